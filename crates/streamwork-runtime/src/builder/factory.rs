//! Type-erased factories: how the wiring instantiates a component's instances
//! and an edge's dispatchers and lineages without knowing their types. Each
//! is a closure made by the typed builder, where the types are known, so
//! that everything it builds is monomorphised over the user's types.

use std::any::Any;
use std::sync::Arc;

use streamwork_core::InstanceIdx;
use streamwork_core::grouping::{GroupingKind, KeyGroups};
use streamwork_core::outputs::OutputParts;

use crate::acking::Acker;
use crate::instance::{Env, InputTask, SourceTask};
use crate::message::{ChannelSender, SenderIdx};

/// Builds a source instance.
pub(crate) type SourceFactory = Box<dyn Fn(Env, OutputParts) -> Box<dyn SourceTask> + Send>;

/// Builds an instance that reads its inputs from channels. The last argument
/// maps, per port, each sender index to the ordinal of its edge at that port.
pub(crate) type RootFactory =
    Box<dyn Fn(Env, OutputParts, Vec<Vec<u32>>) -> Box<dyn InputTask> + Send>;

/// Builds an instance fused into its upstream's task: a `Box<dyn Edge<In>>`
/// boxed as `Any`.
pub(crate) type FusedFactory = Box<dyn Fn(Env, OutputParts) -> Box<dyn Any + Send> + Send>;

/// How the wiring instantiates a component.
pub(crate) enum NodeFactory {
    /// A source.
    Source(SourceFactory),
    /// An operator or sink.
    Input {
        /// As the root of a task, reading channels.
        root: RootFactory,
        /// Fused into its upstream (single-input components only).
        fused: Option<FusedFactory>,
    },
}

/// Everything a channel dispatcher needs from the wiring.
pub(crate) struct EdgeWiring {
    /// This sender's index at the target port.
    pub(crate) from: SenderIdx,
    /// One sender per target instance, in instance order.
    pub(crate) targets: Vec<Box<dyn ChannelSender>>,
    /// Records per batch.
    pub(crate) batch_size: usize,
    /// The sending instance's index.
    pub(crate) source_instance: InstanceIdx,
    /// The job's key groups.
    pub(crate) key_groups: KeyGroups,
}

/// Builds the dispatcher of one sending instance of an edge: a
/// `Box<dyn Edge<T>>` boxed as `Any`.
pub(crate) type DispatcherFactory =
    Box<dyn Fn(GroupingKind, EdgeWiring) -> Box<dyn Any + Send> + Send + Sync>;

/// Joins the edges of one channel (each a `Box<dyn Edge<T>>` boxed as
/// `Any`, at least two) into the one edge its collector hands batches to.
pub(crate) type FanOutFactory = fn(Vec<Box<dyn Any + Send>>) -> Box<dyn Any + Send>;

/// What an edge carrying `T` makes once it is wired, made where `T` is known.
pub(crate) struct EdgeFactories {
    /// Its dispatcher, for each sending instance.
    pub(crate) dispatcher: DispatcherFactory,
    /// The lineage of the channel it leaves from, in a job run with acking.
    pub(crate) lineage: LineageFactory,
    /// The fan-out of the channel it leaves from, when others leave it too.
    pub(crate) fan_out: FanOutFactory,
}

/// Builds the lineage of the collector of the channel an edge leaves from,
/// in a job run with acking: a `Box<dyn Lineage<T>>` boxed as `Any`. For a
/// source instance (given), the lineage starts a tree per record.
pub(crate) type LineageFactory =
    Box<dyn Fn(&Arc<Acker>, Option<(Arc<str>, InstanceIdx)>) -> Box<dyn Any + Send> + Send + Sync>;
