//! Streamwork's engine: the typed job builder (with the groupings chosen on
//! a stream, [`Groupings`]), and everything that runs a job — tasks on
//! threads or workers, connected by bounded channels carrying batches, the
//! instance lifecycle, routes and dispatchers, acking, checkpoints, metrics.
//!
//! ```
//! use streamwork::core::{Collector, ConnectorError, Record, Sink, Source, SourcePoll};
//! use streamwork::runtime::JobBuilder;
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
//! let report = streamwork::runtime::run(job.build()?)?;
//! assert_eq!(report.component("discard").unwrap().records_in(), 200);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A record's path stays inside this crate, except for user code. Modules, in
//! the order a record meets them:
//! * [`builder`]: the typed [`JobBuilder`] (what `job!` lowers to), the
//!   checked [`JobGraph`] and its [`JobPlan`];
//! * `wiring`: which components are fused into one task (forward edges into
//!   single-input components of equal parallelism), one bounded channel per
//!   input port of every other instance;
//! * `task`, `worker`: the loops that drive tasks, each on its own thread,
//!   or with `workers N;` on one of N threads that take turns;
//! * `instance`: one lifecycle per instance (restore, open, records,
//!   watermarks, barriers, timers, end, close), shared by every kind of
//!   component, fused or not; failures are values that name the instance;
//! * [`dispatch`], [`message`], `channel`: routing a batch to the target
//!   instances, what travels between tasks, the sending half of a channel
//!   (overflow policies, backpressure time);
//! * [`acking`]: at-least-once by acking (chapter 5);
//! * [`checkpoint`]: the coordinator, checkpoint configuration, restore;
//! * [`metrics`], `report`: capacity, backpressure, the [`JobReport`];
//! * `options`, `run`, `start`, `handle`: how to run a job; running,
//!   restarting, stopping and watching it.
//!
//! What it is not: a scheduler of many jobs, a cluster manager (scale-out
//! across processes is `streamwork-scaleout`), or a place for user-facing traits
//! (those are in `streamwork-core`).

#![warn(missing_docs)]

pub mod acking;
mod batch;
pub mod builder;
mod channel;
pub mod checkpoint;
pub mod combiner;
mod ctrl_c;
pub mod cut;
pub mod dispatch;
mod error;
mod failure;
mod fan_out;
mod handle;
mod instance;
pub mod message;
pub mod metrics;
mod options;
mod report;
pub mod route;
mod run;
mod start;
mod task;
mod wiring;
mod worker;

pub use builder::{
    ComponentKind, ComponentPlan, EdgeDef, EdgePlan, Flow, GraphError, GroupingChoice, Groupings,
    Input, InputPort, IntoInputs, JobBuilder, JobConfig, JobGraph, JobPlan, KeyedFlow, KeyedStream,
    NodeDef, PortInfo, StageRow,
};
pub use checkpoint::{CheckpointConfig, CheckpointStats, Delivery, Recovery, RescaledFrom};
pub use ctrl_c::raise_on_ctrl_c;
pub use error::JobError;
pub use handle::{JobHandle, LiveMetrics, StopHandle};
pub use instance::InstanceCounters;
pub use metrics::Capacity;
pub use options::{RestartStrategy, RunOptions};
pub use report::{ComponentReport, InstanceReport, JobReport};
pub use run::{run, run_with, start, start_with};
pub use worker::cores;
