//! `streamwork-nexmark`: runs a Nexmark query on a JSON-lines input or on
//! generated events, writing JSON rows; the summary goes to stderr.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use streamwork::core::checkpoint::Delivery;
use streamwork_nexmark::{Checkpoints, Input, Query, RowTarget, RunOptions, run};

/// Run a Nexmark query on Streamwork.
#[derive(Parser, Debug)]
#[command(name = "streamwork-nexmark")]
struct Args {
    /// The query: q0 to q22, or `events` to write the input events themselves.
    #[arg(long)]
    query: Query,
    /// JSON-lines input file, `-` for stdin.
    #[arg(long, conflicts_with = "events")]
    input: Option<PathBuf>,
    /// Generate this many events instead of reading them.
    #[arg(long)]
    events: Option<u64>,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Result file (stdout without it); `none` counts the rows without
    /// formatting or writing them (the blackhole of published benchmarks).
    #[arg(long)]
    output: Option<PathBuf>,
    /// q13's side input: `KEY,VALUE` lines (default: keys 0 to 9999, each
    /// with its own decimal string).
    #[arg(long)]
    side_input: Option<PathBuf>,
    /// Instances of the query's operators (default: the number of cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=128))]
    parallelism: Option<u32>,
    /// Worker threads that share the tasks (default: one per instance, at
    /// most one per core; 0: one thread per task).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1024))]
    threads: Option<u32>,
    /// Write an update stream: each change of the result as it happens,
    /// with `"op":"+"` (the row enters the result) or `"op":"-"` (it
    /// leaves), rather than final rows.
    #[arg(long)]
    updates: bool,
    /// Take checkpoints into this directory, and resume from its last
    /// complete one if it has any (a run killed and started again with the
    /// same options goes on where it stopped).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// How often a checkpoint starts: `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = interval, requires = "checkpoint_dir")]
    checkpoint_interval: Duration,
    /// `exactly-once` (the default with checkpoints: rows are published as
    /// their checkpoint completes) or `at-least-once`; without
    /// `--checkpoint-dir`, `at-most-once`.
    #[arg(long, requires = "checkpoint_dir")]
    delivery: Option<Delivery>,
    /// Print the summary as one JSON object on stdout as well (with
    /// `--output`, so that it is the only thing there).
    #[arg(long, requires = "output")]
    json_summary: bool,
    /// For fault tests: the input never ends, so that the run is killed,
    /// never finished.
    #[arg(long, hide = true)]
    hold_input_open: bool,
}

/// A checkpoint interval that is not one.
#[derive(Debug)]
struct BadInterval(String);

impl std::fmt::Display for BadInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is not an interval: give whole seconds or milliseconds above zero, as in 10s or 500ms",
            self.0
        )
    }
}

impl std::error::Error for BadInterval {}

/// A checkpoint interval: a whole number of seconds (`10s`) or
/// milliseconds (`500ms`).
fn interval(text: &str) -> Result<Duration, BadInterval> {
    let parsed = if let Some(ms) = text.strip_suffix("ms") {
        ms.parse().ok().map(Duration::from_millis)
    } else {
        let s = text.strip_suffix('s').unwrap_or(text);
        s.parse().ok().map(Duration::from_secs)
    };
    parsed
        .filter(|d| !d.is_zero())
        .ok_or_else(|| BadInterval(text.to_string()))
}

/// The process's peak resident size (`VmHWM`), where Linux reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Tells mimalloc to keep the memory it frees instead of returning it to
/// the system (its purge delay, -1), unless `MIMALLOC_PURGE_DELAY` says
/// otherwise. A checkpoint of large heap state frees, on the coordinator's
/// thread, the copies the task made while it was archived; returned to the
/// system, that memory comes back as fresh pages the kernel must zero
/// first: exactly once, q16 and q19 took up to a quarter more CPU time
/// that way (three alternating runs each on the project's machine). The
/// memory stays the process's, as a JVM's heap stays Flink's.
fn keep_freed_memory() {
    /// `mi_option_purge_delay` in mimalloc's `mi_option_t` (the same in its
    /// versions 2 and 3, which `libmimalloc-sys` 0.1 builds).
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    #[allow(unsafe_code)]
    unsafe extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's own function, linked in as the global
        // allocator; it writes one option, before any thread but this one
        // exists (mimalloc's options are not thread safe).
        #[allow(unsafe_code)]
        unsafe {
            mi_option_set(MI_OPTION_PURGE_DELAY, -1)
        };
    }
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    let args = Args::parse();
    let input = match (args.input, args.events) {
        (Some(path), _) => Input::File(path),
        (None, Some(events)) => Input::Generated {
            events,
            seed: args.seed,
        },
        (None, None) => anyhow::bail!(
            "give an input with --input FILE (or - for stdin), or generate with --events COUNT"
        ),
    };
    let parallelism = args.parallelism.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let output = match args.output {
        Some(path) if path.as_os_str() == "none" => RowTarget::Blackhole,
        Some(path) => RowTarget::File(path),
        None => RowTarget::Stdout,
    };
    let delivery = match (&args.checkpoint_dir, args.delivery) {
        (None, _) => Delivery::AtMostOnce,
        (Some(_), Some(Delivery::AtMostOnce)) => anyhow::bail!(
            "--delivery at-most-once takes no checkpoints: drop --checkpoint-dir, or give --delivery exactly-once or at-least-once"
        ),
        (Some(_), Some(delivery)) => delivery,
        (Some(_), None) => Delivery::ExactlyOnce,
    };
    let summary = run(&RunOptions {
        query: args.query,
        input,
        output,
        parallelism,
        workers: args.threads,
        side_input: args.side_input,
        checkpoints: args.checkpoint_dir.map(|dir| Checkpoints {
            dir,
            interval: args.checkpoint_interval,
            delivery,
        }),
        updates: args.updates,
        hold_input_open: args.hold_input_open,
    })?;
    let threads = match args
        .threads
        .unwrap_or_else(|| streamwork_nexmark::default_workers(parallelism))
    {
        0 => "a thread per task".to_string(),
        1 => "1 thread".to_string(),
        t => format!("{t} threads"),
    };
    eprintln!(
        "{}: {} events read, {} late, {} malformed, {} results in {:.3} s ({:.0} events/s, parallelism {parallelism}, {threads}, {delivery}, {} checkpoints); {:.3} CPU s, {:.0} events per core-second",
        args.query,
        summary.events,
        summary.late,
        summary.malformed,
        summary.results,
        summary.elapsed_s,
        summary.events_per_sec(),
        summary.checkpoints,
        summary.cpu_s,
        summary.events_per_core_sec()
    );
    if let Some(resumed) = &summary.resumed {
        eprintln!(
            "resumed from checkpoint {}: loaded in {:.1} ms, state rebuilt in {:.1} ms (the slowest instance)",
            resumed.checkpoint, resumed.load_ms, resumed.longest_instance_restore_ms
        );
    }
    if args.json_summary {
        println!(
            "{}",
            serde_json::json!({
                "query": args.query.to_string(),
                "parallelism": parallelism,
                "events": summary.events,
                "late": summary.late,
                "malformed": summary.malformed,
                "results": summary.results,
                "elapsed_s": summary.elapsed_s,
                "cpu_s": summary.cpu_s,
                "delivery": delivery.to_string(),
                "checkpoints": summary.checkpoints,
                "longest_checkpoint_pause_ms": summary.longest_checkpoint_pause_ms,
                "events_per_sec": summary.events_per_sec(),
                "events_per_core_sec": summary.events_per_core_sec(),
                "peak_rss_bytes": peak_rss_bytes(),
                "resumed": summary.resumed.as_ref().map(|r| serde_json::json!({
                    "checkpoint": r.checkpoint,
                    "load_ms": r.load_ms,
                    "longest_instance_restore_ms": r.longest_instance_restore_ms,
                })),
            })
        );
    }
    Ok(())
}
