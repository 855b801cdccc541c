//! A [`Source`] instance: always the root of its task.

use std::time::Duration;

use streamwork_core::checkpoint::{CheckpointId, Restore, SnapshotContext, StateBytes};
use streamwork_core::outputs::Outputs;
use streamwork_core::{Source, SourcePoll, TaskError, Timestamp};

use super::{Env, Instance, Kind, SourceTask};
use crate::acking;
use crate::failure::Failed;

/// How long a source whose input has ended waits between looks at its
/// trees still in flight, with acking.
const TREES_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// A source.
pub(crate) struct SourceKind<S: Source> {
    source: S,
}

impl<S: Source> SourceKind<S> {
    pub(crate) fn new(source: S) -> Self {
        SourceKind { source }
    }
}

impl<S: Source> Kind for SourceKind<S> {
    type Out = S::Out;
    const FORWARDS_WATERMARKS: bool = true;

    fn start(&mut self, env: &Env, restore: Option<&Restore<'_>>) -> Result<(), TaskError> {
        if let Some(restore) = restore {
            self.source.restore(restore)?;
        }
        Ok(self.source.open(&env.ctx)?)
    }

    /// Its position: where its next poll would read.
    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        Ok(self.source.snapshot())
    }

    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        self.source.snapshot_taken(checkpoint);
    }

    /// The input has ended, but with acking perhaps not every tree: replay
    /// what times out until every record has been processed. The task loop
    /// has waited for the trees of what the source polled a step at a time
    /// ([`SourceTask::trees_pending`]); what is left here is the trees of
    /// what operators fused into the task emit at the end.
    fn on_end(&mut self, out: &mut S::Out, env: &Env) -> Result<(), TaskError> {
        let Some(acker) = env.acker.clone() else {
            return Ok(());
        };
        while acker.pending_of(env.ctx.component(), env.ctx.instance()) > 0 {
            if acker.aborted() {
                return Err(TaskError::Disconnected);
            }
            out.flush()?;
            acking::send_pending(&acker);
            std::thread::sleep(TREES_POLL);
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), TaskError> {
        Ok(self.source.close()?)
    }

    fn on_suspend(&mut self, env: &Env) -> Result<(), TaskError> {
        if let Some(link) = &env.checkpoints {
            self.source.suspended_at(link.completed());
        }
        Ok(())
    }
}

impl<S: Source> SourceTask for Instance<SourceKind<S>> {
    fn poll(&mut self) -> Result<SourcePoll, Failed> {
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            let poll = kind.source.poll(out)?;
            env.settle_acks(|| out.flush())?;
            env.counters.set_out(out.emitted());
            Ok(poll)
        })
    }

    fn flush(&mut self) -> Result<(), Failed> {
        let Instance { out, env, .. } = self;
        env.guard(|| {
            out.flush()?;
            if let Some(acker) = &env.acker {
                acking::send_pending(acker);
            }
            Ok(())
        })
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Failed> {
        let Instance { out, env, .. } = self;
        env.guard(|| Ok(out.tick(now)?))
    }

    fn checkpoint(&mut self, checkpoint: CheckpointId) -> Result<(), Failed> {
        self.barrier(checkpoint, Duration::ZERO)
    }

    fn trees_pending(&mut self) -> Result<bool, Failed> {
        let Instance { out, env, .. } = self;
        let Some(acker) = env.acker.clone() else {
            return Ok(false);
        };
        env.guard(|| {
            if acker.aborted() {
                return Err(TaskError::Disconnected);
            }
            out.flush()?;
            acking::send_pending(&acker);
            Ok(acker.pending_of(env.ctx.component(), env.ctx.instance()) > 0)
        })
    }
}
