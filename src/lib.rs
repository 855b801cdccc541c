//! Streamwork: stream processing in Rust, after *Grokking Streaming Systems*.
//!
//! A job is a DAG of sources, operators and sinks with parallel instances,
//! wired by typed streams: `job!` (or the [`JobBuilder`](prelude::JobBuilder))
//! checks the graph at compile time, and the runtime runs it as tasks on
//! threads with batches flowing through bounded channels.
//!
//! ```
//! use streamwork::prelude::*;
//!
//! #[operator]
//! fn double(value: u64, out: &mut Collector<u64>) {
//!     out.emit(value * 2);
//! }
//!
//! let sink = CollectSink::new();
//! let job = job! {
//!     name "doubling";
//!     source numbers = VecSource::new(vec![1u64, 2, 3]);
//!     operator doubled = Double <- numbers;
//!     sink collected = sink.clone() <- doubled;
//! }?;
//! job.run()?;
//! let mut values = sink.values();
//! values.sort();
//! assert_eq!(values, vec![2, 4, 6]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The crates behind the facade:
//! * [`core`]: the vocabulary: traits, records, collectors, stream handles,
//!   groupings, keyed state, timers, checkpoints as components see them;
//! * [`runtime`]: the engine: the job builder, and everything that runs a
//!   job graph;
//! * [`connectors`]: sources and sinks;
//! * [`window`]: watermark strategies and windows;
//! * [`join`]: stream-table, windowed, interval, table-table and unwindowed joins;
//! * [`state`]: the checkpoint log and keyed state codecs;
//! * [`web`]: the job page;
//! * [`scaleout`]: a job across processes through a Kafka consumer group
//!   (feature `kafka`);
//! * `streamwork-macros`: `#[operator]`, `#[derive(Outputs)]`, `#[derive(State)]`, `#[state_data]` and `job!`.

#![warn(missing_docs)]

#[doc(inline)]
pub use streamwork_connectors as connectors;
#[doc(inline)]
pub use streamwork_core as core;
#[doc(inline)]
pub use streamwork_join as join;
pub use streamwork_macros::{Outputs, State, job, operator, state_data};
#[cfg(feature = "logging")]
pub mod logging;
#[cfg(feature = "progress")]
pub mod progress;
#[doc(inline)]
pub use streamwork_runtime as runtime;
#[doc(inline)]
pub use streamwork_scaleout as scaleout;
#[doc(inline)]
pub use streamwork_state as state;
#[doc(inline)]
pub use streamwork_web as web;
#[doc(inline)]
pub use streamwork_window as window;

use streamwork_runtime::{JobError, JobGraph, JobHandle, JobReport};

/// Running a built job graph.
pub trait Run {
    /// Runs to completion; see [`runtime::run`].
    fn run(self) -> Result<JobReport, JobError>;
    /// Starts and returns a handle; see [`runtime::start`].
    fn start(self) -> Result<JobHandle, JobError>;
    /// Runs to completion with `options` (checkpoints); see [`runtime::run_with`].
    fn run_with(self, options: runtime::RunOptions) -> Result<JobReport, JobError>;
    /// Starts with `options`; see [`runtime::start_with`].
    fn start_with(self, options: runtime::RunOptions) -> Result<JobHandle, JobError>;
    /// Starts, and serves the job page on `address` (such as
    /// `127.0.0.1:7000`); the page stops when the returned view is dropped.
    fn start_with_ui(self, address: &str) -> Result<(JobHandle, web::WebView), UiError>;
}

/// Why a job with its page could not start.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum UiError {
    /// The job could not start.
    #[error(transparent)]
    Job(#[from] JobError),
    /// The page could not be served.
    #[error(transparent)]
    Web(#[from] web::WebError),
}

streamwork_core::debug_as_display!(UiError);

/// Logging with no set-up, unless the application has its own.
fn install_logging() {
    #[cfg(feature = "logging")]
    logging::install_default();
}

impl Run for JobGraph {
    fn run(self) -> Result<JobReport, JobError> {
        install_logging();
        streamwork_runtime::run(self)
    }

    fn start(self) -> Result<JobHandle, JobError> {
        install_logging();
        streamwork_runtime::start(self)
    }

    fn run_with(self, options: runtime::RunOptions) -> Result<JobReport, JobError> {
        install_logging();
        streamwork_runtime::run_with(self, options)
    }

    fn start_with(self, options: runtime::RunOptions) -> Result<JobHandle, JobError> {
        install_logging();
        streamwork_runtime::start_with(self, options)
    }

    fn start_with_ui(self, address: &str) -> Result<(JobHandle, web::WebView), UiError> {
        install_logging();
        let plan = self.plan();
        let handle = streamwork_runtime::start(self)?;
        let view = web::serve(address, plan, handle.live_metrics())?;
        Ok((handle, view))
    }
}

/// Operators from closures: stateless steps (`map`, `filter`,
/// `filter_map`, `flat_map`, `inspect`) and keyed aggregations (`reduce`,
/// `fold`), for `job!` and the builder alike; [`runtime::Flow`] chains them
/// on a stream.
pub mod ops {
    pub use streamwork_core::ops::{
        Filter, FilterMap, FlatMap, Inspect, Map, filter, filter_map, flat_map, inspect, map,
    };
    pub use streamwork_state::{Fold, Reduce, fold, reduce};
}

/// Everything a job needs, in one import.
pub mod prelude {
    pub use crate::ops::{filter, filter_map, flat_map, fold, inspect, map, reduce};
    pub use crate::{Outputs, State, job, operator, state_data};
    pub use crate::{Run, UiError};
    pub use streamwork_connectors::{
        BadInput, CollectSink, FileSink, FileSource, GeneratorSource, InputErrors, StdoutSink,
        TcpLineSource, UpsertFileSink, VecSource,
    };
    pub use streamwork_core::ports::Either;
    pub use streamwork_core::{
        AnyTime, ByKey, CheckpointId, Collector, ConnectorError, Context, CurrentKey, Data,
        ErrorDomain, EventTime, GroupingKind, InstanceContext, InstanceIdx, KeyGroups, KeyedState,
        NoKey, Operator, Overflow, Record, Restore, Sink, SnapshotContext, Source, SourcePoll,
        StateBytes, Statefulness, Stream, TaskError, Timestamp, Unwatermarked, Watermarked,
    };
    pub use streamwork_join::{Change, Delta, Join, JoinRow};
    pub use streamwork_runtime::{
        CheckpointConfig, Delivery, GraphError, GroupingChoice, Groupings, Input, JobBuilder,
        JobError, JobGraph, JobHandle, JobReport, KeyedStream, RestartStrategy, RunOptions,
    };
    pub use streamwork_state::{
        AggregatingState, ExpiringState, InstanceState, KeyedValues, ListState, MapState,
        ReducingState, StoredState, Ttl, ValueState,
    };
    pub use streamwork_window::{
        Firing, LateCounter, Watermarks, Window, WindowContents, WindowResult, Windows,
    };
}

/// Paths used by the code the macros generate. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use streamwork_core::checkpoint::{Delivery, replayable, transactional};
    pub use streamwork_core::control::{Control, Disconnected};
    pub use streamwork_core::ops::map;
    pub use streamwork_core::outputs::{
        AllChannelsHandled, Channel, ChannelHandled, ChannelInfo, Handled, OutputParts, Outputs,
        Unconnected, all_channels_handled,
    };
    pub use streamwork_core::record::Data;
    pub use streamwork_core::stream::Stream;
    pub use streamwork_core::time::Timestamp;
    pub use streamwork_core::{
        AnyTime, ByKey, Collector, Context, CurrentKey, EventTime, InstanceContext, JobId,
        KeyGroups, NoKey, NodeId, Operator, StreamTime,
    };
    pub use streamwork_core::{Restore, SnapshotContext, StateBytes, Statefulness, TaskError};
    pub use streamwork_runtime::builder::{Groupings, Input, IntoInputs, fan_in};
    pub use streamwork_runtime::{GraphError, InputPort, JobBuilder, JobGraph};
    pub use streamwork_state::rkyv;
    pub use streamwork_state::{FieldsReader, FieldsWriter, OperatorState, StateError, StateField};
    pub use streamwork_state::{StateLayout, layout_mix, layout_of};
}

/// Compiles the code of README.md as a doctest, so that the README never lies.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
