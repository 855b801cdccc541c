//! Workers: threads that take turns among several tasks (`workers N;`).
//!
//! One thread per task is simple and lets the operating system share the
//! cores; but with more tasks than cores it pays for it in context switches,
//! in caches that each task finds cold when its turn comes, and in sources
//! that run ahead of one another while their peers wait for a core (which
//! makes every downstream window hold more state). A worker instead runs
//! instance `i` of every component on worker `i % workers`: with as many
//! workers as cores and parallelism equal to the workers, each core runs one
//! whole slice of the pipeline, and only the exchanges between slices cross
//! threads (the worker model of Timely Dataflow).
//!
//! A worker steps its tasks in turn: a source polls once, an input task
//! handles up to [`BUDGET`] messages. A step never blocks: the channels between tasks
//! are unbounded, and a task is stepped only while every channel it sends
//! into is below its capacity, so backpressure holds a task back between
//! steps (timed as backpressured) instead of in the middle of one, where it
//! could wait forever for a task of its own worker. When no task can do
//! anything the worker waits for a message on any of its tasks' inputs (or a
//! moment, when one is held back or a source has nothing yet).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crossbeam_channel::Select;
use streamwork_core::InstanceIdx;

use crate::failure::Failed;
use crate::task::{Ended, Flags, InputRun, OutputChannel, SourceRun, Step, TICK, Task, TaskBody};

/// The cores this process may use (its CPU affinity and cgroup quota
/// count): the default number of workers.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

/// The most messages an input task handles in one turn, so that its worker's
/// other tasks are not kept waiting behind a long queue. A source polls once
/// a turn: what it emits for a task of its own worker is then read while it
/// is still in the core's cache.
pub(crate) const BUDGET: usize = 64;

/// How long a worker waits before looking again at a task held back by a
/// full channel or a source with nothing to read: their wake-ups come from
/// other threads, which do not signal.
const RECHECK: Duration = Duration::from_micros(100);

/// Rounds in a row without progress in which a worker with a held-back task
/// only yields its core before it starts to sleep: room usually comes within
/// microseconds, and a sleep costs a hundred.
const YIELDS: u32 = 64;

/// A task and where its loop stands.
struct Turn {
    task: Task,
    run: Run,
    /// Time spent stepping it in the current round.
    spent: Duration,
    /// Held back this round: a channel it sends into is full, or a pause is
    /// raised downstream.
    held: bool,
}

// Not boxed: the input task's state is stepped in the hot loop, and a
// worker holds a handful of these.
#[allow(clippy::large_enum_variant)]
enum Run {
    Source(SourceRun),
    Input(InputRun),
}

impl Turn {
    fn new(task: Task, flags: &Flags) -> Turn {
        let run = match &task.body {
            TaskBody::Source { .. } => Run::Source(SourceRun::new()),
            TaskBody::Input { ports, pause, .. } => Run::Input(InputRun::new(
                task.component.clone(),
                task.instance,
                ports,
                pause.clone(),
                flags,
            )),
        };
        Turn {
            task,
            run,
            spent: Duration::ZERO,
            held: false,
        }
    }

    /// Whether the task may take a step: every channel it sends into has
    /// room. (A source's gates are looked at by its step, after it starts.)
    fn may_step(&self) -> bool {
        self.task.outputs.iter().all(OutputChannel::has_room)
    }

    /// Steps the task while it has work, room in its outputs, and budget.
    fn step(&mut self, flags: &Flags) -> Result<Step, Failed> {
        let mut last = Step::Idle;
        let budget = match self.run {
            Run::Source(_) => 1,
            Run::Input(_) => BUDGET,
        };
        for done in 0..budget {
            if done > 0 && !self.may_step() {
                break;
            }
            last = match (&mut self.run, &mut self.task.body) {
                (
                    Run::Source(run),
                    TaskBody::Source {
                        task,
                        pauses,
                        gates,
                    },
                ) => run.step(task.as_mut(), pauses, gates, flags)?,
                (Run::Input(run), TaskBody::Input { task, ports, .. }) => {
                    run.step(task.as_mut(), ports, &self.task.times, flags, false)?
                }
                _ => unreachable!("a turn's loop matches its task"),
            };
            if last != Step::Busy {
                break;
            }
        }
        Ok(last)
    }

    /// Lowers the pause request of an input task that ends.
    /// Stops the task at the complete savepoint (a failure is recorded by
    /// the instance that failed).
    fn suspend(&mut self) {
        crate::task::suspend(&mut self.task);
    }

    fn release(&mut self) {
        if let Run::Input(run) = &mut self.run {
            run.release_pause();
        }
    }
}

/// The worker of each root `(node, instance)` of `roots`: instance `i` of a
/// component goes to worker `(offset + i) % workers`, the offset being the
/// instances of the components before it in `roots`. Components of equal
/// parallelism line up (instance `i` of each on one worker, so the records of
/// an exchange that keep their instance stay on their thread), and components
/// of parallelism 1 spread over the workers.
pub(crate) fn placement(
    roots: &[(usize, InstanceIdx)],
    parallelism: impl Fn(usize) -> u32,
    workers: u32,
) -> Vec<usize> {
    let mut offsets = std::collections::HashMap::new();
    let mut next = 0u32;
    roots
        .iter()
        .map(|&(node, instance)| {
            let offset = *offsets.entry(node).or_insert_with(|| {
                let offset = next;
                next += parallelism(node);
                offset
            });
            ((offset + instance.0) % workers.max(1)) as usize
        })
        .collect()
}

/// Runs `tasks` on this thread, in turns, until every one has ended (or the
/// job is aborted).
pub(crate) fn run_worker(tasks: Vec<Task>, flags: &Flags) -> Ended {
    let mut turns: Vec<Turn> = tasks.into_iter().map(|t| Turn::new(t, flags)).collect();
    let mut ended = Ended::Completed;
    // Rounds in a row in which no task could do anything.
    let mut fruitless = 0u32;
    while !turns.is_empty() {
        if flags.failure.aborted() {
            for turn in &mut turns {
                turn.release();
            }
            return Ended::Aborted;
        }
        if flags.failure.suspending() {
            // Held turns too: a full channel must not keep one running.
            for turn in &mut turns {
                turn.suspend();
                turn.release();
            }
            return Ended::Suspended;
        }
        let round = Instant::now();
        let (mut progressed, mut recheck) = (false, false);
        let mut i = 0;
        while i < turns.len() {
            let turn = &mut turns[i];
            turn.spent = Duration::ZERO;
            turn.held = !turn.may_step();
            if turn.held {
                recheck = true;
                i += 1;
                continue;
            }
            let started = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| turn.step(flags)));
            turn.spent = started.elapsed();
            match outcome {
                Ok(Ok(Step::Busy)) => progressed = true,
                Ok(Ok(Step::Idle)) => recheck |= matches!(turn.run, Run::Source(_)),
                // Ended, waiting for the final checkpoint: look again soon.
                Ok(Ok(Step::Closing)) => recheck = true,
                Ok(Ok(Step::Paused | Step::Gated)) => {
                    turn.held = true;
                    recheck = true;
                }
                Ok(Ok(Step::Done(how))) => {
                    let mut turn = turns.remove(i);
                    turn.release();
                    if how == Ended::Aborted {
                        ended = Ended::Aborted;
                    }
                    progressed = true;
                    continue;
                }
                Ok(Err(Failed)) if flags.failure.suspending() => {
                    // A neighbour stopped at the savepoint, found gone
                    // mid-step: the loop's next round stops every task.
                    let mut turn = turns.remove(i);
                    turn.suspend();
                    turn.release();
                    continue;
                }
                Ok(Err(Failed)) => {
                    // Recorded by the instance that failed; dropping the
                    // task closes its channels.
                    let mut turn = turns.remove(i);
                    turn.release();
                    return Ended::Aborted;
                }
                Err(payload) => {
                    // Instances catch the panics of user code; one that
                    // reaches here is the engine's own.
                    let mut turn = turns.remove(i);
                    turn.release();
                    flags
                        .failure
                        .panic(&turn.task.component, turn.task.instance, payload);
                    return Ended::Aborted;
                }
            }
            i += 1;
        }
        if progressed {
            fruitless = 0;
        } else if !turns.is_empty() {
            fruitless += 1;
            if recheck && fruitless <= YIELDS {
                // Held back by a full channel or a gate: the task that will
                // make room runs on another thread, most likely just now.
                std::thread::yield_now();
            } else {
                wait(&turns, if recheck { RECHECK } else { TICK });
            }
        }
        account(&turns, round.elapsed());
    }
    ended
}

/// Charges each task the part of the round it did not run: backpressured if
/// it was held back, idle otherwise (waiting for input, or for its turn).
fn account(turns: &[Turn], round: Duration) {
    for turn in turns {
        let rest = round.saturating_sub(turn.spent);
        if turn.held {
            turn.task.times.add_backpressured(rest);
        } else {
            turn.task.times.add_idle(rest);
        }
    }
}

/// Waits up to `timeout` for a message on any input of `turns`.
fn wait(turns: &[Turn], timeout: Duration) {
    let mut select = Select::new();
    let mut any = false;
    for turn in turns {
        if let (Run::Input(run), TaskBody::Input { ports, .. }) = (&turn.run, &turn.task.body) {
            for &(port, sender) in run.waiting_on() {
                select.recv(&ports[port][sender].receiver);
                any = true;
            }
        }
    }
    if any {
        let _ = select.ready_timeout(timeout);
    } else {
        std::thread::sleep(timeout.min(RECHECK));
    }
}

#[cfg(test)]
mod tests {
    use super::placement;
    use streamwork_core::InstanceIdx;

    /// The roots of components of the given parallelisms, in order.
    fn roots(parallelisms: &[u32]) -> Vec<(usize, InstanceIdx)> {
        parallelisms
            .iter()
            .enumerate()
            .flat_map(|(node, &p)| (0..p).map(move |i| (node, InstanceIdx(i))))
            .collect()
    }

    fn placed(parallelisms: &[u32], workers: u32) -> Vec<usize> {
        placement(&roots(parallelisms), |node| parallelisms[node], workers)
    }

    #[test]
    fn equal_parallelisms_line_up_one_slice_per_worker() {
        assert_eq!(placed(&[2, 2], 2), [0, 1, 0, 1]);
        assert_eq!(placed(&[3, 3, 3], 3), [0, 1, 2, 0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn single_instances_spread_over_the_workers() {
        assert_eq!(placed(&[1, 1], 2), [0, 1]);
        assert_eq!(placed(&[1, 2, 1], 2), [0, 1, 0, 1]);
    }

    #[test]
    fn every_task_gets_a_worker_within_range() {
        for workers in 1..5 {
            let places = placed(&[3, 1, 4, 2], workers);
            assert_eq!(places.len(), 10);
            assert!(places.iter().all(|&w| w < workers as usize));
        }
    }
}
