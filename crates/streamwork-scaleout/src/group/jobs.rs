//! The jobs of the partitions this process owns: started and stopped
//! as partitions are assigned and revoked, each under its lease, and
//! their positions committed to the group.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use streamwork_connectors::kafka::{BusySpan, SourceProgress};
use streamwork_runtime::{
    CheckpointConfig, RescaledFrom, RestartStrategy, RunOptions, StopHandle, start_with,
};

use crate::error::GroupError;
use crate::leased::{LeasePlace, Leased};

use super::report::TaskRun;
use super::runner::GroupRunner;
use super::task::{Build, PartitionTask, Routing};

/// A partition's job, running on its own thread.
pub(super) struct Running {
    pub(super) stopped: Arc<AtomicBool>,
    pub(super) stop: Arc<Mutex<Option<StopHandle>>>,
    pub(super) thread: JoinHandle<Result<(), GroupError>>,
    /// The progress of each topic it reads.
    pub(super) reads: Vec<(String, Arc<SourceProgress>)>,
    /// Its run, for the report.
    pub(super) run: TaskRun,
}

/// `run`, of a job that read `reads`, ended now.
pub(super) fn run_ended(
    run: &TaskRun,
    reads: &[(String, Arc<SourceProgress>)],
    stop_asked: Option<SystemTime>,
) -> TaskRun {
    {
        let now = (SystemTime::now(), Instant::now());
        let first = reads
            .iter()
            .filter_map(|(_, p)| p.busy().first())
            .min()
            .map(|first| now.0 - now.1.duration_since(first));
        TaskRun {
            first_record: first,
            stop_asked,
            stopped: Some(now.0),
            ..run.clone()
        }
    }
}

/// What the coordinator consumer's callbacks and the runner share.
pub(super) struct Shared {
    pub(super) runner: GroupRunner,
    pub(super) routing: Routing,
    pub(super) build: Build,
    pub(super) tasks: Mutex<BTreeMap<(String, i32), Running>>,
    pub(super) failure: Mutex<Option<GroupError>>,
    pub(super) rebalances: AtomicU64,
    pub(super) started: AtomicU64,
    pub(super) records_of_ended: AtomicU64,
    /// When the ended jobs first and last read.
    pub(super) busy: Mutex<BusySpan>,
    /// This process's name in partition leases.
    pub(super) member: String,
    /// Set once the runner leaves the group: an assignment that arrives
    /// while the consumer closes starts no job.
    pub(super) leaving: AtomicBool,
    /// The runs of the jobs that ended.
    pub(super) runs: Mutex<Vec<TaskRun>>,
}

/// Where each task's reading of each topic is, by task.
pub(super) type Positions = Vec<((String, i32), Vec<(String, BTreeMap<i32, i64>)>)>;

impl Shared {
    pub(super) fn take_failure(&self) -> Option<GroupError> {
        if let Some(failure) = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Some(failure);
        }
        // A job thread that ended on its own failed (a partition job only
        // ends when stopped).
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let ended: Vec<(String, i32)> = tasks
            .iter()
            .filter(|(_, r)| r.thread.is_finished())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in ended {
            if let Some(running) = tasks.remove(&tp) {
                self.account(&running.reads);
                self.runs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(run_ended(&running.run, &running.reads, None));
                match running.thread.join() {
                    Ok(Err(error)) => return Some(error),
                    Ok(Ok(())) => {}
                    Err(_) => {
                        return Some(GroupError::JobThread {
                            topic: tp.0.clone(),
                            partition: tp.1,
                        });
                    }
                }
            }
        }
        None
    }

    /// Adds an ended job's reading to the process's.
    pub(super) fn account(&self, reads: &[(String, Arc<SourceProgress>)]) {
        for (_, progress) in reads {
            self.records_of_ended
                .fetch_add(progress.records(), Ordering::Relaxed);
            let busy = progress.busy();
            self.busy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .merge(busy);
        }
    }

    /// Records read by the running jobs and the ended ones.
    pub(super) fn records(&self) -> u64 {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        self.records_of_ended.load(Ordering::Relaxed)
            + tasks
                .values()
                .flat_map(|r| &r.reads)
                .map(|(_, p)| p.records())
                .sum::<u64>()
    }

    /// The positions of the running jobs' last snapshots.
    pub(super) fn positions(&self) -> Positions {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks
            .iter()
            .map(|(tp, r)| (tp.clone(), committed(&r.reads)))
            .collect()
    }

    /// Starts the job of one partition.
    pub(super) fn start(&self, topic: &str, partition: i32) {
        let (stage, task_name, topics) = self.routing.task_of(topic);
        let path = self.routing.path(stage, &task_name, partition);
        let rescaled = self.routing.rescaled(stage);
        let reads: Vec<(String, Arc<SourceProgress>)> = topics
            .into_iter()
            .map(|t| (t, Arc::new(SourceProgress::default())))
            .collect();
        let progress = reads
            .first()
            .map_or_else(|| Arc::new(SourceProgress::default()), |(_, p)| p.clone());
        let task = PartitionTask {
            brokers: self.runner.brokers.clone(),
            group: self.runner.group.clone(),
            topic: topic.to_string(),
            partition,
            extra: self.runner.extra.clone(),
            progress,
            reads: reads.clone(),
        };
        let stopped = Arc::new(AtomicBool::new(false));
        let stop: Arc<Mutex<Option<StopHandle>>> = Arc::new(Mutex::new(None));
        let dir = self.runner.checkpoint_dir.join(&path);
        let config = CheckpointConfig::new(dir.clone(), self.runner.checkpoint_interval)
            .delivery(self.runner.delivery);
        let store_name = path.clone();
        let store = match self
            .runner
            .store
            .as_ref()
            .map(|store| store.child(&store_name))
        {
            Some(Ok(store)) => Some(store),
            Some(Err(error)) => {
                self.failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(GroupError::Store {
                        task: store_name,
                        error,
                    });
                return;
            }
            None => None,
        };
        let (build, restart) = (self.build.clone(), self.runner.restart);
        let (thread_stopped, thread_stop) = (stopped.clone(), stop.clone());
        let (member, stale) = (self.member.clone(), self.runner.session_timeout);
        let runner = self.runner.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{topic}-{partition}"))
            .spawn(move || {
                // A partition of a rescaled stage restores from the old
                // partitions until it has checkpoints of its own.
                let mut config = config;
                if let Some((name, generation, partitions, fresh)) = rescaled {
                    let dirs = runner.rescaler(&member).old_partitions(
                        &name,
                        generation,
                        partitions,
                        &store_name,
                    )?;
                    config = config.rescaled_from(RescaledFrom { dirs, fresh });
                }
                let options = |config: CheckpointConfig| RunOptions {
                    checkpoints: Some(config),
                    restart: RestartStrategy::Never,
                    acking: None,
                };
                // Not before the last owner has let go (see `lease` and
                // `store_lease`): in the store when the checkpoints are
                // there (each process has a directory of its own), else in
                // the shared directory.
                let place = match store {
                    Some(store) => LeasePlace::Store {
                        store,
                        name: store_name,
                    },
                    None => LeasePlace::Directory(dir),
                };
                let leased = Leased {
                    place,
                    member,
                    stale,
                };
                leased.run(
                    &task,
                    &build,
                    options(config),
                    restart,
                    &thread_stopped,
                    &thread_stop,
                )
            })
            .expect("spawning a partition job's thread");
        self.started.fetch_add(1, Ordering::Relaxed);
        tracing::info!("kafka group: running `{topic}` partition {partition}");
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).insert(
            (topic.to_string(), partition),
            Running {
                stopped,
                stop,
                thread,
                reads,
                run: TaskRun {
                    task: path.clone(),
                    started: SystemTime::now(),
                    first_record: None,
                    stop_asked: None,
                    stopped: None,
                },
            },
        );
    }

    /// Stops the jobs of `which` partitions (all with `None`) and waits for
    /// them; returns where each ended.
    pub(super) fn stop(&self, which: Option<&[(String, i32)]>) -> Positions {
        let taken: Vec<((String, i32), Running)> = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<(String, i32)> = match which {
                Some(which) => which
                    .iter()
                    .filter(|tp| tasks.contains_key(*tp))
                    .cloned()
                    .collect(),
                None => tasks.keys().cloned().collect(),
            };
            keys.into_iter()
                .filter_map(|tp| tasks.remove(&tp).map(|r| (tp, r)))
                .collect()
        };
        let asked = SystemTime::now();
        for (_, running) in &taken {
            running.stopped.store(true, Ordering::Relaxed);
            if let Some(stop) = running
                .stop
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                stop.stop();
            }
        }
        let mut ended = Vec::new();
        for ((topic, partition), running) in taken {
            let outcome = running.thread.join();
            self.account(&running.reads);
            self.runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(run_ended(&running.run, &running.reads, Some(asked)));
            match outcome {
                Ok(Ok(())) => {
                    for (_, progress) in &running.reads {
                        progress.adopt_final();
                    }
                }
                Ok(Err(error)) => {
                    self.failure
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(error);
                }
                Err(_) => {
                    self.failure
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(GroupError::JobThread {
                            topic: topic.clone(),
                            partition,
                        });
                }
            }
            let positions = committed(&running.reads);
            tracing::info!("kafka group: stopped `{topic}` partition {partition}");
            ended.push(((topic, partition), positions));
        }
        ended
    }

    pub(super) fn stop_all(&self) -> Positions {
        self.stop(None)
    }
}

impl Leased {
    /// Takes the lease and runs the job until `stopped`. A lease lost while
    /// the job runs (another process took the partition over, or the lease
    /// could not be refreshed for most of the stale time) aborts the job at
    /// once, without a checkpoint (a store lease's fence would refuse one
    /// too); the partition is then taken again once its lease is free,
    /// unless it is no longer this process's. An error while taking it
    /// again is retried (the store or directory was failing a moment ago);
    /// at the first taking, it ends the runner (it names a place that does
    /// not work).
    pub(super) fn run(
        self,
        task: &PartitionTask,
        build: &Build,
        options: RunOptions,
        restart: RestartStrategy,
        stopped: &AtomicBool,
        stop: &Arc<Mutex<Option<StopHandle>>>,
    ) -> Result<(), GroupError> {
        let mut taken_before = false;
        while !stopped.load(Ordering::Relaxed) {
            let lease = match self.take(stopped) {
                Ok(Some(lease)) => lease,
                Ok(None) => return Ok(()),
                Err(error) if taken_before => {
                    tracing::warn!(
                        "`{}`: taking the partition's lease again: {error}; retrying",
                        self.name()
                    );
                    let retry = Instant::now() + RETAKE;
                    while Instant::now() < retry && !stopped.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    continue;
                }
                Err(error) => return Err(error),
            };
            taken_before = true;
            let lost = Arc::new(AtomicBool::new(false));
            lease.holding().on_lost({
                let (lost, stop) = (lost.clone(), stop.clone());
                move || {
                    lost.store(true, Ordering::Relaxed);
                    if let Some(handle) = &*stop.lock().unwrap_or_else(|p| p.into_inner()) {
                        handle.abort(LEASE_LOST);
                    }
                }
            });
            let mut options = options.clone();
            options.checkpoints = options.checkpoints.map(|config| lease.checkpoints(config));
            let outcome = run_partition(task, build, options, restart, stopped, &lost, stop);
            let lost = lease.holding().is_lost();
            lease.release();
            if !lost {
                return outcome;
            }
            tracing::warn!(
                "`{}`: the partition's lease was lost while its job ran; the job was aborted, without a checkpoint{}",
                self.name(),
                match outcome {
                    Ok(()) => String::new(),
                    Err(error) => format!(" ({error})"),
                }
            );
        }
        Ok(())
    }
}

/// Why a partition's job is aborted when its lease is lost.
pub(super) const LEASE_LOST: &str =
    "this process lost the partition's lease (another process may run the partition now)";

/// How long a partition waits before taking its lease again after an
/// error.
pub(super) const RETAKE: Duration = Duration::from_secs(1);

/// Runs one partition's job until `stopped` (it stops at a savepoint) or
/// `lost` (its lease was lost: it is aborted, without a checkpoint),
/// restarting it from its last checkpoint after a failure as `restart`
/// allows.
pub(super) fn run_partition(
    task: &PartitionTask,
    build: &Build,
    options: RunOptions,
    restart: RestartStrategy,
    stopped: &AtomicBool,
    lost: &AtomicBool,
    stop: &Mutex<Option<StopHandle>>,
) -> Result<(), GroupError> {
    let mut attempt = 0;
    loop {
        let graph = build(task)?;
        let outcome = start_with(graph, options.clone()).and_then(|handle| {
            *stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle.stop_handle());
            // Lost or stopped before the handle's publication.
            if lost.load(Ordering::Relaxed) {
                handle.stop_handle().abort(LEASE_LOST);
            } else if stopped.load(Ordering::Relaxed) {
                handle.stop();
            }
            handle.join()
        });
        let halted = || stopped.load(Ordering::Relaxed) || lost.load(Ordering::Relaxed);
        match outcome {
            Ok(_) if halted() => return Ok(()),
            // A partition's input has no end: a job ending by itself is a
            // source that finished early (an `idle_exit` in `build`, say).
            Ok(_) => return Ok(()),
            Err(error) => {
                attempt += 1;
                let delay = restart.delay(attempt);
                match delay {
                    Some(delay) if !halted() => {
                        tracing::warn!(
                            "the job of `{}` partition {} failed ({error}); restart {attempt} from its last checkpoint in {delay:?}",
                            task.topic,
                            task.partition
                        );
                        std::thread::sleep(delay);
                    }
                    _ => {
                        return Err(GroupError::Job {
                            topic: task.topic.clone(),
                            partition: task.partition,
                            error,
                        });
                    }
                }
            }
        }
    }
}

/// Where a task's reading of each topic is, as of its last completed
/// checkpoint.
pub(super) fn committed(
    reads: &[(String, Arc<SourceProgress>)],
) -> Vec<(String, BTreeMap<i32, i64>)> {
    reads
        .iter()
        .map(|(topic, progress)| (topic.clone(), progress.committed_positions()))
        .collect()
}

/// Commits the positions of partition jobs as the group's offsets.
pub(super) fn commit_positions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    positions: &Positions,
    mode: CommitMode,
) -> Result<(), GroupError> {
    let mut list = TopicPartitionList::new();
    for (_, reads) in positions {
        for (topic, by_partition) in reads {
            for (&partition, &next) in by_partition {
                list.add_partition_offset(topic, partition, Offset::Offset(next))?;
            }
        }
    }
    if list.count() > 0 {
        consumer.commit(&list, mode)?;
    }
    Ok(())
}
