//! What a checkpointed run records of its checkpoints, for its handle and
//! its metrics.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::config::CheckpointStats;
use super::restore::Recovery;

/// What a checkpointed run records of its checkpoints: where it started
/// from, and each one it completed.
pub(crate) struct CheckpointRecord {
    pub(crate) completed: Arc<Mutex<Vec<CheckpointStats>>>,
    pub(crate) recovery: Recovery,
    /// The savepoint a stop asked for (0: none).
    pub(crate) savepoint: Arc<std::sync::atomic::AtomicU64>,
    /// The longest restore of an instance, in nanoseconds.
    pub(crate) longest_restore: Arc<std::sync::atomic::AtomicU64>,
    /// The holds on the job's input, by state past its memory budget.
    pub(crate) input_holds: Arc<streamwork_core::InputHolds>,
}

impl CheckpointRecord {
    /// The checkpoints completed so far, and the recovery with its
    /// instances' restore time.
    pub(crate) fn read(&self) -> (Vec<CheckpointStats>, Recovery) {
        let completed = self
            .completed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut recovery = self.recovery.clone();
        recovery.longest_instance_restore =
            Duration::from_nanos(self.longest_restore.load(Ordering::Relaxed));
        (completed, recovery)
    }
}
