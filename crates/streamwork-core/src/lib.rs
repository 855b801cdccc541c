//! Streamwork's vocabulary: records and time, the [`Source`], [`Operator`]
//! and [`Sink`] traits users implement, [`Collector`]s and the
//! [`Edge`] trait they push into, output channel sets, typed stream handles
//! and grouping kinds, keys and key groups, keyed state, timers, checkpoints as
//! components see them, errors, and a test kit.
//!
//! What it is not: an engine. It has no threads, no I/O, no channels, no
//! sleeps and no thread-locals; it does not build, wire or run jobs, and it
//! does not route records. The job builder (with the groupings chosen on a
//! stream), the routes and everything that runs a job live in
//! `streamwork-runtime`.
//!
//! ```
//! use streamwork::core::{Collector, Record};
//! let mut out = Collector::detached();
//! out.emit("hello");
//! assert_eq!(out.take_buffered(), vec![Record::new("hello")]);
//! ```
//!
//! Modules:
//! * [`component`]: the traits users implement, and their [`Context`];
//!   [`ports`]: an operator with several inputs as one [`Operator`];
//! * [`key`], [`stream_time`]: partitioning and time in the type (keyed inputs,
//!   watermarked streams, event-time operators);
//! * [`instance`]: what an instance knows about where it runs;
//! * [`collector`], [`outputs`], [`edge`], [`control`]: where records are
//!   emitted, named channels, the edges a collector pushes into, and the
//!   control messages that travel with records;
//! * [`stream`], [`grouping`], [`flow`], [`hash`]: typed stream handles, the
//!   kinds of grouping and key groups, what an edge does when full, the
//!   stable key hash;
//! * [`state`], [`timer`]: keyed state, reachable only from keyed operators,
//!   and event-time and processing-time timers;
//! * [`pre_aggregate`]: what a keyed operator merges before its exchange;
//! * [`checkpoint`], [`lineage`]: checkpoints and acking as components see them;
//! * [`id`]: the newtypes of ids;
//! * [`testkit`]: driving an operator by hand in unit tests.

#![warn(missing_docs)]

pub mod chain;
pub mod checkpoint;
pub mod collector;
pub mod component;
pub mod control;
pub mod edge;
pub mod error;
pub mod flow;
pub mod grouping;
pub mod hash;
pub mod id;
pub mod instance;
pub mod key;
pub mod lineage;
pub mod ops;
pub mod outputs;
pub mod portable;
pub mod ports;
pub mod pre_aggregate;
pub mod record;
pub mod state;
pub mod stream;
pub mod stream_time;
pub mod table;
pub mod testkit;
pub mod time;
pub mod timer;

pub use checkpoint::{
    CheckpointView, DeferredBytes, Delivery, InputHold, InputHolds, Restore, SharedBytes,
    SideCheck, SideRecord, SnapshotContext, StateBytes,
};
pub use collector::Collector;
pub use component::{
    Admits, AnyTime, AssignsWatermarks, ByKey, Context, EventTime, KeyKind, NoKey, Operator,
    PreAggregating, Sink, Source, SourcePoll, Statefulness, StreamTime, TimeRequirement,
    Unwatermarked, Watermarked,
};
pub use control::{Control, Disconnected};
pub use edge::Edge;
pub use error::{ConnectorError, ErrorDomain, FormatError, TaskError};
pub use flow::{FlowControl, Overflow, PauseWatermarks};
pub use grouping::{GroupingKind, KeyGroups};
pub use id::{CheckpointId, InstanceIdx, JobId, NodeId, OperatorId, RootId};
pub use instance::InstanceContext;
pub use outputs::{
    AllChannelsHandled, Channel, ChannelHandled, ChannelInfo, Handled, Outputs, Unconnected,
    all_channels_handled,
};
pub use portable::Portable;
pub use record::{Data, Record};
pub use state::{CurrentKey, Key, KeyedState};
pub use stream::Stream;
pub use time::Timestamp;
