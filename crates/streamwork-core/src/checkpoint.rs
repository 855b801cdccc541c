//! Checkpoints as components see them (chapter 10): the state an instance
//! hands over when a checkpoint's barrier reaches it, the state a restarted
//! instance is offered back, what an instance may learn of the job's
//! checkpoints, and the delivery a job promises.
//!
//! A component opts in by overriding `snapshot` and `restore` on
//! [`Source`](crate::Source), [`Operator`](crate::Operator) or
//! [`Sink`](crate::Sink); a
//! transactional sink also overrides `pre_commit` and `commit`. Taking,
//! storing and completing checkpoints is the engine's business.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery `{0}`: expected at-most-once, at-least-once or exactly-once")]
pub struct UnknownDelivery(pub String);

crate::debug_as_display!(UnknownDelivery);

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
    /// The newest checkpoint known to be complete when the part is taken
    /// ([`CheckpointId::NONE`] if none): state written in increments
    /// builds on what this one holds, never on a checkpoint that may not
    /// have completed.
    pub completed: CheckpointId,
}

impl SnapshotContext {
    /// The context of instance 0 of 1, for tests and harnesses.
    pub fn single(checkpoint: CheckpointId) -> Self {
        SnapshotContext {
            checkpoint,
            key_groups: crate::KeyGroups::DEFAULT,
            instance: InstanceIdx(0),
            parallelism: 1,
            completed: CheckpointId::NONE,
        }
    }
}

/// One instance's state in a checkpoint: bytes (an rkyv archive, say) and
/// the version of their layout, so that a newer build can migrate them.
///
/// State that lives in the checkpoint log (the state store) also hands
/// over [`side`](Self::side) records, produced off the task thread, and
/// names the earlier checkpoints whose records it still reads
/// ([`builds_on`](Self::builds_on)).
///
/// ```
/// use streamwork::core::StateBytes;
/// let state = StateBytes::new(1, 42u64.to_le_bytes().to_vec());
/// assert!(state.side.is_empty() && state.builds_on.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    /// The version of the layout of `bytes`.
    pub schema: u32,
    /// The state.
    pub bytes: Vec<u8>,
    /// Records written beside `bytes` in the same checkpoint, each produced
    /// by the coordinator rather than on the task thread.
    pub side: Vec<SideRecord>,
    /// Earlier checkpoints whose records this state refers to: the log
    /// keeps them as long as this checkpoint is kept.
    pub builds_on: Vec<CheckpointId>,
}

impl StateBytes {
    /// `bytes` of layout `schema`, with nothing beside them.
    pub fn new(schema: u32, bytes: Vec<u8>) -> Self {
        StateBytes {
            schema,
            bytes,
            side: Vec::new(),
            builds_on: Vec::new(),
        }
    }
}

/// Bytes of a checkpoint that are produced off the task thread: the
/// instance hands over what it froze, and the coordinator serialises it,
/// streaming it into the log (so that it need not fit in memory). May be
/// asked more than once (the same bytes each time).
pub trait DeferredBytes: Send + Sync + fmt::Debug {
    /// Writes the bytes to `out`.
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), crate::TaskError>;
}

/// Who checks a side record's checksum when a checkpoint is loaded.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum SideCheck {
    /// The log, the whole record, before the checkpoint is used: a damaged
    /// record makes its checkpoint (and every one built on it) unusable.
    #[default]
    OnLoad,
    /// Its reader, a part at a time as it reads them: for a record larger
    /// than memory whose parts carry their own checksums (a run of the
    /// state store), which a load must not read whole.
    ByReader,
}

/// A record written beside an instance's part of a checkpoint: stream
/// `stream` of the instance (a field of its state, say), addressed in
/// later checkpoints as `(checkpoint, component, stream, instance)`.
#[derive(Clone, Debug)]
pub struct SideRecord {
    /// Which of the instance's side streams it is (distinct per instance).
    pub stream: u32,
    /// The version of its layout.
    pub schema: u32,
    /// Its bytes, produced by the coordinator.
    pub payload: Arc<dyn DeferredBytes>,
    /// Who checks its checksum when a checkpoint is loaded.
    pub check: SideCheck,
    /// Set by the coordinator once the checkpoint is complete: the record
    /// as written, mapped from the log (so that the state can drop its
    /// copy in memory and read the log instead).
    pub written: Arc<std::sync::OnceLock<SharedBytes>>,
}

impl PartialEq for SideRecord {
    fn eq(&self, other: &Self) -> bool {
        self.stream == other.stream
            && self.schema == other.schema
            && self.check == other.check
            && Arc::ptr_eq(&self.payload, &other.payload)
    }
}
impl Eq for SideRecord {}

/// Bytes owned elsewhere (a mapped checkpoint segment, say), shared by
/// reference count: a range of them, readable from any thread for as long
/// as the value lives.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: std::ops::Range<usize>,
}

impl SharedBytes {
    /// `range` of `owner`'s bytes (`None` if out of bounds).
    pub fn new(
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        range: std::ops::Range<usize>,
    ) -> Option<Self> {
        ((*owner).as_ref().get(range.clone()).is_some()).then_some(SharedBytes { owner, range })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.range.len())
    }
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
    /// The checkpoint's records, for state kept in side records
    /// ([`StateBytes::side`]); `None` where there is no log (a harness).
    pub records: Option<&'a dyn RestoreSource>,
}

impl fmt::Debug for Restore<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Restore")
            .field("component", &self.component)
            .field("checkpoint", &self.checkpoint)
            .field("is_final", &self.is_final)
            .field("ended", &self.ended)
            .field("instance", &self.instance)
            .field("parallelism", &self.parallelism)
            .field("parts", &self.parts)
            .field("records", &self.records.is_some())
            .finish()
    }
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
            records: None,
        }
    }

    /// The same restore with other `parts`: what a wrapping component
    /// hands the component it wraps, having taken its own bytes out of each
    /// part.
    pub fn with_parts<'b>(&'b self, parts: Vec<RestoredPart<'b>>) -> Restore<'b> {
        Restore {
            component: self.component,
            checkpoint: self.checkpoint,
            is_final: self.is_final,
            ended: self.ended.clone(),
            instance: self.instance,
            parallelism: self.parallelism,
            key_groups: self.key_groups,
            parts,
            records: self.records,
        }
    }

    /// Whether the instance with this index had ended its input: it
    /// restores as ended (it emits nothing at its end again), and a
    /// transactional sink publishes what it staged at its end.
    pub fn finished(&self) -> bool {
        self.had_ended(self.instance)
    }

    /// Whether instance `instance` of the run that wrote the checkpoint had
    /// ended its input: its final output is covered, and a transactional
    /// sink restoring it (or inheriting it at a lower parallelism)
    /// publishes what it staged at its end.
    pub fn had_ended(&self, instance: InstanceIdx) -> bool {
        self.is_final || self.ended.contains(&instance)
    }

    /// The last checkpoint whose output of old instance `instance` this
    /// restore covers: the final one if that instance had ended, else the
    /// restored checkpoint.
    pub fn covers(&self, instance: InstanceIdx) -> CheckpointId {
        if self.had_ended(instance) {
            CheckpointId::FINAL
        } else {
            self.checkpoint
        }
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

    /// Side record `stream` of instance `part` in `checkpoint` (see
    /// [`RestoreSource::side_record`]).
    pub fn side_record(
        &self,
        checkpoint: CheckpointId,
        stream: u32,
        part: InstanceIdx,
    ) -> Option<SharedBytes> {
        self.records?.side_record(SideRecordKey {
            checkpoint,
            component: self.component,
            stream,
            part,
        })
    }
}

/// Which side record [`RestoreSource::side_record`] reads: stream `stream`
/// of instance `part` of `component`, in `checkpoint`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SideRecordKey<'a> {
    /// The checkpoint restored, or one it builds on.
    pub checkpoint: CheckpointId,
    /// The component that wrote it.
    pub component: &'a str,
    /// Its stream among the component's side records.
    pub stream: u32,
    /// The instance that wrote it.
    pub part: InstanceIdx,
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
    /// The side record `key` names (of this checkpoint, or one it builds
    /// on), shared in place.
    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes>;
}

/// The holds on one job's input ([`CheckpointView::hold_input`]): how many
/// are out now, which the job's sources look at before each poll, and how
/// many were taken, for its report.
#[derive(Debug, Default)]
pub struct InputHolds {
    out: AtomicUsize,
    taken: AtomicU64,
}

impl InputHolds {
    /// Whether any hold is out: the sources read nothing.
    pub fn any(&self) -> bool {
        self.out.load(Ordering::Acquire) > 0
    }

    /// Holds taken so far.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

/// A hold on a job's input from [`CheckpointView::hold_input`]: its sources
/// read nothing until every hold is dropped.
#[derive(Debug)]
#[must_use = "the input is held only until the hold is dropped"]
pub struct InputHold {
    holds: Option<Arc<InputHolds>>,
}

impl Drop for InputHold {
    fn drop(&mut self) {
        if let Some(holds) = &self.holds {
            holds.out.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What an instance of a checkpointed job may learn about its checkpoints:
/// the last complete one, and the state it is restored from. Cheap to clone.
#[derive(Clone)]
pub struct CheckpointView {
    completed: Arc<AtomicU64>,
    restore: Option<Arc<dyn RestoreSource>>,
    /// Raised when the job fails.
    failed: Option<Arc<AtomicBool>>,
    /// Raised to ask for the next checkpoint now.
    early: Option<Arc<AtomicBool>>,
    /// The holds on the job's input ([`InputHold`]).
    holds: Option<Arc<InputHolds>>,
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
        CheckpointView {
            completed,
            restore,
            failed: None,
            early: None,
            holds: None,
        }
    }

    /// The same view, whose [`hold_input`](Self::hold_input) counts its
    /// holds in `holds`, which the job's sources look at before each poll.
    pub fn with_input_holds(mut self, holds: Arc<InputHolds>) -> Self {
        self.holds = Some(holds);
        self
    }

    /// Holds the job's sources back until the returned hold is dropped:
    /// what an instance calls when what it keeps until a checkpoint is past
    /// its budget, so that it stops growing with the input while the
    /// checkpoints that shrink it run. Held sources read nothing, but go on
    /// taking the checkpoints they are asked for, so checkpoints still
    /// complete; the holder drops the hold once back within its budget (and
    /// should ask for a checkpoint with
    /// [`request_checkpoint`](Self::request_checkpoint) meanwhile). Time held
    /// is the sources' backpressured time in the metrics.
    pub fn hold_input(&self) -> InputHold {
        if let Some(holds) = &self.holds {
            holds.out.fetch_add(1, Ordering::AcqRel);
            holds.taken.fetch_add(1, Ordering::Relaxed);
        }
        InputHold {
            holds: self.holds.clone(),
        }
    }

    /// The same view, whose [`request_checkpoint`](Self::request_checkpoint)
    /// raises `early` for the job's checkpoint coordinator.
    pub fn with_early_requests(mut self, early: Arc<AtomicBool>) -> Self {
        self.early = Some(early);
        self
    }

    /// Asks for the job's next checkpoint now rather than at its interval:
    /// what an instance calls when what it holds until a checkpoint (a
    /// transactional sink's staged output) passes its budget, so that
    /// memory follows the budget, not the input rate times the interval.
    /// The checkpoint starts once the one in flight, if any, is complete;
    /// requests until then are one request.
    pub fn request_checkpoint(&self) {
        if let Some(early) = &self.early {
            early.store(true, Ordering::Release);
        }
    }

    /// The same view, told that the job failed when `failed` is raised.
    pub fn with_failure(mut self, failed: Arc<AtomicBool>) -> Self {
        self.failed = Some(failed);
        self
    }

    /// Whether the job has failed: no checkpoint completes any more, and
    /// an instance waiting for one should stop waiting.
    pub fn job_failed(&self) -> bool {
        self.failed
            .as_ref()
            .is_some_and(|failed| failed.load(Ordering::Acquire))
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
            records: Some(&**source),
        })
    }
}
