//! Streamwork's shared vocabulary: records and time, the [`Source`],
//! [`Operator`], [`CoOperator`] and [`Sink`] traits, [`Collector`]s and output
//! channel sets, groupings, keyed state, and the typed [`JobBuilder`].
//!
//! This crate has no threads and no I/O: it describes jobs and runs user code
//! on batches when asked. `streamwork-runtime` turns a [`JobGraph`] into
//! running tasks, channels and threads.
//!
//! ```
//! use streamwork_core::{Collector, Record};
//! let mut out = Collector::detached();
//! out.emit("hello");
//! assert_eq!(out.take_buffered(), vec![Record::new("hello")]);
//! ```
//!
//! Modules:
//! * [`component`]: the traits users implement, and their [`Context`];
//! * [`collector`], [`outputs`]: where records are emitted, and named channels;
//! * [`grouping`], [`hash`], [`dispatch`]: routing records to instances;
//! * [`graph`], [`plan`]: building a job and looking at its shape;
//! * [`state`]: keyed state, reachable only from keyed operators;
//! * [`timer`]: event-time and processing-time timers;
//! * [`exec`]: the interface the runtime drives;
//! * [`testkit`]: driving an operator by hand in unit tests.

#![warn(missing_docs)]

pub mod ack;
pub mod acking;
pub mod checkpoint;
pub mod collector;
pub mod component;
pub mod dispatch;
pub mod error;
pub mod exec;
pub mod flow;
pub mod graph;
pub mod grouping;
pub mod hash;
pub mod message;
pub mod outputs;
pub mod plan;
pub mod record;
pub mod state;
pub mod testkit;
pub mod time;
pub mod timer;

pub use checkpoint::{Restore, StateBytes};
pub use collector::Collector;
pub use component::{
    Admits, AnyTime, AssignsWatermarks, ByKey, CoOperator, Context, EventTime, InstanceContext,
    InstanceIdx, KeyKind, NoKey, Operator, Sink, Source, SourcePoll, StreamTime, TimeRequirement,
    Unwatermarked, Watermarked,
};
pub use error::{ConnectorError, ErrorDomain, GraphError, TaskError};
pub use flow::{FlowControl, Overflow, PauseWatermarks};
pub use graph::{
    ComponentKind, Input, IntoInputs, JobBuilder, JobConfig, JobGraph, KeyedStream, NodeId, Stream,
};
pub use grouping::{GroupingKind, KeyGroups};
pub use outputs::{
    AllChannelsHandled, ChannelHandled, ChannelInfo, Handled, Outputs, Unconnected,
    all_channels_handled,
};
pub use plan::JobPlan;
pub use record::{Data, Record};
pub use state::{CurrentKey, Key, KeyedState};
pub use time::Timestamp;
