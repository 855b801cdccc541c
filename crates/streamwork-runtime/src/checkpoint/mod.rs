//! Checkpoints (chapter 10): how a job takes them, the coordinator that
//! starts them at the sources, collects every instance's part and writes
//! complete ones to the checkpoint log, and the restore of a job from the
//! last complete one.
//!
//! A checkpoint is a consistent cut taken by barriers (asynchronous barrier
//! snapshotting, Carbone et al. 2015). It starts when the coordinator raises
//! the trigger: each source task, between two polls, reports its position
//! and sends the barrier down every edge. A task with several inputs aligns
//! the barrier (exactly-once: it holds every input that delivered it until
//! all have) or merely waits for it on every input (at-least-once), then
//! reports its part and forwards the barrier. Once every instance has
//! reported, the coordinator appends the parts and the commit record,
//! flushed durably, and publishes the checkpoint as complete: transactional
//! sinks then commit what they staged. At end of input every instance
//! reports a final part; the final checkpoint is what a job restarted after
//! completion resumes from, so it adds nothing.

mod config;
mod coordinator;
mod merged;
pub(crate) use merged::Merged;
mod record;
pub(crate) use record::CheckpointRecord;
mod restore;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use config::{CheckpointConfig, CheckpointStats, RescaledFrom};
pub(crate) use coordinator::{Coordinator, Signals};
pub use restore::Recovery;
pub(crate) use restore::load;
pub use streamwork_core::checkpoint::Delivery;
use streamwork_core::checkpoint::{CheckpointId, StateBytes};
use streamwork_core::{InstanceContext, InstanceIdx};

/// One instance's part of one checkpoint, reported to the coordinator.
#[derive(Debug)]
pub(crate) struct Part {
    /// The checkpoint ([`CheckpointId::FINAL`] at end of input).
    pub(crate) checkpoint: CheckpointId,
    /// The component's name.
    pub(crate) component: Arc<str>,
    /// The instance.
    pub(crate) instance: InstanceIdx,
    /// Its state, if it keeps any.
    pub(crate) state: Option<StateBytes>,
    /// How long taking it held the task thread, and how long the barrier
    /// took to arrive on every input.
    pub(crate) timing: PartTiming,
}

/// What an instance measured of taking its part of a checkpoint.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartTiming {
    /// The time the snapshot held the task thread (records waited).
    pub(crate) pause: Duration,
    /// From the barrier's first arrival on an input of the task to its
    /// arrival on the last (zero for a source, or a task with one input).
    pub(crate) alignment: Duration,
}

/// What every instance of a checkpointed job shares with the coordinator:
/// where its parts go, and what has completed.
#[derive(Clone)]
pub(crate) struct CheckpointLink {
    parts: crossbeam_channel::Sender<Part>,
    completed: Arc<AtomicU64>,
    /// The longest restore of an instance in this run, in nanoseconds.
    longest_restore: Arc<AtomicU64>,
}

impl CheckpointLink {
    pub(crate) fn new(parts: crossbeam_channel::Sender<Part>, signals: &Signals) -> Self {
        CheckpointLink {
            parts,
            completed: signals.completed.clone(),
            longest_restore: signals.longest_restore.clone(),
        }
    }

    /// Reports `ctx`'s part of `checkpoint`.
    pub(crate) fn report(
        &self,
        checkpoint: CheckpointId,
        ctx: &InstanceContext,
        state: Option<StateBytes>,
        timing: PartTiming,
    ) {
        // A coordinator that is gone has failed the job already.
        let _ = self.parts.send(Part {
            checkpoint,
            component: ctx.component_arc(),
            instance: ctx.instance(),
            state,
            timing,
        });
    }

    /// An instance took `took` to restore its state.
    pub(crate) fn restored(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.longest_restore.fetch_max(nanos, Ordering::Relaxed);
    }

    /// The last complete checkpoint.
    pub(crate) fn completed(&self) -> CheckpointId {
        CheckpointId::new(self.completed.load(Ordering::Acquire))
    }
}
