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
    /// Rounds this figure is the median of (0: one run, not summarised).
    #[serde(default)]
    pub(crate) rounds: u32,
    /// The slowest and fastest round's events per second.
    #[serde(default)]
    pub(crate) events_per_sec_low: Option<f64>,
    #[serde(default)]
    pub(crate) events_per_sec_high: Option<f64>,
    /// Checkpoints completed during the run (a Nexmark query run exactly
    /// once; the final one not counted).
    #[serde(default)]
    pub(crate) checkpoints: Option<u64>,
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

    /// The median round of one configuration's rounds (the lower of the two
    /// middle ones for an even count), with the spread of all of them, the
    /// median baseline, the largest peak resident size, and the latency of
    /// the round that measured it.
    #[allow(dead_code)] // used by `cargo xtask bench` only
    pub(crate) fn median_of(mut rounds: Vec<Measurement>) -> Option<Measurement> {
        if rounds.is_empty() {
            return None;
        }
        let count = rounds.len();
        let low = rounds
            .iter()
            .map(|m| m.events_per_sec)
            .fold(f64::INFINITY, f64::min);
        let high = rounds.iter().map(|m| m.events_per_sec).fold(0.0, f64::max);
        let peak = rounds.iter().filter_map(|m| m.peak_rss_bytes).max();
        let (p50, p99) = rounds
            .iter()
            .find(|m| m.p50_latency_us.is_some())
            .map_or((None, None), |m| (m.p50_latency_us, m.p99_latency_us));
        let mut baselines: Vec<f64> = rounds.iter().map(|m| m.baseline_events_per_sec).collect();
        baselines.sort_by(f64::total_cmp);
        rounds.sort_by(|a, b| a.events_per_sec.total_cmp(&b.events_per_sec));
        let mut median = rounds.swap_remove((count - 1) / 2);
        median.baseline_events_per_sec = baselines[(count - 1) / 2];
        median.peak_rss_bytes = peak;
        median.p50_latency_us = p50;
        median.p99_latency_us = p99;
        median.rounds = count as u32;
        median.events_per_sec_low = Some(low);
        median.events_per_sec_high = Some(high);
        Some(median)
    }

    /// The spread of the rounds, fastest less slowest, as a share of the
    /// median (0 for one round).
    #[allow(dead_code)] // used by `cargo xtask bench` only
    pub(crate) fn spread(&self) -> f64 {
        match (self.events_per_sec_low, self.events_per_sec_high) {
            (Some(low), Some(high)) if self.events_per_sec > 0.0 => {
                (high - low) / self.events_per_sec
            }
            _ => 0.0,
        }
    }
}
