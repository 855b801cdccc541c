//! `streamwork-bench`: runs one workload at one parallelism, beside its
//! hand-written baseline in the same process, and prints one JSON object;
//! with `--latency`, W2 also measures its latency at half its rate.
//! `cargo xtask bench` runs it per workload and parallelism in rounds, each
//! in a fresh process so that the peak resident size is the run's own.

use anyhow::{Context, bail};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::{Duration, Instant};

use streamwork_benches::{
    Outcome, StateKind, best_of, best_of_with_cpu, distinct_keys_reference, join_baseline,
    join_job, peak_rss_bytes, state_baseline, state_file_job, state_job, state_reference,
    w1_baseline, w1_closure_job, w1_flow_job, w1_job, w2_baseline, w2_job, w2_latency, w3_baseline,
    w3_exchange_job, w3_job, write_distinct_keys,
};

#[path = "measurement.rs"]
mod measurement;
use measurement::{Measurement, StateFigures};

/// A workload as a Streamwork job: events, parallelism.
type JobFn = fn(u64, u32) -> Outcome;
/// A workload as a hand-written loop: events.
type BaselineFn = fn(u64) -> Outcome;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<&str> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let workload = value("--workload")
        .context("--workload W1|W2|W3|W3-K100")?
        .to_string();
    let parallelism: u32 = value("--parallelism").unwrap_or("1").parse()?;
    let events: u64 = value("--events").unwrap_or("10000000").parse()?;
    let runs: u32 = value("--runs").unwrap_or("3").parse()?;
    if workload == "STATE-FILE" {
        let keys: u64 = value("--keys").unwrap_or("1000000").parse()?;
        let interval = Duration::from_millis(value("--interval-ms").unwrap_or("2000").parse()?);
        let measurement = state_file_workload(parallelism, keys, interval, value("--input"))?;
        println!("{}", serde_json::to_string(&measurement)?);
        return Ok(());
    }
    if let Some(kind) = match workload.as_str() {
        "STATE-KEYED" => Some(StateKind::Keyed),
        "STATE-STORED" => Some(StateKind::Stored),
        "STATE-WINDOW" => Some(StateKind::Window),
        _ => None,
    } {
        let keys: u64 = value("--keys").unwrap_or("1000000").parse()?;
        let interval = Duration::from_millis(value("--interval-ms").unwrap_or("1000").parse()?);
        let checked_only = args.iter().any(|a| a == "--checked-only");
        let measurement = state_workload(
            &workload,
            kind,
            parallelism,
            events,
            keys,
            interval,
            runs,
            checked_only,
        )?;
        println!("{}", serde_json::to_string(&measurement)?);
        return Ok(());
    }

    let (job, baseline): (JobFn, BaselineFn) = match workload.as_str() {
        "W1" => (w1_job, w1_baseline),
        "W1-CLOSURE" => (w1_closure_job, w1_baseline),
        "W1-FLOW" => (w1_flow_job, w1_baseline),
        "W2" => (w2_job, w2_baseline),
        "W3" => (|n, p| w3_job(n, p, 10_000), |n| w3_baseline(n, 10_000)),
        "W3-K100" => (|n, p| w3_job(n, p, 100), |n| w3_baseline(n, 100)),
        "W3-K100K" => (|n, p| w3_job(n, p, 100_000), |n| w3_baseline(n, 100_000)),
        // W3 by hand on P threads with a keyed exchange: what parallelism
        // costs without a framework.
        "W3-HAND" => (
            |n, p| w3_exchange_job(n, p, 10_000),
            |n| w3_baseline(n, 10_000),
        ),
        "JOIN" => (join_job, join_baseline),
        other => bail!(
            "unknown workload {other}: expected W1, W1-CLOSURE, W1-FLOW, W2, W3, W3-K100, W3-K100K, W3-HAND, JOIN, STATE-KEYED, STATE-STORED, STATE-WINDOW or STATE-FILE"
        ),
    };
    let (expected, baseline_s) = best_of(runs, || baseline(events));
    let (outcome, elapsed_s, cpu_s) = best_of_with_cpu(runs, || job(events, parallelism));
    if outcome != expected {
        bail!(
            "{workload} at parallelism {parallelism} computed {outcome:?}, the baseline {expected:?}"
        );
    }
    let events_per_sec = events as f64 / elapsed_s;
    let (p50, p99) = if workload == "W2" && args.iter().any(|a| a == "--latency") {
        // Half the maximum rate, for about two seconds.
        let rate = events_per_sec / 2.0;
        let latency = w2_latency(((rate * 2.0) as u64).min(events), parallelism, rate);
        (Some(latency.p50_us), Some(latency.p99_us))
    } else {
        (None, None)
    };
    let measurement = Measurement {
        workload,
        parallelism,
        events,
        records: outcome.records,
        checksum: outcome.checksum,
        elapsed_s,
        events_per_sec,
        ns_per_event: elapsed_s * 1e9 / events as f64,
        baseline_events_per_sec: events as f64 / baseline_s,
        p50_latency_us: p50,
        p99_latency_us: p99,
        peak_rss_bytes: peak_rss_bytes(),
        state: None,
        cpu_s: Some(cpu_s),
        rounds: 0,
        events_per_sec_low: None,
        events_per_sec_high: None,
        checkpoints: None,
    };
    println!("{}", serde_json::to_string(&measurement)?);
    Ok(())
}

/// A state workload: the hand-written loop, the job without checkpoints,
/// the job checkpointed every `interval` (the best of `runs`), then two
/// restores of its final checkpoint, at the same parallelism and one more.
/// `checked_only`: the checkpointed job alone, its result checked against
/// a dense array of counts (for state larger than the memory allowed).
#[allow(clippy::too_many_arguments)]
fn state_workload(
    workload: &str,
    kind: StateKind,
    parallelism: u32,
    events: u64,
    keys: u64,
    interval: Duration,
    runs: u32,
    checked_only: bool,
) -> anyhow::Result<Measurement> {
    let dir = std::env::temp_dir().join(format!("streamwork-bench-state-{}", std::process::id()));
    let (expected, baseline_s, unchecked_s) = if checked_only {
        let (expected, reference_s) = best_of(1, || state_reference(events, keys));
        (expected, reference_s, f64::INFINITY)
    } else {
        let (expected, baseline_s) = best_of(runs, || state_baseline(events, keys));
        let (unchecked, unchecked_s) =
            best_of(runs, || state_job(events, parallelism, keys, kind, None).0);
        if unchecked != expected {
            bail!("{workload} computed {unchecked:?}, the baseline {expected:?}");
        }
        (expected, baseline_s, unchecked_s)
    };
    let mut best: Option<(f64, streamwork::runtime::JobReport)> = None;
    for _ in 0..runs.max(1) {
        let _ = std::fs::remove_dir_all(&dir);
        let started = Instant::now();
        let (outcome, report) = state_job(events, parallelism, keys, kind, Some((&dir, interval)));
        let elapsed = started.elapsed().as_secs_f64();
        if outcome != expected {
            bail!("{workload} checkpointed computed {outcome:?}, the baseline {expected:?}");
        }
        if best.as_ref().is_none_or(|(b, _)| elapsed < *b) {
            best = Some((elapsed, report));
        }
    }
    let Some((elapsed_s, report)) = best else {
        bail!("no run")
    };
    // The directory now holds the last run's final checkpoint.
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (_, restored) = state_job(events, parallelism, keys, kind, Some((&dir, interval)));
    let (_, rescaled) = state_job(events, parallelism + 1, keys, kind, Some((&dir, interval)));
    let _ = std::fs::remove_dir_all(&dir);
    let state = StateFigures {
        unchecked_events_per_sec: events as f64 / unchecked_s,
        restore_load_ms: ms(restored.recovery.load),
        restore_instance_ms: ms(restored.recovery.longest_instance_restore),
        rescale_load_ms: ms(rescaled.recovery.load),
        rescale_instance_ms: ms(rescaled.recovery.longest_instance_restore),
        ..checkpoint_figures(keys, &report)
    };
    Ok(state_measurement(
        workload,
        parallelism,
        events,
        expected,
        elapsed_s,
        events as f64 / baseline_s,
        state,
    ))
}

/// The figures of `report`'s checkpoints (not the final one) over `keys`
/// keys; no unchecked run, restore or rescale measured.
fn checkpoint_figures(keys: u64, report: &streamwork::runtime::JobReport) -> StateFigures {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let taken: Vec<_> = report.checkpoints.iter().filter(|c| !c.is_final).collect();
    StateFigures {
        keys,
        unchecked_events_per_sec: 0.0,
        checkpoints: taken.len(),
        longest_pause_ms: taken
            .iter()
            .map(|c| ms(c.longest_pause))
            .fold(0.0, f64::max),
        longest_checkpoint_ms: taken.iter().map(|c| ms(c.duration)).fold(0.0, f64::max),
        bytes: taken.iter().map(|c| c.bytes).collect(),
        restore_load_ms: 0.0,
        restore_instance_ms: 0.0,
        rescale_load_ms: 0.0,
        rescale_instance_ms: 0.0,
    }
}

/// A state workload's measurement: `events` in `elapsed_s`, with `result`
/// and the `state` figures.
fn state_measurement(
    workload: &str,
    parallelism: u32,
    events: u64,
    result: Outcome,
    elapsed_s: f64,
    baseline_events_per_sec: f64,
    state: StateFigures,
) -> Measurement {
    Measurement {
        workload: workload.to_string(),
        parallelism,
        events,
        records: result.records,
        checksum: result.checksum,
        elapsed_s,
        events_per_sec: events as f64 / elapsed_s,
        ns_per_event: elapsed_s * 1e9 / events as f64,
        baseline_events_per_sec,
        p50_latency_us: None,
        p99_latency_us: None,
        peak_rss_bytes: peak_rss_bytes(),
        state: Some(state),
        cpu_s: None,
        rounds: 0,
        events_per_sec_low: None,
        events_per_sec_high: None,
        checkpoints: None,
    }
}

/// STATE-FILE: `keys` distinct keys from a file (`input`, or one written
/// under the temporary directory) into a stored state, exactly once, a
/// checkpoint every `interval`; one run, checked against the keys.
fn state_file_workload(
    parallelism: u32,
    keys: u64,
    interval: Duration,
    input: Option<&str>,
) -> anyhow::Result<Measurement> {
    let scratch = std::env::temp_dir().join(format!(
        "streamwork-bench-state-file-{}",
        std::process::id()
    ));
    let input = match input {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::temp_dir().join(format!("streamwork-bench-keys-{keys}.txt")),
    };
    write_distinct_keys(&input, keys)?;
    let _ = std::fs::remove_dir_all(&scratch);
    let (checkpoints, output) = (scratch.join("checkpoints"), scratch.join("output"));
    let started = Instant::now();
    let (committed, report) = state_file_job(&input, parallelism, interval, &checkpoints, &output)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&scratch);
    let expected = distinct_keys_reference(keys);
    if committed != expected {
        bail!("STATE-FILE committed {committed:?}, the keys add up to {expected:?}");
    }
    // No baseline: the file's keys are the reference.
    Ok(state_measurement(
        "STATE-FILE",
        parallelism,
        keys,
        committed,
        elapsed_s,
        0.0,
        checkpoint_figures(keys, &report),
    ))
}
