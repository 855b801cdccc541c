//! Live counters of one instance.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one instance, updated once per batch (relaxed atomics,
/// never per record) and readable while the job runs.
#[derive(Debug, Default)]
pub struct InstanceCounters {
    records_in: AtomicU64,
    records_out: AtomicU64,
}

impl InstanceCounters {
    /// Records received so far.
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }
    /// Records emitted so far (all channels).
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }
    pub(crate) fn add_in(&self, n: u64) {
        self.records_in.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn set_out(&self, n: u64) {
        self.records_out.store(n, Ordering::Relaxed);
    }
}
