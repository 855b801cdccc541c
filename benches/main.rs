//! `streamwork-bench`: runs one workload at one parallelism, beside its
//! hand-written baseline in the same process, and prints one JSON object;
//! with `--latency`, W2 also measures its latency at half its rate.
//! `cargo xtask bench` runs it per workload and parallelism in rounds, each
//! in a fresh process so that the peak resident size is the run's own.

use anyhow::{Context, bail};
use streamwork_benches::{
    Outcome, best_of, join_baseline, join_job, peak_rss_bytes, w1_baseline, w1_job, w2_baseline,
    w2_job, w2_latency, w3_baseline, w3_job,
};

#[path = "measurement.rs"]
mod measurement;
use measurement::Measurement;

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

    let (job, baseline): (JobFn, BaselineFn) = match workload.as_str() {
        "W1" => (w1_job, w1_baseline),
        "W2" => (w2_job, w2_baseline),
        "W3" => (|n, p| w3_job(n, p, 10_000), |n| w3_baseline(n, 10_000)),
        "W3-K100" => (|n, p| w3_job(n, p, 100), |n| w3_baseline(n, 100)),
        "W3-K100K" => (|n, p| w3_job(n, p, 100_000), |n| w3_baseline(n, 100_000)),
        "JOIN" => (join_job, join_baseline),
        other => bail!("unknown workload {other}: expected W1, W2, W3, W3-K100, W3-K100K or JOIN"),
    };
    let (expected, baseline_s) = best_of(runs, || baseline(events));
    let (outcome, elapsed_s) = best_of(runs, || job(events, parallelism));
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
    };
    println!("{}", serde_json::to_string(&measurement)?);
    Ok(())
}
