//! A [`Sink`] instance: at the root of its task, reading channels, or fused
//! into its upstream's task as an [`Edge`]. A transactional sink
//! pre-commits at every barrier and commits once the coordinator declares a
//! checkpoint complete.

use streamwork_core::checkpoint::{CheckpointId, Restore, SnapshotContext, StateBytes};
use streamwork_core::control::{Control, Disconnected};
use streamwork_core::edge::Edge;
use streamwork_core::outputs::{Channel, ChannelInfo, OutputParts, Outputs};
use streamwork_core::record::Record;
use streamwork_core::{JobId, NodeId, Sink, StreamTime, TaskError, Timestamp};

use super::{Arrived, Env, Instance, Kind, Receives, downcast_anchored};
use crate::acking;
use crate::failure::Failed;

/// The outputs of a sink: none.
pub(crate) struct NoOutputs;

impl Outputs for NoOutputs {
    type Streams<Tm: StreamTime> = ();

    fn channels() -> Vec<ChannelInfo> {
        Vec::new()
    }

    fn streams<Tm: StreamTime>(_: JobId, _: NodeId) {}

    fn assemble(_: &mut OutputParts) -> Self {
        NoOutputs
    }

    fn set_time(&mut self, _: Option<Timestamp>) {}

    fn for_each_channel(&mut self, _: &mut dyn FnMut(&mut dyn Channel)) {}

    fn for_each_channel_ref(&self, _: &mut dyn FnMut(&dyn Channel)) {}
}

/// A sink, and the last checkpoint it committed.
pub(crate) struct SinkKind<S: Sink> {
    sink: S,
    committed: CheckpointId,
}

impl<S: Sink> SinkKind<S> {
    pub(crate) fn new(sink: S) -> Self {
        SinkKind {
            sink,
            committed: CheckpointId::NONE,
        }
    }

    /// Commits what completed checkpoints staged.
    fn commit_completed(&mut self, env: &Env) -> Result<(), TaskError> {
        let Some(link) = &env.checkpoints else {
            return Ok(());
        };
        let completed = link.completed();
        if completed > self.committed {
            self.sink.commit(completed)?;
            self.committed = completed;
        }
        Ok(())
    }
}

impl<S: Sink> Kind for SinkKind<S> {
    type Out = NoOutputs;
    const FORWARDS_WATERMARKS: bool = false;

    /// A sink opens first: restoring commits or discards what a previous
    /// run staged, which needs the sink open. It restores in every run that
    /// takes checkpoints, from nothing too: what a run that crashed before
    /// its first complete checkpoint staged must not survive into this one.
    fn start(&mut self, env: &Env, restore: Option<&Restore<'_>>) -> Result<(), TaskError> {
        self.sink.open(&env.ctx)?;
        let recovery = match restore {
            Some(_) => None,
            None => env.ctx.recovery(),
        };
        if let Some(restore) = restore.or(recovery.as_ref()) {
            self.committed = restore.checkpoint;
            self.sink.restore(restore)?;
        }
        Ok(())
    }

    fn on_processing_time(
        &mut self,
        _: Timestamp,
        _: &mut NoOutputs,
        env: &Env,
    ) -> Result<(), TaskError> {
        self.commit_completed(env)
    }

    fn flush(&mut self, _: &mut NoOutputs) -> Result<(), TaskError> {
        Ok(self.sink.flush()?)
    }

    /// Everything written since the last barrier belongs to `checkpoint`:
    /// staged, not yet visible; the sink's part is what it keeps of that in
    /// the checkpoint (a write-ahead sink), if anything.
    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.sink.pre_commit(ctx.checkpoint)?;
        Ok(self.sink.snapshot(ctx.checkpoint)?)
    }

    fn after_barrier(&mut self, env: &Env) -> Result<(), TaskError> {
        self.commit_completed(env)
    }

    /// The final checkpoint is complete: what it staged becomes visible.
    fn after_final(&mut self, env: &Env) -> Result<(), TaskError> {
        match &env.checkpoints {
            Some(_) => Ok(self.sink.commit(CheckpointId::FINAL)?),
            None => Ok(()),
        }
    }

    fn close(&mut self) -> Result<(), TaskError> {
        Ok(self.sink.close()?)
    }

    /// The savepoint is complete: what it (and every checkpoint before it)
    /// staged becomes visible. What was written after it stays staged, and
    /// the next run discards it.
    fn on_suspend(&mut self, env: &Env) -> Result<(), TaskError> {
        self.commit_completed(env)
    }
}

impl<S: Sink> Instance<SinkKind<S>> {
    /// Writes every record.
    fn write_all(&mut self, records: impl Iterator<Item = Record<S::In>>) -> Result<(), Failed> {
        self.start()?;
        let Instance { kind, env, .. } = self;
        env.guard(|| {
            let mut n = 0;
            for record in records {
                n += 1;
                kind.sink.write(record)?;
            }
            env.counters.add_in(n);
            Ok(())
        })
    }
}

impl<S: Sink> Receives for SinkKind<S> {
    fn on_batch(instance: &mut Instance<Self>, arrived: Arrived) -> Result<(), Failed> {
        let batch = arrived.batch;
        let (mut batch, anchors) = instance.env.guard(|| downcast_anchored::<S::In>(batch))?;
        instance.write_all(batch.drain())?;
        if let (Some(acker), Some(anchors)) = (instance.env.acker.clone(), anchors) {
            // Written and flushed: the records' events are done.
            let Instance { kind, env, .. } = instance;
            env.guard(|| Ok(kind.sink.flush()?))?;
            for anchor in anchors {
                acking::complete(anchor);
            }
            acking::send_pending(&acker);
        }
        Ok(())
    }
}

/// A sink fused into its upstream's task. Its failure is recorded with its
/// own name; the upstream only learns that it is gone.
impl<S: Sink> Edge<S::In> for Instance<SinkKind<S>> {
    fn open(&mut self) -> Result<(), Disconnected> {
        self.start().map_err(|Failed| Disconnected)
    }

    fn push(&mut self, records: &mut Vec<Record<S::In>>) -> Result<(), Disconnected> {
        self.write_all(records.drain(..))
            .map_err(|Failed| Disconnected)
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        Instance::flush(self).map_err(|Failed| Disconnected)
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        match control {
            Control::Watermark(_) | Control::Idle => Ok(()),
            control => Instance::control(self, control).map_err(|Failed| Disconnected),
        }
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.tick(now).map_err(|Failed| Disconnected)
    }
}
