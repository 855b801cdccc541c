//! Tasks: a root instance and everything fused into it, and the loops that
//! drive them, as step machines that a thread runs to the end or a worker
//! steps in turn with others.
//!
//! * [`source_run`]: a source task polls its source, once per step;
//! * [`input_run`]: an input task takes one message per step from its
//!   channels, round-robin, and hands it to its instance;
//! * [`event_clock`]: the event time of an instance, the minimum over its senders;
//! * [`barrier`]: collecting a checkpoint's barrier from every input;
//! * [`pause`]: an input's backpressure watermarks, pausing the sources;
//! * [`gates`]: the conditions under which a source task may be polled;
//! * `drive`: one task on a thread of its own.

pub(crate) mod barrier;
mod drive;
pub(crate) mod event_clock;
pub(crate) mod gates;
pub(crate) mod input_run;
pub(crate) mod pause;
pub(crate) mod source_run;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use streamwork_core::flow::PauseWatermarks;
use streamwork_core::{CheckpointId, InstanceIdx};

pub(crate) use drive::{drive, suspend};
pub(crate) use gates::{SourceGates, SourceStarts};
pub(crate) use input_run::{InputRun, run_input};
pub(crate) use source_run::{SourceRun, run_source};

use crate::checkpoint::Signals;
use crate::failure::Failure;
use crate::instance::{InputTask, SourceTask};
use crate::message::Message;
use crate::metrics::{PauseFlag, TaskTimes};

/// How often tasks tick processing time while running.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// How long a task on its own thread that has ended waits between looks at
/// the final checkpoint.
pub(crate) const FINAL_POLL: Duration = Duration::from_millis(2);

/// How a task ended without error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its input ended (or, for a source, it was drained) and it ended its outputs.
    Completed,
    /// The job stopped at a savepoint: it stopped where it was.
    Suspended,
    /// The job was aborted by a failure.
    Aborted,
}

/// What one step of a task did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It did some work: step it again.
    Busy,
    /// It has nothing to do right now (its output is flushed).
    Idle,
    /// A downstream queue is above its high watermark: the source holds off.
    Paused,
    /// A gate of the source is closed (an aligned watermark strategy is
    /// ahead): the source holds off.
    Gated,
    /// It has ended and waits for the final checkpoint to close.
    Closing,
    /// It ended.
    Done(Ended),
}

/// Flags shared by every task of a job.
#[derive(Clone)]
pub(crate) struct Flags {
    /// Stop: with checkpoints, at a savepoint, without draining (the
    /// coordinator takes it, then raises the failure's suspending flag);
    /// without, as a drain.
    pub(crate) stop: Arc<AtomicBool>,
    /// Drain: sources end their streams now, everything drains to the end
    /// of event time, and a job with checkpoints takes its final one.
    pub(crate) drain: Arc<AtomicBool>,
    /// The job's failure, and its abort flag: stop now.
    pub(crate) failure: Failure,
    /// Checkpoints, if the job takes them.
    pub(crate) checkpoints: Option<TaskCheckpoints>,
}

/// What tasks of a checkpointed job share with the coordinator.
#[derive(Clone)]
pub(crate) struct TaskCheckpoints {
    /// The checkpoint to take next, the last complete, the savepoint a stop
    /// asked for (a source stops polling once it has taken it), and the
    /// holds on the job's input (while any is, sources take checkpoints but
    /// read nothing).
    pub(crate) signals: Signals,
    /// Exactly-once: hold the inputs that delivered a barrier until all have.
    pub(crate) align: bool,
}

/// One input channel of a task: where it comes from and how full it may get.
pub(crate) struct InputChannel {
    pub(crate) receiver: Receiver<Message>,
    pub(crate) capacity: usize,
    /// The backpressure watermarks of its edge, if any.
    pub(crate) pause: Option<PauseWatermarks>,
}

/// A channel a task sends into, and its capacity in messages.
pub(crate) struct OutputChannel {
    pub(crate) sender: Sender<Message>,
    pub(crate) capacity: usize,
}

impl Flags {
    /// The checkpoint most recently triggered: one that completes past it
    /// holds the final parts of the instances that end now.
    pub(crate) fn last_triggered(&self) -> CheckpointId {
        self.checkpoints.as_ref().map_or(CheckpointId::NONE, |c| {
            CheckpointId::new(c.signals.trigger.load(Ordering::Acquire))
        })
    }

    /// The next step of a task that ended after checkpoint `ended_after`
    /// was triggered: close once a checkpoint holding its final parts is
    /// complete (one triggered later, or the final one), else wait. Without
    /// checkpoints, at once.
    pub(crate) fn closing_step(
        &self,
        ended_after: CheckpointId,
        close: impl FnOnce() -> Result<(), crate::failure::Failed>,
    ) -> Result<Step, crate::failure::Failed> {
        if self.failure.aborted() {
            return Ok(Step::Done(Ended::Aborted));
        }
        if self.failure.suspending() {
            // Stopped at a savepoint, which holds the final parts.
            close()?;
            return Ok(Step::Done(Ended::Suspended));
        }
        let complete = self.checkpoints.as_ref().is_none_or(|c| {
            c.signals.final_completed.load(Ordering::Acquire)
                || CheckpointId::new(c.signals.completed.load(Ordering::Acquire)) > ended_after
        });
        if !complete {
            return Ok(Step::Closing);
        }
        close()?;
        Ok(Step::Done(Ended::Completed))
    }
}

impl OutputChannel {
    /// Whether another message stays within the capacity.
    pub(crate) fn has_room(&self) -> bool {
        self.sender.len() < self.capacity
    }
}

/// What a task runs.
pub(crate) enum TaskBody {
    Source {
        task: Box<dyn SourceTask>,
        /// The pause requests of the components this source feeds.
        pauses: Vec<Arc<PauseFlag>>,
        /// The conditions for polling it, set by instances fused into it.
        gates: SourceGates,
    },
    Input {
        task: Box<dyn InputTask>,
        /// Per port, one channel per sender, by sender index.
        ports: Vec<Vec<InputChannel>>,
        /// Raised while this instance's queue is above a high watermark.
        pause: Option<Arc<PauseFlag>>,
    },
}

/// One task: a root instance and everything fused into it.
pub(crate) struct Task {
    pub(crate) component: Arc<str>,
    pub(crate) instance: InstanceIdx,
    pub(crate) times: Arc<TaskTimes>,
    pub(crate) body: TaskBody,
    /// On workers: the channels it (and what is fused into it) sends into,
    /// whose room decides whether the worker may step it.
    pub(crate) outputs: Vec<OutputChannel>,
}
