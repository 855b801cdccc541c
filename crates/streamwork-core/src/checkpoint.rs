//! Checkpoints as components see them (chapter 10): the state an instance
//! hands over when a checkpoint's barrier reaches it, the state a restarted
//! instance is offered back, what an instance may learn of the job's
//! checkpoints, and the delivery a job promises.
//!
//! A component opts in by overriding `snapshot` and `restore` on
//! [`Source`](crate::Source), [`Operator`](crate::Operator),
//! [`CoOperator`](crate::CoOperator) or [`Sink`](crate::Sink); a
//! transactional sink also overrides `pre_commit` and `commit`. Taking,
//! storing and completing checkpoints is the engine's business.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::id::CheckpointId;
use crate::id::InstanceIdx;

/// What a job guarantees about each record's effect on its sinks.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Delivery {
    /// No tracking: a failure may lose records (the default).
    #[default]
    AtMostOnce,
    /// Checkpoints without alignment: after a failure, records since the
    /// last checkpoint are replayed, so a sink may see some twice.
    AtLeastOnce,
    /// Aligned checkpoints, replayable sources and transactional sinks: the
    /// committed output is that of a run without failure.
    ExactlyOnce,
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Delivery::AtMostOnce => "at-most-once",
            Delivery::AtLeastOnce => "at-least-once",
            Delivery::ExactlyOnce => "exactly-once",
        })
    }
}

/// A delivery name that is none of the three.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery `{0}`: expected at-most-once, at-least-once or exactly-once")]
pub struct UnknownDelivery(pub String);

impl std::str::FromStr for Delivery {
    type Err = UnknownDelivery;
    fn from_str(s: &str) -> Result<Self, UnknownDelivery> {
        match s {
            "at-most-once" => Ok(Delivery::AtMostOnce),
            "at-least-once" => Ok(Delivery::AtLeastOnce),
            "exactly-once" => Ok(Delivery::ExactlyOnce),
            other => Err(UnknownDelivery(other.to_string())),
        }
    }
}

/// A source that can resume from a checkpointed position: required of every
/// source of a job declared `delivery at_least_once` or `exactly_once` in
/// `job!`, checked when the job compiles.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a replayable source, so the job cannot promise at-least-once or exactly-once delivery",
    label = "not replayable",
    note = "a replayable source checkpoints its position (`Source::snapshot` and `restore`) and implements `Replayable`; `FileSource` and `GeneratorSource` do"
)]
pub trait Replayable: crate::Source {}

/// A sink whose output becomes visible only with the checkpoint that covers
/// it (or that overwrites by key): required of every sink of a job declared
/// `delivery exactly_once` in `job!`, checked when the job compiles.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is neither transactional nor idempotent, so the job cannot promise exactly-once delivery",
    label = "not transactional",
    note = "a transactional sink stages output in `Sink::pre_commit` and publishes it in `commit`, and implements `Transactional`; `FileSink::transactional()` is one, and `UpsertFileSink` (idempotent: it overwrites by key) is another"
)]
pub trait Transactional: crate::Sink {}

/// `source`, if it is replayable (used by `job!`).
pub fn replayable<S: Replayable>(source: S) -> S {
    source
}

/// `sink`, if it is transactional (used by `job!`).
pub fn transactional<S: Transactional>(sink: S) -> S {
    sink
}

/// The id the last snapshot of every instance carries: the checkpoint taken
/// when the input has ended. The coordinator stores it under a real id.
pub const FINAL_CHECKPOINT: CheckpointId = CheckpointId::FINAL;

/// What an instance taking its part of a checkpoint knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SnapshotContext {
    /// The checkpoint ([`CheckpointId::FINAL`] at end of input).
    pub checkpoint: CheckpointId,
    /// The job's key groups: keyed state is snapshotted by key group, so
    /// that a restore at another parallelism can take each instance's share.
    pub key_groups: crate::KeyGroups,
    /// The instance taking it.
    pub instance: InstanceIdx,
    /// The component's parallelism.
    pub parallelism: u32,
}

impl SnapshotContext {
    /// The context of instance 0 of 1, for tests and harnesses.
    pub fn single(checkpoint: CheckpointId) -> Self {
        SnapshotContext {
            checkpoint,
            key_groups: crate::KeyGroups::DEFAULT,
            instance: InstanceIdx(0),
            parallelism: 1,
        }
    }
}

/// One instance's state in a checkpoint: bytes (an rkyv archive, say) and
/// the version of their layout, so that a newer build can migrate them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBytes {
    /// The version of the layout of `bytes`.
    pub schema: u32,
    /// The state.
    pub bytes: Vec<u8>,
}

/// One snapshot a previous run took of a component: by instance `part`.
#[derive(Copy, Clone, Debug)]
pub struct RestoredPart<'a> {
    /// The instance that wrote it (at the previous run's parallelism).
    pub part: InstanceIdx,
    /// The version of its layout.
    pub schema: u32,
    /// The state, read in place.
    pub bytes: &'a [u8],
}

/// The state of a previous run offered to one instance before it opens.
#[derive(Debug)]
pub struct Restore<'a> {
    /// The component restored, by its name in the job.
    pub component: &'a str,
    /// The checkpoint restored from.
    pub checkpoint: CheckpointId,
    /// Whether it is the final checkpoint of a run that completed: the
    /// sources are at the end of their input, and a transactional sink
    /// commits what it staged at the end.
    pub is_final: bool,
    /// The instances of the component (at the previous run's parallelism)
    /// that had ended their input when the checkpoint was taken, while
    /// others went on: their parts are their final ones. See
    /// [`finished`](Self::finished).
    pub ended: Vec<InstanceIdx>,
    /// This instance's index now.
    pub instance: InstanceIdx,
    /// The component's parallelism now.
    pub parallelism: u32,
    /// The job's key groups: a keyed instance keeps the keys whose group it
    /// now owns (`key_groups.route(hash, parallelism) == instance`).
    pub key_groups: crate::KeyGroups,
    /// Every instance's snapshot of this component in that checkpoint.
    pub parts: Vec<RestoredPart<'a>>,
}

impl<'a> Restore<'a> {
    /// What a run that starts from no checkpoint offers a sink: checkpoint
    /// [`CheckpointId::NONE`], no parts.
    pub fn nothing(
        component: &'a str,
        instance: InstanceIdx,
        parallelism: u32,
        key_groups: crate::KeyGroups,
    ) -> Self {
        Restore {
            component,
            checkpoint: CheckpointId::NONE,
            is_final: false,
            ended: Vec::new(),
            instance,
            parallelism,
            key_groups,
            parts: Vec::new(),
        }
    }

    /// Whether the instance with this index had ended its input: it
    /// restores as ended (it emits nothing at its end again), and a
    /// transactional sink publishes what it staged at its end.
    pub fn finished(&self) -> bool {
        self.is_final || self.ended.contains(&self.instance)
    }

    /// Whether the run starts from no checkpoint.
    pub fn is_fresh(&self) -> bool {
        self.checkpoint == CheckpointId::NONE
    }

    /// The snapshot the instance with this index wrote: this instance's own
    /// state when the parallelism has not changed.
    pub fn own(&self) -> Option<RestoredPart<'a>> {
        self.parts.iter().copied().find(|p| p.part == self.instance)
    }
}

/// Where restored state comes from: the engine implements it over a loaded
/// checkpoint.
pub trait RestoreSource: Send + Sync {
    /// The checkpoint's id.
    fn checkpoint(&self) -> CheckpointId;
    /// Whether it is the final checkpoint of a completed run.
    fn is_final(&self) -> bool;
    /// Every snapshot `component` wrote in it.
    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>>;
    /// The instances of `component` that had ended their input when the
    /// checkpoint was taken.
    fn ended(&self, component: &str) -> Vec<InstanceIdx>;
}

/// What an instance of a checkpointed job may learn about its checkpoints:
/// the last complete one, and the state it is restored from. Cheap to clone.
#[derive(Clone)]
pub struct CheckpointView {
    completed: Arc<AtomicU64>,
    restore: Option<Arc<dyn RestoreSource>>,
}

impl fmt::Debug for CheckpointView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointView")
            .field("completed", &self.completed())
            .field("restore", &self.restore.as_ref().map(|r| r.checkpoint()))
            .finish()
    }
}

impl CheckpointView {
    /// A view in which `completed` holds the raw id of the last complete
    /// checkpoint (0: none yet), restoring from `restore` if given.
    pub fn new(completed: Arc<AtomicU64>, restore: Option<Arc<dyn RestoreSource>>) -> Self {
        CheckpointView { completed, restore }
    }

    /// The last complete checkpoint ([`CheckpointId::NONE`] before the first).
    pub fn completed(&self) -> CheckpointId {
        CheckpointId::new(self.completed.load(Ordering::Acquire))
    }

    /// The checkpoint this run restores from, if it restores.
    pub fn restored_from(&self) -> Option<CheckpointId> {
        self.restore.as_ref().map(|r| r.checkpoint())
    }

    /// The state to restore `component`'s instance `instance` of
    /// `parallelism` from, if the job restores.
    pub fn restore_for<'a>(
        &'a self,
        component: &'a str,
        instance: InstanceIdx,
        parallelism: u32,
        key_groups: crate::KeyGroups,
    ) -> Option<Restore<'a>> {
        let source = self.restore.as_ref()?;
        Some(Restore {
            component,
            checkpoint: source.checkpoint(),
            is_final: source.is_final(),
            ended: source.ended(component),
            instance,
            parallelism,
            key_groups,
            parts: source.parts(component),
        })
    }
}
