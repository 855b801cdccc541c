//! The coordinator: triggers checkpoints at the sources, collects every
//! instance's part, and writes complete checkpoints to the log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::CheckpointId;
use streamwork_state::{
    CheckpointLog, LogOptions, Mirror, StateError, operator_id, side_operator_id,
};

use super::restore::{COMPONENTS_MARKER, FINAL_MARKER, finished_marker};
use super::{CheckpointConfig, CheckpointStats, Part, PartTiming};

/// The shared signals between the coordinator and the tasks.
#[derive(Clone)]
pub(crate) struct Signals {
    /// The checkpoint the sources should take next (0: none yet).
    pub(crate) trigger: Arc<AtomicU64>,
    /// The last complete checkpoint.
    pub(crate) completed: Arc<AtomicU64>,
    /// The final checkpoint is complete.
    pub(crate) final_completed: Arc<AtomicBool>,
    /// The savepoint a stop asked for (0: none yet).
    pub(crate) savepoint: Arc<AtomicU64>,
    /// The longest restore of an instance, in nanoseconds.
    pub(crate) longest_restore: Arc<AtomicU64>,
    /// An instance asked for the next checkpoint now
    /// ([`CheckpointView::request_checkpoint`](streamwork_core::checkpoint::CheckpointView::request_checkpoint)).
    pub(crate) early: Arc<AtomicBool>,
    /// Holds on the job's input out
    /// ([`CheckpointView::hold_input`](streamwork_core::checkpoint::CheckpointView::hold_input)).
    pub(crate) input_holds: Arc<streamwork_core::InputHolds>,
}

impl Signals {
    pub(crate) fn new(completed: CheckpointId) -> Self {
        Signals {
            trigger: Arc::new(AtomicU64::new(0)),
            completed: Arc::new(AtomicU64::new(completed.get())),
            final_completed: Arc::new(AtomicBool::new(false)),
            savepoint: Arc::new(AtomicU64::new(0)),
            longest_restore: Arc::new(AtomicU64::new(0)),
            early: Arc::new(AtomicBool::new(false)),
            input_holds: Arc::default(),
        }
    }
}

/// A checkpoint triggered and not yet complete: the parts received, by
/// instance.
struct InFlight {
    id: CheckpointId,
    started: Instant,
    /// Asked for by an instance before the interval.
    early: bool,
    parts: BTreeMap<(Arc<str>, InstanceIdx), Part>,
}

/// Which checkpoint completed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// At the interval, at a stop, or asked for early by an instance.
    Taken { early: bool },
    /// At the end of input.
    Final,
}

/// An empty snapshot that marks something in checkpoint `id`: the final
/// checkpoint, or an instance that had ended.
fn marker(id: CheckpointId, component: &str, instance: InstanceIdx) -> Part {
    Part {
        checkpoint: id,
        component: component.into(),
        instance,
        state: Some(streamwork_core::StateBytes::new(0, Vec::new())),
        timing: PartTiming::default(),
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
    /// The job's components, by name: every checkpoint records them, so a
    /// changed job can tell state it no longer has a component for.
    pub(crate) components: Vec<Arc<str>>,
    /// The job's name, the `job` label of the checkpoint series.
    pub(crate) job: String,
    /// The copy of the directory in a checkpoint store, if the job has one:
    /// a checkpoint is complete once it is there.
    pub(crate) mirror: Option<Mirror>,
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

    /// Whether an instance asked for the next checkpoint now (taking the
    /// request).
    fn asked_early(&self) -> bool {
        self.signals.early.swap(false, Ordering::AcqRel)
    }

    /// Runs until the final checkpoint is complete, the savepoint a stop
    /// asked for is complete, or the job aborts.
    ///
    /// An instance that has ended its input reports its final part and
    /// takes part in no more barriers; its final part stands for it in
    /// every later checkpoint (its state no longer changes), marked so that
    /// a restore knows it had ended. Checkpoints therefore go on while any
    /// source runs, and the final checkpoint is taken once every instance
    /// has ended.
    pub(crate) fn run(mut self) -> Result<(), StateError> {
        let mut in_flight: Option<InFlight> = None;
        let mut finals: BTreeMap<(Arc<str>, InstanceIdx), Part> = BTreeMap::new();
        let mut next_trigger = Instant::now() + self.interval;
        let mut savepoint = CheckpointId::NONE;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let stop = self.stop.load(Ordering::Relaxed);
            let idle = in_flight.is_none()
                && savepoint == CheckpointId::NONE
                && finals.len() < self.expected;
            let due = idle && (stop || Instant::now() >= next_trigger);
            // A request is taken only when a checkpoint can start.
            let asked = idle && self.asked_early();
            if due || asked {
                let early = !due;
                if early {
                    metrics::counter!("streamwork_checkpoints_requested_early_total", "job" => self.job.clone())
                        .increment(1);
                }
                let id = self.log.next_checkpoint_id()?;
                if let Some(mirror) = &self.mirror {
                    // A block of ids is reserved in the store before its
                    // first id is used.
                    mirror.publish_reserved(self.log.dir())?;
                }
                in_flight = Some(InFlight {
                    id,
                    started: Instant::now(),
                    early,
                    parts: BTreeMap::new(),
                });
                self.signals.trigger.store(id.get(), Ordering::Release);
            }
            if stop && savepoint == CheckpointId::NONE {
                // The checkpoint in flight is the savepoint: the sources
                // read nothing after its barrier.
                if let Some(flight) = &in_flight {
                    savepoint = flight.id;
                    self.signals
                        .savepoint
                        .store(flight.id.get(), Ordering::Release);
                }
            }
            let part = match self.parts.recv_timeout(Duration::from_millis(10)) {
                Ok(part) => part,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let key = (part.component.clone(), part.instance);
            if part.checkpoint.is_final() {
                finals.insert(key, part);
                if finals.len() == self.expected {
                    return self.complete_final(finals);
                }
            } else if let Some(flight) = in_flight.as_mut()
                && part.checkpoint == flight.id
            {
                flight.parts.insert(key, part);
            }
            let covered = in_flight.as_ref().is_some_and(|flight| {
                let ended = finals.keys().filter(|k| !flight.parts.contains_key(*k));
                flight.parts.len() + ended.count() == self.expected
            });
            if !covered {
                continue;
            }
            let Some(InFlight {
                id,
                started,
                early,
                parts,
            }) = in_flight.take()
            else {
                continue;
            };
            let mut all: Vec<Part> = parts.into_values().collect();
            for (key, last) in &finals {
                if all
                    .iter()
                    .any(|p| (&p.component, p.instance) == (&key.0, key.1))
                {
                    continue;
                }
                all.push(Part {
                    checkpoint: id,
                    component: last.component.clone(),
                    instance: last.instance,
                    state: last.state.clone(),
                    timing: PartTiming::default(),
                });
                all.push(marker(id, &finished_marker(&last.component), last.instance));
            }
            let timing = Timing::of(&all);
            let bytes = self.write(id, all)?;
            self.record(id, started, bytes, timing, Kind::Taken { early });
            self.signals.completed.store(id.get(), Ordering::Release);
            if id == savepoint {
                // Every task stops where it is; sinks commit it.
                self.suspending.store(true, Ordering::Release);
                return Ok(());
            }
            next_trigger = Instant::now() + self.interval;
        }
    }

    /// Every instance has ended: the final checkpoint, of their final parts.
    fn complete_final(
        &mut self,
        finals: BTreeMap<(Arc<str>, InstanceIdx), Part>,
    ) -> Result<(), StateError> {
        let id = self.log.next_checkpoint_id()?;
        let started = Instant::now();
        let mut parts: Vec<Part> = finals.into_values().collect();
        parts.push(marker(id, FINAL_MARKER, InstanceIdx(0)));
        let timing = Timing::of(&parts);
        let bytes = self.write(id, parts)?;
        self.record(id, started, bytes, timing, Kind::Final);
        self.signals.completed.store(id.get(), Ordering::Release);
        self.signals.final_completed.store(true, Ordering::Release);
        Ok(())
    }

    /// Appends every part of checkpoint `id`, with the side records the
    /// instances left to produce here (off their task threads) and the
    /// checkpoints they build on, then commits it; the side records, now
    /// durable, are handed back mapped from the log.
    fn write(&mut self, id: CheckpointId, mut parts: Vec<Part>) -> Result<u64, StateError> {
        let mut snapshots = 0u32;
        let mut bytes = 0u64;
        parts.push(Part {
            checkpoint: id,
            component: COMPONENTS_MARKER.into(),
            instance: InstanceIdx(0),
            state: Some(streamwork_core::StateBytes::new(
                1,
                self.components.join("\n").into_bytes(),
            )),
            timing: PartTiming::default(),
        });
        let mut written = Vec::new();
        let mut builds_on = std::collections::BTreeSet::new();
        for part in parts {
            let Some(state) = part.state else { continue };
            self.log.append_snapshot(
                id,
                operator_id(&part.component),
                part.instance,
                state.schema,
                &state.bytes,
            )?;
            snapshots += 1;
            bytes += state.bytes.len() as u64;
            for side in &state.side {
                let at = self.log.append_streamed(
                    id,
                    side_operator_id(&part.component, side.stream),
                    part.instance,
                    side.schema,
                    side.check,
                    |out| {
                        side.payload
                            .produce(out)
                            .map_err(|e| StateError::Serialize {
                                type_name: "a side record",
                                reason: format!(
                                    "{}[{}] stream {}: {e}",
                                    part.component, part.instance, side.stream
                                ),
                            })
                    },
                )?;
                snapshots += 1;
                bytes += at.len() as u64;
                written.push((at, side.written.clone()));
            }
            builds_on.extend(state.builds_on.iter().copied().filter(|&on| on != id));
        }
        for on in builds_on {
            self.log.append_dependency(id, on)?;
        }
        self.log.commit(id, snapshots)?;
        if let Some(mirror) = &self.mirror {
            mirror.publish(self.log.dir())?;
        }
        for (at, slot) in written {
            let _ = slot.set(self.log.map_written(&at)?);
        }
        Ok(bytes)
    }

    fn record(&self, id: CheckpointId, started: Instant, bytes: u64, timing: Timing, kind: Kind) {
        let is_final = kind == Kind::Final;
        let stats = CheckpointStats {
            id,
            duration: started.elapsed(),
            bytes,
            is_final,
            early: kind == Kind::Taken { early: true },
            longest_pause: timing.longest_pause,
            paused_most: timing.paused_most,
            longest_alignment: timing.longest_alignment,
        };
        tracing::info!(
            "checkpoint {id} complete{}: {} bytes in {:.1} ms, longest task pause {:.2} ms, longest alignment {:.1} ms",
            if is_final { " (final)" } else { "" },
            stats.bytes,
            stats.duration.as_secs_f64() * 1e3,
            stats.longest_pause.as_secs_f64() * 1e3,
            stats.longest_alignment.as_secs_f64() * 1e3
        );
        let job = self.job.clone();
        // Every checkpoint completed, the final one included.
        metrics::counter!("streamwork_checkpoints_total", "job" => job.clone()).increment(1);
        metrics::gauge!("streamwork_last_checkpoint_id", "job" => job.clone()).set(id.get() as f64);
        metrics::gauge!("streamwork_last_checkpoint_duration_seconds", "job" => job.clone())
            .set(stats.duration.as_secs_f64());
        metrics::gauge!("streamwork_last_checkpoint_bytes", "job" => job.clone())
            .set(stats.bytes as f64);
        metrics::gauge!("streamwork_last_checkpoint_pause_seconds", "job" => job.clone())
            .set(stats.longest_pause.as_secs_f64());
        metrics::gauge!("streamwork_last_checkpoint_alignment_seconds", "job" => job)
            .set(stats.longest_alignment.as_secs_f64());
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(stats);
    }
}

/// What the instances measured of one checkpoint, over all its parts.
#[derive(Default)]
struct Timing {
    longest_pause: Duration,
    paused_most: Option<(String, InstanceIdx)>,
    longest_alignment: Duration,
}

impl Timing {
    fn of(parts: &[Part]) -> Self {
        let mut timing = Timing::default();
        for part in parts {
            if part.timing.pause > timing.longest_pause {
                timing.longest_pause = part.timing.pause;
                timing.paused_most = Some((part.component.to_string(), part.instance));
            }
            timing.longest_alignment = timing.longest_alignment.max(part.timing.alignment);
        }
        if timing.longest_pause.is_zero() {
            timing.paused_most = None;
        }
        timing
    }
}
