//! What checkpoints cost: the keyed count over one million keys, and a
//! tumbling window count over one million keys, each run with aligned
//! checkpoints every second and without any, best of three each. Prints
//! the throughput of both, the largest and longest checkpoint, and the
//! longest pause of a task thread for a snapshot.
//!
//! ```sh
//! cargo bench -p streamwork-benches --bench checkpoint_overhead
//! CKPT_EVENTS=50000000 CKPT_ONLY=windows cargo bench -p streamwork-benches --bench checkpoint_overhead
//! ```

use std::path::Path;
use std::time::Duration;

use streamwork_benches::{CheckpointedRun, best_of, checkpointed_count, checkpointed_windows};

/// A checkpointed workload: events, parallelism, keys, interval, directory.
type Workload = fn(u64, u32, u64, Option<Duration>, &Path) -> CheckpointedRun;

fn main() {
    let events: u64 = std::env::var("CKPT_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150_000_000);
    let only = std::env::var("CKPT_ONLY").ok();
    let keys = 1_000_000;
    let dir = std::env::temp_dir().join(format!("streamwork-ckpt-bench-{}", std::process::id()));
    let workloads: [(&str, Workload); 2] = [
        ("keyed count", checkpointed_count),
        ("windows", checkpointed_windows),
    ];
    for (name, workload) in workloads {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        for parallelism in [1, 2] {
            let (plain, plain_s) = best_of(3, || workload(events, parallelism, keys, None, &dir));
            let (with, with_s) = best_of(3, || {
                workload(
                    events,
                    parallelism,
                    keys,
                    Some(Duration::from_secs(1)),
                    &dir,
                )
            });
            assert_eq!(plain.outcome, with.outcome, "checkpoints change no result");
            println!(
                "{name}, p={parallelism}: {events} events, {keys} keys: no checkpoints {:.1} M ev/s; checkpoints every 1 s {:.1} M ev/s ({:+.1}%), {} checkpoints, largest {:.1} MiB, longest {:.0} ms, longest pause {:.1} µs",
                events as f64 / plain_s / 1e6,
                events as f64 / with_s / 1e6,
                (plain_s / with_s - 1.0) * 100.0,
                with.checkpoints,
                with.largest_bytes as f64 / (1 << 20) as f64,
                with.longest.as_secs_f64() * 1e3,
                with.longest_pause.as_secs_f64() * 1e6,
            );
        }
    }
}
