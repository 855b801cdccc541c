//! A source task's loop, one poll at a time: run to the end on its own
//! thread by [`run_source`], or stepped in turn with others by a worker.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use streamwork_core::timer::wall_clock;
use streamwork_core::{CheckpointId, SourcePoll};

use super::{Ended, FINAL_POLL, Flags, SourceGates, Step, TICK};
use crate::failure::Failed;
use crate::instance::SourceTask;
use crate::metrics::{PauseFlag, TaskTimes};

/// How long a source task on its own thread waits while paused by a
/// backpressure watermark downstream.
const PAUSED_WAIT: Duration = Duration::from_millis(1);

/// How long a source task on its own thread waits while one of its gates
/// is closed: its peers, which open it, are running on other threads.
const GATED_WAIT: Duration = Duration::from_micros(200);

/// Where a source task's loop stands.
pub(crate) struct SourceRun {
    started: bool,
    /// The source has ended (after this checkpoint was triggered); it
    /// closes once a checkpoint holding its final part is complete.
    ended: Option<CheckpointId>,
    last_tick: Instant,
    last_checkpoint: CheckpointId,
    /// The input has ended and, with acking, the trees of its records are
    /// awaited before the source ends.
    draining: bool,
}

impl SourceRun {
    pub(crate) fn new() -> Self {
        SourceRun {
            started: false,
            ended: None,
            last_tick: Instant::now(),
            last_checkpoint: CheckpointId::NONE,
            draining: false,
        }
    }

    /// Polls the source once (starting it first), taking a checkpoint if one
    /// was triggered and holding off while a pause is raised or a gate closed.
    pub(crate) fn step(
        &mut self,
        task: &mut dyn SourceTask,
        pauses: &[Arc<PauseFlag>],
        gates: &SourceGates,
        flags: &Flags,
    ) -> Result<Step, Failed> {
        if !self.started {
            task.start()?;
            gates.started();
            self.started = true;
        }
        if let Some(after) = self.ended {
            return flags.closing_step(after, || task.close());
        }
        if flags.failure.aborted() {
            return Ok(Step::Done(Ended::Aborted));
        }
        if flags.failure.suspending() {
            task.suspend()?;
            return Ok(Step::Done(Ended::Suspended));
        }
        if self.draining {
            return self.drain_trees(task, flags);
        }
        let stop = flags.stop.load(Ordering::Relaxed);
        if flags.drain.load(Ordering::Relaxed) || (stop && flags.checkpoints.is_none()) {
            return self.end(task, flags);
        }
        if let Some(checkpoints) = &flags.checkpoints {
            let trigger = CheckpointId::new(checkpoints.signals.trigger.load(Ordering::Acquire));
            if trigger > self.last_checkpoint {
                self.last_checkpoint = trigger;
                task.checkpoint(trigger)?;
            }
            let savepoint =
                CheckpointId::new(checkpoints.signals.savepoint.load(Ordering::Acquire));
            if savepoint != CheckpointId::NONE && self.last_checkpoint >= savepoint {
                // Past the savepoint: nothing more is read until the job
                // stops; what is in flight is replayed from it next time.
                task.flush()?;
                return Ok(Step::Gated);
            }
            if checkpoints.signals.input_holds.any() {
                // State past its memory budget waits for checkpoints to
                // shrink it: read nothing meanwhile (checkpoints go on).
                task.flush()?;
                return Ok(Step::Paused);
            }
        }
        if pauses.iter().any(|p| p.is_raised()) {
            // A downstream queue is above its high watermark: hold off.
            task.flush()?;
            return Ok(Step::Paused);
        }
        if !gates.are_open() {
            task.flush()?;
            return Ok(Step::Gated);
        }
        let poll = task.poll()?;
        if self.last_tick.elapsed() >= TICK {
            self.last_tick = Instant::now();
            task.on_processing_time(wall_clock())?;
        }
        match poll {
            // A gated source (aligned watermarks) hands on what a poll
            // emitted at once, so that its progress is stamped and published
            // before the gate is asked again: a batch of a sparse source can
            // span far more event time than the drift.
            SourcePoll::Emitted if gates.any() => {
                task.flush()?;
                Ok(Step::Busy)
            }
            SourcePoll::Emitted => Ok(Step::Busy),
            SourcePoll::Idle => {
                task.flush()?;
                Ok(Step::Idle)
            }
            SourcePoll::Finished => self.drain_trees(task, flags),
        }
    }

    /// The input has ended: with acking, the trees of its records complete
    /// (what times out is replayed) before the source ends. The task waits
    /// for them a step at a time, never blocking, so that on a worker the
    /// tasks that process and ack them run in the meantime.
    fn drain_trees(&mut self, task: &mut dyn SourceTask, flags: &Flags) -> Result<Step, Failed> {
        if task.trees_pending()? {
            self.draining = true;
            return Ok(Step::Closing);
        }
        self.end(task, flags)
    }

    fn end(&mut self, task: &mut dyn SourceTask, flags: &Flags) -> Result<Step, Failed> {
        let after = flags.last_triggered();
        task.finish()?;
        self.ended = Some(after);
        flags.closing_step(after, || task.close())
    }
}

/// Runs a source task on its own thread until it ends.
pub(crate) fn run_source(
    task: &mut dyn SourceTask,
    pauses: &[Arc<PauseFlag>],
    gates: &SourceGates,
    times: &TaskTimes,
    flags: &Flags,
) -> Result<Ended, Failed> {
    let mut run = SourceRun::new();
    loop {
        let held = match run.step(task, pauses, gates, flags)? {
            Step::Busy | Step::Idle => continue,
            Step::Closing => FINAL_POLL,
            Step::Paused => PAUSED_WAIT,
            Step::Gated => GATED_WAIT,
            Step::Done(ended) => return Ok(ended),
        };
        let started = Instant::now();
        std::thread::sleep(held);
        times.add_backpressured(started.elapsed());
    }
}
