//! An input task's loop, one message at a time: run to the end on its own
//! thread by [`run_input`], or stepped in turn with others by a worker.
//!
//! Each step takes one message from the task's channels, visited
//! round-robin so that no upstream instance gets ahead of the others, and
//! hands it to the instance: a batch, a watermark (through the
//! [`EventClock`]), idleness, a barrier (through the [`Barrier`]) or the end
//! of a sender's stream. Whenever the input is momentarily empty the task
//! flushes its partial batches (adaptive flushing); it ticks processing
//! time every [`TICK`].

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{RecvTimeoutError, Select, TryRecvError};
use streamwork_core::control::Control;
use streamwork_core::timer::wall_clock;
use streamwork_core::{InstanceIdx, TaskError};

use super::barrier::{Barrier, Slot};
use super::event_clock::{Change, EventClock};
use super::pause::{PauseState, occupancy};
use super::{Ended, FINAL_POLL, Flags, InputChannel, Step, TICK};
use crate::failure::Failed;
use crate::instance::{Arrived, InputTask};
use crate::message::{Message, Payload};
use crate::metrics::{PauseFlag, TaskTimes};

/// Where an input task's loop stands.
pub(crate) struct InputRun {
    /// The task's root component and instance, to whom the loop's own
    /// failures are attributed.
    component: Arc<str>,
    instance: InstanceIdx,
    started: bool,
    /// Every input has ended (after this checkpoint was triggered); it
    /// closes once a checkpoint holding its final parts is complete.
    ended: Option<streamwork_core::CheckpointId>,
    clock: EventClock,
    /// Per port, the senders that have not ended.
    remaining: Vec<u32>,
    /// Every (port, sender) channel that has not ended (nor delivered a
    /// barrier it is held on), visited round-robin.
    active: Vec<Slot>,
    next: usize,
    last_tick: Instant,
    barrier: Barrier,
    pause: Option<PauseState>,
}

impl InputRun {
    pub(crate) fn new(
        component: Arc<str>,
        instance: InstanceIdx,
        ports: &[Vec<InputChannel>],
        pause: Option<Arc<PauseFlag>>,
        flags: &Flags,
    ) -> Self {
        let senders_per_port: Vec<u32> = ports.iter().map(|p| p.len() as u32).collect();
        InputRun {
            component,
            instance,
            started: false,
            ended: None,
            clock: EventClock::new(&senders_per_port),
            active: ports
                .iter()
                .enumerate()
                .flat_map(|(port, senders)| (0..senders.len()).map(move |sender| (port, sender)))
                .collect(),
            remaining: senders_per_port,
            next: 0,
            last_tick: Instant::now(),
            barrier: Barrier::new(flags.checkpoints.as_ref().is_some_and(|c| c.align)),
            pause: pause.map(PauseState::new),
        }
    }

    /// The channels a message may come from next.
    pub(crate) fn waiting_on(&self) -> &[Slot] {
        &self.active
    }

    /// Handles the next message (starting the task first; finishing it once
    /// every input has ended). With `block`, waits up to a tick for one;
    /// without, an empty input is a [`Step::Idle`].
    pub(crate) fn step(
        &mut self,
        task: &mut dyn InputTask,
        ports: &[Vec<InputChannel>],
        times: &TaskTimes,
        flags: &Flags,
        block: bool,
    ) -> Result<Step, Failed> {
        if !self.started {
            task.start()?;
            self.started = true;
            for (port, &senders) in self.remaining.iter().enumerate() {
                if senders == 0 {
                    task.on_port_end(port)?;
                }
            }
        }
        if let Some(after) = self.ended {
            return flags.closing_step(after, || task.close());
        }
        if flags.failure.suspending() {
            task.suspend()?;
            self.release_pause();
            return Ok(Step::Done(Ended::Suspended));
        }
        if self.active.is_empty() && !self.barrier.holds_inputs() {
            let after = flags.last_triggered();
            task.finish()?;
            self.release_pause();
            self.ended = Some(after);
            return flags.closing_step(after, || task.close());
        }
        let received = match self.ready(ports, flags)? {
            Some(received) => received,
            None => {
                // The input is momentarily empty: flush (adaptive flushing),
                // then, if `block`, wait up to one tick.
                task.flush()?;
                if flags.failure.aborted() {
                    Received::Aborted
                } else if block {
                    let waiting = Instant::now();
                    let received = self.wait(ports, flags)?;
                    times.add_idle(waiting.elapsed());
                    received
                } else {
                    Received::Nothing
                }
            }
        };
        if let Some(pause) = self.pause.as_mut() {
            pause.update(ports);
        }
        if self.last_tick.elapsed() >= TICK {
            self.last_tick = Instant::now();
            times.set_occupancy(occupancy(ports));
            task.on_processing_time(wall_clock())?;
        }
        let (slot, envelope) = match received {
            Received::Message(slot, envelope) => (slot, envelope),
            Received::Nothing => return Ok(Step::Idle),
            Received::Aborted => return Ok(Step::Done(Ended::Aborted)),
            Received::Suspending => {
                // A neighbour stopped at the savepoint before this task
                // looked: stop too, committing it.
                task.suspend()?;
                self.release_pause();
                return Ok(Step::Done(Ended::Suspended));
            }
        };
        let (port, _) = self.active[slot];
        let from = envelope.from;
        let clock = &mut self.clock;
        match envelope.payload {
            Payload::Batch(batch) => {
                let change = clock.activity(port, from);
                apply(task, change, times)?;
                task.on_batch(Arrived { port, from, batch })?;
            }
            Payload::Control(Control::Watermark(watermark)) => {
                let change = clock.watermark(port, from, watermark);
                apply(task, change, times)?;
            }
            Payload::Control(Control::Idle) => {
                let change = clock.idle(port, from);
                apply(task, change, times)?;
            }
            Payload::Control(Control::Barrier(checkpoint)) => {
                self.barrier.arrived(checkpoint, slot, &mut self.active);
                if let Some((checkpoint, alignment)) =
                    self.barrier.complete_if_aligned(&mut self.active)
                {
                    task.on_barrier(checkpoint, alignment)?;
                }
            }
            Payload::Control(Control::EndOfStream) => {
                self.active.remove(slot);
                self.remaining[port] -= 1;
                let change = clock.ended(port, from);
                apply(task, change, times)?;
                if self.remaining[port] == 0 {
                    task.on_port_end(port)?;
                }
                // An ended input no longer holds a checkpoint back.
                if let Some((checkpoint, alignment)) =
                    self.barrier.complete_if_aligned(&mut self.active)
                {
                    task.on_barrier(checkpoint, alignment)?;
                }
            }
            Payload::Control(_) => {}
        }
        Ok(Step::Busy)
    }

    /// Lowers this instance's pause request, if it raised one: it ended.
    pub(crate) fn release_pause(&mut self) {
        if let Some(pause) = self.pause.as_mut() {
            pause.release();
        }
    }

    /// A message ready on the active channels, visited round-robin; `None`
    /// if none is.
    fn ready(
        &mut self,
        ports: &[Vec<InputChannel>],
        flags: &Flags,
    ) -> Result<Option<Received>, Failed> {
        let n = self.active.len();
        for i in 0..n {
            let slot = (self.next + i) % n;
            let (port, sender) = self.active[slot];
            match ports[port][sender].receiver.try_recv() {
                Ok(envelope) => {
                    self.next = (slot + 1) % n;
                    return Ok(Some(Received::Message(slot, envelope)));
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return self.disconnected(flags).map(Some),
            }
        }
        Ok(None)
    }

    /// Blocks up to one tick for a message on any active channel.
    fn wait(&mut self, ports: &[Vec<InputChannel>], flags: &Flags) -> Result<Received, Failed> {
        let n = self.active.len();
        if let [(port, sender)] = self.active[..] {
            return match ports[port][sender].receiver.recv_timeout(TICK) {
                Ok(envelope) => Ok(Received::Message(0, envelope)),
                Err(RecvTimeoutError::Timeout) => Ok(Received::Nothing),
                Err(RecvTimeoutError::Disconnected) => self.disconnected(flags),
            };
        }
        let mut select = Select::new();
        for &(port, sender) in &self.active {
            select.recv(&ports[port][sender].receiver);
        }
        let Ok(slot) = select.ready_timeout(TICK) else {
            return Ok(Received::Nothing);
        };
        let (port, sender) = self.active[slot];
        match ports[port][sender].receiver.try_recv() {
            Ok(envelope) => {
                self.next = (slot + 1) % n;
                Ok(Received::Message(slot, envelope))
            }
            Err(TryRecvError::Empty) => Ok(Received::Nothing),
            Err(TryRecvError::Disconnected) => self.disconnected(flags),
        }
    }

    /// A channel lost its sender without an end of stream: the upstream task
    /// failed (and the job is aborting), or something went wrong.
    fn disconnected(&self, flags: &Flags) -> Result<Received, Failed> {
        if flags.failure.suspending() {
            Ok(Received::Suspending)
        } else if flags.failure.aborted() {
            Ok(Received::Aborted)
        } else {
            Err(flags
                .failure
                .task(&self.component, self.instance, TaskError::UpstreamFailed))
        }
    }
}

fn apply(task: &mut dyn InputTask, change: Change, times: &TaskTimes) -> Result<(), Failed> {
    match change {
        Change::None => Ok(()),
        Change::Advanced(watermark) => {
            times.set_watermark(watermark);
            task.on_watermark(watermark)
        }
        Change::BecameIdle => task.on_idle(),
    }
}

/// The outcome of waiting for a message.
enum Received {
    /// A message from `active[slot]`.
    Message(usize, Message),
    /// Nothing arrived within a tick: time to tick processing time.
    Nothing,
    Aborted,
    /// The job stops at its savepoint, and a sender has already stopped.
    Suspending,
}

/// Runs an input task on its own thread until it ends.
pub(crate) fn run_input(
    run: &mut InputRun,
    task: &mut dyn InputTask,
    ports: &[Vec<InputChannel>],
    times: &TaskTimes,
    flags: &Flags,
) -> Result<Ended, Failed> {
    let result = loop {
        match run.step(task, ports, times, flags, true) {
            Ok(Step::Done(ended)) => break Ok(ended),
            Ok(Step::Closing) => std::thread::sleep(FINAL_POLL),
            Ok(_) => {}
            Err(failed) => break Err(failed),
        }
    };
    run.release_pause();
    result
}
