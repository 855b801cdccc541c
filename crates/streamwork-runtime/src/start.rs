//! Starting one run of a job, step by step: check the delivery it promises
//! against the run's, open its checkpoints (restoring the last complete
//! one), build its tasks, place them on threads, and start the threads, the
//! checkpoint coordinator and the monitor.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use streamwork_core::checkpoint::{CheckpointId, CheckpointView, Delivery, RestoreSource};
use streamwork_state::Mirror;

use crate::acking::Acker;
use crate::builder::JobGraph;
use crate::checkpoint::CheckpointRecord;
use crate::checkpoint::{self, CheckpointConfig, CheckpointLink, Coordinator, Recovery, Signals};
use crate::error::JobError;
use crate::failure::Failure;
use crate::handle::JobHandle;
use crate::metrics::{MONITOR_INTERVAL, Registry};
use crate::options::RunOptions;
use crate::task::{Ended, Flags, Task, TaskCheckpoints, drive};
use crate::wiring::{Shared, TaskBuilder};
use crate::worker::{placement, run_worker};

/// Starts one run of `graph` with `options`.
pub(crate) fn start_graph(graph: &JobGraph, options: RunOptions) -> Result<JobHandle, JobError> {
    let started = Instant::now();
    let failure = Failure::default();
    let stop = Arc::new(AtomicBool::new(false));
    let config = checked_delivery(graph, &options)?;
    let instances: u32 = graph.nodes().iter().map(|n| n.parallelism()).sum();
    match &config {
        Some(config) => tracing::info!(
            "job `{}` starting: {} components, {instances} instances, {:?} checkpoints every {:?} into {}",
            graph.name(),
            graph.nodes().len(),
            config.delivery,
            config.interval,
            config.dir.display()
        ),
        None => tracing::info!(
            "job `{}` starting: {} components, {instances} instances, no checkpoints",
            graph.name(),
            graph.nodes().len()
        ),
    }
    let checkpointing = match &config {
        Some(config) => Some(open_checkpoints(graph, config, &failure, &stop)?),
        None => None,
    };
    let flags = Flags {
        stop: stop.clone(),
        drain: Arc::new(AtomicBool::new(false)),
        failure: failure.clone(),
        checkpoints: checkpointing.as_ref().map(|c| c.tasks.clone()),
    };
    let shared = Shared {
        view: checkpointing.as_ref().map(|c| c.view.clone()),
        link: checkpointing.as_ref().map(|c| c.link.clone()),
        acker: options
            .acking
            .map(|timeout| Arc::new(Acker::new(timeout, failure.abort_flag().clone()))),
        failure: failure.clone(),
    };
    let (groups, registry) = build_tasks(graph, shared)?;
    let registry = Arc::new(registry);
    let threads = spawn_tasks(graph, groups, &flags)?;
    let coordinator = match checkpointing {
        Some(checkpointing) => {
            let record = CheckpointRecord {
                completed: checkpointing.coordinator.stats.clone(),
                recovery: checkpointing.recovery,
                savepoint: checkpointing.coordinator.signals.savepoint.clone(),
                longest_restore: checkpointing.coordinator.signals.longest_restore.clone(),
                input_holds: checkpointing.coordinator.signals.input_holds.clone(),
            };
            let _ = registry.checkpoints.set(record);
            match spawn_coordinator(checkpointing.coordinator, &failure) {
                Ok(handle) => Some(handle),
                Err(error) => {
                    // No checkpoint would ever complete: the job must not run.
                    failure.abort_flag().store(true, Ordering::Relaxed);
                    for thread in threads {
                        let _ = thread.join();
                    }
                    return Err(error);
                }
            }
        }
        None => None,
    };
    let monitor = spawn_monitor(&registry);
    Ok(JobHandle {
        job: graph.name().to_string(),
        registry,
        monitor,
        coordinator,
        threads,
        flags,
        started,
    })
}

/// The run's checkpoints, if it takes any, after checking that the run
/// keeps the delivery the job promises.
fn checked_delivery(
    graph: &JobGraph,
    options: &RunOptions,
) -> Result<Option<CheckpointConfig>, JobError> {
    let config = options
        .checkpoints
        .clone()
        .filter(|c| c.delivery != Delivery::AtMostOnce);
    let declared = graph.config().delivery;
    let by_checkpoints = config.as_ref().map_or(Delivery::AtMostOnce, |c| c.delivery);
    let run = if options.acking.is_some() && by_checkpoints == Delivery::AtMostOnce {
        Delivery::AtLeastOnce
    } else {
        by_checkpoints
    };
    if run < declared {
        return Err(JobError::WeakerDelivery {
            job: graph.name().to_string(),
            declared,
            run,
        });
    }
    // A run that takes checkpoints promises what they deliver, declared or
    // not: every component must be able to keep it, or the run does not
    // start.
    if let Some((component, problem)) = graph.delivery_problem(by_checkpoints) {
        return Err(JobError::CannotKeepDelivery {
            component: component.to_string(),
            delivery: by_checkpoints,
            problem,
        });
    }
    Ok(config)
}

/// What a checkpointed run shares between its coordinator and its tasks.
struct Checkpointing {
    coordinator: Coordinator,
    tasks: TaskCheckpoints,
    view: CheckpointView,
    link: CheckpointLink,
    recovery: Recovery,
}

/// Loads the checkpoint to restore from (if asked and there is one) and
/// opens the log for the coordinator.
fn open_checkpoints(
    graph: &JobGraph,
    config: &CheckpointConfig,
    failure: &Failure,
    stop: &Arc<AtomicBool>,
) -> Result<Checkpointing, JobError> {
    let mirror = config.store.clone().map(Mirror::new);
    if let (true, Some(mirror)) = (config.restore, &mirror) {
        // The store is the truth: the directory becomes its copy.
        if mirror.fetch(&config.dir)? {
            tracing::info!(
                "checkpoint directory {} brought up to date from {:?}",
                config.dir.display(),
                mirror.store()
            );
        }
    }
    let (restored, recovery) = if config.restore {
        checkpoint::load(&config.dir)?
    } else {
        (None, Recovery::default())
    };
    if let Some(restored) = &restored {
        // A changed job: components are matched by name; one that kept
        // state and is gone is refused unless its state may be dropped.
        let names: Vec<&str> = graph.nodes().iter().map(|n| n.name()).collect();
        let removed = restored.removed_components(&names);
        if !removed.is_empty() && !config.drop_removed_state {
            return Err(JobError::RemovedComponentState {
                checkpoint: restored.checkpoint(),
                components: removed,
            });
        }
    }
    let mut source: Option<Arc<dyn RestoreSource>> =
        restored.map(|r| Arc::new(r) as Arc<dyn RestoreSource>);
    if let (None, Some(rescaled)) = (&source, &config.rescaled) {
        // The first run of a stage partition at a new partition count: the
        // old partitions' checkpoints, merged.
        let mut checkpoints = Vec::with_capacity(rescaled.dirs.len());
        for dir in &rescaled.dirs {
            checkpoints.push(match streamwork_state::load_latest(dir) {
                Ok(checkpoint) => Some(checkpoint),
                Err(streamwork_state::StateError::NoCheckpoint { .. }) => None,
                Err(error) => return Err(error.into()),
            });
        }
        let merged = checkpoint::Merged::new(checkpoints, rescaled.fresh.clone());
        tracing::info!(
            "{}: no checkpoint of its own yet; restoring from the {} partitions it was rescaled from (newest checkpoint {})",
            config.dir.display(),
            rescaled.dirs.len(),
            merged.checkpoint()
        );
        source = Some(Arc::new(merged));
    }
    let completed = source
        .as_ref()
        .map_or(CheckpointId::NONE, |r| r.checkpoint());
    let mut log = Coordinator::open(config)?;
    // Ids follow those of what it restores from.
    log.skip_ids_past(completed);
    let signals = Signals::new(completed);
    let (parts_tx, parts_rx) = crossbeam_channel::unbounded();
    let view = CheckpointView::new(signals.completed.clone(), source)
        .with_failure(failure.abort_flag().clone())
        .with_early_requests(signals.early.clone())
        .with_input_holds(signals.input_holds.clone());
    let link = CheckpointLink::new(parts_tx, &signals);
    let tasks = TaskCheckpoints {
        signals: signals.clone(),
        align: config.delivery == Delivery::ExactlyOnce,
    };
    let coordinator = Coordinator {
        log,
        parts: parts_rx,
        expected: graph.nodes().iter().map(|n| n.parallelism() as usize).sum(),
        interval: config.interval,
        signals,
        abort: failure.abort_flag().clone(),
        stop: stop.clone(),
        suspending: failure.suspending_flag().clone(),
        stats: Arc::new(Mutex::new(Vec::new())),
        components: graph.nodes().iter().map(|n| n.name_arc()).collect(),
        job: graph.name().to_string(),
        mirror,
    };
    if let Some(id) = recovery.restored_from {
        let job = graph.name().to_string();
        metrics::gauge!("streamwork_restored_checkpoint_id", "job" => job.clone())
            .set(id.get() as f64);
        metrics::gauge!("streamwork_restore_load_seconds", "job" => job)
            .set(recovery.load.as_secs_f64());
    }
    Ok(Checkpointing {
        coordinator,
        tasks,
        view,
        link,
        recovery,
    })
}

/// The tasks of one thread, and the thread's name.
type ThreadTasks = (String, Vec<Task>);

/// Builds every task and groups them by thread: one thread per task, or
/// the job's workers, each with its tasks.
fn build_tasks(graph: &JobGraph, shared: Shared) -> Result<(Vec<ThreadTasks>, Registry), JobError> {
    let failure = shared.failure.clone();
    let mut builder = TaskBuilder::new(graph, shared);
    let roots = builder.roots();
    let blocking = builder.blocking_roots();
    let mut tasks = Vec::with_capacity(roots.len());
    for &(node, instance) in &roots {
        // Building a task clones user values (a `Clone` impl may panic).
        match catch_unwind(AssertUnwindSafe(|| builder.task(node, instance))) {
            Ok(task) => tasks.push(task),
            Err(payload) => {
                failure.panic(graph.nodes()[node].name(), instance, payload);
                return Err(failure
                    .take()
                    .unwrap_or_else(|| unreachable!("a failure was just recorded")));
            }
        }
    }
    builder.release_senders();
    let registry = builder.registry();
    let groups = match graph.config().workers {
        None => tasks
            .into_iter()
            .map(|task| (format!("{}#{}", task.component, task.instance), vec![task]))
            .collect(),
        Some(workers) => {
            let workers = workers.max(1);
            let mut groups: Vec<ThreadTasks> = (0..workers)
                .map(|w| (format!("worker#{w}"), Vec::new()))
                .collect();
            // A task that may wait for something outside the job runs as
            // a worker of its own; the others are placed on the workers.
            let (alone, shared): (Vec<_>, Vec<_>) = tasks
                .into_iter()
                .zip(&roots)
                .partition(|(_, (node, _))| blocking.contains(node));
            let shared_roots: Vec<_> = shared.iter().map(|(_, root)| **root).collect();
            let places = placement(
                &shared_roots,
                |node| graph.nodes()[node].parallelism(),
                workers,
            );
            for ((task, _), worker) in shared.into_iter().zip(places) {
                groups[worker].1.push(task);
            }
            groups.retain(|(_, tasks)| !tasks.is_empty());
            for (task, _) in alone {
                groups.push((format!("{}#{}", task.component, task.instance), vec![task]));
            }
            groups
        }
    };
    Ok((groups, registry))
}

/// Starts a thread per group: a task driven to its end, or a worker.
fn spawn_tasks(
    graph: &JobGraph,
    groups: Vec<ThreadTasks>,
    flags: &Flags,
) -> Result<Vec<JoinHandle<Ended>>, JobError> {
    let on_workers = graph.config().workers.is_some();
    let mut threads = Vec::with_capacity(groups.len());
    for (name, mut tasks) in groups {
        let component = match tasks.as_slice() {
            [task] => task.component.to_string(),
            _ => name.clone(),
        };
        let thread_flags = flags.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            if on_workers {
                run_worker(tasks, &thread_flags)
            } else {
                match tasks.pop() {
                    Some(task) => drive(task, &thread_flags),
                    None => Ended::Completed,
                }
            }
        });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(source) => {
                flags.failure.abort_flag().store(true, Ordering::Relaxed);
                for handle in threads {
                    let _ = handle.join();
                }
                return Err(JobError::Spawn {
                    component,
                    error: source,
                });
            }
        }
    }
    Ok(threads)
}

/// Starts the checkpoint coordinator: its failure is the job's.
fn spawn_coordinator(
    coordinator: Coordinator,
    failure: &Failure,
) -> Result<JoinHandle<()>, JobError> {
    let failure = failure.clone();
    std::thread::Builder::new()
        .name("streamwork-checkpoints".into())
        .spawn(move || {
            // It archives state with the operators' own types: a panic
            // there (or in the engine) fails the job rather than leaving
            // it waiting for checkpoints that never come.
            match catch_unwind(AssertUnwindSafe(|| coordinator.run())) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure.record(JobError::Checkpoint(e));
                }
                Err(panic) => {
                    failure.panic(
                        "the checkpoint coordinator",
                        streamwork_core::InstanceIdx(0),
                        panic,
                    );
                }
            }
        })
        .map_err(|source| JobError::Spawn {
            component: "the checkpoint coordinator".to_string(),
            error: source,
        })
}

/// Starts the monitor, which looks at the job every [`MONITOR_INTERVAL`].
/// Without it the job runs unmeasured: it does not fail for that.
fn spawn_monitor(registry: &Arc<Registry>) -> Option<JoinHandle<()>> {
    let registry = registry.clone();
    let spawned = std::thread::Builder::new()
        .name("streamwork-monitor".into())
        .spawn(move || {
            while !registry.stop.load(Ordering::Relaxed) {
                std::thread::park_timeout(MONITOR_INTERVAL);
                registry.observe();
            }
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(error) => {
            tracing::warn!("the job's monitor could not start ({error}): it runs unmeasured");
            None
        }
    }
}
