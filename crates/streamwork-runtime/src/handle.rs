//! A running job: stop it, watch it, wait for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use streamwork_core::{CheckpointId, InstanceIdx, TaskError};

use crate::checkpoint::CheckpointRecord;
use crate::error::JobError;
use crate::failure::Failure;
use crate::metrics::Registry;
use crate::report::{ComponentReport, InstanceReport, JobReport};
use crate::task::{Ended, Flags};

/// A running job.
pub struct JobHandle {
    pub(crate) job: String,
    pub(crate) registry: Arc<Registry>,
    pub(crate) monitor: Option<JoinHandle<()>>,
    pub(crate) coordinator: Option<JoinHandle<()>>,
    pub(crate) threads: Vec<JoinHandle<Ended>>,
    pub(crate) flags: Flags,
    pub(crate) started: Instant,
}

impl JobHandle {
    /// The flag a graceful stop raises (for Ctrl-C).
    pub(crate) fn stop_flag(&self) -> &Arc<AtomicBool> {
        &self.flags.stop
    }
}

/// Reads a job's live measurements from any thread.
#[derive(Clone)]
pub struct LiveMetrics {
    job: String,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
    started: Instant,
}

impl LiveMetrics {
    /// How many times the monitor has looked at the job (every 250 ms while
    /// it runs): a version number for the capacity measurements.
    pub fn looks(&self) -> u64 {
        self.registry
            .monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .looks
    }

    /// Waits until the monitor has looked more than `after` times (or the
    /// job has ended, or `timeout` has passed) and returns the number of
    /// looks: a long poll, so a reader sees every new measurement once.
    pub fn wait_for_look(&self, after: u64, timeout: Duration) -> u64 {
        self.registry.wait_for_look(after, timeout)
    }

    /// The counts and measurements so far.
    pub fn snapshot(&self) -> JobReport {
        let registry = &self.registry;
        let monitor = registry
            .monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let components = registry
            .components
            .iter()
            .enumerate()
            .map(|(c, info)| ComponentReport {
                name: info.name.clone(),
                kind: info.kind,
                instances: info
                    .counters
                    .iter()
                    .map(|counters| InstanceReport {
                        records_in: counters.records_in(),
                        records_out: counters.records_out(),
                    })
                    .collect(),
                capacity: monitor.capacity.get(c).cloned().unwrap_or_default(),
                dropped_in: registry
                    .edges
                    .iter()
                    .filter(|(_, to, _)| *to == c)
                    .map(|(_, _, d)| d.load(Ordering::Relaxed))
                    .sum(),
            })
            .collect();
        let (checkpoints, recovery) = registry
            .checkpoints
            .get()
            .map(CheckpointRecord::read)
            .unwrap_or_default();
        JobReport {
            job: self.job.clone(),
            elapsed: self.started.elapsed(),
            stopped: self.stop.load(Ordering::Relaxed),
            components,
            bottleneck: monitor.bottleneck,
            thrashing: monitor.thrashing,
            source_pauses: registry.pause_flags.iter().map(|(_, f)| f.episodes()).sum(),
            input_holds: registry
                .checkpoints
                .get()
                .map_or(0, |record| record.input_holds.taken()),
            checkpoints,
            recovery,
            savepoint: None,
            restarts: 0,
        }
    }
}

/// Stops a running job from anywhere: see [`JobHandle::stop`] and
/// [`JobHandle::drain`].
#[derive(Clone, Debug)]
pub struct StopHandle {
    job: String,
    stop: Arc<AtomicBool>,
    drain: Arc<AtomicBool>,
    failure: Failure,
}

impl StopHandle {
    /// Ends the job now, without a checkpoint: every task stops where it
    /// is, the sinks commit nothing more (a checkpoint being completed at
    /// that moment may still be), and [`JobHandle::join`] returns
    /// [`JobError::Aborted`] with `reason`. For a process that must not
    /// write anything more for this job, such as one that lost a
    /// partition's lease to another process; a run restored from the last
    /// complete checkpoint carries on.
    pub fn abort(&self, reason: impl Into<String>) {
        self.failure.record(JobError::Aborted {
            job: self.job.clone(),
            reason: reason.into(),
        });
    }

    /// Asks the job to stop at a savepoint (see [`JobHandle::stop`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Asks the job to drain (see [`JobHandle::drain`]).
    pub fn drain(&self) {
        self.drain.store(true, Ordering::Relaxed);
    }
}

impl JobHandle {
    /// A handle that stops this job from anywhere.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            job: self.job.clone(),
            stop: self.flags.stop.clone(),
            drain: self.flags.drain.clone(),
            failure: self.flags.failure.clone(),
        }
    }

    /// Asks the job to stop; [`join`](Self::join) returns once it has.
    ///
    /// A job that takes checkpoints stops at a **savepoint**, without
    /// draining: a checkpoint is taken at once (or the one in flight is
    /// used), the sources read nothing after it, and once it is complete
    /// and the sinks have committed it every task stops where it is. Open
    /// windows stay open and event time does not jump to its end: the next
    /// run on the same checkpoint directory resumes from the savepoint as
    /// if the job had never stopped ([`JobReport::savepoint`] names it).
    /// Ctrl-C does the same. A job without checkpoints has nothing to
    /// resume from, and drains.
    pub fn stop(&self) {
        self.flags.stop.store(true, Ordering::Relaxed);
    }

    /// Asks the job to drain: the sources end their input now, and the job
    /// ends as at the end of its input (every window fires, the final
    /// checkpoint is taken). A run restored from that final checkpoint
    /// starts at the sources' positions with event time at its end.
    pub fn drain(&self) {
        self.flags.drain.store(true, Ordering::Relaxed);
    }

    /// The counts and measurements so far, while the job runs (capacity,
    /// bottleneck and thrashing as of the monitor's last look, every 250 ms).
    pub fn snapshot(&self) -> JobReport {
        self.live_metrics().snapshot()
    }

    /// A cheap, shareable reader of this job's live measurements (for a web
    /// view or an exporter thread); it stays valid after the job ends.
    pub fn live_metrics(&self) -> LiveMetrics {
        LiveMetrics {
            job: self.job.clone(),
            registry: self.registry.clone(),
            stop: self.flags.stop.clone(),
            started: self.started,
        }
    }

    /// Whether every task has ended.
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Waits for the job to end: its report, or the failure that ended it.
    pub fn join(mut self) -> Result<JobReport, JobError> {
        for thread in std::mem::take(&mut self.threads) {
            if thread.join().is_err() {
                // Task threads catch every panic; a thread can only die here
                // if recording the failure panicked. The job must not pass.
                self.flags
                    .failure
                    .abort_flag()
                    .store(true, Ordering::Relaxed);
            }
        }
        if let Some(coordinator) = self.coordinator.take() {
            // Every task has ended: the coordinator has completed the final
            // checkpoint, or sees the job aborted, or loses its last reporter.
            let _ = coordinator.join();
        }
        self.stop_monitor();
        if let Some(error) = self.flags.failure.take() {
            return Err(error);
        }
        if self.flags.failure.aborted() {
            return Err(JobError::Failed {
                component: self.job.clone(),
                instance: InstanceIdx(0),
                error: TaskError::UpstreamFailed,
            });
        }
        let mut report = self.snapshot();
        if let Some(record) = self.registry.checkpoints.get()
            && self.flags.failure.suspending()
        {
            report.savepoint = Some(CheckpointId::new(record.savepoint.load(Ordering::Acquire)));
        }
        match report.savepoint {
            Some(id) => tracing::info!(
                "job `{}` stopped at savepoint {id} after {:.3} s: the next run on the same directory resumes from it",
                report.job,
                report.elapsed.as_secs_f64()
            ),
            None => tracing::info!(
                "job `{}` {} in {:.3} s",
                report.job,
                if report.stopped {
                    "stopped"
                } else {
                    "finished"
                },
                report.elapsed.as_secs_f64()
            ),
        }
        Ok(report)
    }
}

impl JobHandle {
    /// Takes a last look (so that the report's capacity covers the end of the
    /// run) and stops the monitor.
    fn stop_monitor(&mut self) {
        self.registry.stop.store(true, Ordering::Relaxed);
        if let Some(monitor) = self.monitor.take() {
            monitor.thread().unpark();
            let _ = monitor.join();
        }
    }
}

impl Drop for JobHandle {
    /// Dropping a handle without joining stops the job and waits for it, so
    /// that no task outlives its handle.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.flags.stop.store(true, Ordering::Relaxed);
            for thread in std::mem::take(&mut self.threads) {
                let _ = thread.join();
            }
        }
        self.stop_monitor();
    }
}
