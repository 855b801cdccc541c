//! Streamwork across processes: the same program started as several
//! processes of one Kafka consumer group splits the input partitions between
//! them, and each process runs the ordinary engine for the partitions it
//! owns (the model of Kafka Streams).
//!
//! * `GroupRunner` (module `group`, behind the `kafka` feature) joins the
//!   group and runs one job per partition it is given, each with its own
//!   checkpoints in the partition's directory, stopping and handing them
//!   over as the group rebalances;
//! * `lease`: the file in a partition's checkpoint directory that names the
//!   process running its job, so that two processes never run it at once.
//!
//! What it is not: the Kafka source and sinks (those are connectors, in
//! `streamwork-connectors`), or the engine (`streamwork-runtime`). It sits
//! above both. Without the `kafka` feature it holds nothing: the runner
//! needs librdkafka, built from source with cmake.
//!
//! ```no_run
//! # #[cfg(feature = "kafka")]
//! # fn main() -> Result<(), streamwork::scaleout::GroupError> {
//! use std::time::Duration;
//! use streamwork::connectors::CollectSink;
//! use streamwork::runtime::JobBuilder;
//! use streamwork::scaleout::GroupRunner;
//!
//! let report = GroupRunner::new("127.0.0.1:9092", "my-job", &["input"], "/shared/checkpoints")
//!     .checkpoint_interval(Duration::from_secs(1))
//!     .run(|task| {
//!         let mut job = JobBuilder::new(format!("my-job-{}", task.partition()));
//!         let records = job.source("records", 1, task.source());
//!         job.sink("out", 1, CollectSink::new(), records);
//!         job.build()
//!     })?;
//! # let _ = report;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "kafka"))]
//! # fn main() {}
//! ```

#![warn(missing_docs)]

#[cfg(feature = "kafka")]
mod exchange;
#[cfg(feature = "kafka")]
pub mod group;
#[cfg(feature = "kafka")]
mod lease;

#[cfg(feature = "kafka")]
pub use group::{
    GroupError, GroupReport, GroupRunner, Handover, PartitionTask, TaskRun, handovers,
};
