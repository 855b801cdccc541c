//! The runner and its settings.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use streamwork_connectors::kafka::cluster_replication;
use streamwork_runtime::{Delivery, RestartStrategy};
use streamwork_state::CheckpointStore;

use crate::error::GroupError;
use crate::exchange::Unsent;

/// Runs a job per owned partition of a consumer group (see the [module
/// docs](crate::group)).
#[derive(Clone, Debug)]
pub struct GroupRunner {
    pub(super) brokers: String,
    pub(super) group: String,
    pub(super) topics: Vec<String>,
    pub(super) checkpoint_dir: PathBuf,
    pub(super) checkpoint_interval: Duration,
    pub(super) delivery: Delivery,
    pub(super) restart: RestartStrategy,
    pub(super) idle_exit: Option<Duration>,
    pub(super) session_timeout: Duration,
    pub(super) extra: Vec<(String, String)>,
    pub(super) store: Option<Arc<dyn CheckpointStore>>,
    /// Raised: leave the group (stopping every partition job gracefully).
    pub(super) leave: Option<Arc<AtomicBool>>,
    /// Every topic whose end `idle_exit` waits for, in the order data
    /// flows through them.
    pub(super) done_topics: Vec<String>,
    /// What this process's exchange sinks have not had acknowledged:
    /// `idle_exit` waits for none.
    pub(super) unsent: Unsent,
    /// Copies of each exchange topic's partitions (`None`: as many as the
    /// cluster has brokers, up to 3).
    pub(super) replication: Option<u16>,
    /// Copies a write to an exchange topic waits for (`None`: one fewer
    /// than the replication, at least 1).
    pub(super) min_insync: Option<u16>,
    /// The exchange topics of a staged job (`run_job`).
    pub(super) exchange_topics: Vec<String>,
    /// How often read exchange records are deleted (`None`: never).
    pub(super) purge_every: Option<Duration>,
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
    pub(super) fn exchange_copies(&self, probe: &str) -> Result<(u16, u16), GroupError> {
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

    /// Stops after `idle` without a new record or a rebalance in this
    /// process, once the group has given it its share and has read every
    /// partition of its topics to the end (so that a dead member's
    /// partitions are not left behind). Make `idle` longer than the broker
    /// takes to complete a rebalance: a process that joins is first given
    /// nothing (the rebalancing is cooperative), and its share only in the
    /// rebalance that follows. A process the group has not given a share
    /// within the rebalance timeout (three session timeouts, at least
    /// 10 s) stops too once the group has read everything: a broker stuck
    /// in a rebalance does not hold it forever.
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
}
