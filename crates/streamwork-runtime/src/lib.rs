//! Streamwork's engine: runs a [`JobGraph`] as tasks on threads, connected by
//! bounded channels carrying batches.
//!
//! ```
//! use streamwork_core::{Collector, ConnectorError, JobBuilder, Record, Sink, Source, SourcePoll};
//! #[derive(Clone)]
//! struct Count(u64);
//! impl Source for Count {
//!     type Out = Collector<u64>;
//!     fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
//!         if self.0 == 0 { return Ok(SourcePoll::Finished); }
//!         self.0 -= 1;
//!         out.emit(self.0);
//!         Ok(SourcePoll::Emitted)
//!     }
//! }
//! #[derive(Clone)]
//! struct Discard;
//! impl Sink for Discard {
//!     type In = u64;
//!     fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> { Ok(()) }
//! }
//! let mut job = JobBuilder::new("count");
//! let numbers = job.source("numbers", 2, Count(100));
//! job.sink("discard", 1, Discard, numbers);
//! let report = streamwork_runtime::run(job.build()?)?;
//! assert_eq!(report.component("discard").unwrap().records_in(), 200);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! How it works:
//! * [`wiring`](crate) decides which components are fused into one task
//!   (forward edges into single-input components of equal parallelism) and
//!   creates one bounded channel per input port of every other instance;
//! * each task runs on its own thread, or with `workers N;` on one of N
//!   threads that take turns among their tasks: a source task polls its
//!   source; other tasks receive messages, hand batches to their instance and
//!   count end-of-stream per port; whenever its input is momentarily empty a
//!   task flushes its partial batches (adaptive flushing);
//! * a full channel blocks the sender: backpressure (on workers, the worker
//!   holds a task back while a channel it sends into is full);
//! * a panic or error in any task aborts the job: every blocked send or
//!   receive notices within 50 ms, so a failing job never hangs, and the error
//!   names the component and instance where it started.
//!
//! What it is not: a scheduler of many jobs, a cluster manager, or a place for
//! user-facing traits (those are in `streamwork-core`).

#![warn(missing_docs)]

/// The tree tracker of acking, which lives in the core next to the
/// collectors and dispatchers that report to it.
pub use streamwork_core::ack;
mod channel;
pub mod checkpoint;
mod error;
mod handle;
pub mod metrics;
mod report;
mod task;
mod wiring;
mod worker;

pub use checkpoint::{CheckpointConfig, CheckpointStats, Delivery};
pub use error::JobError;
pub use handle::{
    JobHandle, LiveMetrics, RestartStrategy, RunOptions, StopHandle, run, run_with, start,
    start_with,
};
pub use metrics::Capacity;
pub use report::{ComponentReport, InstanceReport, JobReport, prometheus};
pub use streamwork_core::JobGraph;
