//! Checkpoints (chapter 10): the coordinator that starts them at the
//! sources, collects every instance's part, and writes complete ones to the
//! checkpoint log; and the restore of a job from the last complete one.
//!
//! A checkpoint starts when the coordinator raises the trigger: each source
//! task, between two polls, reports its position and sends the barrier down
//! every edge. A task with several inputs aligns the barrier (exactly-once:
//! it holds every input that delivered it until all have) or merely waits
//! for it on every input (at-least-once), then reports its part and forwards
//! the barrier. Once every instance has reported, the coordinator appends
//! the parts and the commit record, flushed durably, and publishes the
//! checkpoint as complete: transactional sinks then commit what they staged.
//! At end of input every instance reports a final part; the final
//! checkpoint is what a job restarted after completion resumes from, so it
//! adds nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
pub use streamwork_core::checkpoint::Delivery;
use streamwork_core::checkpoint::{FINAL_CHECKPOINT, Part, RestoreSource, RestoredPart};
use streamwork_state::{Checkpoint, CheckpointLog, LogOptions, StateError, operator_id};

/// How a job takes checkpoints and restores from them.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// The checkpoint directory (created if need be).
    pub dir: PathBuf,
    /// Time between the end of one checkpoint and the start of the next.
    pub interval: Duration,
    /// At-least-once or exactly-once (at-most-once takes no checkpoints).
    pub delivery: Delivery,
    /// Restore from the directory's last complete checkpoint, if it has one.
    pub restore: bool,
    /// Complete checkpoints kept.
    pub retain: usize,
}

impl CheckpointConfig {
    /// Checkpoints into `dir` every `interval`, exactly-once, restoring
    /// from the directory when it holds a complete checkpoint.
    pub fn new(dir: impl Into<PathBuf>, interval: Duration) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            interval,
            delivery: Delivery::ExactlyOnce,
            restore: true,
            retain: 3,
        }
    }

    /// The same, with `delivery`.
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }
}

/// One checkpoint as the coordinator completed it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointStats {
    /// Its id.
    pub id: u64,
    /// From the trigger to the durable commit record.
    pub duration: Duration,
    /// Bytes of state written.
    pub bytes: u64,
    /// Whether it is the final checkpoint, taken at end of input.
    pub is_final: bool,
}

/// A loaded checkpoint offered to the instances of a restarted job.
pub(crate) struct Restored {
    checkpoint: Checkpoint,
}

/// The component name under which the final checkpoint carries its marker.
const FINAL_MARKER: &str = "__streamwork_final_checkpoint__";

impl RestoreSource for Restored {
    fn checkpoint(&self) -> u64 {
        self.checkpoint.id()
    }

    fn is_final(&self) -> bool {
        self.checkpoint
            .snapshot(operator_id(FINAL_MARKER), 0)
            .is_some()
    }

    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>> {
        let operator = operator_id(component);
        self.checkpoint
            .snapshots()
            .filter(|s| s.operator() == operator)
            .map(|s| RestoredPart {
                part: s.part(),
                schema: s.schema(),
                bytes: s.bytes(),
            })
            .collect()
    }
}

/// Loads the last complete checkpoint of `dir`, if there is one.
pub(crate) fn load(dir: &std::path::Path) -> Result<Option<Restored>, StateError> {
    if !dir.exists() {
        return Ok(None);
    }
    match streamwork_state::load_latest(dir) {
        Ok(checkpoint) => Ok(Some(Restored { checkpoint })),
        Err(StateError::NoCheckpoint { skipped, .. }) => {
            for line in skipped {
                tracing::warn!("checkpoint directory {}: skipped {line}", dir.display());
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The shared signals between the coordinator and the tasks.
#[derive(Clone)]
pub(crate) struct Signals {
    /// The checkpoint the sources should take next (0: none yet).
    pub(crate) trigger: Arc<AtomicU64>,
    /// The last complete checkpoint.
    pub(crate) completed: Arc<AtomicU64>,
    /// The final checkpoint is complete.
    pub(crate) final_completed: Arc<AtomicBool>,
    /// A source has ended its input: no periodic checkpoint can complete.
    pub(crate) source_ended: Arc<AtomicBool>,
}

impl Signals {
    pub(crate) fn new(completed: u64) -> Self {
        Signals {
            trigger: Arc::new(AtomicU64::new(0)),
            completed: Arc::new(AtomicU64::new(completed)),
            final_completed: Arc::new(AtomicBool::new(false)),
            source_ended: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The coordinator, run on its own thread until the final checkpoint is
/// complete or the job fails.
pub(crate) struct Coordinator {
    pub(crate) log: CheckpointLog,
    pub(crate) parts: Receiver<Part>,
    pub(crate) expected: usize,
    pub(crate) interval: Duration,
    pub(crate) signals: Signals,
    pub(crate) abort: Arc<AtomicBool>,
    pub(crate) stats: Arc<std::sync::Mutex<Vec<CheckpointStats>>>,
}

impl Coordinator {
    pub(crate) fn open(config: &CheckpointConfig) -> Result<CheckpointLog, StateError> {
        CheckpointLog::open(
            &config.dir,
            LogOptions {
                retain: config.retain.max(1),
                ..LogOptions::default()
            },
        )
    }

    /// Runs until the final checkpoint is complete, or the job aborts.
    pub(crate) fn run(mut self) -> Result<(), StateError> {
        let mut in_flight: Option<(u64, Instant, Vec<Part>)> = None;
        let mut finals: Vec<Part> = Vec::new();
        let mut next_trigger = Instant::now() + self.interval;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let ended = self.signals.source_ended.load(Ordering::Relaxed);
            if ended {
                // A finished source cannot take part: the final checkpoint
                // covers the end.
                in_flight = None;
            } else if in_flight.is_none() && Instant::now() >= next_trigger {
                let id = self.log.next_checkpoint_id();
                in_flight = Some((id, Instant::now(), Vec::with_capacity(self.expected)));
                self.signals.trigger.store(id, Ordering::Release);
            }
            let wait = Duration::from_millis(10);
            let part = match self.parts.recv_timeout(wait) {
                Ok(part) => part,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            if part.checkpoint == FINAL_CHECKPOINT {
                finals.push(part);
                if finals.len() == self.expected {
                    let id = self.log.next_checkpoint_id();
                    let started = Instant::now();
                    let mut parts = std::mem::take(&mut finals);
                    parts.push(Part {
                        checkpoint: id,
                        component: FINAL_MARKER.into(),
                        instance: 0,
                        state: Some(streamwork_core::StateBytes {
                            schema: 0,
                            bytes: Vec::new(),
                        }),
                    });
                    let bytes = self.write(id, parts)?;
                    self.record(id, started, bytes, true);
                    self.signals.completed.store(id, Ordering::Release);
                    self.signals.final_completed.store(true, Ordering::Release);
                    return Ok(());
                }
                continue;
            }
            let Some((id, started, parts)) = in_flight.as_mut() else {
                continue;
            };
            if part.checkpoint != *id {
                continue;
            }
            parts.push(part);
            if parts.len() == self.expected {
                let (id, started) = (*id, *started);
                let parts = std::mem::take(parts);
                in_flight = None;
                let bytes = self.write(id, parts)?;
                self.record(id, started, bytes, false);
                self.signals.completed.store(id, Ordering::Release);
                next_trigger = Instant::now() + self.interval;
            }
        }
    }

    fn write(&mut self, id: u64, parts: Vec<Part>) -> Result<u64, StateError> {
        let mut snapshots = 0u32;
        let mut bytes = 0u64;
        for part in parts {
            if let Some(state) = part.state {
                self.log.append_snapshot(
                    id,
                    operator_id(&part.component),
                    part.instance,
                    state.schema,
                    &state.bytes,
                )?;
                snapshots += 1;
                bytes += state.bytes.len() as u64;
            }
        }
        self.log.commit(id, snapshots)?;
        Ok(bytes)
    }

    fn record(&self, id: u64, started: Instant, bytes: u64, is_final: bool) {
        let stats = CheckpointStats {
            id,
            duration: started.elapsed(),
            bytes,
            is_final,
        };
        tracing::debug!(?stats, "checkpoint complete");
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(stats);
    }
}
