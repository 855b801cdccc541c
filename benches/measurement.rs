//! One benchmark measurement: the JSON line `streamwork-bench` prints and
//! `cargo xtask bench` reads (shared by both through `#[path]`, so the two
//! ends of the pipe cannot disagree on its fields).

/// One workload at one parallelism, beside its hand-written baseline.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub(crate) struct Measurement {
    pub(crate) workload: String,
    pub(crate) parallelism: u32,
    pub(crate) events: u64,
    pub(crate) records: u64,
    pub(crate) checksum: u64,
    pub(crate) elapsed_s: f64,
    pub(crate) events_per_sec: f64,
    pub(crate) ns_per_event: f64,
    pub(crate) baseline_events_per_sec: f64,
    pub(crate) p50_latency_us: Option<f64>,
    pub(crate) p99_latency_us: Option<f64>,
    pub(crate) peak_rss_bytes: Option<u64>,
    /// What a state workload measured of its checkpoints and restores.
    #[serde(default)]
    pub(crate) state: Option<StateFigures>,
    /// CPU seconds (user and system, every thread) of the measured run.
    #[serde(default)]
    pub(crate) cpu_s: Option<f64>,
}

/// What a state workload measured beside its throughput.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub(crate) struct StateFigures {
    /// Distinct keys.
    pub(crate) keys: u64,
    /// The same job without checkpoints, events per second.
    pub(crate) unchecked_events_per_sec: f64,
    /// Checkpoints taken (the final one excluded).
    pub(crate) checkpoints: usize,
    /// The longest a task thread waited for a checkpoint, ms.
    pub(crate) longest_pause_ms: f64,
    /// The longest checkpoint, trigger to durable commit, ms.
    pub(crate) longest_checkpoint_ms: f64,
    /// Bytes each checkpoint wrote, in order (the final one excluded).
    pub(crate) bytes: Vec<u64>,
    /// Restoring the final checkpoint at the same parallelism: loading it,
    /// and the longest instance restore, ms.
    pub(crate) restore_load_ms: f64,
    pub(crate) restore_instance_ms: f64,
    /// The same at one more instance.
    pub(crate) rescale_load_ms: f64,
    pub(crate) rescale_instance_ms: f64,
}

impl Measurement {
    /// Events per second of CPU time: the throughput of one core.
    #[allow(dead_code)] // used by `cargo xtask bench` only
    pub(crate) fn events_per_core_sec(&self) -> Option<f64> {
        self.cpu_s.map(|cpu| self.events as f64 / cpu.max(1e-9))
    }

    /// The better of two rounds of one configuration: the faster run, with
    /// the faster baseline, the larger peak resident size, and whichever
    /// latency was measured.
    #[allow(dead_code)] // used by `cargo xtask bench` only
    pub(crate) fn best_with(self, other: Measurement) -> Measurement {
        let baseline = self
            .baseline_events_per_sec
            .max(other.baseline_events_per_sec);
        let peak = self.peak_rss_bytes.max(other.peak_rss_bytes);
        // The per-core figure goes with the run it was measured in.
        let (p50, p99) = (
            self.p50_latency_us.or(other.p50_latency_us),
            self.p99_latency_us.or(other.p99_latency_us),
        );
        let mut best = if other.events_per_sec > self.events_per_sec {
            other
        } else {
            self
        };
        best.baseline_events_per_sec = baseline;
        best.peak_rss_bytes = peak;
        best.p50_latency_us = p50;
        best.p99_latency_us = p99;
        best
    }
}
