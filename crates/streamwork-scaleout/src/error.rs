//! Why a scale-out runner stopped: [`GroupError`].

use std::path::PathBuf;

use crate::stages::StageError;
use rdkafka::error::KafkaError;
use streamwork_core::ConnectorError;
use streamwork_runtime::{GraphError, JobError};
use streamwork_state::StateError;

/// Why a scale-out runner stopped.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The Kafka client failed (joining the group, committing, reading
    /// metadata).
    #[error("kafka consumer group: {0}")]
    Kafka(KafkaError),
    /// Finding where the partitions end failed.
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    /// Building the job of a partition failed.
    #[error("building the job of `{topic}` partition {partition}: {error}")]
    Build {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// What was wrong with the job.
        error: GraphError,
    },
    /// The job of a partition failed, and its restarts were used up.
    #[error(
        "the job of `{topic}` partition {partition} failed: {error} (its partition resumes from its last checkpoint in whichever process runs it next)"
    )]
    Job {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// How it failed.
        error: JobError,
    },
    /// The thread running a partition's job panicked (a bug in the runner:
    /// a job's own panics are its failures).
    #[error("the job thread of `{topic}` partition {partition} panicked")]
    JobThread {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The job cannot run as stages.
    #[error(transparent)]
    Stages(#[from] StageError),
    /// Building the job (to plan its stages) failed.
    #[error("building the job: {0}")]
    Plan(GraphError),
    /// An exchange's topic exists with another number of partitions than
    /// the group's layout gives it.
    #[error(
        "exchange topic `{topic}` has {found} partitions, and the group's layout gives it {wanted}: the topic was made by something else than this group's runner (or by an earlier version of it); run the job as a new group, or give the topic back the partitions it had"
    )]
    ExchangePartitions {
        /// The exchange's topic.
        topic: String,
        /// Its partitions.
        found: usize,
        /// The partitions the layout gives it.
        wanted: u32,
    },
    /// The group's layout cannot be read, or the job cannot run in it.
    #[error("the group's layout (`LAYOUT` beside its checkpoints): {problem}")]
    Layout {
        /// What is wrong.
        problem: String,
    },
    /// A sink keeps what it staged on one machine, and the processes share
    /// nothing but the checkpoint store ([`GroupRunner::checkpoint_store`](crate::GroupRunner::checkpoint_store)).
    #[error(
        "sink `{component}` keeps what it staged for uncommitted checkpoints in {place}, which a process taking its partition over on another machine cannot reach (the processes share only the checkpoint store): write to a sink that keeps it in the checkpoint (`KafkaSink::transactional`, `UpsertFileSink`), or keep the checkpoints and that place on storage every process shares (a runner without `checkpoint_store`)"
    )]
    StagedLocally {
        /// The sink.
        component: String,
        /// Where it stages.
        place: String,
    },
    /// The exchange topics' replication cannot be what was asked.
    #[error(
        "exchange topics with {copies} copies of each partition on a cluster of {brokers} brokers: {problem}; set `exchange_replication` (and `exchange_min_insync_replicas`) to what the cluster can hold"
    )]
    ExchangeReplication {
        /// The copies asked for.
        copies: u16,
        /// The brokers of the cluster.
        brokers: u16,
        /// What is wrong.
        problem: String,
    },
    /// The Ctrl-C handler could not be installed.
    #[error("installing the Ctrl-C handler: {0}")]
    Signal(JobError),
    /// A partition's checkpoint store could not be opened.
    #[error("the checkpoint store of {task}: {error}")]
    Store {
        /// `STAGE/PARTITION` (or `TOPIC/PARTITION`).
        task: String,
        /// What the store said.
        error: StateError,
    },
    /// The lease file of a partition (in its checkpoint directory) could
    /// not be read or written.
    #[error(
        "the partition lease in {}: {error} (the checkpoint directory must be writable by every process of the group)",
        dir.display()
    )]
    Lease {
        /// The lease file's directory.
        dir: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
}

streamwork_core::debug_as_display!(GroupError);

impl From<KafkaError> for GroupError {
    fn from(error: KafkaError) -> Self {
        GroupError::Kafka(error)
    }
}
