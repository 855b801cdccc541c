//! Starting a job, stopping it, waiting for it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use streamwork_core::acking::Acker;
use streamwork_core::checkpoint::{CheckpointHooks, RestoreSource};
use streamwork_core::exec::{FusedFailure, current_component};
use streamwork_core::{JobGraph, TaskError};

use crate::checkpoint::{self, CheckpointConfig, CheckpointStats, Coordinator, Delivery, Signals};
use crate::error::JobError;
use crate::metrics::{MONITOR_INTERVAL, Registry};
use crate::report::{ComponentReport, InstanceReport, JobReport};
use crate::task::{Ended, Flags, TaskCheckpoints, run_input, run_source};
use crate::wiring::{Builder, Task, TaskBody};
use crate::worker::{placement, run_worker};

/// Runs `graph` to completion on this machine's threads: until every source
/// has ended and everything has drained, or until a failure.
pub fn run(graph: JobGraph) -> Result<JobReport, JobError> {
    start(graph)?.join()
}

/// Starts `graph` and returns at once with a handle to stop it or wait for it.
pub fn start(graph: JobGraph) -> Result<JobHandle, JobError> {
    start_with(graph, RunOptions::default())
}

/// How to run a job beyond its graph.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Take checkpoints (and restore from them): at-least-once or
    /// exactly-once delivery. `None`: at-most-once.
    pub checkpoints: Option<CheckpointConfig>,
    /// What [`run_with`] does when the job fails: restart it from its last
    /// complete checkpoint, or give up.
    pub restart: RestartStrategy,
    /// At-least-once by acking (chapter 5), with this tree timeout: every
    /// source record's tree of derived events is tracked, and a record whose
    /// tree is not complete within the timeout (dropped by a full edge, say)
    /// is replayed. Independent of checkpoints.
    pub acking: Option<Duration>,
}

impl RunOptions {
    /// Options for at-least-once by acking, replaying a record whose tree
    /// is not complete within `timeout`.
    pub fn acking(timeout: Duration) -> Self {
        RunOptions {
            acking: Some(timeout),
            ..RunOptions::default()
        }
    }
}

/// When a failed job is started again from its last complete checkpoint
/// (chapter 10). A restart needs checkpoints to resume from; without them a
/// job restarts from the beginning of its input.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum RestartStrategy {
    /// Fail at the first failure (the default).
    #[default]
    Never,
    /// Up to `attempts` restarts, `delay` apart.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each.
        delay: Duration,
    },
    /// Up to `attempts` restarts, waiting `initial`, then twice as long each
    /// time, at most `max`.
    ExponentialBackoff {
        /// Restarts allowed.
        attempts: u32,
        /// The first wait.
        initial: Duration,
        /// The longest wait.
        max: Duration,
    },
}

impl RestartStrategy {
    /// The wait before restart number `attempt` (from 1), or `None` once
    /// the attempts are used up.
    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        match *self {
            RestartStrategy::Never => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (attempt <= attempts).then_some(delay)
            }
            RestartStrategy::ExponentialBackoff {
                attempts,
                initial,
                max,
            } => (attempt <= attempts).then(|| {
                let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(31));
                initial.saturating_mul(factor).min(max)
            }),
        }
    }
}

/// Runs `graph` with `options` to completion, restarting it from its last
/// complete checkpoint after a failure as `options.restart` allows. The
/// report is that of the last run, with `restarts` counting the others.
pub fn run_with(graph: JobGraph, options: RunOptions) -> Result<JobReport, JobError> {
    let mut attempt = 0;
    loop {
        let outcome = start_graph(&graph, options.clone()).and_then(JobHandle::join);
        match outcome {
            Ok(mut report) => {
                report.restarts = attempt;
                return Ok(report);
            }
            // Bad configuration or a broken checkpoint log does not heal.
            Err(
                error @ (JobError::Graph(_)
                | JobError::WeakerDelivery { .. }
                | JobError::Checkpoint(_)),
            ) => {
                return Err(error);
            }
            Err(error) => {
                attempt += 1;
                let Some(delay) = options.restart.delay(attempt) else {
                    return Err(error);
                };
                tracing::warn!(
                    "job `{}` failed ({error}); restart {attempt} from its last complete checkpoint in {delay:?}",
                    graph.name()
                );
                std::thread::sleep(delay);
            }
        }
    }
}

/// Starts `graph` with `options`.
pub fn start_with(graph: JobGraph, options: RunOptions) -> Result<JobHandle, JobError> {
    start_graph(&graph, options)
}

fn start_graph(graph: &JobGraph, options: RunOptions) -> Result<JobHandle, JobError> {
    let started = Instant::now();
    let abort = Arc::new(AtomicBool::new(false));
    let failure = Arc::new(Mutex::new(None::<JobError>));
    let config = options
        .checkpoints
        .filter(|c| c.delivery != Delivery::AtMostOnce);
    let declared = graph.config().delivery;
    let by_checkpoints = config.as_ref().map_or(Delivery::AtMostOnce, |c| c.delivery);
    let run = if options.acking.is_some() && by_checkpoints == Delivery::AtMostOnce {
        Delivery::AtLeastOnce
    } else {
        by_checkpoints
    };
    let rank = |d: Delivery| match d {
        Delivery::AtMostOnce => 0,
        Delivery::AtLeastOnce => 1,
        Delivery::ExactlyOnce => 2,
    };
    if rank(run) < rank(declared) {
        return Err(JobError::WeakerDelivery {
            job: graph.name().to_string(),
            declared,
            run,
        });
    }
    let mut coordinator = None;
    let mut task_checkpoints = None;
    let mut hooks = None;
    if let Some(config) = &config {
        let restored = if config.restore {
            checkpoint::load(&config.dir)?
        } else {
            None
        };
        let completed = restored.as_ref().map_or(0, |r| r.checkpoint());
        let log = Coordinator::open(config)?;
        let signals = Signals::new(completed);
        let (tx, rx) = crossbeam_channel::unbounded();
        hooks = Some(CheckpointHooks::new(
            move |part| {
                let _ = tx.send(part);
            },
            signals.completed.clone(),
            signals.final_completed.clone(),
            abort.clone(),
            restored.map(|r| Arc::new(r) as Arc<dyn RestoreSource>),
        ));
        task_checkpoints = Some(TaskCheckpoints {
            trigger: signals.trigger.clone(),
            source_ended: signals.source_ended.clone(),
            align: config.delivery == Delivery::ExactlyOnce,
        });
        coordinator = Some(Coordinator {
            log,
            parts: rx,
            expected: graph.nodes().iter().map(|n| n.parallelism() as usize).sum(),
            interval: config.interval,
            signals,
            abort: abort.clone(),
            stats: Arc::new(Mutex::new(Vec::new())),
        });
    }
    let flags = Flags {
        stop: Arc::new(AtomicBool::new(false)),
        abort,
        checkpoints: task_checkpoints,
    };
    let mut builder = Builder::new(graph, flags.abort.clone());
    builder.checkpoints = hooks;
    builder.acker = options
        .acking
        .map(|timeout| Arc::new(Acker::new(timeout, flags.abort.clone())));
    let roots = builder.roots();
    let mut tasks = Vec::with_capacity(roots.len());
    for &(node, instance) in &roots {
        let built = catch_unwind(AssertUnwindSafe(|| builder.task(node, instance)));
        match built {
            Ok(task) => tasks.push(task),
            Err(payload) => return Err(panic_error(graph, node, instance, payload)),
        }
    }
    builder.release_senders();

    let registry = Arc::new(builder.registry());
    // One thread per task, or per worker, each with a list of tasks.
    let groups: Vec<(String, Vec<Task>)> = match graph.config().workers {
        None => tasks
            .into_iter()
            .map(|task| (format!("{}#{}", task.component, task.instance), vec![task]))
            .collect(),
        Some(workers) => {
            let workers = workers.max(1);
            let mut groups: Vec<(String, Vec<Task>)> = (0..workers)
                .map(|w| (format!("worker#{w}"), Vec::new()))
                .collect();
            let places = placement(&roots, |node| graph.nodes()[node].parallelism(), workers);
            for (task, worker) in tasks.into_iter().zip(places) {
                groups[worker].1.push(task);
            }
            groups.retain(|(_, tasks)| !tasks.is_empty());
            groups
        }
    };
    let on_workers = graph.config().workers.is_some();
    let mut threads = Vec::with_capacity(groups.len());
    for (name, mut tasks) in groups {
        let component = match tasks.as_slice() {
            [task] => task.component.to_string(),
            _ => name.clone(),
        };
        let thread_flags = flags.clone();
        let thread_failure = failure.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            if on_workers {
                run_worker(tasks, &thread_flags, &thread_failure)
            } else {
                let task = tasks
                    .pop()
                    .unwrap_or_else(|| unreachable!("one task per thread"));
                drive(task, &thread_flags, &thread_failure)
            }
        });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(source) => {
                flags.abort.store(true, Ordering::Relaxed);
                for handle in threads {
                    let _ = handle.join();
                }
                return Err(JobError::Spawn { component, source });
            }
        }
    }
    drop(builder);
    let checkpoint_stats = coordinator.as_ref().map(|c| c.stats.clone());
    let coordinator = coordinator.and_then(|coordinator| {
        let failure = failure.clone();
        let abort = flags.abort.clone();
        std::thread::Builder::new()
            .name("streamwork-checkpoints".into())
            .spawn(move || {
                if let Err(e) = coordinator.run() {
                    record_failure(&failure, JobError::Checkpoint(e));
                    abort.store(true, Ordering::Relaxed);
                }
            })
            .ok()
    });
    let monitor = {
        let registry = registry.clone();
        std::thread::Builder::new()
            .name("streamwork-monitor".into())
            .spawn(move || {
                while !registry.stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(MONITOR_INTERVAL);
                    registry.observe();
                }
            })
            .ok()
    };
    Ok(JobHandle {
        job: graph.name().to_string(),
        registry,
        monitor,
        coordinator,
        checkpoint_stats,
        threads,
        flags,
        failure,
        started,
    })
}

/// Runs one task on its thread, recording a failure and aborting the job.
fn drive(mut task: Task, flags: &Flags, failure: &Mutex<Option<JobError>>) -> Ended {
    let times = task.times.clone();
    let result = catch_unwind(AssertUnwindSafe(|| match &mut task.body {
        TaskBody::Source { task, pauses } => run_source(task.as_mut(), pauses, &times, flags),
        TaskBody::Input { task, ports, pause } => {
            run_input(task.as_mut(), ports, pause.clone(), &times, flags)
        }
    }));
    match result {
        Ok(Ok(ended)) => ended,
        Ok(Err(source)) => task_failed(task, Ok(source), flags, failure),
        Err(payload) => task_failed(task, Err(payload), flags, failure),
    }
}

/// Records the failure of `task` (its error, or the payload of its panic),
/// aborts the job, and drops the task, which closes its channels and wakes
/// its neighbours.
pub(crate) fn task_failed(
    task: Task,
    error: Result<TaskError, Box<dyn std::any::Any + Send>>,
    flags: &Flags,
    failure: &Mutex<Option<JobError>>,
) -> Ended {
    let error = match error {
        Ok(source) => JobError::Failed {
            component: task.component.to_string(),
            instance: task.instance,
            source,
        },
        Err(payload) => {
            let (component, instance) = current_component()
                .map(|(c, i)| (c.to_string(), i))
                .unwrap_or_else(|| (task.component.to_string(), task.instance));
            payload_error(component, instance, payload)
        }
    };
    record_failure(failure, error);
    flags.abort.store(true, Ordering::Relaxed);
    drop(task);
    Ended::Aborted
}

/// Keeps the first failure that is not a mere consequence of another.
fn record_failure(failure: &Mutex<Option<JobError>>, error: JobError) {
    let mut slot = failure
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let replace = match &*slot {
        None => true,
        Some(existing) => existing.is_cascade() && !error.is_cascade(),
    };
    if replace {
        *slot = Some(error);
    }
}

fn payload_error(
    component: String,
    instance: u32,
    payload: Box<dyn std::any::Any + Send>,
) -> JobError {
    let payload = match payload.downcast::<FusedFailure>() {
        Ok(fused) => {
            return JobError::Failed {
                component: fused.component,
                instance: fused.instance,
                source: TaskError::Connector(streamwork_core::ConnectorError {
                    domain: streamwork_core::ErrorDomain::External,
                    message: fused.message,
                    source: None,
                }),
            };
        }
        Err(payload) => payload,
    };
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    };
    JobError::Panicked {
        component,
        instance,
        message,
    }
}

fn panic_error(
    graph: &JobGraph,
    node: usize,
    instance: u32,
    payload: Box<dyn std::any::Any + Send>,
) -> JobError {
    let (component, instance) = current_component()
        .map(|(c, i)| (c.to_string(), i))
        .unwrap_or_else(|| (graph.nodes()[node].name().to_string(), instance));
    payload_error(component, instance, payload)
}

/// A running job.
pub struct JobHandle {
    job: String,
    registry: Arc<Registry>,
    monitor: Option<JoinHandle<()>>,
    coordinator: Option<JoinHandle<()>>,
    checkpoint_stats: Option<Arc<Mutex<Vec<CheckpointStats>>>>,
    threads: Vec<JoinHandle<Ended>>,
    flags: Flags,
    failure: Arc<Mutex<Option<JobError>>>,
    started: Instant,
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
        JobReport {
            job: self.job.clone(),
            elapsed: self.started.elapsed(),
            stopped: self.stop.load(Ordering::Relaxed),
            components,
            bottleneck: monitor.bottleneck,
            thrashing: monitor.thrashing,
            source_pauses: registry.pause_flags.iter().map(|(_, f)| f.episodes()).sum(),
            checkpoints: Vec::new(),
            restarts: 0,
        }
    }
}

/// Stops a running job gracefully from anywhere: sources end their streams,
/// and everything in flight drains to the sinks.
#[derive(Clone, Debug)]
pub struct StopHandle {
    stop: Arc<AtomicBool>,
}

impl StopHandle {
    /// Asks the job to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn ctrl_c_registry() -> &'static Mutex<Vec<Weak<AtomicBool>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Weak<AtomicBool>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

impl JobHandle {
    /// A handle that stops this job gracefully.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            stop: self.flags.stop.clone(),
        }
    }

    /// Asks the job to stop gracefully; [`join`](Self::join) then returns once drained.
    pub fn stop(&self) {
        self.flags.stop.store(true, Ordering::Relaxed);
    }

    /// Stops this job gracefully on Ctrl-C (SIGINT/SIGTERM). A second Ctrl-C
    /// while draining exits the process with status 130.
    pub fn stop_on_ctrl_c(&self) -> Result<(), JobError> {
        static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
        let installed = INSTALLED.get_or_init(|| {
            ctrlc::set_handler(|| {
                let flags = ctrl_c_registry()
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let mut any_set = false;
                for flag in flags.iter().filter_map(Weak::upgrade) {
                    any_set |= flag.swap(true, Ordering::Relaxed);
                }
                if any_set {
                    std::process::exit(130);
                }
                eprintln!("streamwork: stopping (Ctrl-C again to exit at once)");
            })
            .map_err(|e| e.to_string())
        });
        installed.clone().map_err(JobError::CtrlC)?;
        ctrl_c_registry()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Arc::downgrade(&self.flags.stop));
        Ok(())
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
                // `drive` catches every panic; a thread can only die here if
                // reporting itself panicked. Make sure the job does not pass.
                self.flags.abort.store(true, Ordering::Relaxed);
            }
        }
        if let Some(coordinator) = self.coordinator.take() {
            // Every task has ended: the coordinator has completed the final
            // checkpoint, or sees the job aborted, or loses its last reporter.
            let _ = coordinator.join();
        }
        self.stop_monitor();
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(error) = failure {
            return Err(error);
        }
        if self.flags.abort.load(Ordering::Relaxed) {
            return Err(JobError::Failed {
                component: self.job.clone(),
                instance: 0,
                source: TaskError::UpstreamFailed,
            });
        }
        let mut report = self.snapshot();
        if let Some(stats) = &self.checkpoint_stats {
            report.checkpoints = stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
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

    /// The job's plan-independent measurements, for the web view and exporters.
    pub fn prometheus(&self) -> String {
        crate::report::prometheus(&self.snapshot())
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
