//! Driving operators by hand, without a runtime: scripted records (with keys
//! and event times), watermarks and processing time (a virtual clock), and
//! the outputs they produce. For unit tests of operators, windows and joins.
//!
//! A [`Script`] of [`Step`]s can also be run with a [`Fault`] injected: the
//! instance fails before its N-th record or while taking its K-th
//! checkpoint, is rebuilt from the last complete checkpoint's snapshot, and
//! the script resumes from there, as the runtime replays a replayable
//! source. Output is committed at checkpoints, as a transactional sink does,
//! and [`assert_recovers`] checks that the committed output with each fault
//! equals the output without (the exactly-once oracle).
//!
//! In a whole job, [`InjectFault`] is a pass-through operator that makes one
//! instance fail once, at a record or at a checkpoint, so that a test can
//! check that the runtime's recovery commits what a run without the fault
//! commits.
//!
//! ```
//! use streamwork::core::testkit::Harness;
//! use streamwork::core::{AnyTime, Collector, Context, NoKey, Operator, Statefulness};
//! #[derive(Clone)]
//! struct Double;
//! impl Operator for Double {
//!     type In = u32;
//!     type Key = NoKey;
//!     type Out = Collector<u32>;
//!     type Time = AnyTime;
//!     fn statefulness(&self) -> Statefulness {
//!         Statefulness::Stateless
//!     }
//!     fn on_record(&mut self, v: u32, ctx: &mut Context<'_, NoKey, Collector<u32>>) {
//!         ctx.emit(v * 2);
//!     }
//! }
//! let mut harness = Harness::new(Double);
//! harness.record((), 21, None);
//! assert_eq!(harness.take(|out| out.take_buffered()).len(), 1);
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::checkpoint::{
    Restore, RestoreSource, RestoredPart, SharedBytes, SideRecordKey, SnapshotContext, StateBytes,
};
use crate::collector::Collector;
use crate::component::{AnyTime, Context, KeyKind, NoKey, Operator, Statefulness};
use crate::error::TaskError;
use crate::grouping::KeyGroups;
use crate::id::{CheckpointId, InstanceIdx};
use crate::instance::InstanceContext;
use crate::outputs::{OutputParts, Outputs};
use crate::ports::Either;
use crate::record::Data;
use crate::time::Timestamp;

/// A snapshot, or the test's failure with the operator's error.
fn snapshot_or_panic(snapshot: Result<Option<StateBytes>, TaskError>) -> Option<StateBytes> {
    match snapshot {
        Ok(state) => state,
        Err(error) => panic!("the operator failed to take its snapshot: {error}"),
    }
}

fn context(name: &str) -> InstanceContext {
    InstanceContext::new(name, InstanceIdx(0), 1, KeyGroups::DEFAULT)
}

/// The checkpoint a harness restores from: one snapshot (of instance 0 of
/// 1), with its side records produced as the runtime's coordinator produces
/// them, off the operator.
struct HarnessCheckpoint {
    checkpoint: CheckpointId,
    state: Option<StateBytes>,
    side: Vec<(u32, SharedBytes)>,
}

impl HarnessCheckpoint {
    fn of(checkpoint: CheckpointId, state: Option<&StateBytes>) -> Result<Self, TaskError> {
        let mut side = Vec::new();
        for record in state.iter().flat_map(|s| s.side.iter()) {
            let mut bytes = Vec::new();
            record.payload.produce(&mut bytes)?;
            let len = bytes.len();
            let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes);
            if let Some(shared) = SharedBytes::new(owner, 0..len) {
                side.push((record.stream, shared));
            }
        }
        Ok(HarnessCheckpoint {
            checkpoint,
            state: state.cloned(),
            side,
        })
    }

    fn part(&self) -> Option<RestoredPart<'_>> {
        self.state.as_ref().map(|s| RestoredPart {
            part: InstanceIdx(0),
            schema: s.schema,
            bytes: &s.bytes,
        })
    }

    /// What a restarted instance `0 of 1` is offered.
    fn restore<'a>(&'a self, ctx: &'a InstanceContext) -> Restore<'a> {
        Restore {
            component: ctx.component(),
            checkpoint: self.checkpoint,
            is_final: false,
            ended: Vec::new(),
            instance: InstanceIdx(0),
            parallelism: 1,
            key_groups: ctx.key_groups(),
            parts: self.part().into_iter().collect(),
            records: Some(self),
        }
    }
}

impl RestoreSource for HarnessCheckpoint {
    fn checkpoint(&self) -> CheckpointId {
        self.checkpoint
    }

    fn is_final(&self) -> bool {
        false
    }

    fn parts(&self, _: &str) -> Vec<RestoredPart<'_>> {
        self.part().into_iter().collect()
    }

    fn ended(&self, _: &str) -> Vec<InstanceIdx> {
        Vec::new()
    }

    /// The snapshot's own side records; a harness keeps no earlier
    /// checkpoint.
    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes> {
        let SideRecordKey {
            checkpoint,
            stream,
            part,
            ..
        } = key;
        if checkpoint != self.checkpoint || part != InstanceIdx(0) {
            return None;
        }
        self.side
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|(_, bytes)| bytes.clone())
    }
}

/// One operator instance, driven by hand.
pub struct Harness<O: Operator> {
    operator: O,
    out: O::Out,
    ctx: InstanceContext,
    watermark: Timestamp,
}

impl<O: Operator> Harness<O> {
    /// Opens `operator` as instance 0 of 1, with outputs that keep what they get.
    pub fn new(mut operator: O) -> Self {
        let ctx = context("harness");
        operator.open(&ctx);
        Harness {
            operator,
            out: O::Out::assemble(&mut OutputParts::detached()),
            ctx,
            watermark: Timestamp::MIN,
        }
    }

    /// Opens `operator` after restoring it from the snapshot `state` it (or
    /// another instance of it) took at checkpoint `checkpoint`, as the
    /// runtime does after a failure.
    pub fn restored(
        mut operator: O,
        checkpoint: CheckpointId,
        state: Option<&StateBytes>,
    ) -> Result<Self, TaskError> {
        // Restored before it opens, as the runtime does.
        let ctx = context("harness");
        operator.restore(&HarnessCheckpoint::of(checkpoint, state)?.restore(&ctx))?;
        Ok(Self::new(operator))
    }

    /// Takes the snapshot a checkpoint would (checkpoint 1, instance 0 of 1).
    ///
    /// # Panics
    ///
    /// If the operator fails to take it: a harness drives a test, which
    /// then fails with the operator's error.
    pub fn snapshot(&mut self) -> Option<StateBytes> {
        snapshot_or_panic(
            self.operator
                .snapshot(&SnapshotContext::single(CheckpointId::new(1))),
        )
    }

    /// A checkpoint's barrier arrives, as the runtime delivers it: the
    /// operator emits what must precede it
    /// ([`before_barrier`](Operator::before_barrier)), then takes its
    /// snapshot (see [`snapshot`](Self::snapshot)).
    pub fn barrier(&mut self) -> Option<StateBytes> {
        self.out.set_time(None);
        self.operator.before_barrier(&mut self.out);
        self.snapshot()
    }

    /// Processes `value` with key `key` (`()` when unkeyed) at event time `time` (ms).
    pub fn record(&mut self, key: <O::Key as KeyKind>::Value, value: O::In, time: Option<i64>) {
        let owned = O::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(O::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_record(value, &mut ctx);
        self.out.set_time(None);
        self.operator.on_batch_end(&mut self.out);
    }

    /// Advances event time to `millis` (as the runtime does, never backwards).
    pub fn watermark(&mut self, millis: i64) {
        let watermark = Timestamp::from_millis(millis);
        if watermark > self.watermark {
            self.watermark = watermark;
            self.operator.on_watermark(watermark, &mut self.out);
        }
    }

    /// Ticks processing time to `millis`.
    pub fn processing_time(&mut self, millis: i64) {
        self.operator
            .on_processing_time(Timestamp::from_millis(millis), &mut self.out);
    }

    /// Every sender into input port `port` has ended, as the runtime tells
    /// the operator ([`on_input_end`](Operator::on_input_end)).
    pub fn end_input(&mut self, port: u32) {
        self.out.set_time(None);
        self.operator.on_input_end(port, &mut self.out);
    }

    /// Ends the input: event time reaches its end, then `on_end`.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.operator.on_end(&mut self.out);
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &O {
        &self.operator
    }

    /// The operator under test, to call a hook the harness does not (its
    /// [`on_batch_in_place`](Operator::on_batch_in_place), say).
    pub fn operator_mut(&mut self) -> &mut O {
        &mut self.operator
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<R>(&mut self, read: impl FnOnce(&mut O::Out) -> R) -> R {
        read(&mut self.out)
    }
}

/// One two-input operator instance (its input an [`Either`] of its ports'
/// records), driven by hand: a [`Harness`] with a method per port.
pub struct CoHarness<O: Operator>(Harness<O>);

impl<O, L, R> CoHarness<O>
where
    O: Operator<In = Either<L, R>>,
{
    /// Opens `operator` as instance 0 of 1.
    pub fn new(operator: O) -> Self {
        CoHarness(Harness::new(operator))
    }

    /// Opens `operator` after restoring it from the snapshot `state` taken
    /// at checkpoint `checkpoint`, as the runtime does after a failure.
    pub fn restored(
        operator: O,
        checkpoint: CheckpointId,
        state: Option<&StateBytes>,
    ) -> Result<Self, TaskError> {
        Harness::restored(operator, checkpoint, state).map(CoHarness)
    }

    /// Ticks processing time to `millis`.
    pub fn processing_time(&mut self, millis: i64) {
        self.0.processing_time(millis);
    }

    /// Processes a left record.
    pub fn left(&mut self, key: <O::Key as KeyKind>::Value, value: L, time: Option<i64>) {
        self.0.record(key, Either::Left(value), time);
    }

    /// Processes a right record.
    pub fn right(&mut self, key: <O::Key as KeyKind>::Value, value: R, time: Option<i64>) {
        self.0.record(key, Either::Right(value), time);
    }

    /// Advances event time to `millis`.
    pub fn watermark(&mut self, millis: i64) {
        self.0.watermark(millis);
    }

    /// Ends both inputs.
    pub fn end(&mut self) {
        self.0.end();
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &O {
        self.0.operator()
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<T>(&mut self, read: impl FnOnce(&mut O::Out) -> T) -> T {
        self.0.take(read)
    }
}

/// One step of a [`Script`].
#[derive(Clone, Debug)]
pub enum Step<K, T> {
    /// A record with its key (`()` when unkeyed) and event time (ms).
    Record {
        /// The key.
        key: K,
        /// The value.
        value: T,
        /// The event time, if any.
        time: Option<i64>,
    },
    /// Event time advances to this many ms.
    Watermark(i64),
    /// The virtual wall clock reads this many ms.
    ProcessingTime(i64),
    /// A checkpoint: the instance takes its snapshot and the output so far
    /// is committed.
    Checkpoint,
}

/// Steps for one operator of input `T` keyed by `K`.
pub type Script<K, T> = Vec<Step<K, T>>;

/// Where a scripted run fails.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The instance fails just before its `n`-th record (from 0).
    BeforeRecord(usize),
    /// The instance fails while taking its `k`-th checkpoint (from 1), so
    /// the checkpoint never completes.
    InCheckpoint(usize),
}

/// The result of a scripted run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scripted<R> {
    /// The output committed, in order.
    pub output: Vec<R>,
    /// Times the instance was rebuilt from a checkpoint.
    pub restarts: u32,
    /// Checkpoints completed (replayed ones counted again).
    pub checkpoints: u32,
}

/// Runs `script` on an instance of `operator`, failing it at `fault`, and
/// returns the committed output that `drain` takes from its outputs after
/// each step. Output since the last complete checkpoint is discarded at the
/// failure, as a transactional sink discards what it staged.
///
/// ```
/// use streamwork::core::testkit::{Fault, Step, run_script};
/// use streamwork::core::{AnyTime, Collector, Context, NoKey, Operator, Restore, StateBytes, TaskError};
/// use streamwork::core::{SnapshotContext, Statefulness};
/// // A running sum that checkpoints its total.
/// #[derive(Clone, Default)]
/// struct Sum(u64);
/// impl Operator for Sum {
///     type In = u64;
///     type Key = NoKey;
///     type Out = Collector<u64>;
///     type Time = AnyTime;
///     fn on_record(&mut self, v: u64, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
///         self.0 += v;
///         ctx.emit(self.0);
///     }
///     fn statefulness(&self) -> Statefulness {
///         Statefulness::Checkpointed
///     }
///     fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
///         Ok(Some(StateBytes::new(1, self.0.to_le_bytes().to_vec())))
///     }
///     fn restore(&mut self, r: &Restore<'_>) -> Result<(), TaskError> {
///         if let Some(part) = r.own() {
///             let bytes = part.bytes.try_into().map_err(|_| TaskError::Restore("8 bytes".into()))?;
///             self.0 = u64::from_le_bytes(bytes);
///         }
///         Ok(())
///     }
/// }
/// let script = vec![
///     Step::Record { key: (), value: 1, time: None },
///     Step::Checkpoint,
///     Step::Record { key: (), value: 2, time: None },
///     Step::Record { key: (), value: 3, time: None },
/// ];
/// let run = run_script(Sum::default(), &script, Some(Fault::BeforeRecord(2)), |o| {
///     o.take_buffered().into_iter().map(|r| r.value).collect()
/// })
///     .unwrap();
/// assert_eq!(run.output, vec![1, 3, 6]);
/// assert_eq!(run.restarts, 1);
/// ```
pub fn run_script<O, R>(
    operator: O,
    script: &[Step<<O::Key as KeyKind>::Value, O::In>],
    fault: Option<Fault>,
    drain: impl FnMut(&mut O::Out) -> Vec<R>,
) -> Result<Scripted<R>, TaskError>
where
    O: Operator,
    O::In: Clone,
{
    run_instance(|from| harness(&operator, from), script, fault, drain)
}

/// The exactly-once oracle: runs `script` without a fault, then with each
/// of `faults`, and panics, naming the fault, unless every run commits the
/// same output and recovers exactly once. Where an operator emits the
/// results of one step in no set order (a window firing for many keys),
/// let `drain` sort them.
pub fn assert_recovers<O, R>(
    operator: O,
    script: &[Step<<O::Key as KeyKind>::Value, O::In>],
    faults: impl IntoIterator<Item = Fault>,
    mut drain: impl FnMut(&mut O::Out) -> Vec<R>,
) where
    O: Operator,
    O::In: Clone,
    R: PartialEq + std::fmt::Debug,
{
    compare_runs(
        |fault| run_script(operator.clone(), script, fault, &mut drain),
        faults,
    );
}

/// The combiner oracle: checks that `operator`'s
/// [`combine`](Operator::combine) is a true merge on `script`, and panics,
/// naming the step, where it is not.
///
/// It runs `script` twice, on two instances: record by record, and with
/// the records of each key merged by `combine` as the engine's combiner
/// merges them (in arrival order, the latest event time kept), sent before
/// each watermark, processing-time step and checkpoint of the script, and
/// at the end, one key after another in the order the keys first came.
/// (The engine sends at a tick only once 100 ms have passed, and keys in
/// no set order: it may merge across more ticks than the script does.)
/// After each of those steps and at the end, `view` reads each instance:
/// what must not differ, such as the operator's state (a sorted copy of
/// its map) or what it emitted at a watermark. What it emits per record
/// differs by design (fewer updates), so a view of outputs should read
/// them where the two runs agree.
///
/// A declared combine is the operator's own claim: the engine cannot check
/// it, so check it here, with scripts that merge what the job will merge.
///
/// ```
/// use streamwork::core::testkit::{Step, assert_combines};
/// use streamwork::core::{AnyTime, ByKey, Collector, Context, Operator, Statefulness};
/// use std::collections::BTreeMap;
/// // Sums per key; `combine` adds two records' amounts.
/// #[derive(Clone, Default)]
/// struct Sums(BTreeMap<u32, u64>);
/// impl Operator for Sums {
///     type In = (u32, u64);
///     type Key = ByKey<u32>;
///     type Out = Collector<(u32, u64)>;
///     type Time = AnyTime;
///     const COMBINES: bool = true;
///     fn combine(&self, earlier: &mut (u32, u64), later: (u32, u64)) {
///         earlier.1 += later.1;
///     }
///     fn on_record(&mut self, (k, v): (u32, u64), _: &mut Context<'_, ByKey<u32>, Self::Out>) {
///         *self.0.entry(k).or_default() += v;
///     }
///     fn statefulness(&self) -> Statefulness {
///         Statefulness::Unchecked("an example: its map is not checkpointed")
///     }
/// }
/// let record = |k: u32, v: u64| Step::Record { key: k, value: (k, v), time: None };
/// let script = vec![record(1, 2), record(2, 5), record(1, 3), Step::Watermark(10), record(1, 1)];
/// assert_combines(Sums::default(), &script, |h| h.operator().0.clone());
/// ```
pub fn assert_combines<O, S>(
    operator: O,
    script: &[Step<<O::Key as KeyKind>::Value, O::In>],
    mut view: impl FnMut(&mut Harness<O>) -> S,
) where
    O: Operator,
    O::In: Clone,
    S: PartialEq + std::fmt::Debug,
{
    type Pending<K, T> = Vec<(K, T, Option<i64>)>;
    let merger = operator.clone();
    let mut one_by_one = Harness::new(operator.clone());
    let mut merged = Harness::new(operator);
    let mut pending: Pending<<O::Key as KeyKind>::Value, O::In> = Vec::new();
    let send = |pending: &mut Pending<_, _>, harness: &mut Harness<O>| {
        for (key, value, time) in pending.drain(..) {
            harness.record(key, value, time);
        }
    };
    let mut compare = |at: &str, one_by_one: &mut Harness<O>, merged: &mut Harness<O>| {
        let (expected, got) = (view(one_by_one), view(merged));
        assert!(
            expected == got,
            "`combine` is not a true merge: {at}, record by record reads {expected:?}, merged reads {got:?}"
        );
    };
    for (i, step) in script.iter().enumerate() {
        let at = match step {
            Step::Record { key, value, time } => {
                one_by_one.record(key.clone(), value.clone(), *time);
                match pending.iter_mut().find(|(k, _, _)| k == key) {
                    Some((_, earlier, at)) => {
                        merger.combine(earlier, value.clone());
                        *at = (*at).max(*time);
                    }
                    None => pending.push((key.clone(), value.clone(), *time)),
                }
                continue;
            }
            Step::Watermark(millis) => {
                send(&mut pending, &mut merged);
                one_by_one.watermark(*millis);
                merged.watermark(*millis);
                format!("after step {i}, a watermark at {millis} ms")
            }
            Step::ProcessingTime(millis) => {
                send(&mut pending, &mut merged);
                one_by_one.processing_time(*millis);
                merged.processing_time(*millis);
                format!("after step {i}, processing time {millis} ms")
            }
            Step::Checkpoint => {
                send(&mut pending, &mut merged);
                one_by_one.barrier();
                merged.barrier();
                format!("after step {i}, a checkpoint")
            }
        };
        compare(&at, &mut one_by_one, &mut merged);
    }
    send(&mut pending, &mut merged);
    one_by_one.end();
    merged.end();
    compare("at the end", &mut one_by_one, &mut merged);
}

/// Checks that `f`, a `reduce` function that folds its second argument into
/// its first, is associative on every triple of `samples` (`(a·b)·c` equals
/// `a·(b·c)`), and panics with the first triple where it is not: what
/// `reduce(f).associative()` claims, so that the engine may merge a key's
/// values before the exchange.
///
/// ```
/// use streamwork::core::testkit::assert_associative;
/// assert_associative(|sum: &mut u64, x: u64| *sum += x, &[0, 1, 7, u64::MAX / 4]);
/// let mean = |avg: &mut f64, x: f64| *avg = (*avg + x) / 2.0;
/// let checked = std::panic::catch_unwind(|| assert_associative(mean, &[1.0, 2.0, 4.0]));
/// assert!(checked.is_err(), "a running mean of two is not associative");
/// ```
pub fn assert_associative<V, F>(f: F, samples: &[V])
where
    V: Clone + PartialEq + std::fmt::Debug,
    F: Fn(&mut V, V),
{
    for a in samples {
        for b in samples {
            for c in samples {
                let mut left = a.clone();
                f(&mut left, b.clone());
                f(&mut left, c.clone());
                let mut bc = b.clone();
                f(&mut bc, c.clone());
                let mut right = a.clone();
                f(&mut right, bc);
                assert!(
                    left == right,
                    "not associative: ({a:?}·{b:?})·{c:?} = {left:?} but {a:?}·({b:?}·{c:?}) = {right:?}"
                );
            }
        }
    }
}

/// One step of a [`CoScript`], for a two-input operator.
#[derive(Clone, Debug)]
pub enum CoStep<K, L, R> {
    /// A record on the left input.
    Left {
        /// The key.
        key: K,
        /// The value.
        value: L,
        /// The event time, if any.
        time: Option<i64>,
    },
    /// A record on the right input.
    Right {
        /// The key.
        key: K,
        /// The value.
        value: R,
        /// The event time, if any.
        time: Option<i64>,
    },
    /// Event time advances to this many ms.
    Watermark(i64),
    /// The virtual wall clock reads this many ms.
    ProcessingTime(i64),
    /// A checkpoint.
    Checkpoint,
}

/// Steps for a two-input operator.
pub type CoScript<K, L, R> = Vec<CoStep<K, L, R>>;

/// [`run_script`] for a two-input operator: records on either input count
/// toward [`Fault::BeforeRecord`].
pub fn run_co_script<O, L, R, T>(
    operator: O,
    script: &[CoStep<<O::Key as KeyKind>::Value, L, R>],
    fault: Option<Fault>,
    drain: impl FnMut(&mut O::Out) -> Vec<T>,
) -> Result<Scripted<T>, TaskError>
where
    O: Operator<In = Either<L, R>>,
    L: Clone,
    R: Clone,
{
    run_instance(
        |from| harness(&operator, from).map(CoHarness),
        script,
        fault,
        drain,
    )
}

/// [`assert_recovers`] for a two-input operator.
pub fn assert_co_recovers<O, L, R, T>(
    operator: O,
    script: &[CoStep<<O::Key as KeyKind>::Value, L, R>],
    faults: impl IntoIterator<Item = Fault>,
    mut drain: impl FnMut(&mut O::Out) -> Vec<T>,
) where
    O: Operator<In = Either<L, R>>,
    L: Clone,
    R: Clone,
    T: PartialEq + std::fmt::Debug,
{
    compare_runs(
        |fault| run_co_script(operator.clone(), script, fault, &mut drain),
        faults,
    );
}

/// What a scripted run needs of a driven instance.
trait Scriptable {
    type Step;
    type Out;
    fn is_record(step: &Self::Step) -> bool;
    fn is_checkpoint(step: &Self::Step) -> bool;
    /// Applies a step other than a checkpoint.
    fn apply(&mut self, step: &Self::Step);
    fn snapshot(&mut self) -> Result<Option<StateBytes>, TaskError>;
    fn end(&mut self);
    fn out(&mut self) -> &mut Self::Out;
}

impl<O: Operator> Scriptable for Harness<O>
where
    O::In: Clone,
{
    type Step = Step<<O::Key as KeyKind>::Value, O::In>;
    type Out = O::Out;
    fn is_record(step: &Self::Step) -> bool {
        matches!(step, Step::Record { .. })
    }
    fn is_checkpoint(step: &Self::Step) -> bool {
        matches!(step, Step::Checkpoint)
    }
    fn apply(&mut self, step: &Self::Step) {
        match step {
            Step::Record { key, value, time } => self.record(key.clone(), value.clone(), *time),
            Step::Watermark(millis) => self.watermark(*millis),
            Step::ProcessingTime(millis) => self.processing_time(*millis),
            Step::Checkpoint => {}
        }
    }
    fn snapshot(&mut self) -> Result<Option<StateBytes>, TaskError> {
        self.operator
            .snapshot(&SnapshotContext::single(CheckpointId::new(1)))
    }
    fn end(&mut self) {
        Harness::end(self);
    }
    fn out(&mut self) -> &mut O::Out {
        &mut self.out
    }
}

impl<O, L, R> Scriptable for CoHarness<O>
where
    O: Operator<In = Either<L, R>>,
    L: Clone,
    R: Clone,
{
    type Step = CoStep<<O::Key as KeyKind>::Value, L, R>;
    type Out = O::Out;
    fn is_record(step: &Self::Step) -> bool {
        matches!(step, CoStep::Left { .. } | CoStep::Right { .. })
    }
    fn is_checkpoint(step: &Self::Step) -> bool {
        matches!(step, CoStep::Checkpoint)
    }
    fn apply(&mut self, step: &Self::Step) {
        match step {
            CoStep::Left { key, value, time } => self.left(key.clone(), value.clone(), *time),
            CoStep::Right { key, value, time } => self.right(key.clone(), value.clone(), *time),
            CoStep::Watermark(millis) => self.watermark(*millis),
            CoStep::ProcessingTime(millis) => self.processing_time(*millis),
            CoStep::Checkpoint => {}
        }
    }
    fn snapshot(&mut self) -> Result<Option<StateBytes>, TaskError> {
        Scriptable::snapshot(&mut self.0)
    }
    fn end(&mut self) {
        CoHarness::end(self);
    }
    fn out(&mut self) -> &mut O::Out {
        &mut self.0.out
    }
}

/// The state a rebuilt instance starts from: a checkpoint and its snapshot.
type From<'a> = Option<(CheckpointId, Option<&'a StateBytes>)>;

/// A fresh instance of `operator`, or one restored `from` a checkpoint.
fn harness<O: Operator>(operator: &O, from: From<'_>) -> Result<Harness<O>, TaskError> {
    match from {
        Some((checkpoint, state)) => Harness::restored(operator.clone(), checkpoint, state),
        None => Ok(Harness::new(operator.clone())),
    }
}

fn run_instance<I: Scriptable, R>(
    make: impl Fn(From<'_>) -> Result<I, TaskError>,
    script: &[I::Step],
    fault: Option<Fault>,
    mut drain: impl FnMut(&mut I::Out) -> Vec<R>,
) -> Result<Scripted<R>, TaskError> {
    let mut run = Scripted {
        output: Vec::new(),
        restarts: 0,
        checkpoints: 0,
    };
    let mut staged: Vec<R> = Vec::new();
    // The last complete checkpoint: its id, the step after it, the snapshot.
    let mut last: Option<(CheckpointId, usize, Option<StateBytes>)> = None;
    let mut instance = make(None)?;
    let (mut step, mut records, mut checkpoints) = (0usize, 0usize, 0usize);
    let mut failed = false;
    while step < script.len() {
        let current = &script[step];
        let fails_here = !failed
            && match fault {
                Some(Fault::BeforeRecord(n)) => I::is_record(current) && records == n,
                Some(Fault::InCheckpoint(k)) => I::is_checkpoint(current) && checkpoints + 1 == k,
                None => false,
            };
        if fails_here {
            failed = true;
            staged.clear();
            run.restarts += 1;
            instance = make(last.as_ref().map(|(id, _, state)| (*id, state.as_ref())))?;
            step = last.as_ref().map_or(0, |(_, resume, _)| *resume);
            continue;
        }
        if I::is_checkpoint(current) {
            checkpoints += 1;
            let state = instance.snapshot()?;
            staged.extend(drain(instance.out()));
            run.output.append(&mut staged);
            run.checkpoints += 1;
            last = Some((CheckpointId::new(run.checkpoints as u64), step + 1, state));
        } else {
            records += usize::from(I::is_record(current));
            instance.apply(current);
        }
        staged.extend(drain(instance.out()));
        step += 1;
    }
    instance.end();
    staged.extend(drain(instance.out()));
    run.output.append(&mut staged);
    Ok(run)
}

fn compare_runs<R: PartialEq + std::fmt::Debug>(
    mut run: impl FnMut(Option<Fault>) -> Result<Scripted<R>, TaskError>,
    faults: impl IntoIterator<Item = Fault>,
) {
    let clean = match run(None) {
        Ok(run) => run,
        Err(e) => panic!("the run without a fault failed: {e}"),
    };
    for fault in faults {
        let faulty = match run(Some(fault)) {
            Ok(run) => run,
            Err(e) => panic!("with {fault:?}: recovery failed: {e}"),
        };
        assert_eq!(
            faulty.restarts, 1,
            "with {fault:?}: the fault was never reached"
        );
        assert_eq!(
            faulty.output, clean.output,
            "with {fault:?}: the committed output differs from the run without a fault"
        );
    }
}

/// A pass-through operator for a whole job that makes instance `instance`
/// fail once (the first attempt only: the flag is shared by every clone and
/// every restart), before its `n`-th record or while taking its `k`-th
/// snapshot (see [`Fault`]). Put it on a forward edge before the stage under
/// test; the runtime's recovery must then commit what the run without it
/// commits.
///
/// ```
/// use streamwork::core::testkit::{Fault, InjectFault};
/// let fault = InjectFault::<u64>::new(1, Fault::BeforeRecord(10_000));
/// assert!(!fault.has_fired());
/// ```
pub struct InjectFault<T> {
    instance: u32,
    fault: Fault,
    fired: Arc<AtomicBool>,
    me: u32,
    records: usize,
    snapshots: usize,
    _types: std::marker::PhantomData<fn(T)>,
}

impl<T> Clone for InjectFault<T> {
    fn clone(&self) -> Self {
        InjectFault {
            instance: self.instance,
            fault: self.fault,
            fired: self.fired.clone(),
            me: self.me,
            records: self.records,
            snapshots: self.snapshots,
            _types: std::marker::PhantomData,
        }
    }
}

impl<T> InjectFault<T> {
    /// Fails instance `instance` once, at `fault`.
    pub fn new(instance: u32, fault: Fault) -> Self {
        InjectFault {
            instance,
            fault,
            fired: Arc::new(AtomicBool::new(false)),
            me: 0,
            records: 0,
            snapshots: 0,
            _types: std::marker::PhantomData,
        }
    }

    /// Whether the fault has happened (in any clone).
    pub fn has_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    fn fire(&self, at: &str) {
        if self.me == self.instance && !self.fired.swap(true, Ordering::SeqCst) {
            panic!("injected fault: instance {} fails {at}", self.me);
        }
    }
}

impl<T: Data> Operator for InjectFault<T> {
    type In = T;
    type Key = NoKey;
    type Out = Collector<T>;
    type Time = AnyTime;

    fn open(&mut self, ctx: &InstanceContext) {
        self.me = ctx.instance().0;
    }

    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<T>>) {
        if self.fault == Fault::BeforeRecord(self.records) {
            self.fire(&format!("before record {}", self.records));
        }
        self.records += 1;
        ctx.emit(value);
    }

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.snapshots += 1;
        if self.fault == Fault::InCheckpoint(self.snapshots) {
            self.fire(&format!("in checkpoint {}", self.snapshots));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::AnyTime;
    use crate::component::Statefulness;
    use crate::key::ByKey;

    /// Sums per key, with a `combine` given at construction.
    #[derive(Clone)]
    struct Sums {
        sums: BTreeMap<u32, u64>,
        combine: fn(&mut u64, u64),
    }

    impl Operator for Sums {
        type In = (u32, u64);
        type Key = ByKey<u32>;
        type Out = Collector<(u32, u64)>;
        type Time = AnyTime;
        const COMBINES: bool = true;

        fn combine(&self, earlier: &mut (u32, u64), later: (u32, u64)) {
            (self.combine)(&mut earlier.1, later.1);
        }

        fn on_record(&mut self, (k, v): (u32, u64), _: &mut Context<'_, ByKey<u32>, Self::Out>) {
            *self.sums.entry(k).or_default() += v;
        }

        fn statefulness(&self) -> Statefulness {
            Statefulness::Unchecked("a test")
        }
    }

    fn script() -> Script<u32, (u32, u64)> {
        let record = |k: u32, v: u64| Step::Record {
            key: k,
            value: (k, v),
            time: Some(v as i64),
        };
        vec![
            record(1, 2),
            record(2, 5),
            record(1, 3),
            Step::Checkpoint,
            record(1, 4),
            record(1, 4),
            Step::Watermark(10),
            record(2, 1),
        ]
    }

    #[test]
    fn a_combine_that_adds_is_a_true_merge_of_sums() {
        let sums = Sums {
            sums: BTreeMap::new(),
            combine: |a, b| *a += b,
        };
        assert_combines(sums, &script(), |h| h.operator().sums.clone());
    }

    #[test]
    #[should_panic(expected = "`combine` is not a true merge: after step 3, a checkpoint")]
    fn a_combine_that_keeps_the_larger_is_not_a_merge_of_sums() {
        let sums = Sums {
            sums: BTreeMap::new(),
            combine: |a, b| *a = (*a).max(b),
        };
        // Key 1's 2 and 3, merged before the checkpoint, count as 3, not 5.
        assert_combines(sums, &script(), |h| h.operator().sums.clone());
    }

    #[test]
    #[should_panic(expected = "not associative")]
    fn subtraction_is_not_associative() {
        assert_associative(|a: &mut i64, b: i64| *a -= b, &[1, 2, 3]);
    }
}
