//! The coordinator: triggers checkpoints at the sources, collects every
//! instance's part, and writes complete checkpoints to the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::CheckpointId;
use streamwork_state::{CheckpointLog, LogOptions, StateError, operator_id};

use super::restore::FINAL_MARKER;
use super::{CheckpointConfig, CheckpointStats, Part};

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
    /// The savepoint a stop asked for (0: none yet).
    pub(crate) savepoint: Arc<AtomicU64>,
}

impl Signals {
    pub(crate) fn new(completed: CheckpointId) -> Self {
        Signals {
            trigger: Arc::new(AtomicU64::new(0)),
            completed: Arc::new(AtomicU64::new(completed.get())),
            final_completed: Arc::new(AtomicBool::new(false)),
            source_ended: Arc::new(AtomicBool::new(false)),
            savepoint: Arc::new(AtomicU64::new(0)),
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
    /// Raised by a stop: take a savepoint.
    pub(crate) stop: Arc<AtomicBool>,
    /// Raised here once the savepoint is complete: the tasks stop.
    pub(crate) suspending: Arc<AtomicBool>,
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
        let mut in_flight: Option<(CheckpointId, Instant, Vec<Part>)> = None;
        let mut finals: Vec<Part> = Vec::new();
        let mut next_trigger = Instant::now() + self.interval;
        let mut savepoint = CheckpointId::NONE;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let ended = self.signals.source_ended.load(Ordering::Relaxed);
            let stop = self.stop.load(Ordering::Relaxed);
            if ended {
                // A finished source cannot take part: the final checkpoint
                // covers the end.
                in_flight = None;
            } else if in_flight.is_none()
                && savepoint == CheckpointId::NONE
                && (stop || Instant::now() >= next_trigger)
            {
                let id = self.log.next_checkpoint_id()?;
                in_flight = Some((id, Instant::now(), Vec::with_capacity(self.expected)));
                self.signals.trigger.store(id.get(), Ordering::Release);
            }
            if stop && savepoint == CheckpointId::NONE {
                // The checkpoint in flight is the savepoint: the sources
                // read nothing after its barrier.
                if let Some((id, _, _)) = &in_flight {
                    savepoint = *id;
                    self.signals.savepoint.store(id.get(), Ordering::Release);
                }
            }
            let wait = Duration::from_millis(10);
            let part = match self.parts.recv_timeout(wait) {
                Ok(part) => part,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            if part.checkpoint.is_final() {
                finals.push(part);
                if finals.len() == self.expected {
                    let id = self.log.next_checkpoint_id()?;
                    let started = Instant::now();
                    let mut parts = std::mem::take(&mut finals);
                    parts.push(Part {
                        checkpoint: id,
                        component: FINAL_MARKER.into(),
                        instance: InstanceIdx(0),
                        state: Some(streamwork_core::StateBytes {
                            schema: 0,
                            bytes: Vec::new(),
                        }),
                    });
                    let bytes = self.write(id, parts)?;
                    self.record(id, started, bytes, true);
                    self.signals.completed.store(id.get(), Ordering::Release);
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
                self.signals.completed.store(id.get(), Ordering::Release);
                if id == savepoint {
                    // Every task stops where it is; sinks commit it.
                    self.suspending.store(true, Ordering::Release);
                    return Ok(());
                }
                next_trigger = Instant::now() + self.interval;
            }
        }
    }

    fn write(&mut self, id: CheckpointId, parts: Vec<Part>) -> Result<u64, StateError> {
        let mut snapshots = 0u32;
        let mut bytes = 0u64;
        for part in parts {
            if let Some(state) = part.state {
                self.log.append_snapshot(
                    id,
                    operator_id(&part.component),
                    part.instance.0,
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

    fn record(&self, id: CheckpointId, started: Instant, bytes: u64, is_final: bool) {
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
