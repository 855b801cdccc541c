//! Streamwork across processes: the same program started as several
//! processes of one Kafka consumer group splits the work between them, and
//! each process runs the ordinary engine for the partitions it owns (the
//! model of Kafka Streams).
//!
//! * `GroupRunner` (module `group`, behind the `kafka` feature) joins the
//!   group and runs one job per partition it is given, each with its own
//!   checkpoints (in a directory, and with a `CheckpointStore` in S3),
//!   stopping and handing them over as the group rebalances. With
//!   `run_job` it runs a whole `job!` as **stages**: cut at its keyed
//!   exchanges, each exchange carried by a topic the runner creates, each
//!   partition of a stage a job; records a restarted stage writes again
//!   are dropped by the next (see `stages`);
//! * [`stages`]: how a job is cut into stages at its keyed exchanges, and
//!   the job of one partition of a stage (through the engine's
//!   `JobGraph::into_part`); no Kafka needed;
//! * `exchange`: the sink and source of an exchange's topic;
//! * `purge`: deleting the exchange records every reader is past;
//! * `lease`: the file in a partition's checkpoint directory that names the
//!   process running its job, so that two processes sharing the directory
//!   never run it at once;
//! * `store_lease`: the same as an object beside the partition's
//!   checkpoints in a store, taken and refreshed by conditional writes; a
//!   process that lost it publishes no more checkpoints of the partition;
//! * `lease_clock`: how both are judged, each process by its own clock: a
//!   waiting process counts a lease stale once it stayed unchanged for the
//!   stale time; a holder stops counting it as its own before that, and
//!   the runner then aborts its job of the partition.
//!
//! What it is not: the Kafka source and sinks (those are connectors, in
//! `streamwork-connectors`), how a part of a job graph is made into a job
//! of its own (the engine, `streamwork-runtime`'s `cut`), or a cluster
//! manager (the consumer group is). It sits above the engine and the
//! connectors. Without the `kafka` feature it holds only `stages`: the
//! runner needs librdkafka, built from source with cmake.
//!
//! ```no_run
//! # #[cfg(feature = "kafka")]
//! # fn main() -> Result<(), streamwork::scaleout::GroupError> {
//! use streamwork::connectors::CollectSink;
//! use streamwork::connectors::kafka::{KafkaRecord, KafkaSource};
//! use streamwork::prelude::*;
//! use streamwork::scaleout::GroupRunner;
//!
//! let brokers = "127.0.0.1:9092";
//! let report = GroupRunner::new(brokers, "my-job", &[], "/var/tmp/my-job")
//!     .leave_on_ctrl_c()?
//!     .run_job(move || {
//!         let counts = CollectSink::new();
//!         job! {
//!             delivery at_least_once;
//!             source records = KafkaSource::new(brokers, "input", "my-job");
//!             operator sizes = map(|r: KafkaRecord| r.value.len() as u64) <- records;
//!             operator bigger[2] = filter(|n: &u64| *n > 10) <- sizes.key(|n: &u64| *n);
//!             sink out = counts <- bigger;
//!         }
//!     })?;
//! eprint!("{}", report.stages.expect("a staged job"));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "kafka"))]
//! # fn main() {}
//! ```

#![warn(missing_docs)]

#[cfg(feature = "kafka")]
mod error;
#[cfg(feature = "kafka")]
mod exchange;
#[cfg(feature = "kafka")]
pub mod group;
#[cfg(feature = "kafka")]
mod layout;
#[cfg(feature = "kafka")]
mod lease;
#[cfg(feature = "kafka")]
mod lease_clock;
#[cfg(feature = "kafka")]
mod leased;
#[cfg(feature = "kafka")]
mod purge;
#[cfg(feature = "kafka")]
mod rescale;
pub mod stages;
#[cfg(feature = "kafka")]
mod store_lease;

#[cfg(feature = "kafka")]
pub use group::{
    GroupError, GroupReport, GroupRunner, Handover, PartitionTask, TaskRun, handovers,
};
