//! Scale-out through a Kafka consumer group: the same program started as
//! several processes with the same group id splits the input partitions
//! between them, and each runs the ordinary Streamwork runtime for the
//! partitions it owns (the model of Kafka Streams).
//!
//! A [`GroupRunner`] joins the group and, for every partition the group
//! assigns it, runs a job: with [`run_job`](GroupRunner::run_job), one
//! stage's partition of a whole job (the job is cut at its keyed
//! exchanges, each carried by a topic the runner creates; see
//! `streamwork::runtime::stages`), checkpointed in
//! `CHECKPOINT_DIR/STAGE/PARTITION`; with [`run`](GroupRunner::run), a job
//! the user builds from a [`PartitionTask`], checkpointed in
//! `CHECKPOINT_DIR/TOPIC/PARTITION`. With a
//! [`checkpoint_store`](GroupRunner::checkpoint_store) the checkpoints are
//! copied into the store under the same names, and a process restores a
//! partition it is given from there. State is therefore scoped by input
//! partition: the input topic is partitioned by the job's key, or the job
//! repartitions through an intermediate topic (partitioned by key, read by
//! tasks of its own).
//!
//! When a process joins, leaves or dies, the group rebalances,
//! cooperatively: only the partitions that move are revoked, and the jobs of
//! the others run on through the rebalance. Before a partition is revoked
//! its job stops gracefully: it drains and takes a
//! final checkpoint, then the runner commits its position and lets the
//! rebalance go on. The process that receives the partition restores its
//! job from the latest checkpoint in the directory (which must be shared
//! storage when processes run on several hosts) and reads on from the
//! checkpointed position. A process that dies leaves its partitions to the
//! group once its session times out; they resume from their last complete
//! checkpoint, so nothing committed is lost and records after it are read
//! again (what a replay writes to an output topic is an upsert, or is
//! dropped by an [`OriginFilter`](streamwork_connectors::kafka::OriginFilter) downstream).
//!
//! A process processes only partitions it owns: the group's coordinator
//! consumer never reads (its partitions are paused), and a partition's job
//! is stopped before the rebalance that revokes it completes. A process cut
//! off from the group but still running (a network partition, not a crash)
//! is not fenced: that needs Kafka transactions.
//!
//! See the [crate documentation](crate) for an example.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use streamwork_connectors::kafka::{
    BusySpan, EndProbe, KafkaSource, RecordPurger, SourceProgress, cluster_replication,
    create_replicated_topic, end_offsets,
};
use streamwork_runtime::stages::{ExchangePlan, StageError, StagePlan};
use streamwork_runtime::{
    CheckpointConfig, Delivery, GraphError, JobGraph, RescaledFrom, RestartStrategy, RunOptions,
    StopHandle, start_with,
};
use streamwork_state::CheckpointStore;

pub use crate::error::GroupError;
use crate::exchange::{ExchangeSink, ExchangeSource, Unsent, mark_partitions};
use crate::layout::Layout;
use crate::lease::member_name;
use crate::leased::{LeasePlace, Leased};
use crate::purge::{PurgeHistory, Purging};
use crate::rescale::Rescaler;

/// How often the runner commits the group's offsets and looks for idleness.
const TICK: Duration = Duration::from_millis(100);
/// How often the group's committed offsets are advanced.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// One partition this process owns: what its job is built from.
pub struct PartitionTask {
    brokers: String,
    group: String,
    topic: String,
    partition: i32,
    extra: Vec<(String, String)>,
    progress: Arc<SourceProgress>,
    /// Every topic the task reads (the first its own), with its progress.
    reads: Vec<(String, Arc<SourceProgress>)>,
}

impl PartitionTask {
    /// The partition's topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The brokers, for the job's sinks.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// The progress of the task's reading of `topic`.
    fn progress_of(&self, topic: &str) -> Arc<SourceProgress> {
        self.reads
            .iter()
            .find(|(t, _)| t == topic)
            .map_or_else(|| self.progress.clone(), |(_, p)| p.clone())
    }

    /// The job's source: this partition, from its checkpointed position.
    /// Use it at parallelism 1.
    pub fn source(&self) -> KafkaSource {
        let mut source = KafkaSource::new(&self.brokers, &self.topic, &self.group)
            .assign([self.partition])
            .report_to(self.progress.clone());
        for (key, value) in &self.extra {
            source = source.property(key, value);
        }
        source
    }
}

/// What a runner did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReport {
    /// Rebalances that assigned this process partitions (or none).
    pub rebalances: u64,
    /// Partition jobs started (a partition assigned twice counts twice).
    pub tasks_started: u64,
    /// Records read by this process's partition jobs.
    pub records: u64,
    /// The partitions owned at the end, as `(topic, partition)`.
    pub owned_at_end: Vec<(String, i32)>,
    /// From the first record this process's partition jobs read to the
    /// last: the time it was busy, for throughput.
    pub busy: Duration,
    /// The job's stages and their topics ([`GroupRunner::run_job`]).
    pub stages: Option<StagePlan>,
    /// Every partition job this process ran, with when it started, read
    /// its first record and stopped: with the other processes' runs, what
    /// [`handovers`] measures.
    pub runs: Vec<TaskRun>,
}

/// One run of one partition job in one process.
///
/// A process prints each as one line (`task-run ` and the run as JSON, times
/// in milliseconds since the Unix epoch) for another to read back with
/// [`parse`](Self::parse):
///
/// ```
/// # use std::time::{Duration, SystemTime};
/// use streamwork::scaleout::TaskRun;
///
/// let run = TaskRun {
///     task: "counted/3".to_string(),
///     started: SystemTime::UNIX_EPOCH + Duration::from_millis(1_000),
///     first_record: None,
///     stop_asked: None,
///     stopped: None,
/// };
/// assert_eq!(TaskRun::parse(&run.line()), Some(run));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskRun {
    /// `STAGE/PARTITION` (or `TOPIC/PARTITION`).
    pub task: String,
    /// When the group gave it to this process (its job started restoring).
    #[serde(with = "epoch_ms")]
    pub started: SystemTime,
    /// When its job first read a record.
    #[serde(with = "epoch_ms::optional")]
    pub first_record: Option<SystemTime>,
    /// When the process was asked to stop it (the group revoked it, or the
    /// process left).
    #[serde(with = "epoch_ms::optional")]
    pub stop_asked: Option<SystemTime>,
    /// When its job had stopped (drained, final checkpoint taken and, with
    /// a checkpoint store, stored).
    #[serde(with = "epoch_ms::optional")]
    pub stopped: Option<SystemTime>,
}

/// What starts a [`TaskRun`]'s line.
const TASK_RUN: &str = "task-run ";

impl TaskRun {
    /// The run as one line, for a process to print (see the type's docs).
    pub fn line(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string());
        format!("{TASK_RUN}{json}")
    }

    /// A run from a [`line`](Self::line); `None` for any other line.
    pub fn parse(line: &str) -> Option<TaskRun> {
        serde_json::from_str(line.trim_end().strip_prefix(TASK_RUN)?).ok()
    }
}

/// Times as milliseconds since the Unix epoch, in a run's line.
mod epoch_ms {
    use std::time::{Duration, SystemTime};

    use serde::{Deserialize, Deserializer, Serializer};

    fn ms(time: SystemTime) -> u64 {
        time.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(ms(*time))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(u64::deserialize(d)?))
    }

    pub(super) mod optional {
        use std::time::{Duration, SystemTime};

        use serde::{Deserialize, Deserializer, Serializer};

        pub(in super::super) fn serialize<S: Serializer>(
            time: &Option<SystemTime>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => s.serialize_some(&super::ms(*time)),
                None => s.serialize_none(),
            }
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            Ok(Option::<u64>::deserialize(d)?
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)))
        }
    }
}

/// A partition job moved from one process to another: from the moment the
/// old owner was asked to stop it to the first record the new owner read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// `STAGE/PARTITION`.
    pub task: String,
    /// The stopped run (an index into the runs given to [`handovers`]).
    pub from: usize,
    /// The run that carried on.
    pub to: usize,
    /// From the stop asked to the job stopped (draining, final checkpoint,
    /// storing it).
    pub stopping: Duration,
    /// From the job stopped to the new owner starting it (the group's
    /// rebalance).
    pub rebalance: Duration,
    /// From the new owner starting it to its first record (fetching the
    /// checkpoint, restoring, reading).
    pub resuming: Duration,
}

impl Handover {
    /// From the stop asked to the new owner's first record.
    pub fn total(&self) -> Duration {
        self.stopping + self.rebalance + self.resuming
    }
}

/// The hand-overs among `runs` (every process's [`GroupReport::runs`]):
/// each run stopped, paired with the next run of the same task that read a
/// record.
pub fn handovers(runs: &[TaskRun]) -> Vec<Handover> {
    let mut handovers = Vec::new();
    for (from, old) in runs.iter().enumerate() {
        let (Some(asked), Some(stopped)) = (old.stop_asked, old.stopped) else {
            continue;
        };
        let next = runs
            .iter()
            .enumerate()
            .filter(|(_, new)| new.task == old.task && new.started >= stopped)
            .min_by_key(|(_, new)| new.started);
        if let Some((to, new)) = next
            && let Some(first) = new.first_record
        {
            let since = |later: SystemTime, earlier: SystemTime| {
                later.duration_since(earlier).unwrap_or_default()
            };
            handovers.push(Handover {
                task: old.task.clone(),
                from,
                to,
                stopping: since(stopped, asked),
                rebalance: since(new.started, stopped),
                resuming: since(first, new.started),
            });
        }
    }
    handovers
}

type Build = Arc<dyn Fn(&PartitionTask) -> Result<JobGraph, GroupError> + Send + Sync>;

/// What the partitions of the group's topics are the partitions of.
#[derive(Clone, Debug)]
enum Routing {
    /// [`GroupRunner::run`]: each is a job of its own.
    Partitions,
    /// [`GroupRunner::run_job`]: each partition of a stage's first topic
    /// is a partition of that stage.
    Stages {
        plan: StagePlan,
        /// The topics each stage reads, its first one first, by stage.
        reads: Vec<Vec<String>>,
        /// Where each stage's partitions keep their checkpoints.
        layout: Layout,
    },
}

impl Routing {
    /// The stage a topic is the first topic of, its name, and the topics it
    /// reads.
    fn task_of(&self, topic: &str) -> (Option<usize>, String, Vec<String>) {
        match self {
            Routing::Partitions => (None, topic.to_string(), vec![topic.to_string()]),
            Routing::Stages { plan, reads, .. } => {
                match reads
                    .iter()
                    .position(|r| r.first().map(String::as_str) == Some(topic))
                {
                    Some(stage) => (
                        Some(stage),
                        plan.stages[stage].name.clone(),
                        reads[stage].clone(),
                    ),
                    None => (None, topic.to_string(), vec![topic.to_string()]),
                }
            }
        }
    }

    /// Where the checkpoints of partition `partition` of the task named
    /// `name` (of stage `stage`) are, relative to the group's.
    fn path(&self, stage: Option<usize>, name: &str, partition: i32) -> String {
        match (self, stage) {
            (Routing::Stages { layout, .. }, Some(stage)) => {
                layout.stages[stage].path(partition as u32)
            }
            _ => format!("{name}/{partition}"),
        }
    }

    /// For a partition of a stage that was rescaled: the stage's name,
    /// generation and partition count before, which the partition restores
    /// from until it has checkpoints of its own, and the components that
    /// start anew (its exchange ends).
    fn rescaled(&self, stage: Option<usize>) -> Option<(String, u32, u32, Vec<String>)> {
        let (Routing::Stages { plan, layout, .. }, Some(stage)) = (self, stage) else {
            return None;
        };
        let (generation, partitions) = layout.stages[stage].from?;
        let mut fresh = Vec::new();
        for exchange in &plan.exchanges {
            if exchange.to_stage == stage {
                fresh.push(format!("{}:read", exchange.name));
            }
            if exchange.from_stage == stage {
                fresh.push(format!("{}:encode", exchange.name));
                fresh.push(format!("{}:write", exchange.name));
            }
        }
        Some((
            layout.stages[stage].name.clone(),
            generation,
            partitions,
            fresh,
        ))
    }
}

/// Runs a job per owned partition of a consumer group (see the [module
/// docs](self)).
#[derive(Clone, Debug)]
pub struct GroupRunner {
    brokers: String,
    group: String,
    topics: Vec<String>,
    checkpoint_dir: PathBuf,
    checkpoint_interval: Duration,
    delivery: Delivery,
    restart: RestartStrategy,
    idle_exit: Option<Duration>,
    session_timeout: Duration,
    extra: Vec<(String, String)>,
    store: Option<Arc<dyn CheckpointStore>>,
    /// Raised: leave the group (stopping every partition job gracefully).
    leave: Option<Arc<AtomicBool>>,
    /// Every topic whose end `idle_exit` waits for, in the order data
    /// flows through them.
    done_topics: Vec<String>,
    /// What this process's exchange sinks have not had acknowledged:
    /// `idle_exit` waits for none.
    unsent: Unsent,
    /// Copies of each exchange topic's partitions (`None`: as many as the
    /// cluster has brokers, up to 3).
    replication: Option<u16>,
    /// Copies a write to an exchange topic waits for (`None`: one fewer
    /// than the replication, at least 1).
    min_insync: Option<u16>,
    /// The exchange topics of a staged job (`run_job`).
    exchange_topics: Vec<String>,
    /// How often read exchange records are deleted (`None`: never).
    purge_every: Option<Duration>,
}

impl GroupRunner {
    /// Joins group `group` on `brokers`, subscribing to `topics`, with
    /// partition checkpoints under `checkpoint_dir`.
    pub fn new(
        brokers: &str,
        group: &str,
        topics: &[&str],
        checkpoint_dir: impl Into<PathBuf>,
    ) -> Self {
        GroupRunner {
            brokers: brokers.to_string(),
            group: group.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            checkpoint_dir: checkpoint_dir.into(),
            checkpoint_interval: Duration::from_secs(1),
            delivery: Delivery::ExactlyOnce,
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(500),
            },
            idle_exit: None,
            session_timeout: Duration::from_secs(6),
            extra: Vec::new(),
            store: None,
            leave: None,
            done_topics: topics.iter().map(|t| t.to_string()).collect(),
            unsent: Unsent::default(),
            replication: None,
            min_insync: None,
            exchange_topics: Vec::new(),
            purge_every: Some(Duration::from_secs(10)),
        }
    }

    /// Leaves the group once `flag` is raised: every partition job stops
    /// gracefully (final checkpoint), its position is committed, and the
    /// group gives the partitions to the other processes.
    pub fn leave_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.leave = Some(flag);
        self
    }

    /// Leaves the group on Ctrl-C (SIGINT or SIGTERM), as
    /// [`leave_when`](Self::leave_when) a flag; a second Ctrl-C exits at
    /// once.
    pub fn leave_on_ctrl_c(self) -> Result<Self, GroupError> {
        let flag = self.leave.clone().unwrap_or_default();
        streamwork_runtime::raise_on_ctrl_c(&flag).map_err(GroupError::Signal)?;
        Ok(self.leave_when(flag))
    }

    /// Keeps every partition's checkpoints in `store` too, under
    /// `STAGE/PARTITION` (or `TOPIC/PARTITION`): a process with an empty
    /// checkpoint directory of its own restores a partition it is given
    /// from there, so the processes share no file system.
    pub fn checkpoint_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Keeps `copies` of every partition of the job's exchange topics (the
    /// records between its stages); by default as many as the cluster has
    /// brokers, up to 3, with a warning below 3 (one broker lost would lose
    /// the records in flight).
    pub fn exchange_replication(mut self, copies: u16) -> Self {
        self.replication = Some(copies.max(1));
        self
    }

    /// A write to an exchange topic is acknowledged once `copies` replicas
    /// hold it (the topics' `min.insync.replicas`; by default one fewer
    /// than the replication, at least 1).
    pub fn exchange_min_insync_replicas(mut self, copies: u16) -> Self {
        self.min_insync = Some(copies.max(1));
        self
    }

    /// How often the records of the exchange topics that every reader is
    /// past are deleted (Kafka's `DeleteRecords`; default every 10 s;
    /// `None`: never, the topics' retention alone bounds them). A partition
    /// is purged to the oldest of the last three positions its reader
    /// completed a checkpoint at, so each retained checkpoint's records
    /// stay readable.
    pub fn exchange_purge(mut self, every: Option<Duration>) -> Self {
        self.purge_every = every;
        self
    }

    /// The replication and `min.insync.replicas` of the exchange topics,
    /// given the cluster (`probe`: a topic whose metadata names its
    /// brokers), or why they cannot be.
    fn exchange_copies(&self, probe: &str) -> Result<(u16, u16), GroupError> {
        let (brokers, _) = cluster_replication(&self.brokers, probe)?;
        let brokers = u16::try_from(brokers).unwrap_or(u16::MAX).max(1);
        let copies = self.replication.unwrap_or(brokers.min(3));
        if copies > brokers {
            return Err(GroupError::ExchangeReplication {
                copies,
                brokers,
                problem: "more copies than the cluster has brokers".to_string(),
            });
        }
        let insync = self.min_insync.unwrap_or(copies.saturating_sub(1).max(1));
        if insync > copies {
            return Err(GroupError::ExchangeReplication {
                copies,
                brokers,
                problem: format!("min.insync.replicas {insync} is more than the copies"),
            });
        }
        if copies < 3 {
            tracing::warn!(
                "kafka group `{}`: exchange topics keep {copies} cop{} of each partition (the cluster has {brokers} broker{}): a broker lost loses the records in flight between stages; give the cluster 3 brokers, or set `exchange_replication`",
                self.group,
                if copies == 1 { "y" } else { "ies" },
                if brokers == 1 { "" } else { "s" },
            );
        }
        Ok((copies, insync))
    }

    /// Time between a partition job's checkpoints (default 1 s).
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// The partition jobs' delivery (default exactly-once).
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// What a partition job does when it fails (default: three restarts
    /// from its last checkpoint, 500 ms apart).
    pub fn restart(mut self, restart: RestartStrategy) -> Self {
        self.restart = restart;
        self
    }

    /// Stops after `idle` without a new record in this process, once the
    /// group has given it its share and has read every partition of its
    /// topics to the end (so that a dead member's partitions are not left
    /// behind). A process the group has not given a share within the
    /// rebalance timeout (three session timeouts, at least 10 s) stops
    /// too once the group has read everything: a broker stuck in a
    /// rebalance does not hold it forever.
    pub fn idle_exit(mut self, idle: Duration) -> Self {
        self.idle_exit = Some(idle);
        self
    }

    /// How long the group waits for a silent member before giving its
    /// partitions to the others (default 6 s, the least a Kafka broker
    /// accepts by default).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets an `rdkafka` property of every consumer.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    /// Refuses a job one of whose sinks stages on one machine, when the
    /// processes share nothing but the checkpoint store.
    fn refuse_local_staging(shared_store: bool, graph: &JobGraph) -> Result<(), GroupError> {
        if !shared_store {
            return Ok(());
        }
        match graph
            .nodes()
            .iter()
            .find_map(|node| Some((node.name(), node.staged_locally()?)))
        {
            Some((component, place)) => Err(GroupError::StagedLocally {
                component: component.to_string(),
                place: place.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Runs until idle (with [`idle_exit`](Self::idle_exit)) or a failure:
    /// `build` makes the job of each partition this process is assigned.
    pub fn run(
        self,
        build: impl Fn(&PartitionTask) -> Result<JobGraph, GraphError> + Send + Sync + 'static,
    ) -> Result<GroupReport, GroupError> {
        let stored = self.store.is_some();
        let build: Build = Arc::new(move |task: &PartitionTask| {
            let graph = build(task).map_err(|error| GroupError::Build {
                topic: task.topic.clone(),
                partition: task.partition,
                error,
            })?;
            GroupRunner::refuse_local_staging(stored, &graph)?;
            Ok(graph)
        });
        self.run_with(build, Routing::Partitions)
    }

    /// Runs `job` as stages across the processes of the group (see the
    /// [crate docs](crate)): the job is cut at its keyed exchanges
    /// ([`JobGraph::stage_plan`]); each exchange is carried by a topic the
    /// runner names `GROUP-COMPONENT-PORT-repartition` and creates, with as
    /// many partitions as the parallelism of the component it enters; each
    /// partition of a stage's input is a job of its own, given to one
    /// process of the group. `job` is called once to plan and once for
    /// every partition job started; it is the same `job!` that runs in one
    /// process.
    ///
    /// What a stage writes into an exchange reaches the next stage only
    /// once the checkpoint that covers it is complete (it is kept in that
    /// checkpoint until then), and a stage restored from a checkpoint sends
    /// what it holds again, numbered as before, for the reader to drop
    /// what it has read: across stages, nothing is read twice or lost,
    /// whatever the operators compute in a replay (hash-map order,
    /// processing time, randomness), without a broker that has
    /// transactions. Each stage's output is as late as its checkpoint
    /// interval.
    pub fn run_job(
        mut self,
        job: impl Fn() -> Result<JobGraph, GraphError> + Send + Sync + 'static,
    ) -> Result<GroupReport, GroupError> {
        let planned = job().map_err(GroupError::Plan)?;
        GroupRunner::refuse_local_staging(self.store.is_some(), &planned)?;
        let plan = planned.stage_plan()?;
        tracing::info!("kafka group `{}`: {plan}", self.group);
        let mut source_partitions = Vec::with_capacity(plan.stages.len());
        for stage in &plan.stages {
            source_partitions.push(match &stage.log {
                Some(topic) => self.partitions_of(topic)? as u32,
                None => 0,
            });
        }
        let wanted = Layout::first(&plan, &source_partitions);
        let copies = match wanted.exchanges.first() {
            Some(first) => Some(self.exchange_copies(&first.topic(&self.group))?),
            None => None,
        };
        let create = |topic: &str, partitions: u32| -> Result<(), GroupError> {
            let (replication, insync) = copies.unwrap_or((1, 1));
            let insync = insync.to_string();
            create_replicated_topic(
                &self.brokers,
                topic,
                partitions as i32,
                i32::from(replication),
                &[("min.insync.replicas", &insync)],
            )?;
            if let (_, Some(found)) = cluster_replication(&self.brokers, topic)?
                && found < usize::from(replication)
            {
                tracing::warn!(
                    "kafka group `{}`: exchange topic `{topic}` exists with {found} copies of a partition, fewer than the {replication} asked: add replicas with Kafka's partition reassignment",
                    self.group
                );
            }
            let found = self.partitions_of(topic)?;
            if found != partitions as usize {
                return Err(GroupError::ExchangePartitions {
                    topic: topic.to_string(),
                    found,
                    wanted: partitions,
                });
            }
            mark_partitions(&self.brokers, topic, partitions)?;
            Ok(())
        };
        let member = member_name();
        let rescaler = self.rescaler(&member);
        let layout = rescaler.settle(&plan, wanted, &create)?;
        for exchange in &layout.exchanges {
            create(&exchange.topic(&self.group), exchange.partitions)?;
        }
        let reads: Vec<Vec<String>> = plan
            .stages
            .iter()
            .map(|stage| match &stage.log {
                Some(log) => vec![log.clone()],
                None => stage
                    .inputs
                    .iter()
                    .map(|&x| layout.exchanges[x].topic(&self.group))
                    .collect(),
            })
            .collect();
        self.topics = reads.iter().filter_map(|r| r.first().cloned()).collect();
        self.done_topics = reads.iter().flatten().cloned().collect();
        self.exchange_topics = layout
            .exchanges
            .iter()
            .map(|x| x.topic(&self.group))
            .collect();
        let (brokers, group, extra) =
            (self.brokers.clone(), self.group.clone(), self.extra.clone());
        let routing = Routing::Stages {
            plan: plan.clone(),
            reads,
            layout: layout.clone(),
        };
        let stages = routing.clone();
        let key_groups = plan.key_groups;
        let unsent = self.unsent.clone();
        let build: Build = Arc::new(move |task: &PartitionTask| {
            let graph = job().map_err(GroupError::Plan)?;
            let (Some(stage), _, _) = stages.task_of(&task.topic) else {
                return Err(GroupError::Stages(StageError {
                    component: task.topic.clone(),
                    problem: "is no stage's topic".to_string(),
                    fix: "run one job per group".to_string(),
                }));
            };
            let link: Arc<dyn std::any::Any + Send + Sync> = task.progress.clone();
            let partition = task.partition;
            let this = &layout.stages[stage];
            let exchange_of = |x: &ExchangePlan| {
                let index = plan
                    .exchanges
                    .iter()
                    .position(|e| e.name == x.name)
                    .unwrap_or(0);
                &layout.exchanges[index]
            };
            Ok(graph.into_stage(
                &plan,
                stage,
                partition as u32,
                this.partitions,
                Some(link),
                |x| {
                    let topic = exchange_of(x).topic(&group);
                    ExchangeSource::new(
                        &brokers,
                        &topic,
                        &group,
                        partition,
                        task.progress_of(&topic),
                        &extra,
                    )
                },
                |x| {
                    let exchange = exchange_of(x);
                    ExchangeSink::new(
                        &brokers,
                        &exchange.topic(&group),
                        exchange.partitions,
                        key_groups,
                        this.writer(partition as u32),
                        &extra,
                        unsent.clone(),
                    )
                    .moved_from(&exchange.previous)
                },
            )?)
        });
        self.run_with(build, routing)
    }

    /// The rescaler of this runner (see `rescale`).
    fn rescaler<'a>(&'a self, member: &'a str) -> Rescaler<'a> {
        Rescaler {
            brokers: &self.brokers,
            group: &self.group,
            extra: &self.extra,
            checkpoint_dir: &self.checkpoint_dir,
            store: self.store.as_ref(),
            stale: self.session_timeout,
            member,
            wait: (self.rebalance_timeout() * 2).max(self.session_timeout * 4),
        }
    }

    /// The partitions of `topic`, once its metadata shows any (a topic
    /// just made may take a moment to show).
    fn partitions_of(&self, topic: &str) -> Result<usize, GroupError> {
        let mut found = 0;
        for _ in 0..50 {
            found = end_offsets(&self.brokers, topic)?.len();
            if found > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(found)
    }

    fn run_with(self, build: Build, routing: Routing) -> Result<GroupReport, GroupError> {
        let plan = match &routing {
            Routing::Stages { plan, .. } => Some(plan.clone()),
            Routing::Partitions => None,
        };
        let shared = Arc::new(Shared {
            runner: self.clone(),
            routing,
            build,
            tasks: Mutex::new(BTreeMap::new()),
            failure: Mutex::new(None),
            rebalances: AtomicU64::new(0),
            started: AtomicU64::new(0),
            records_of_ended: AtomicU64::new(0),
            busy: Mutex::new(BusySpan::default()),
            member: member_name(),
            leaving: AtomicBool::new(false),
            runs: Mutex::new(Vec::new()),
        });
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            // Cooperative, incremental rebalancing: a rebalance revokes only
            // the partitions that move, and the others' jobs run on through
            // it. The sticky assignor balances the count of partitions over
            // every topic, so the stages' topics of few partitions each do
            // not all go to one member (as ranges, topic by topic, would).
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set(
                "session.timeout.ms",
                self.session_timeout.as_millis().to_string(),
            )
            .set(
                "heartbeat.interval.ms",
                (self.session_timeout.as_millis() / 5).max(100).to_string(),
            )
            .set(
                "max.poll.interval.ms",
                self.rebalance_timeout().as_millis().to_string(),
            );
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        let consumer: BaseConsumer<GroupContext> =
            config.create_with_context(GroupContext(shared.clone()))?;
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        let outcome = self.serve(&consumer, &shared);
        // Leave the group: stop every partition job (each takes its final
        // checkpoint) and commit where they ended.
        tracing::info!("kafka group `{}`: leaving", self.group);
        shared.leaving.store(true, Ordering::Relaxed);
        let stopped = shared.stop_all();
        let commit = commit_positions(&consumer, &stopped, CommitMode::Sync);
        consumer.unsubscribe();
        // Closing the consumer waits for the group to take its leave. A
        // broker that never answers the leave (tansu 0.6, asked during a
        // rebalance, has been seen not to) would hold the process forever:
        // the positions are committed, so after a session timeout the
        // process goes without the answer, and the group drops the member
        // by its session timeout.
        let (closed, close_done) = std::sync::mpsc::channel();
        let closing = std::thread::Builder::new()
            .name("kafka-group-close".to_string())
            .spawn(move || {
                drop(consumer);
                let _ = closed.send(());
            });
        match closing {
            Ok(_) => {
                if close_done.recv_timeout(self.session_timeout).is_ok() {
                    tracing::info!("kafka group `{}`: left", self.group);
                } else {
                    tracing::warn!(
                        "kafka group `{}`: the broker did not answer the leave within {:?}; going without it (the group drops this member after its session timeout)",
                        self.group,
                        self.session_timeout
                    );
                }
            }
            Err(error) => tracing::warn!("kafka group `{}`: closing: {error}", self.group),
        }
        let report = GroupReport {
            rebalances: shared.rebalances.load(Ordering::Relaxed),
            tasks_started: shared.started.load(Ordering::Relaxed),
            records: shared.records_of_ended.load(Ordering::Relaxed),
            owned_at_end: stopped.iter().map(|(tp, _)| tp.clone()).collect(),
            stages: plan,
            runs: std::mem::take(&mut *shared.runs.lock().unwrap_or_else(|p| p.into_inner())),
            busy: shared
                .busy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .duration(),
        };
        outcome?;
        if let Some(failure) = shared.take_failure() {
            return Err(failure);
        }
        match commit {
            // The group dropped this member before it could commit (a
            // broker that timed the member out while it stopped its jobs):
            // the positions are in the partitions' checkpoints, which is
            // where the next owner resumes from; the group's offsets only
            // tell how far it has read.
            Err(GroupError::Kafka(error))
                if matches!(
                    error.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::UnknownMemberId
                            | RDKafkaErrorCode::IllegalGeneration
                            | RDKafkaErrorCode::RebalanceInProgress
                    )
                ) =>
            {
                tracing::warn!(
                    "kafka group `{}`: the positions were not committed as the group's offsets when leaving ({error}): the checkpoints hold them",
                    self.group
                );
            }
            outcome => outcome?,
        }
        Ok(report)
    }

    /// How long the group waits for members to rejoin in a rebalance (the
    /// consumer's `max.poll.interval.ms`): three session timeouts, at
    /// least 10 s.
    fn rebalance_timeout(&self) -> Duration {
        (self.session_timeout * 3).max(Duration::from_secs(10))
    }

    /// Polls the group (serving rebalances), commits progress, and watches
    /// for a failure or the idle exit.
    fn serve(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        shared: &Shared,
    ) -> Result<(), GroupError> {
        let probe = EndProbe::new(&self.brokers, &self.extra)?;
        let purging = match self.purge_every {
            Some(_) if !self.exchange_topics.is_empty() => {
                let purger = RecordPurger::new(&self.brokers, &self.extra)?;
                Purging::start(purger, self.group.clone())
                    .inspect_err(|error| {
                        tracing::warn!(
                            "kafka group `{}`: no thread to delete read exchange records ({error}): the exchange topics grow until their retention removes records",
                            self.group
                        );
                    })
                    .ok()
            }
            _ => None,
        };
        let mut purge_history = PurgeHistory::default();
        let mut last_purge = Instant::now();
        let mut last_commit = Instant::now();
        let mut records = u64::MAX;
        let mut quiet_since = Instant::now();
        let (joined_at, mut warned_unassigned) = (Instant::now(), false);
        loop {
            // The coordinator reads nothing itself (its partitions are
            // paused); a message fetched before the pause is dropped.
            if let Some(Err(error)) = consumer.poll(TICK) {
                tracing::debug!("kafka group `{}`: {error}", self.group);
            }
            if let Some(failure) = shared.take_failure() {
                return Err(failure);
            }
            if self
                .leave
                .as_ref()
                .is_some_and(|f| f.load(Ordering::Relaxed))
            {
                tracing::info!("kafka group `{}`: asked to leave", self.group);
                return Ok(());
            }
            if last_commit.elapsed() >= COMMIT_EVERY {
                let positions = shared.positions();
                if let Err(error) = commit_positions(consumer, &positions, CommitMode::Async) {
                    tracing::debug!("kafka group `{}`: {error}", self.group);
                }
                last_commit = Instant::now();
                if let Some(purging) = &purging {
                    for (topic, read) in positions.iter().flat_map(|(_, reads)| reads) {
                        if self.exchange_topics.contains(topic) {
                            for (&partition, &next) in read {
                                purge_history.observe(topic, partition, next);
                            }
                        }
                    }
                    if self
                        .purge_every
                        .is_some_and(|every| last_purge.elapsed() >= every)
                    {
                        purging.ask(purge_history.due());
                        last_purge = Instant::now();
                    }
                }
            }
            // A healthy broker completes a join within the rebalance
            // timeout; tansu 0.6, when the group's leader leaves during a
            // rebalance, answers every rejoin with the departed leader's
            // generation and never assigns anything.
            let unassigned = shared.rebalances.load(Ordering::Relaxed) == 0;
            let given_up = unassigned && joined_at.elapsed() >= self.rebalance_timeout();
            if given_up && !warned_unassigned {
                tracing::warn!(
                    "kafka group `{}`: no assignment after {:?} (the coordinator may be stuck in a rebalance)",
                    self.group,
                    joined_at.elapsed()
                );
                warned_unassigned = true;
            }
            let now = shared.records();
            if now != records {
                records = now;
                quiet_since = Instant::now();
            }
            // Not before the group has given this process its share (a
            // process still joining knows nothing of the group's work), or
            // given up waiting for it.
            // Nor while an exchange sink holds what a completed checkpoint
            // covers and the brokers have not acknowledged: it is on its way
            // into a topic that may look read to its end until it arrives.
            if let Some(idle) = self.idle_exit
                && quiet_since.elapsed() >= idle
                && (!unassigned || given_up)
                && self.unsent.bytes() == 0
            {
                if self.group_is_done(consumer, &probe)? {
                    tracing::info!(
                        "kafka group `{}`: every partition is read to its end",
                        self.group
                    );
                    return Ok(());
                }
                // Someone (maybe a dead member) still owns unread input:
                // look again after another idle period.
                quiet_since = Instant::now();
            }
        }
    }

    /// Whether the group's committed offsets have reached the end of every
    /// partition of every topic.
    fn group_is_done(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        probe: &EndProbe,
    ) -> Result<bool, GroupError> {
        // Topic by topic in the order data flows: a stage's input is read
        // to its end only after what it wrote is flushed, so the next
        // topic's end, read after, holds all of it.
        for topic in &self.done_topics {
            if !self.topic_is_done(consumer, probe, topic)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether the group's committed offsets have reached the end of every
    /// partition of `topic`.
    fn topic_is_done(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        probe: &EndProbe,
        topic: &str,
    ) -> Result<bool, GroupError> {
        let mut wanted = TopicPartitionList::new();
        let mut ends = Vec::new();
        {
            let topic_ends = match probe.ends(topic) {
                Ok(ends) => ends,
                Err(error) => {
                    tracing::warn!("kafka group `{}`: {error}", self.group);
                    return Ok(false);
                }
            };
            for (partition, end) in topic_ends {
                wanted.add_partition(topic, partition);
                ends.push((topic.to_string(), partition, end));
            }
        }
        let committed = consumer.committed_offsets(wanted, Duration::from_secs(10))?;
        for (topic, partition, end) in ends {
            let at = match committed
                .find_partition(&topic, partition)
                .map(|e| e.offset())
            {
                Some(Offset::Offset(at)) => at,
                _ => 0,
            };
            if at < end {
                tracing::debug!(
                    "kafka group `{}`: `{topic}` partition {partition} read to {at} of {end}",
                    self.group
                );
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A partition's job, running on its own thread.
struct Running {
    stopped: Arc<AtomicBool>,
    stop: Arc<Mutex<Option<StopHandle>>>,
    thread: JoinHandle<Result<(), GroupError>>,
    /// The progress of each topic it reads.
    reads: Vec<(String, Arc<SourceProgress>)>,
    /// Its run, for the report.
    run: TaskRun,
}

/// `run`, of a job that read `reads`, ended now.
fn run_ended(
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
struct Shared {
    runner: GroupRunner,
    routing: Routing,
    build: Build,
    tasks: Mutex<BTreeMap<(String, i32), Running>>,
    failure: Mutex<Option<GroupError>>,
    rebalances: AtomicU64,
    started: AtomicU64,
    records_of_ended: AtomicU64,
    /// When the ended jobs first and last read.
    busy: Mutex<BusySpan>,
    /// This process's name in partition leases.
    member: String,
    /// Set once the runner leaves the group: an assignment that arrives
    /// while the consumer closes starts no job.
    leaving: AtomicBool,
    /// The runs of the jobs that ended.
    runs: Mutex<Vec<TaskRun>>,
}

/// Where each task's reading of each topic is, by task.
type Positions = Vec<((String, i32), Vec<(String, BTreeMap<i32, i64>)>)>;

impl Shared {
    fn take_failure(&self) -> Option<GroupError> {
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
    fn account(&self, reads: &[(String, Arc<SourceProgress>)]) {
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
    fn records(&self) -> u64 {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        self.records_of_ended.load(Ordering::Relaxed)
            + tasks
                .values()
                .flat_map(|r| &r.reads)
                .map(|(_, p)| p.records())
                .sum::<u64>()
    }

    /// The positions of the running jobs' last snapshots.
    fn positions(&self) -> Positions {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks
            .iter()
            .map(|(tp, r)| (tp.clone(), committed(&r.reads)))
            .collect()
    }

    /// Starts the job of one partition.
    fn start(&self, topic: &str, partition: i32) {
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
    fn stop(&self, which: Option<&[(String, i32)]>) -> Positions {
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

    fn stop_all(&self) -> Positions {
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
    fn run(
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
            lease.on_lost({
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
            let lost = lease.is_lost();
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
const LEASE_LOST: &str =
    "this process lost the partition's lease (another process may run the partition now)";

/// How long a partition waits before taking its lease again after an
/// error.
const RETAKE: Duration = Duration::from_secs(1);

/// Runs one partition's job until `stopped` (it stops at a savepoint) or
/// `lost` (its lease was lost: it is aborted, without a checkpoint),
/// restarting it from its last checkpoint after a failure as `restart`
/// allows.
fn run_partition(
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
fn committed(reads: &[(String, Arc<SourceProgress>)]) -> Vec<(String, BTreeMap<i32, i64>)> {
    reads
        .iter()
        .map(|(topic, progress)| (topic.clone(), progress.committed_positions()))
        .collect()
}

/// Commits the positions of partition jobs as the group's offsets.
fn commit_positions(
    consumer: &BaseConsumer<GroupContext>,
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

/// The coordinator consumer's context: rebalances start and stop
/// partition jobs.
struct GroupContext(Arc<Shared>);

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let revoked: Vec<(String, i32)> = list
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            // Stopped (drained, final checkpoint taken) before anyone else
            // may be assigned them.
            let ended = self.0.stop(Some(&revoked));
            if let Err(error) = commit_positions(consumer, &ended, CommitMode::Sync) {
                tracing::warn!("kafka group: committing revoked partitions: {error}");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                self.0.rebalances.fetch_add(1, Ordering::Relaxed);
                if let Err(error) = consumer.pause(list) {
                    tracing::warn!("kafka group: pausing the coordinator: {error}");
                }
                if self.0.leaving.load(Ordering::Relaxed) {
                    return;
                }
                for element in list.elements() {
                    self.0.start(element.topic(), element.partition());
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => tracing::warn!("kafka group: rebalance failed: {error}"),
        }
    }
}
