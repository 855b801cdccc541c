//! The loops that drive tasks: poll a source, or receive messages and hand
//! them to the instance, flushing whenever there is nothing to do right now.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Select, TryRecvError};
use streamwork_core::exec::{InputTask, SourceTask};
use streamwork_core::message::{Control, Envelope, Payload, SenderIdx};
use streamwork_core::timer::wall_clock;
use streamwork_core::{SourcePoll, TaskError, Timestamp};

use crate::metrics::{PauseFlag, TaskTimes};
use crate::wiring::InputChannel;

/// How a task ended without error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its input ended (or, for a source, it was stopped) and it ended its outputs.
    Completed,
    /// The job was aborted by another task's failure.
    Aborted,
}

/// Flags shared by every task of a job.
#[derive(Clone)]
pub(crate) struct Flags {
    /// Graceful stop: sources end their streams, everything drains.
    pub(crate) stop: Arc<AtomicBool>,
    /// Failure elsewhere: stop now.
    pub(crate) abort: Arc<AtomicBool>,
    /// Checkpoints, if the job takes them.
    pub(crate) checkpoints: Option<TaskCheckpoints>,
}

/// What tasks of a checkpointed job share with the coordinator.
#[derive(Clone)]
pub(crate) struct TaskCheckpoints {
    /// The checkpoint the sources should take next.
    pub(crate) trigger: Arc<AtomicU64>,
    /// Set by a source that has ended its input.
    pub(crate) source_ended: Arc<AtomicBool>,
    /// Exactly-once: hold the inputs that delivered a barrier until all have.
    pub(crate) align: bool,
}

/// How often tasks tick processing time while running.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// The shortest pause of the sources once a backpressure watermark is
/// crossed: hysteresis in time, against pausing and resuming at every batch.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// What one step of a task did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It did some work: step it again.
    Busy,
    /// It has nothing to do right now (its output is flushed).
    Idle,
    /// A downstream queue is above its high watermark: the source holds off.
    Paused,
    /// It ended.
    Done(Ended),
}

/// A source task's loop, one poll at a time: run to the end on its own
/// thread by [`run_source`], or stepped in turn with others by a worker.
pub(crate) struct SourceRun {
    opened: bool,
    last_tick: Instant,
    last_checkpoint: u64,
}

impl SourceRun {
    pub(crate) fn new() -> Self {
        SourceRun {
            opened: false,
            last_tick: Instant::now(),
            last_checkpoint: 0,
        }
    }

    /// Polls the source once (opening it first), taking a checkpoint if one
    /// was triggered and holding off while a pause is raised.
    pub(crate) fn step(
        &mut self,
        task: &mut dyn SourceTask,
        pauses: &[Arc<PauseFlag>],
        flags: &Flags,
    ) -> Result<Step, TaskError> {
        if !self.opened {
            task.open()?;
            self.opened = true;
        }
        if flags.abort.load(Ordering::Relaxed) {
            return Ok(Step::Done(Ended::Aborted));
        }
        if flags.stop.load(Ordering::Relaxed) {
            return Self::end(task, flags);
        }
        if let Some(checkpoints) = &flags.checkpoints {
            let trigger = checkpoints.trigger.load(Ordering::Acquire);
            if trigger > self.last_checkpoint {
                self.last_checkpoint = trigger;
                task.checkpoint(trigger)?;
            }
        }
        if pauses.iter().any(|p| p.is_raised()) {
            // A downstream queue is above its high watermark: hold off.
            task.flush()?;
            return Ok(Step::Paused);
        }
        let poll = task.poll()?;
        if self.last_tick.elapsed() >= TICK {
            self.last_tick = Instant::now();
            task.on_processing_time(wall_clock())?;
        }
        match poll {
            SourcePoll::Emitted => Ok(Step::Busy),
            SourcePoll::Idle => {
                task.flush()?;
                Ok(Step::Idle)
            }
            SourcePoll::Finished => Self::end(task, flags),
        }
    }

    fn end(task: &mut dyn SourceTask, flags: &Flags) -> Result<Step, TaskError> {
        if let Some(checkpoints) = &flags.checkpoints {
            checkpoints.source_ended.store(true, Ordering::Relaxed);
        }
        task.finish()?;
        Ok(Step::Done(Ended::Completed))
    }
}

/// Runs a source task on its own thread until it ends.
pub(crate) fn run_source(
    task: &mut dyn SourceTask,
    pauses: &[Arc<PauseFlag>],
    times: &TaskTimes,
    flags: &Flags,
) -> Result<Ended, TaskError> {
    let mut run = SourceRun::new();
    loop {
        match run.step(task, pauses, flags)? {
            Step::Busy | Step::Idle => {}
            Step::Paused => {
                let started = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                times.add_backpressured(started.elapsed());
            }
            Step::Done(ended) => return Ok(ended),
        }
    }
}

/// Event time as seen from one sender into one port.
#[derive(Copy, Clone, Debug)]
struct SenderTime {
    watermark: Timestamp,
    idle: bool,
    ended: bool,
}

/// The event time of an instance: the minimum watermark over every sender of
/// every port that is neither idle nor ended (an ended sender counts as the
/// end of time). It never goes back.
struct EventClock {
    senders: Vec<Vec<SenderTime>>,
    current: Timestamp,
    all_idle: bool,
}

/// What changed when a sender's time changed.
enum Change {
    None,
    Advanced(Timestamp),
    BecameIdle,
}

impl EventClock {
    fn new(senders_per_port: &[u32]) -> Self {
        let initial = SenderTime {
            watermark: Timestamp::MIN,
            idle: false,
            ended: false,
        };
        EventClock {
            senders: senders_per_port
                .iter()
                .map(|&n| vec![initial; n as usize])
                .collect(),
            current: Timestamp::MIN,
            all_idle: false,
        }
    }

    fn sender(&mut self, port: usize, from: SenderIdx) -> Option<&mut SenderTime> {
        self.senders.get_mut(port)?.get_mut(from.0 as usize)
    }

    /// Records data from a sender: an idle sender becomes active again.
    fn activity(&mut self, port: usize, from: SenderIdx) -> Change {
        match self.sender(port, from) {
            Some(sender) if sender.idle => {
                sender.idle = false;
                self.recompute()
            }
            _ => Change::None,
        }
    }

    fn watermark(&mut self, port: usize, from: SenderIdx, watermark: Timestamp) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.idle = false;
            sender.watermark = sender.watermark.max(watermark);
        }
        self.recompute()
    }

    fn idle(&mut self, port: usize, from: SenderIdx) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.idle = true;
        }
        self.recompute()
    }

    fn ended(&mut self, port: usize, from: SenderIdx) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.ended = true;
            sender.watermark = Timestamp::MAX;
        }
        self.recompute()
    }

    fn recompute(&mut self) -> Change {
        let active = self
            .senders
            .iter()
            .flatten()
            .filter(|s| !s.idle && !s.ended);
        let minimum = active.map(|s| s.watermark).min();
        let all_ended = self.senders.iter().flatten().all(|s| s.ended);
        let (minimum, all_idle) = match minimum {
            Some(minimum) => (minimum, false),
            None if all_ended => (Timestamp::MAX, false),
            None => (self.current, true),
        };
        let became_idle = all_idle && !self.all_idle;
        self.all_idle = all_idle;
        if minimum > self.current {
            self.current = minimum;
            Change::Advanced(minimum)
        } else if became_idle {
            Change::BecameIdle
        } else {
            Change::None
        }
    }
}

fn apply(task: &mut dyn InputTask, change: Change, times: &TaskTimes) -> Result<(), TaskError> {
    match change {
        Change::None => Ok(()),
        Change::Advanced(watermark) => {
            times.set_watermark(watermark);
            task.on_watermark(watermark)
        }
        Change::BecameIdle => task.on_idle(),
    }
}

/// The input side of a task's flow control: its pause request, and when it
/// was raised.
struct PauseState {
    flag: Arc<PauseFlag>,
    raised_at: Option<Instant>,
}

impl PauseState {
    /// Raises the pause above a channel's high watermark, lowers it once every
    /// watermarked channel is below its low one (and the pause lasted long enough).
    fn update(&mut self, ports: &[Vec<InputChannel>]) {
        let watermarked = ports.iter().flatten().filter_map(|c| Some((c, c.pause?)));
        let (mut above, mut below) = (false, true);
        for (channel, watermarks) in watermarked {
            let occupancy = channel.receiver.len() as f64 / channel.capacity.max(1) as f64;
            above |= occupancy >= watermarks.high;
            below &= occupancy <= watermarks.low;
        }
        match self.raised_at {
            None if above => {
                self.flag.raise();
                self.raised_at = Some(Instant::now());
            }
            Some(at) if below && at.elapsed() >= MIN_PAUSE => {
                self.flag.lower();
                self.raised_at = None;
            }
            _ => {}
        }
    }

    fn release(&mut self) {
        if self.raised_at.take().is_some() {
            self.flag.lower();
        }
    }
}

fn occupancy(ports: &[Vec<InputChannel>]) -> f64 {
    let (len, capacity) = ports.iter().flatten().fold((0usize, 0usize), |(l, c), ch| {
        (l + ch.receiver.len(), c + ch.capacity)
    });
    len as f64 / capacity.max(1) as f64
}

/// An input task's loop, one message at a time: run to the end on its own
/// thread by [`run_input`], or stepped in turn with others by a worker.
pub(crate) struct InputRun {
    opened: bool,
    clock: EventClock,
    /// Per port, the senders that have not ended.
    remaining: Vec<u32>,
    /// Every (port, sender) channel that has not ended (nor delivered a
    /// barrier it is held on), visited round-robin.
    active: Vec<(usize, usize)>,
    next: usize,
    last_tick: Instant,
    barrier: Barrier,
    pause: Option<PauseState>,
}

impl InputRun {
    pub(crate) fn new(
        ports: &[Vec<InputChannel>],
        pause: Option<Arc<PauseFlag>>,
        flags: &Flags,
    ) -> Self {
        let senders_per_port: Vec<u32> = ports.iter().map(|p| p.len() as u32).collect();
        InputRun {
            opened: false,
            clock: EventClock::new(&senders_per_port),
            active: ports
                .iter()
                .enumerate()
                .flat_map(|(port, senders)| (0..senders.len()).map(move |sender| (port, sender)))
                .collect(),
            remaining: senders_per_port,
            next: 0,
            last_tick: Instant::now(),
            barrier: Barrier {
                align: flags.checkpoints.as_ref().is_some_and(|c| c.align),
                ..Barrier::default()
            },
            pause: pause.map(|flag| PauseState {
                flag,
                raised_at: None,
            }),
        }
    }

    /// The channels a message may come from next.
    pub(crate) fn waiting_on(&self) -> &[(usize, usize)] {
        &self.active
    }

    /// Handles the next message (opening the task first; finishing it once
    /// every input has ended). With `block`, waits up to a tick for one;
    /// without, an empty input is a [`Step::Idle`].
    pub(crate) fn step(
        &mut self,
        task: &mut dyn InputTask,
        ports: &[Vec<InputChannel>],
        times: &TaskTimes,
        flags: &Flags,
        block: bool,
    ) -> Result<Step, TaskError> {
        if !self.opened {
            task.open()?;
            self.opened = true;
            for (port, &senders) in self.remaining.iter().enumerate() {
                if senders == 0 {
                    task.on_port_end(port)?;
                }
            }
        }
        if self.active.is_empty() && self.barrier.held.is_empty() {
            task.finish()?;
            self.release_pause();
            return Ok(Step::Done(Ended::Completed));
        }
        let received = receive(
            task,
            ports,
            &self.active,
            &mut self.next,
            times,
            flags,
            block,
        )?;
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
        };
        let (port, _) = self.active[slot];
        let from = envelope.from;
        let clock = &mut self.clock;
        match envelope.payload {
            Payload::Batch(batch) => {
                let change = clock.activity(port, from);
                apply(task, change, times)?;
                task.on_batch(port, from, batch)?;
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
                self.barrier.complete_if_aligned(task, &mut self.active)?;
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
                self.barrier.complete_if_aligned(task, &mut self.active)?;
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
}

/// Runs an input task on its own thread until it ends.
pub(crate) fn run_input(
    task: &mut dyn InputTask,
    ports: &[Vec<InputChannel>],
    pause: Option<Arc<PauseFlag>>,
    times: &TaskTimes,
    flags: &Flags,
) -> Result<Ended, TaskError> {
    let mut run = InputRun::new(ports, pause, flags);
    let result = loop {
        match run.step(task, ports, times, flags, true) {
            Ok(Step::Done(ended)) => break Ok(ended),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    run.release_pause();
    result
}

/// The checkpoint barrier a task is collecting from its inputs.
#[derive(Default)]
struct Barrier {
    /// Exactly-once: inputs that delivered the barrier are not read until
    /// every input has (alignment); at-least-once: they are.
    align: bool,
    /// The checkpoint whose barrier has arrived on some inputs.
    pending: Option<u64>,
    /// Aligning: the inputs that delivered it, set aside.
    held: Vec<(usize, usize)>,
    /// Not aligning: the inputs that delivered it.
    seen: Vec<(usize, usize)>,
}

impl Barrier {
    /// The barrier of `checkpoint` arrived on `active[slot]`.
    fn arrived(&mut self, checkpoint: u64, slot: usize, active: &mut Vec<(usize, usize)>) {
        if self.pending.is_some_and(|p| p != checkpoint) {
            // A newer checkpoint overtook one that was abandoned: start over.
            active.append(&mut self.held);
            self.seen.clear();
        }
        self.pending = Some(checkpoint);
        if self.align {
            self.held.push(active.remove(slot));
        } else {
            self.seen.push(active[slot]);
        }
    }

    /// Once every input that has not ended has delivered the barrier:
    /// snapshot, forward it, and read the held inputs again.
    fn complete_if_aligned(
        &mut self,
        task: &mut dyn InputTask,
        active: &mut Vec<(usize, usize)>,
    ) -> Result<(), TaskError> {
        let Some(checkpoint) = self.pending else {
            return Ok(());
        };
        let aligned = if self.align {
            active.is_empty()
        } else {
            active.iter().all(|c| self.seen.contains(c))
        };
        if aligned {
            task.on_barrier(checkpoint)?;
            self.pending = None;
            active.append(&mut self.held);
            self.seen.clear();
        }
        Ok(())
    }
}

/// The outcome of waiting for a message.
enum Received {
    /// A message from `active[slot]`.
    Message(usize, Envelope),
    /// Nothing arrived within a tick: time to tick processing time.
    Nothing,
    Aborted,
}

/// The next message from the active channels, visited round-robin so that no
/// sender gets ahead of the others: without blocking if one is ready;
/// otherwise flush (adaptive flushing) and, if `block`, block up to one tick.
fn receive(
    task: &mut dyn InputTask,
    ports: &[Vec<InputChannel>],
    active: &[(usize, usize)],
    next: &mut usize,
    times: &TaskTimes,
    flags: &Flags,
    block: bool,
) -> Result<Received, TaskError> {
    let n = active.len();
    for i in 0..n {
        let slot = (*next + i) % n;
        let (port, sender) = active[slot];
        match ports[port][sender].receiver.try_recv() {
            Ok(envelope) => {
                *next = (slot + 1) % n;
                return Ok(Received::Message(slot, envelope));
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return disconnected(flags),
        }
    }
    task.flush()?;
    if flags.abort.load(Ordering::Relaxed) {
        return Ok(Received::Aborted);
    }
    if !block {
        return Ok(Received::Nothing);
    }
    let waiting = Instant::now();
    let received = wait(ports, active, next, flags);
    times.add_idle(waiting.elapsed());
    received
}

/// Blocks up to one tick for a message on any active channel.
fn wait(
    ports: &[Vec<InputChannel>],
    active: &[(usize, usize)],
    next: &mut usize,
    flags: &Flags,
) -> Result<Received, TaskError> {
    let n = active.len();
    if let [(port, sender)] = active {
        return match ports[*port][*sender].receiver.recv_timeout(TICK) {
            Ok(envelope) => Ok(Received::Message(0, envelope)),
            Err(RecvTimeoutError::Timeout) => Ok(Received::Nothing),
            Err(RecvTimeoutError::Disconnected) => disconnected(flags),
        };
    }
    let mut select = Select::new();
    for &(port, sender) in active {
        select.recv(&ports[port][sender].receiver);
    }
    let Ok(slot) = select.ready_timeout(TICK) else {
        return Ok(Received::Nothing);
    };
    let (port, sender) = active[slot];
    match ports[port][sender].receiver.try_recv() {
        Ok(envelope) => {
            *next = (slot + 1) % n;
            Ok(Received::Message(slot, envelope))
        }
        Err(TryRecvError::Empty) => Ok(Received::Nothing),
        Err(TryRecvError::Disconnected) => disconnected(flags),
    }
}

fn disconnected(flags: &Flags) -> Result<Received, TaskError> {
    if flags.abort.load(Ordering::Relaxed) {
        Ok(Received::Aborted)
    } else {
        Err(TaskError::UpstreamFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn advanced(change: Change) -> Option<i64> {
        match change {
            Change::Advanced(w) => Some(w.millis()),
            _ => None,
        }
    }

    #[test]
    fn event_time_is_the_minimum_over_ports_and_senders() {
        let mut clock = EventClock::new(&[2, 1]);
        assert_eq!(advanced(clock.watermark(0, SenderIdx(0), t(10))), None);
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(5))), None);
        assert_eq!(advanced(clock.watermark(1, SenderIdx(0), t(7))), Some(5));
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(20))), Some(7));
        // Never goes back, even if a sender reports an older watermark.
        assert_eq!(advanced(clock.watermark(1, SenderIdx(0), t(1))), None);
        assert_eq!(clock.current, t(7));
    }

    #[test]
    fn idle_senders_are_skipped_until_they_speak_again() {
        let mut clock = EventClock::new(&[2]);
        clock.watermark(0, SenderIdx(0), t(10));
        assert_eq!(advanced(clock.idle(0, SenderIdx(1))), Some(10));
        assert!(matches!(clock.idle(0, SenderIdx(0)), Change::BecameIdle));
        // Data from an idle sender makes it active; the clock does not go back.
        assert!(matches!(clock.activity(0, SenderIdx(1)), Change::None));
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(15))), Some(15));
    }

    #[test]
    fn an_ended_sender_counts_as_the_end_of_time() {
        let mut clock = EventClock::new(&[2]);
        clock.watermark(0, SenderIdx(0), t(3));
        assert_eq!(advanced(clock.ended(0, SenderIdx(1))), Some(3));
        assert_eq!(advanced(clock.ended(0, SenderIdx(0))), Some(i64::MAX));
    }
}
