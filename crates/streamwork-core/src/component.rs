//! The user-facing traits: [`Source`], [`Operator`], [`Sink`], and the
//! context they run in.

use crate::checkpoint::{CheckpointId, Restore, SnapshotContext, StateBytes};
use crate::collector::Collector;
use crate::error::{ConnectorError, TaskError};
use crate::instance::InstanceContext;
pub use crate::key::{ByKey, KeyFn, KeyKind, NoKey};
use crate::outputs::Outputs;
use crate::pre_aggregate::{LocalAggregate, PreAggregatedIn};
use crate::record::{Data, Record};
use crate::state::{CurrentKey, Key};
pub use crate::stream_time::{
    Admits, AnyTime, AssignsWatermarks, EventTime, StreamTime, TimeRequirement, Unwatermarked,
    Watermarked,
};
use crate::time::Timestamp;

/// What an operator keeps across records, as it declares it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Statefulness {
    /// It keeps nothing across records: what it emits for a record depends
    /// on that record alone (and on its configuration).
    Stateless,
    /// It keeps state, and its snapshots hold all of it: restored, it goes
    /// on as if it had never stopped.
    Checkpointed,
    /// It keeps state its snapshots leave out; the text says how to make it
    /// checkpoint (a window built without `.checkpointed()`, say). A job or
    /// a run that promises more than at-most-once refuses it.
    Unchecked(&'static str),
}

/// What a source did in one [`Source::poll`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// It emitted records (or may have more at once): poll again.
    Emitted,
    /// Nothing is available now: the runtime flushes pending batches (adaptive
    /// flushing) and polls again. A source should wait briefly (up to ~50 ms)
    /// for input before returning `Idle`, rather than spin.
    Idle,
    /// The input has ended: the source is closed and end-of-stream sent.
    Finished,
}

/// A component that brings records into the job.
///
/// Each instance is a clone of the value given to the job, opened with its own
/// [`InstanceContext`] (a parallel source splits its input by instance index).
pub trait Source: Clone + Send + 'static {
    /// Output channel(s): a [`Collector<T>`] or a struct of collectors.
    type Out: Outputs;

    /// Prepares this instance.
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let _ = ctx;
        Ok(())
    }

    /// Emits what is available now, preferably no more than about one batch.
    fn poll(&mut self, out: &mut Self::Out) -> Result<SourcePoll, ConnectorError>;

    /// Releases resources at the end of input (its own, or a drain), once
    /// the job's final checkpoint is complete. A job that stops at a
    /// savepoint does not close its instances (nothing ends): it drops
    /// them, so release what must always be released in `Drop`.
    fn close(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Whether the source can resume from its checkpointed position, so
    /// that a run promising at-least-once or exactly-once may read it
    /// (checked when the run starts). `false` by default: a source that
    /// overrides [`snapshot`](Self::snapshot) and [`restore`](Self::restore)
    /// says `true` here, and implements
    /// [`Replayable`](crate::checkpoint::Replayable) for `job!`'s check at
    /// compile time.
    fn replayable(&self) -> bool {
        false
    }

    /// The name of the input this source reads, when that input is divided
    /// into numbered *splits* a runner may share out among instances and
    /// processes (a Kafka topic, whose splits are its partitions; the word
    /// is Flink's, from its source API), each instance then reading the
    /// splits it is assigned ([`InstanceContext::assigned_splits`]); `None`
    /// (the default) for a source that cannot be split that way.
    ///
    /// [`InstanceContext::assigned_splits`]: crate::InstanceContext::assigned_splits
    fn split_input(&self) -> Option<String> {
        None
    }

    /// Whether [`poll`](Self::poll) may wait for something outside the job
    /// (a socket, a broker, a database, another process) rather than
    /// return what it has at once. On workers such a source runs on a
    /// thread of its own, so that its waits hold up no other task; one
    /// whose polls never wait (it generates, or reads memory or a local
    /// file) says `false` and shares a worker. `true` by default: the
    /// safe choice for a source the framework cannot see into.
    fn may_block(&self) -> bool {
        true
    }

    /// The position to resume from (chapter 10), taken when a checkpoint
    /// starts, between two polls: a replayable source returns where its
    /// next poll would read. `None` (the default): nothing to resume, the
    /// source is not replayable.
    fn snapshot(&mut self) -> Option<StateBytes> {
        None
    }

    /// The snapshot just taken belongs to checkpoint `checkpoint`
    /// ([`CheckpointId::FINAL`] at end of input), in a job that takes
    /// checkpoints: for a source that tells others how far the *completed*
    /// checkpoints have read (compare
    /// [`CheckpointView::completed`](crate::checkpoint::CheckpointView::completed)).
    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        let _ = checkpoint;
    }

    /// The job stops at savepoint `checkpoint`, which is complete: the
    /// source reads nothing more in this run, and the next resumes from the
    /// position it took for it. Nothing to do by default; a source that
    /// tells others how far completed checkpoints have read does so here.
    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        let _ = checkpoint;
    }

    /// Resumes from the position a previous run checkpointed, before
    /// [`open`](Self::open).
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let _ = restore;
        Ok(())
    }
}

/// What an operator sees while processing one record: its outputs, the
/// record's event time, its instance and, for keyed operators, the key.
pub struct Context<'a, K: KeyKind, O> {
    key: K::Ref<'a>,
    out: &'a mut O,
    time: Option<Timestamp>,
    instance: &'a InstanceContext,
}

impl<'a, K: KeyKind, O> Context<'a, K, O> {
    /// The context of one record: made by the engine and test harnesses.
    pub fn new(
        key: K::Ref<'a>,
        out: &'a mut O,
        time: Option<Timestamp>,
        instance: &'a InstanceContext,
    ) -> Self {
        Context {
            key,
            out,
            time,
            instance,
        }
    }

    /// The output channel(s).
    #[inline]
    pub fn out(&mut self) -> &mut O {
        self.out
    }

    /// Event time of the record being processed.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.time
    }

    /// Where this instance runs.
    pub fn instance(&self) -> &InstanceContext {
        self.instance
    }

    /// The current key handle, whatever the partitioning (`()` when unkeyed):
    /// for generic operators such as windows.
    #[inline]
    pub fn key_ref(&self) -> K::Ref<'a> {
        self.key
    }
}

impl<K: KeyKind, T: Data> Context<'_, K, Collector<T>> {
    /// Emits on the single output channel, at the input record's event time.
    #[inline]
    pub fn emit(&mut self, value: T) {
        self.out.emit(value);
    }

    /// Emits on the single output channel at event time `time`.
    #[inline]
    pub fn emit_at(&mut self, value: T, time: Timestamp) {
        self.out.emit_at(value, time);
    }
}

impl<'a, K: Key, O> Context<'a, ByKey<K>, O> {
    /// The key of the record being processed: the handle keyed state takes.
    #[inline]
    pub fn key(&self) -> CurrentKey<'a, K> {
        self.key
    }
}

/// A component that transforms records: one or more input ports, one or more
/// output channels.
///
/// An operator with inputs of several types reads one type that holds any of
/// them: [`Either`](crate::ports::Either) of two ports' records (a join, and
/// `<- left(a), right(b)` in `job!`), or an enum of the user's into which each
/// port's records are turned (`<- port(a => Reading::Count), ...`). The end
/// of each such port is [`on_input_end`](Self::on_input_end). With
/// `type Key = ByKey<K>`, every input must be keyed by `K`, so that the
/// records of a key from any port meet in the same instance.
///
/// Write it with `#[operator]` on a function or an impl block, or implement it
/// directly:
///
/// ```
/// use streamwork::core::{Collector, Context, NoKey, Operator, Statefulness};
/// #[derive(Clone)]
/// struct Double;
/// impl Operator for Double {
///     type In = u64;
///     type Key = NoKey;
///     type Out = Collector<u64>;
///     type Time = streamwork::core::AnyTime;
///     fn statefulness(&self) -> Statefulness {
///         Statefulness::Stateless
///     }
///     fn on_record(&mut self, value: u64, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
///         ctx.emit(value * 2);
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an operator",
    label = "an operator is expected here",
    note = "a closure is an operator once it says what it does: `map(|x: T| ...)`, `filter(|x: &T| ...)`, `filter_map(...)`, `flat_map(...)` or `inspect(...)` (in the prelude; in `job!`, a bare closure is a `map`), and per key `reduce(...)` or `fold(...)`",
    note = "other code becomes an operator with `#[operator]` on a function or an impl block"
)]
pub trait Operator: Clone + Send + 'static {
    /// Input record type.
    type In: Data;
    /// [`NoKey`], or [`ByKey<K>`] to require a stream keyed by `K`.
    type Key: KeyKind;
    /// Output channel(s): a [`Collector<T>`] or a struct of collectors.
    type Out: Outputs;
    /// [`AnyTime`], or [`EventTime`] to require a watermarked input.
    type Time: TimeRequirement;

    /// Prepares this instance.
    fn open(&mut self, ctx: &InstanceContext) {
        let _ = ctx;
    }

    /// Processes one record.
    fn on_record(&mut self, value: Self::In, ctx: &mut Context<'_, Self::Key, Self::Out>);

    /// Event time has advanced to `watermark` (the minimum over every input):
    /// fire event-time timers and windows here. The runtime forwards the
    /// watermark downstream after this returns, so results emitted here
    /// precede it.
    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        let _ = (watermark, out);
    }

    /// What this instance keeps across records: nothing, state that
    /// [`snapshot`](Self::snapshot) holds all of, or state its snapshots
    /// leave out (refused by any job or run that promises more than
    /// at-most-once). There is no default: stateful-ness is declared, never
    /// assumed. `#[operator]` declares it from the operator's
    /// `#[derive(State)]` (or its `stateless` argument).
    fn statefulness(&self) -> Statefulness;

    /// This instance's state for a checkpoint (chapter 10), taken between
    /// two records once the checkpoint's barrier has arrived on its inputs.
    /// `None` (the default): it keeps no state worth restoring.
    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let _ = ctx;
        Ok(None)
    }

    /// Restores the state a previous run checkpointed, before `open`. At a
    /// new parallelism, [`Restore::parts`] holds every old instance's state
    /// to take this instance's keys from.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let _ = restore;
        Ok(())
    }

    /// The wall clock reads `now` (milliseconds since the epoch): fire
    /// processing-time timers here. Called at least every 50 ms while the job
    /// runs, and after every batch.
    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        let _ = (now, out);
    }

    /// Called after each batch of input records: the place to do once per
    /// batch what need not be done per record (a watermark strategy emits its
    /// watermark here, coalesced).
    fn on_batch_end(&mut self, out: &mut Self::Out) {
        let _ = out;
    }

    /// Handles a whole batch in place, for an operator whose output is one
    /// `Collector<Self::In>` and that only restamps, rewrites or removes
    /// records (a watermark strategy): what is left in `records` is emitted
    /// as it is, without a copy per record. Returns `false` if it does not
    /// (the default): then every record goes through
    /// [`on_record`](Self::on_record). The runtime calls it for batches from
    /// the task the operator is fused into, when its output is a single
    /// collector of its input type and the job runs without acking.
    fn on_batch_in_place(&mut self, records: &mut Vec<Record<Self::In>>) -> bool {
        let _ = records;
        false
    }

    /// Every sender into input port `port` has ended (the others may go
    /// on). Called only for an operator with several input ports, whose
    /// input is one of theirs ([`ports`](crate::ports)); an operator with
    /// one input learns of its end through [`on_end`](Self::on_end).
    fn on_input_end(&mut self, port: u32, out: &mut Self::Out) {
        let _ = (port, out);
    }

    /// Called once when every input has ended: emit what is left. Event time
    /// has reached its end first ([`on_watermark`](Self::on_watermark) with
    /// [`Timestamp::MAX`]).
    fn on_end(&mut self, out: &mut Self::Out) {
        let _ = out;
    }

    /// Called when a checkpoint's barrier has reached this instance, before
    /// its [`snapshot`](Self::snapshot): what is emitted here goes out ahead
    /// of the barrier, so it belongs to the checkpoint. An operator that
    /// holds records back to send them together (a combiner) sends them
    /// here, and then holds nothing a snapshot would have to keep (Flink's
    /// `prepareSnapshotPreBarrier`).
    fn before_barrier(&mut self, out: &mut Self::Out) {
        let _ = out;
    }

    /// Whether this keyed operator has a [`combine`](Self::combine): then
    /// the engine merges each key's records before the keyed exchange, in
    /// the sending task (a combiner, as in MapReduce, or Flink's local
    /// aggregation), so that fewer cross it. `false` by default;
    /// `#[operator]` sets it for an impl block with a `fn combine`.
    const COMBINES: bool = false;

    /// Merges `later` into `earlier`, two records of one key, so that
    /// [`on_record`](Self::on_record) of the merged record leaves this
    /// operator's state as the two records one after the other would (a
    /// count whose records carry counts adds them). Called only when
    /// [`COMBINES`](Self::COMBINES) is `true`, on a clone of the operator
    /// that never sees a record: it must depend on nothing but its
    /// arguments and the operator's configuration.
    ///
    /// The operator then sees fewer records and emits fewer updates (one per
    /// merged record), and ends with the same state. Records are merged for
    /// a bounded time and number of keys, never across a watermark or a
    /// checkpoint's barrier, and not at all in a run with acking; a job
    /// turns combiners off with `combiners false;` in `job!`
    /// (`JobBuilder::combiners(false)`).
    fn combine(&self, earlier: &mut Self::In, later: Self::In) {
        let _ = (earlier, later);
    }

    /// Offers the engine a pre-aggregated form of this keyed operator (see
    /// [`pre_aggregate`](crate::pre_aggregate)): a
    /// [`LocalAggregate`] that merges
    /// records into partials in the sending task, and the operator that
    /// reads them, handed to `engine`. `Err(engine)` (the default): the
    /// operator has none, and reads its records one by one. Windows over an
    /// incremental aggregate in event time offer one.
    fn pre_aggregation<E: PreAggregating<Self>>(&self, engine: E) -> Result<E::Output, E> {
        Err(engine)
    }
}

/// A component that writes records out of the job.
pub trait Sink: Clone + Send + 'static {
    /// Input record type.
    type In: Data;

    /// Prepares this instance.
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let _ = ctx;
        Ok(())
    }

    /// Writes one record.
    fn write(&mut self, record: Record<Self::In>) -> Result<(), ConnectorError>;

    /// Called when there is nothing to do right now (adaptive flushing): a
    /// buffered writer flushes here.
    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Called once at end of input (its own, or a drain), after the final
    /// checkpoint is committed: flush and release resources. A job that
    /// stops at a savepoint does not close its sinks (a transactional sink
    /// must not publish what follows the savepoint): it drops them, so
    /// release what must always be released in `Drop`.
    fn close(&mut self) -> Result<(), ConnectorError> {
        self.flush()
    }

    /// Whether what the sink makes visible is exactly what a run without
    /// failure would (it publishes per completed checkpoint, or overwrites
    /// by key), so that a run promising exactly-once may write to it
    /// (checked when the run starts). `false` by default: a transactional or
    /// idempotent sink says `true` here, and implements
    /// [`Transactional`](crate::checkpoint::Transactional) for `job!`'s check
    /// at compile time.
    fn exactly_once(&self) -> bool {
        false
    }

    /// Everything written since the previous checkpoint belongs to
    /// `checkpoint`: make it durable, staged but not yet visible (a
    /// transactional sink), or simply flush it (the default).
    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let _ = checkpoint;
        self.flush()
    }

    /// The sink's own part of checkpoint `checkpoint`, taken right after
    /// [`pre_commit`](Self::pre_commit): what it staged and has not made
    /// visible yet, kept in the checkpoint (and so in its store) rather than
    /// in a directory of one machine, so that whichever process restores
    /// the checkpoint finds it in [`Restore::parts`] and can publish it (a
    /// write-ahead sink). `None` (the default): the sink keeps nothing in
    /// checkpoints.
    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let _ = checkpoint;
        Ok(None)
    }

    /// Where the sink keeps what it staged for checkpoints it has not
    /// committed yet, when that is a place of one machine (a local
    /// directory) rather than the checkpoint ([`snapshot`](Self::snapshot)):
    /// a runner whose processes share nothing but the checkpoint store
    /// refuses such a sink before it starts, since a process taking its
    /// partition over could neither publish nor discard what it staged.
    /// `None` (the default): nothing, or only in the checkpoint.
    fn stages_locally(&self) -> Option<String> {
        None
    }

    /// Whether writing, flushing or committing may wait for something
    /// outside the job (a database, a broker, an upload, a checkpoint's
    /// completion): on workers such a sink runs on a thread of its own
    /// (with what is fused into it), so that its waits hold up no other
    /// task. A sink that only writes memory or a local file says `false`.
    /// `true` by default, the safe choice.
    fn may_block(&self) -> bool {
        true
    }

    /// Checkpoints up to `checkpoint` are complete: make what was staged for
    /// them visible. [`CheckpointId::FINAL`] commits everything staged, at
    /// end of input.
    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let _ = checkpoint;
        Ok(())
    }

    /// Right after [`open`](Self::open), in every run that takes
    /// checkpoints (a sink restores after it opens, as it needs its outputs
    /// to commit or discard what a previous run staged):
    /// `restore.checkpoint` is the checkpoint the run starts from; commit
    /// what was staged up to it and discard what was staged after. A run
    /// that starts from no checkpoint is told so with
    /// [`CheckpointId::NONE`] and no parts: everything an earlier run
    /// staged is then discarded (it belongs to checkpoints that never
    /// completed). Output already *published* past the checkpoint the run
    /// starts from is a refusal (a [`ConnectorError`] that names it), not a
    /// silent repeat.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let _ = restore;
        Ok(())
    }
}

/// The engine's side of [`Operator::pre_aggregation`]: given what the
/// sending task computes and the operator that reads its partials, it
/// places the first before the keyed exchange and the second after it.
pub trait PreAggregating<O: Operator> {
    /// What placing them gives (the operator's output streams).
    type Output;

    /// Places `local` before the exchange and `global` after it. `late` is
    /// the operator's channel of records it finds late, if it has one: the
    /// engine merges nothing while a component reads it, since the records
    /// a late partial stands for are no longer there to emit.
    fn pre_aggregate<L, G>(self, local: L, global: G, late: Option<u32>) -> Self::Output
    where
        L: LocalAggregate<In = O::In, Key = <O::Key as KeyKind>::Value>,
        G: ReadsPartials<O, L::Partial>;
}

/// An operator that stands for `O` after its keyed exchange, reading `O`'s
/// records and partials `P` (what [`PreAggregating::pre_aggregate`] places
/// there): `O`'s key, outputs and time.
pub trait ReadsPartials<O: Operator, P>:
    Operator<In = PreAggregatedIn<O::In, P>, Key = O::Key, Out = O::Out, Time = O::Time>
{
}

impl<O: Operator, P, G> ReadsPartials<O, P> for G where
    G: Operator<In = PreAggregatedIn<O::In, P>, Key = O::Key, Out = O::Out, Time = O::Time>
{
}
