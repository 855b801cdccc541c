//! Scale-out through a Kafka consumer group: the same program started as
//! several processes with the same group id splits the input partitions
//! between them, and each runs the ordinary Streamwork runtime for the
//! partitions it owns (the model of Kafka Streams).
//!
//! A [`GroupRunner`] joins the group and, for every partition the group
//! assigns it, runs a job: with [`run_job`](GroupRunner::run_job), one
//! stage's partition of a whole job (the job is cut at its keyed
//! exchanges, each carried by a topic the runner creates; see
//! `streamwork::scaleout::stages`), checkpointed in
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

mod jobs;
mod rebalance;
mod report;
mod runner;
mod task;

pub use crate::error::GroupError;
pub use report::{GroupReport, Handover, TaskRun, handovers};
pub use runner::GroupRunner;
pub use task::PartitionTask;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::stages::{ExchangePlan, StageError, StagePlan};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use streamwork_connectors::kafka::{
    BusySpan, EndProbe, RecordPurger, cluster_replication, create_replicated_topic, partition_count,
};
use streamwork_runtime::{GraphError, JobGraph};

use crate::exchange::{ExchangeSink, ExchangeSource, mark_partitions};
use crate::layout::Layout;
use crate::lease::member_name;
use crate::purge::{PurgeHistory, Purging};
use crate::rescale::Rescaler;

use self::jobs::{Shared, commit_positions};
use self::rebalance::GroupContext;
use self::task::{Build, Routing};

/// How often the runner commits the group's offsets and looks for idleness.
const TICK: Duration = Duration::from_millis(100);
/// How often the group's committed offsets are advanced.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

impl GroupRunner {
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
    /// ([`StagePlan::of`]); each exchange is carried by a topic the
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
        let plan = StagePlan::of(&planned)?;
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
            Ok(plan.stage_job(
                graph,
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
            found = partition_count(&self.brokers, topic)?;
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
        let mut rebalances = 0;
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
            // A rebalance starts the idle period again: with cooperative
            // rebalancing a joining process is first given nothing, and its
            // share only in the rebalance that follows once the others have
            // let go of it.
            let now_rebalances = shared.rebalances.load(Ordering::Relaxed);
            if now_rebalances != rebalances {
                rebalances = now_rebalances;
                quiet_since = Instant::now();
            }
            let unassigned = rebalances == 0;
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
