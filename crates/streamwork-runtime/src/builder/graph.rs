//! A checked job graph: its components and edges as data (names,
//! parallelism, ports, channels, groupings), with the factories that
//! instantiate them, and the job's settings.

use std::sync::Arc;

use streamwork_core::NodeId;
use streamwork_core::Statefulness;
use streamwork_core::checkpoint::Delivery;
use streamwork_core::collector::DEFAULT_BATCH_SIZE;
use streamwork_core::flow::FlowControl;
use streamwork_core::grouping::{GroupingKind, KeyGroups};
use streamwork_core::outputs::ChannelInfo;

use super::factory::{EdgeFactories, EdgeWiring, NodeFactory};
use crate::cut::ends::EnvelopeSource;

/// What kind of component a node is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    /// Brings records in.
    Source,
    /// Transforms records.
    Operator,
    /// Writes records out.
    Sink,
}

impl std::fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ComponentKind::Source => "source",
            ComponentKind::Operator => "operator",
            ComponentKind::Sink => "sink",
        })
    }
}

/// Name and type of one input port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// `in`, or `left` / `right` for two-input operators.
    pub name: &'static str,
    /// The Rust type of its records.
    pub type_name: &'static str,
    /// Whether the port is keyed (its operator has keyed state).
    pub keyed: bool,
}

impl PortInfo {
    /// Port `name` of records of type `T`.
    pub(crate) fn of<T>(name: &'static str, keyed: bool) -> Self {
        PortInfo {
            name,
            type_name: std::any::type_name::<T>(),
            keyed,
        }
    }
}

/// What a component can keep of a delivery promise, as it declares it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Guarantee {
    /// A source: whether it resumes from its checkpointed position.
    Source {
        /// [`Source::replayable`](streamwork_core::Source::replayable).
        replayable: bool,
    },
    /// An operator: what it keeps across records.
    Operator(Statefulness),
    /// A sink: whether what it publishes is exactly a failure-free run's.
    Sink {
        /// [`Sink::exactly_once`](streamwork_core::Sink::exactly_once).
        exactly_once: bool,
    },
}

impl Guarantee {
    /// Why this component cannot keep `delivery`, if it cannot, with the fix.
    pub fn problem(self, delivery: Delivery) -> Option<String> {
        if delivery == Delivery::AtMostOnce {
            return None;
        }
        match self {
            Guarantee::Source { replayable: false } => Some(
                "it is not a replayable source: after a failure it cannot resume from its checkpointed position; read a replayable source (`FileSource`, `GeneratorSource`, `KafkaSource`), or run at most once".to_string(),
            ),
            Guarantee::Operator(Statefulness::Unchecked(fix)) => Some(format!(
                "it keeps state that its checkpoints leave out: {fix}"
            )),
            Guarantee::Sink {
                exactly_once: false,
            } if delivery == Delivery::ExactlyOnce => Some(
                "it is neither transactional nor idempotent: after a failure it would publish replayed records twice; write to a transactional sink (`FileSink::transactional()`, `KafkaSink::transactional(..)`) or an idempotent one (`UpsertFileSink`), or promise at least once".to_string(),
            ),
            _ => None,
        }
    }
}

/// One component of a job graph.
pub struct NodeDef {
    pub(crate) name: Arc<str>,
    pub(crate) kind: ComponentKind,
    pub(crate) parallelism: u32,
    pub(crate) ports: Vec<PortInfo>,
    pub(crate) channels: Vec<ChannelInfo>,
    pub(crate) guarantee: Guarantee,
    pub(crate) factory: NodeFactory,
    /// The input a source reads in splits a runner may share out
    /// ([`Source::split_input`](streamwork_core::Source::split_input)).
    pub(crate) split_input: Option<String>,
    /// The partitions of its log a source's instances are told to read.
    pub(crate) assigned: Option<std::sync::Arc<[i32]>>,
    /// What the runner gives a source it assigned partitions to.
    pub(crate) link: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
    /// For a job that is one part of a graph (`into_part`): its share and
    /// the shares, which its instance is told as its index and parallelism
    /// (its key groups, its part of checkpoints).
    pub(crate) share: Option<(u32, u32)>,
    /// Where a sink keeps what it staged, if on one machine
    /// ([`Sink::stages_locally`](streamwork_core::Sink::stages_locally)).
    pub(crate) staged_locally: Option<String>,
    /// Whether the source or sink may wait for something outside the job
    /// ([`Source::may_block`](streamwork_core::Source::may_block)): on
    /// workers, its task gets a thread of its own.
    pub(crate) may_block: bool,
}

impl NodeDef {
    /// A component of its shape alone: no partitioned log, nothing
    /// assigned or linked, nothing staged on one machine, not a stage's
    /// partition, and never waiting outside the job (a caller says
    /// otherwise with struct update syntax).
    pub(crate) fn new(
        name: &str,
        kind: ComponentKind,
        parallelism: u32,
        ports: Vec<PortInfo>,
        channels: Vec<ChannelInfo>,
        guarantee: Guarantee,
        factory: NodeFactory,
    ) -> Self {
        NodeDef {
            name: name.into(),
            kind,
            parallelism,
            ports,
            channels,
            guarantee,
            factory,
            split_input: None,
            assigned: None,
            link: None,
            share: None,
            staged_locally: None,
            may_block: false,
        }
    }

    /// The component's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The component's name, shared.
    pub fn name_arc(&self) -> Arc<str> {
        self.name.clone()
    }
    /// Source, operator or sink.
    pub fn kind(&self) -> ComponentKind {
        self.kind
    }
    /// Number of instances.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }
    /// Where a sink keeps what it staged for checkpoints not yet committed,
    /// if that is a place of one machine (see
    /// [`Sink::stages_locally`](streamwork_core::Sink::stages_locally)).
    pub fn staged_locally(&self) -> Option<&str> {
        self.staged_locally.as_deref()
    }
    /// Input ports.
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }
    /// Output channels.
    pub fn channels(&self) -> &[ChannelInfo] {
        &self.channels
    }
    /// What it can keep of a delivery promise.
    pub fn guarantee(&self) -> Guarantee {
        self.guarantee
    }
    /// The input a source reads in splits a runner may share out, if any.
    pub fn split_input(&self) -> Option<&str> {
        self.split_input.as_deref()
    }
    /// How to instantiate it.
    pub(crate) fn factory(&self) -> &NodeFactory {
        &self.factory
    }
}

/// One edge: an output channel of one component into an input port of another.
pub struct EdgeDef {
    pub(crate) from: NodeId,
    pub(crate) channel: u32,
    pub(crate) to: NodeId,
    pub(crate) port: u32,
    pub(crate) grouping: GroupingKind,
    pub(crate) flow: FlowControl,
    pub(crate) factories: EdgeFactories,
    /// How a keyed edge's records cross processes.
    pub(crate) exchange: Option<std::sync::Arc<ExchangeEnds>>,
}

impl EdgeDef {
    /// Upstream component.
    pub fn from(&self) -> NodeId {
        self.from
    }
    /// Upstream output channel index.
    pub fn channel(&self) -> u32 {
        self.channel
    }
    /// Downstream component.
    pub fn to(&self) -> NodeId {
        self.to
    }
    /// Downstream input port index.
    pub fn port(&self) -> u32 {
        self.port
    }
    /// The grouping (with the default resolved).
    pub fn grouping(&self) -> GroupingKind {
        self.grouping
    }
    /// Capacity, overflow policy and backpressure watermarks.
    pub fn flow(&self) -> FlowControl {
        self.flow
    }
    /// Builds the channel dispatcher of this edge for one sending instance: a
    /// `Box<dyn Edge<T>>` boxed as `Any`.
    pub(crate) fn make_dispatcher(&self, wiring: EdgeWiring) -> Box<dyn std::any::Any + Send> {
        (self.factories.dispatcher)(self.grouping, wiring)
    }
}

/// Settings of a job's runtime behaviour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobConfig {
    /// Records per batch between tasks.
    pub batch_size: usize,
    /// Capacity of each channel, in batches.
    pub channel_capacity: usize,
    /// Key groups of keyed streams.
    pub key_groups: KeyGroups,
    /// The delivery the job promises; the runtime refuses to run it with a
    /// weaker one.
    pub delivery: Delivery,
    /// Worker threads that share the job's tasks (see
    /// [`JobBuilder::workers`](super::JobBuilder::workers)): one per core
    /// by default; `None`: one thread per task.
    pub workers: Option<u32>,
    /// Whether keyed operators that can merge their records
    /// ([`Operator::COMBINES`](streamwork_core::Operator::COMBINES)) get a
    /// combiner before their keyed exchange (see
    /// [`JobBuilder::combiners`](super::JobBuilder::combiners)); on by default.
    pub combiners: bool,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            channel_capacity: 16,
            key_groups: KeyGroups::DEFAULT,
            delivery: Delivery::AtMostOnce,
            workers: Some(crate::worker::cores()),
            combiners: true,
        }
    }
}

/// A checked job graph, ready to run.
pub struct JobGraph {
    pub(crate) name: String,
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) edges: Vec<EdgeDef>,
    pub(crate) config: JobConfig,
}

impl JobGraph {
    /// The same job run on `workers` threads that take turns (`0`: one
    /// thread per task); see [`JobBuilder::workers`](super::JobBuilder::workers).
    /// For a runner that picks the threads at run time (a `--threads` flag).
    pub fn with_workers(mut self, workers: u32) -> Self {
        self.config.workers = (workers > 0).then_some(workers);
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Components, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[NodeDef] {
        &self.nodes
    }
    /// Edges.
    pub fn edges(&self) -> &[EdgeDef] {
        &self.edges
    }
    /// Runtime settings.
    pub fn config(&self) -> &JobConfig {
        &self.config
    }
    /// The component `id`.
    pub fn node(&self, id: NodeId) -> &NodeDef {
        &self.nodes[id.index()]
    }

    /// The first component that cannot keep `delivery`, and why.
    pub fn delivery_problem(&self, delivery: Delivery) -> Option<(&str, String)> {
        self.nodes
            .iter()
            .find_map(|n| Some((n.name(), n.guarantee.problem(delivery)?)))
    }
}

/// Makes the encoding operator of an exchange: its name, the writer.
type EncodeMaker = Box<dyn Fn(&str, u32) -> NodeDef + Send + Sync>;
/// Makes the decoding source of an exchange: its name, what reads it.
type DecodeMaker = Box<dyn Fn(&str, Box<dyn EnvelopeSource>) -> NodeDef + Send + Sync>;

/// How to make the ends of one keyed edge cut between parts, for its
/// record type (made where `key_by` knew the type, by the builder's
/// `exchange_ends`).
pub(crate) struct ExchangeEnds {
    /// The records' Rust type.
    pub(crate) type_name: &'static str,
    /// Whether the stream carries watermarks.
    pub(crate) watermarked: bool,
    pub(crate) encode: EncodeMaker,
    pub(crate) decode: DecodeMaker,
}

impl ExchangeEnds {
    /// The operator that encodes the records writer `writer` sends into the
    /// exchange.
    pub(crate) fn encode_node(&self, name: &str, writer: u32) -> NodeDef {
        (self.encode)(name, writer)
    }

    /// The source of the exchange's records, read by `inner`.
    pub(crate) fn decode_node(&self, name: &str, inner: Box<dyn EnvelopeSource>) -> NodeDef {
        (self.decode)(name, inner)
    }
}
