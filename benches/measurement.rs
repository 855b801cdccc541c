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
}
