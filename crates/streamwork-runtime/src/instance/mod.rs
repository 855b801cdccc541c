//! One lifecycle per instance, written once for sources, operators and
//! sinks, fused into another task or at the root of their own.
//!
//! An [`Instance<K>`] holds one component instance (`K` adapts the user's
//! [`Source`](streamwork::core::Source), [`Operator`](streamwork::core::Operator)
//! or [`Sink`](streamwork::core::Sink) to the [`Kind`] trait), its outputs
//! and its [`Env`]. An operator with two inputs (a join) is an `Operator`
//! with two input ports (its input an
//! [`Either`](streamwork::core::ports::Either) of theirs), not a kind of its
//! own. Its steps, in order:
//!
//! 1. **start**: restore from the checkpoint the job restores from (if any)
//!    and open, in the kind's order (a sink opens first, to find what a
//!    previous run staged), then start what is fused downstream;
//! 2. **records**, per kind: a source polls, an operator handles a batch
//!    of any of its input ports, a sink writes;
//! 3. **watermarks** advance event time (never back) and go on downstream;
//!    **idleness** goes on downstream;
//! 4. **processing time** ticks fire timers (a sink commits what completed
//!    checkpoints staged);
//! 5. **barriers**: the instance's part of the checkpoint (a sink
//!    pre-commits), reported to the coordinator, then the barrier goes on;
//! 6. **end**: event time reaches its end, the kind emits what is left,
//!    reports its final part and ends its outputs;
//! 7. **close**, once every instance of the task has ended and the job's
//!    final checkpoint is complete (the task loop waits for it without
//!    blocking a worker): a sink commits the final checkpoint, and the
//!    instance releases its resources, then what is fused downstream.
//!
//! A stop at a savepoint replaces 6 and 7 with **suspend**: the instance
//! stops where it is (a sink commits the savepoint), without draining.
//!
//! Every step that runs user code goes through [`Env::guard`]: an error or
//! a panic is recorded as the job's failure, naming this instance, and the
//! step returns [`Failed`]. An instance fused into another task answers its
//! upstream's collector with [`Disconnected`](streamwork::core::Disconnected),
//! so that the upstream stops too; the failure reported is the instance's own.

mod counters;
mod operator;
mod sink;
mod source;

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use streamwork_core::checkpoint::{CheckpointId, Restore, SnapshotContext, StateBytes};
use streamwork_core::control::{Control, Disconnected};
use streamwork_core::outputs::Outputs;
use streamwork_core::record::Record;
use streamwork_core::{InstanceContext, SourcePoll, TaskError, Timestamp};

pub use counters::InstanceCounters;
pub(crate) use operator::{OperatorKind, Port, ReadPort};
pub(crate) use sink::{NoOutputs, SinkKind};
pub(crate) use source::SourceKind;

use crate::acking::{self, Acker, Anchor, AnchoredBatch};
use crate::batch::{self, HomeBatch};
use crate::checkpoint::{CheckpointLink, PartTiming};
use crate::failure::{Failed, Failure};
use crate::message::SenderIdx;

/// What one instance needs from the engine besides its user code and
/// outputs.
pub(crate) struct Env {
    /// Where it runs.
    pub(crate) ctx: InstanceContext,
    /// Its live counters.
    pub(crate) counters: Arc<InstanceCounters>,
    /// Its connection to the checkpoint coordinator, if the job takes checkpoints.
    pub(crate) checkpoints: Option<CheckpointLink>,
    /// The run's acker, if the job runs with acking.
    pub(crate) acker: Option<Arc<Acker>>,
    /// Where its failure is recorded.
    pub(crate) failure: Failure,
}

impl Env {
    /// Runs `step` (which calls user code), recording its error or panic as
    /// this instance's failure.
    pub(crate) fn guard<R>(
        &self,
        step: impl FnOnce() -> Result<R, TaskError>,
    ) -> Result<R, Failed> {
        match catch_unwind(AssertUnwindSafe(step)) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                Err(self
                    .failure
                    .task(self.ctx.component(), self.ctx.instance(), error))
            }
            Err(payload) => {
                Err(self
                    .failure
                    .panic(self.ctx.component(), self.ctx.instance(), payload))
            }
        }
    }

    /// What this instance's part of `checkpoint` is taken with.
    fn snapshot_context(&self, checkpoint: CheckpointId) -> SnapshotContext {
        SnapshotContext {
            checkpoint,
            key_groups: self.ctx.key_groups(),
            instance: self.ctx.instance(),
            parallelism: self.ctx.parallelism(),
            completed: self
                .checkpoints
                .as_ref()
                .map_or(CheckpointId::NONE, CheckpointLink::completed),
        }
    }

    /// Hands this instance's part of `checkpoint` to the coordinator.
    fn report(&self, checkpoint: CheckpointId, state: Option<StateBytes>, timing: PartTiming) {
        if let Some(link) = &self.checkpoints {
            link.report(checkpoint, &self.ctx, state, timing);
        }
    }

    /// After a batch in a job run with acking: dispatches everything the
    /// batch produced (creating its events' ids), then sends the reports.
    fn settle_acks(
        &self,
        flush: impl FnOnce() -> Result<(), Disconnected>,
    ) -> Result<(), Disconnected> {
        let Some(acker) = &self.acker else {
            return Ok(());
        };
        acking::set_current_root(streamwork_core::RootId::UNTRACKED);
        flush()?;
        acking::send_pending(acker);
        Ok(())
    }
}

/// How the lifecycle of one kind of component calls its user code.
pub(crate) trait Kind: Send + 'static {
    /// The output channels (none for a sink).
    type Out: Outputs;
    /// Whether watermarks and idleness go on downstream once the instance
    /// has seen them (`false` for a watermark strategy, which makes its own).
    const FORWARDS_WATERMARKS: bool;

    /// Restores from `restore` (a restarted job) and opens, in this kind's order.
    fn start(&mut self, env: &Env, restore: Option<&Restore<'_>>) -> Result<(), TaskError>;

    /// Event time has advanced to `watermark`.
    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        let _ = (watermark, out);
    }

    /// The wall clock reads `now`.
    fn on_processing_time(
        &mut self,
        now: Timestamp,
        out: &mut Self::Out,
        env: &Env,
    ) -> Result<(), TaskError> {
        let _ = (now, out, env);
        Ok(())
    }

    /// Sends what is buffered (the input is momentarily empty).
    fn flush(&mut self, out: &mut Self::Out) -> Result<(), TaskError> {
        Ok(out.flush()?)
    }

    /// A checkpoint's barrier has arrived, before the snapshot: emit what
    /// must go out ahead of it (an operator's held-back records).
    fn before_barrier(&mut self, out: &mut Self::Out) {
        let _ = out;
    }

    /// The instance's part of a checkpoint, in a job that takes checkpoints
    /// (a sink pre-commits what it wrote since the last one).
    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError>;

    /// The part of `checkpoint` was taken (or, at end of input without
    /// checkpoints, would have been): a source learns which checkpoint its
    /// position belongs to.
    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        let _ = checkpoint;
    }

    /// After a barrier has gone on: a sink commits what completed checkpoints staged.
    fn after_barrier(&mut self, env: &Env) -> Result<(), TaskError> {
        let _ = env;
        Ok(())
    }

    /// Every input has ended and event time has reached its end: emit what
    /// is left (a source waits for its trees, with acking).
    fn on_end(&mut self, out: &mut Self::Out, env: &Env) -> Result<(), TaskError> {
        let _ = (out, env);
        Ok(())
    }

    /// The final checkpoint is complete (or the job takes none): a sink
    /// commits it.
    fn after_final(&mut self, env: &Env) -> Result<(), TaskError> {
        let _ = env;
        Ok(())
    }

    /// Releases resources, last.
    fn close(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    /// The job stops at a savepoint, which is complete: a sink commits it.
    /// Nothing is drained or closed.
    fn on_suspend(&mut self, env: &Env) -> Result<(), TaskError> {
        let _ = env;
        Ok(())
    }
}

/// One instance: its user code adapted to [`Kind`], its outputs, its
/// environment, and where its lifecycle stands.
pub(crate) struct Instance<K: Kind> {
    kind: K,
    out: K::Out,
    env: Env,
    started: bool,
    ended: bool,
    closed: bool,
    suspended: bool,
    /// Restored from a checkpoint in which it had already ended: at its end
    /// it emits nothing again (it did, before that checkpoint).
    restored_ended: bool,
    /// The event time reached.
    watermark: Timestamp,
}

impl<K: Kind> Instance<K> {
    pub(crate) fn new(kind: K, out: K::Out, env: Env) -> Self {
        Instance {
            kind,
            out,
            env,
            started: false,
            ended: false,
            closed: false,
            suspended: false,
            restored_ended: false,
            watermark: Timestamp::MIN,
        }
    }

    /// Restores and opens this instance, then starts what is fused into its
    /// outputs. Done once: the check is inlined into every step, the work
    /// is not.
    #[inline]
    pub(crate) fn start(&mut self) -> Result<(), Failed> {
        if self.started {
            return Ok(());
        }
        self.start_once()
    }

    #[cold]
    #[inline(never)]
    fn start_once(&mut self) -> Result<(), Failed> {
        self.started = true;
        let Instance {
            kind,
            out,
            env,
            restored_ended,
            ..
        } = self;
        env.guard(|| {
            let restoring = Instant::now();
            let restore = env.ctx.restore();
            *restored_ended = restore.as_ref().is_some_and(|r| r.finished());
            kind.start(env, restore.as_ref())?;
            if let (Some(link), Some(restore)) = (&env.checkpoints, &restore)
                && !restore.is_fresh()
            {
                link.restored(restoring.elapsed());
            }
            Ok(())
        })?;
        env.guard(|| Ok(out.open()?))
    }

    /// Event time advanced to `watermark` (ignored unless it moves forward).
    pub(crate) fn advance(&mut self, watermark: Timestamp) -> Result<(), Failed> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.start()?;
        self.watermark = watermark;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            out.set_time(None);
            kind.on_watermark(watermark, out);
            if K::FORWARDS_WATERMARKS && watermark < Timestamp::MAX {
                out.control(&Control::Watermark(watermark))?;
            }
            env.counters.set_out(out.emitted());
            Ok(())
        })
    }

    /// Every sender that has not ended is idle.
    pub(crate) fn idle(&mut self) -> Result<(), Failed> {
        if !K::FORWARDS_WATERMARKS {
            return Ok(());
        }
        let Instance { out, env, .. } = self;
        env.guard(|| Ok(out.control(&Control::Idle)?))
    }

    /// The wall clock reads `now`; the tick goes on to what is fused downstream.
    pub(crate) fn tick(&mut self, now: Timestamp) -> Result<(), Failed> {
        self.start()?;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            out.set_time(None);
            kind.on_processing_time(now, out, env)?;
            env.counters.set_out(out.emitted());
            Ok(out.tick(now)?)
        })
    }

    /// Sends what is buffered.
    pub(crate) fn flush(&mut self) -> Result<(), Failed> {
        let Instance { kind, out, env, .. } = self;
        env.guard(|| kind.flush(out))
    }

    /// The barrier of `checkpoint` has reached this instance (from every
    /// input, aligned if need be, which took `alignment`): its part, then
    /// the barrier goes on. The time the snapshot holds the task thread is
    /// reported with the part. Out of line: once a checkpoint, never on the
    /// path of a record.
    #[inline(never)]
    pub(crate) fn barrier(
        &mut self,
        checkpoint: CheckpointId,
        alignment: Duration,
    ) -> Result<(), Failed> {
        self.start()?;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            out.set_time(None);
            kind.before_barrier(out);
            if env.checkpoints.is_some() {
                let taking = Instant::now();
                let state = kind.snapshot(&env.snapshot_context(checkpoint))?;
                let timing = PartTiming {
                    pause: taking.elapsed(),
                    alignment,
                };
                env.report(checkpoint, state, timing);
            }
            kind.snapshot_taken(checkpoint);
            out.control(&Control::Barrier(checkpoint))?;
            kind.after_barrier(env)
        })
    }

    /// Every input has ended: event time reaches its end, what is left is
    /// emitted, the final part reported and the outputs ended. Done once;
    /// [`close`](Self::close) follows.
    pub(crate) fn end(&mut self) -> Result<(), Failed> {
        if self.ended {
            return Ok(());
        }
        self.start()?;
        if !self.restored_ended {
            self.advance(Timestamp::MAX)?;
        }
        self.ended = true;
        let restored_ended = self.restored_ended;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            out.set_time(None);
            if !restored_ended {
                kind.on_end(out, env)?;
            }
            if env.checkpoints.is_some() {
                let taking = Instant::now();
                let state = kind.snapshot(&env.snapshot_context(CheckpointId::FINAL))?;
                let timing = PartTiming {
                    pause: taking.elapsed(),
                    alignment: Duration::ZERO,
                };
                env.report(CheckpointId::FINAL, state, timing);
            }
            kind.snapshot_taken(CheckpointId::FINAL);
            out.control(&Control::EndOfStream)?;
            env.counters.set_out(out.emitted());
            Ok(())
        })
    }

    /// After [`end`](Self::end), once the job's final checkpoint (if any)
    /// is complete: a sink commits it, the instance releases its resources,
    /// then so does what is fused downstream. Done once.
    pub(crate) fn close(&mut self) -> Result<(), Failed> {
        if self.closed || !self.ended {
            return Ok(());
        }
        self.closed = true;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            kind.after_final(env)?;
            kind.close()?;
            Ok(out.control(&Control::Close)?)
        })
    }

    /// The job stops at a complete savepoint: the instance stops where it
    /// is (a sink commits what completed), without draining, and so does
    /// what is fused downstream. Done once.
    pub(crate) fn suspend(&mut self) -> Result<(), Failed> {
        if self.ended || self.suspended || !self.started {
            return Ok(());
        }
        self.suspended = true;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            kind.on_suspend(env)?;
            Ok(out.control(&Control::Suspend)?)
        })
    }

    /// Handles a control message from a fused upstream.
    fn control(&mut self, control: &Control) -> Result<(), Failed> {
        match control {
            Control::EndOfStream => self.end(),
            Control::Suspend => self.suspend(),
            Control::Close => self.close(),
            Control::Watermark(watermark) => self.advance(*watermark),
            Control::Idle => self.idle(),
            Control::Barrier(checkpoint) => self.barrier(*checkpoint, Duration::ZERO),
            _ => Ok(()),
        }
    }
}

/// What every task loop does with its instance, whatever its kind: start
/// it, end it, and release it.
pub(crate) trait Lifecycle: Send {
    /// Restores and opens the instance.
    fn start(&mut self) -> Result<(), Failed>;
    /// Its input has ended: emit what is left (a source its final part) and
    /// send end-of-stream downstream.
    fn finish(&mut self) -> Result<(), Failed>;
    /// After `finish`, once the final checkpoint is complete: commit and
    /// release (see [`Instance::close`]).
    fn close(&mut self) -> Result<(), Failed>;
    /// Stops at a complete savepoint, without ending (see [`Instance::suspend`]).
    fn suspend(&mut self) -> Result<(), Failed>;
}

impl<K: Kind> Lifecycle for Instance<K> {
    fn start(&mut self) -> Result<(), Failed> {
        Instance::start(self)
    }

    fn finish(&mut self) -> Result<(), Failed> {
        self.end()
    }

    fn close(&mut self) -> Result<(), Failed> {
        Instance::close(self)
    }

    fn suspend(&mut self) -> Result<(), Failed> {
        Instance::suspend(self)
    }
}

/// A source instance as a task loop drives it.
pub(crate) trait SourceTask: Lifecycle {
    /// Polls once.
    fn poll(&mut self) -> Result<SourcePoll, Failed>;
    /// Sends what is buffered.
    fn flush(&mut self) -> Result<(), Failed>;
    /// The wall clock reads `now`: fused operators fire processing-time timers.
    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Failed>;
    /// Takes the source's part of `checkpoint` (its position) and sends the
    /// checkpoint's barrier downstream, after everything polled before.
    fn checkpoint(&mut self, checkpoint: CheckpointId) -> Result<(), Failed>;
    /// In a run with acking, whether trees of this source's records are
    /// still pending, after sending what is buffered and replaying what
    /// timed out; `false` without acking. Never waits.
    fn trees_pending(&mut self) -> Result<bool, Failed>;
}

/// A batch as it arrives at an instance: the input port and the sender it
/// came from, and its records (a `Vec<Record<T>>` of the port's type, or
/// the same records homed or anchored).
pub(crate) struct Arrived {
    /// The input port.
    pub(crate) port: usize,
    /// The sender, among the port's.
    pub(crate) from: SenderIdx,
    /// The records.
    pub(crate) batch: Box<dyn Any + Send>,
}

/// An instance reading channels, as a task loop drives it. The loop counts
/// end-of-stream messages per port and tracks the watermark of every sender:
/// it calls [`on_watermark`](Self::on_watermark) when the minimum over all
/// active senders advances, [`on_idle`](Self::on_idle) when every remaining
/// sender is idle, [`on_port_end`](Self::on_port_end) when every sender of a
/// port has ended, then [`finish`](Lifecycle::finish).
pub(crate) trait InputTask: Lifecycle {
    /// Processes one batch.
    fn on_batch(&mut self, arrived: Arrived) -> Result<(), Failed>;
    /// The instance's event time advanced to `watermark`.
    fn on_watermark(&mut self, watermark: Timestamp) -> Result<(), Failed>;
    /// Every sender that has not ended is idle.
    fn on_idle(&mut self) -> Result<(), Failed>;
    /// The wall clock reads `now`.
    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Failed>;
    /// Every sender into `port` has ended.
    fn on_port_end(&mut self, port: usize) -> Result<(), Failed>;
    /// Sends what is buffered (the input is momentarily empty).
    fn flush(&mut self) -> Result<(), Failed>;
    /// The barrier of `checkpoint` has arrived from every sender (or every
    /// sender that has not ended), `alignment` after its first arrival.
    fn on_barrier(&mut self, checkpoint: CheckpointId, alignment: Duration) -> Result<(), Failed>;
}

/// What differs between the kinds that read channels (operators, sinks): how a batch is handled, and what the end of one
/// port means. The rest of [`InputTask`] is the shared lifecycle.
pub(crate) trait Receives: Kind + Sized {
    /// Processes one batch.
    fn on_batch(instance: &mut Instance<Self>, arrived: Arrived) -> Result<(), Failed>;

    /// Every sender into `port` has ended (nothing to do by default).
    fn on_port_end(instance: &mut Instance<Self>, port: usize) -> Result<(), Failed> {
        let _ = (instance, port);
        Ok(())
    }
}

impl<K: Receives> InputTask for Instance<K> {
    fn on_batch(&mut self, arrived: Arrived) -> Result<(), Failed> {
        K::on_batch(self, arrived)
    }

    fn on_watermark(&mut self, watermark: Timestamp) -> Result<(), Failed> {
        self.advance(watermark)
    }

    fn on_idle(&mut self) -> Result<(), Failed> {
        self.idle()
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Failed> {
        self.tick(now)
    }

    fn on_port_end(&mut self, port: usize) -> Result<(), Failed> {
        K::on_port_end(self, port)
    }

    fn flush(&mut self) -> Result<(), Failed> {
        Instance::flush(self)
    }

    fn on_barrier(&mut self, checkpoint: CheckpointId, alignment: Duration) -> Result<(), Failed> {
        self.barrier(checkpoint, alignment)
    }
}

/// A received batch: its records, and their anchors if the job runs with acking.
type Received<T> = (batch::Received<T>, Option<Vec<Anchor>>);

/// A batch's records, and their anchors if the job runs with acking.
fn downcast_anchored<T: 'static>(batch: Box<dyn Any + Send>) -> Result<Received<T>, TaskError> {
    let batch = match batch.downcast::<HomeBatch<T>>() {
        Ok(batch) => return Ok((batch::Received::homed(*batch), None)),
        Err(batch) => batch,
    };
    let batch = match batch.downcast::<Vec<Record<T>>>() {
        Ok(batch) => return Ok((batch::Received::owned(*batch), None)),
        Err(batch) => batch,
    };
    match batch.downcast::<AnchoredBatch<T>>() {
        Ok(batch) => {
            let AnchoredBatch { records, anchors } = *batch;
            Ok((batch::Received::owned(records), Some(anchors)))
        }
        Err(_) => Err(TaskError::Connector(streamwork_core::ConnectorError {
            domain: streamwork_core::ErrorDomain::Internal,
            message: format!(
                "streamwork internal error: a batch of the wrong type reached a port of `{}`",
                std::any::type_name::<T>()
            ),
            source: None,
        })),
    }
}

/// Records of a received batch, each making its anchor's root current and
/// reporting its event done as it is taken: what it emits belongs to its tree.
fn rooted<T>(
    records: impl Iterator<Item = Record<T>>,
    anchors: Option<Vec<Anchor>>,
) -> impl Iterator<Item = Record<T>> {
    let mut anchors = anchors.map(Vec::into_iter);
    records.inspect(move |_| {
        if let Some(anchor) = anchors.as_mut().and_then(Iterator::next) {
            acking::complete(anchor);
            acking::set_current_root(anchor.root);
        }
    })
}
