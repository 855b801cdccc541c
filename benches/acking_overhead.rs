//! What acking costs (chapter 5): W2, the keyed count, run without tracking
//! and with every source record's tree tracked (ids per channel copy, XOR
//! reports per batch, a copy of each record kept until its tree completes),
//! best of three each.
//!
//! ```sh
//! cargo bench -p streamwork-benches --bench acking_overhead
//! ACK_EVENTS=50000000 cargo bench -p streamwork-benches --bench acking_overhead
//! ```

use std::time::Duration;

use streamwork::core::collector::DEFAULT_BATCH_SIZE;
use streamwork::prelude::RunOptions;
use streamwork_benches::{best_of, w2_job_with};

fn main() {
    let events: u64 = std::env::var("ACK_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    for parallelism in [1, 2] {
        let (plain, plain_s) = best_of(3, || {
            w2_job_with(
                events,
                parallelism,
                DEFAULT_BATCH_SIZE,
                RunOptions::default(),
            )
        });
        let (acked, acked_s) = best_of(3, || {
            w2_job_with(
                events,
                parallelism,
                DEFAULT_BATCH_SIZE,
                RunOptions::acking(Duration::from_secs(30)),
            )
        });
        assert_eq!(plain, acked, "acking changes no result");
        println!(
            "W2 p={parallelism}: {events} events: untracked {:.1} M ev/s; acked {:.1} M ev/s ({:.2}x the time)",
            events as f64 / plain_s / 1e6,
            events as f64 / acked_s / 1e6,
            acked_s / plain_s,
        );
    }
}
