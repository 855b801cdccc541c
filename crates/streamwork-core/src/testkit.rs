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
//! ```
//! use streamwork_core::testkit::Harness;
//! use streamwork_core::{AnyTime, Collector, Context, NoKey, Operator};
//! #[derive(Clone)]
//! struct Double;
//! impl Operator for Double {
//!     type In = u32;
//!     type Key = NoKey;
//!     type Out = Collector<u32>;
//!     type Time = AnyTime;
//!     fn on_record(&mut self, v: u32, ctx: &mut Context<'_, NoKey, Collector<u32>>) {
//!         ctx.emit(v * 2);
//!     }
//! }
//! let mut harness = Harness::new(Double);
//! harness.record((), 21, None);
//! assert_eq!(harness.take(|out| out.take_buffered()).len(), 1);
//! ```

use crate::checkpoint::{Restore, RestoredPart, StateBytes};
use crate::component::{CoOperator, Context, InstanceContext, KeyKind, Operator};
use crate::error::TaskError;
use crate::grouping::KeyGroups;
use crate::outputs::{OutputParts, Outputs};
use crate::time::Timestamp;

fn context(name: &str) -> InstanceContext {
    InstanceContext::new(name, 0, 1, KeyGroups::DEFAULT)
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
        checkpoint: u64,
        state: Option<&StateBytes>,
    ) -> Result<Self, TaskError> {
        let ctx = context("harness");
        let restore = Restore {
            component: ctx.component(),
            checkpoint,
            is_final: false,
            instance: 0,
            parallelism: 1,
            key_groups: ctx.key_groups(),
            parts: state
                .map(|s| RestoredPart {
                    part: 0,
                    schema: s.schema,
                    bytes: &s.bytes,
                })
                .into_iter()
                .collect(),
        };
        operator.restore(&restore)?;
        operator.open(&ctx);
        Ok(Harness {
            operator,
            out: O::Out::assemble(&mut OutputParts::detached()),
            ctx,
            watermark: Timestamp::MIN,
        })
    }

    /// Takes the snapshot a checkpoint would.
    pub fn snapshot(&mut self) -> Option<StateBytes> {
        self.operator.snapshot()
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

    /// Ends the input: event time reaches its end, then `on_end`.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.operator.on_end(&mut self.out);
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &O {
        &self.operator
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<R>(&mut self, read: impl FnOnce(&mut O::Out) -> R) -> R {
        read(&mut self.out)
    }
}

/// One two-input operator instance, driven by hand.
pub struct CoHarness<C: CoOperator> {
    operator: C,
    out: C::Out,
    ctx: InstanceContext,
    watermark: Timestamp,
}

impl<C: CoOperator> CoHarness<C> {
    /// Opens `operator` as instance 0 of 1.
    pub fn new(mut operator: C) -> Self {
        let ctx = context("harness");
        operator.open(&ctx);
        CoHarness {
            operator,
            out: C::Out::assemble(&mut OutputParts::detached()),
            ctx,
            watermark: Timestamp::MIN,
        }
    }

    /// Processes a left record.
    pub fn left(&mut self, key: <C::Key as KeyKind>::Value, value: C::Left, time: Option<i64>) {
        let owned = C::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(C::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_left(value, &mut ctx);
    }

    /// Processes a right record.
    pub fn right(&mut self, key: <C::Key as KeyKind>::Value, value: C::Right, time: Option<i64>) {
        let owned = C::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(C::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_right(value, &mut ctx);
    }

    /// Advances event time to `millis`.
    pub fn watermark(&mut self, millis: i64) {
        let watermark = Timestamp::from_millis(millis);
        if watermark > self.watermark {
            self.watermark = watermark;
            self.operator.on_watermark(watermark, &mut self.out);
        }
    }

    /// Ends both inputs.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.operator.on_end(&mut self.out);
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &C {
        &self.operator
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<R>(&mut self, read: impl FnOnce(&mut C::Out) -> R) -> R {
        read(&mut self.out)
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
/// use streamwork_core::testkit::{Fault, Step, run_script};
/// use streamwork_core::{AnyTime, Collector, Context, NoKey, Operator, Restore, StateBytes, TaskError};
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
///     fn snapshot(&mut self) -> Option<StateBytes> {
///         Some(StateBytes { schema: 1, bytes: self.0.to_le_bytes().to_vec() })
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
    mut drain: impl FnMut(&mut O::Out) -> Vec<R>,
) -> Result<Scripted<R>, TaskError>
where
    O: Operator,
    O::In: Clone,
{
    let mut run = Scripted {
        output: Vec::new(),
        restarts: 0,
        checkpoints: 0,
    };
    let mut staged: Vec<R> = Vec::new();
    // The last complete checkpoint: its id, the step after it, the snapshot.
    let mut last: Option<(u64, usize, Option<StateBytes>)> = None;
    let mut harness = Harness::new(operator.clone());
    let (mut step, mut records, mut checkpoints) = (0usize, 0usize, 0usize);
    let mut failed = false;
    while step < script.len() {
        let fails_here = !failed
            && match (&script[step], fault) {
                (Step::Record { .. }, Some(Fault::BeforeRecord(n))) => records == n,
                (Step::Checkpoint, Some(Fault::InCheckpoint(k))) => checkpoints + 1 == k,
                _ => false,
            };
        if fails_here {
            failed = true;
            staged.clear();
            run.restarts += 1;
            let (id, resume, state) = match &last {
                Some((id, resume, state)) => (*id, *resume, state.as_ref()),
                None => (0, 0, None),
            };
            harness = if last.is_some() {
                Harness::restored(operator.clone(), id, state)?
            } else {
                Harness::new(operator.clone())
            };
            step = resume;
            continue;
        }
        match &script[step] {
            Step::Record { key, value, time } => {
                records += 1;
                harness.record(key.clone(), value.clone(), *time);
            }
            Step::Watermark(millis) => harness.watermark(*millis),
            Step::ProcessingTime(millis) => harness.processing_time(*millis),
            Step::Checkpoint => {
                checkpoints += 1;
                let state = harness.snapshot();
                staged.extend(drain(&mut harness.out));
                run.output.append(&mut staged);
                run.checkpoints += 1;
                last = Some((run.checkpoints as u64, step + 1, state));
            }
        }
        staged.extend(drain(&mut harness.out));
        step += 1;
    }
    harness.end();
    staged.extend(drain(&mut harness.out));
    run.output.append(&mut staged);
    Ok(run)
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
    let clean = match run_script(operator.clone(), script, None, &mut drain) {
        Ok(run) => run,
        Err(e) => panic!("the run without a fault failed: {e}"),
    };
    for fault in faults {
        let run = match run_script(operator.clone(), script, Some(fault), &mut drain) {
            Ok(run) => run,
            Err(e) => panic!("with {fault:?}: recovery failed: {e}"),
        };
        assert_eq!(
            run.restarts, 1,
            "with {fault:?}: the fault was never reached"
        );
        assert_eq!(
            run.output, clean.output,
            "with {fault:?}: the committed output differs from the run without a fault"
        );
    }
}
