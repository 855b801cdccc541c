//! The typed job-graph builder.
//!
//! Components are added with [`JobBuilder::source`], [`JobBuilder::operator`],
//! [`JobBuilder::co_operator`] and [`JobBuilder::sink`]; each returns typed
//! [`Stream`] handles for its output channels, and each input takes streams of
//! the exact input type, so a type mismatch on an edge is a compile error.
//! Groupings are chosen on the stream: [`Stream::shuffle`], [`Stream::key_by`],
//! [`Stream::broadcast`], [`Stream::global`], [`Stream::forward`],
//! [`Stream::partition_by`]; a bare stream means forward when the parallelism
//! is equal and shuffle otherwise.
//!
//! ```
//! use streamwork_core::{Collector, Context, JobBuilder, NoKey, Operator};
//! # use streamwork_core::{Source, SourcePoll, ConnectorError, Sink, Record};
//! # #[derive(Clone)] struct Numbers(u64);
//! # impl Source for Numbers { type Out = Collector<u64>;
//! #   fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
//! #     if self.0 == 0 { return Ok(SourcePoll::Finished) } self.0 -= 1; out.emit(self.0); Ok(SourcePoll::Emitted) } }
//! # #[derive(Clone)] struct Discard;
//! # impl Sink for Discard { type In = u64; fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> { Ok(()) } }
//! #[derive(Clone)]
//! struct Double;
//! impl Operator for Double {
//!     type In = u64;
//!     type Key = NoKey;
//!     type Out = Collector<u64>;
//!     type Time = streamwork_core::AnyTime;
//!     fn on_record(&mut self, v: u64, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
//!         ctx.emit(v * 2)
//!     }
//! }
//! let mut job = JobBuilder::new("doubler");
//! let numbers = job.source("numbers", 1, Numbers(10));
//! let doubled = job.operator("double", 2, Double, numbers.shuffle());
//! job.sink("discard", 1, Discard, doubled.key_by(|v: &u64| *v % 3));
//! let graph = job.build().unwrap();
//! assert_eq!(graph.nodes().len(), 3);
//! ```

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::collector::DEFAULT_BATCH_SIZE;
use crate::component::{
    Admits, ByKey, CoOperator, InstanceContext, KeyFn, KeyKind, NoKey, Operator, Sink, Source,
    StreamTime, TimeRequirement, Unwatermarked,
};
use crate::dispatch::{ChannelDispatcher, Edge};
use crate::error::GraphError;
use crate::exec::{self, InputTask, InstanceCounters, SourceTask};
use crate::flow::{FlowControl, Overflow, PauseWatermarks};
use crate::grouping::{
    BroadcastRoute, CustomRoute, FixedRoute, GroupingKind, KeyGroups, KeyRoute, ShuffleRoute,
};
use crate::hash::stable_hash;
use crate::message::{ChannelSender, SenderIdx};
use crate::outputs::{ChannelInfo, OutputParts, Outputs};
use crate::record::Data;
use crate::state::Key;

/// Identifies a component within its job.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A typed handle on one output channel of a component, used to connect it.
///
/// `Tm` says whether the stream carries watermarks ([`Watermarked`]) or not
/// ([`Unwatermarked`]): an event-time operator only accepts watermarked streams.
pub struct Stream<T, Tm = Unwatermarked> {
    job: u64,
    node: NodeId,
    channel: u32,
    _type: PhantomData<fn() -> (T, Tm)>,
}

impl<T, Tm> Clone for Stream<T, Tm> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, Tm> Copy for Stream<T, Tm> {}

impl<T, Tm> std::fmt::Debug for Stream<T, Tm> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:?}.{})", self.node, self.channel)
    }
}

/// Everything a channel dispatcher needs from the runtime.
pub struct EdgeWiring {
    /// This sender's index at the target port.
    pub from: SenderIdx,
    /// One sender per target instance, in instance order.
    pub targets: Vec<Box<dyn ChannelSender>>,
    /// Records per batch.
    pub batch_size: usize,
    /// The sending instance's index.
    pub source_instance: u32,
    /// The job's key groups.
    pub key_groups: KeyGroups,
}

type EdgeMaker<T> = Arc<dyn Fn(GroupingKind, EdgeWiring) -> Box<dyn Edge<T>> + Send + Sync>;

fn dispatcher<T: Data, R: crate::grouping::Route<T>>(route: R, w: EdgeWiring) -> Box<dyn Edge<T>> {
    Box::new(ChannelDispatcher::new(
        route,
        w.from,
        w.targets,
        w.batch_size,
    ))
}

fn basic_maker<T: Data>() -> EdgeMaker<T> {
    Arc::new(|kind, w: EdgeWiring| match kind {
        GroupingKind::Forward => dispatcher(FixedRoute(w.source_instance), w),
        GroupingKind::Broadcast => dispatcher(BroadcastRoute, w),
        GroupingKind::Global => dispatcher(FixedRoute(0), w),
        GroupingKind::Shuffle | GroupingKind::Key | GroupingKind::Custom => {
            let start = w.source_instance;
            dispatcher(ShuffleRoute::starting_at(start), w)
        }
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupingSpec {
    /// Forward when the parallelism is equal, shuffle otherwise.
    Auto,
    Fixed(GroupingKind),
}

/// A stream with its grouping chosen: one input edge of a component.
pub struct Input<T, Tm = Unwatermarked> {
    job: u64,
    node: NodeId,
    channel: u32,
    grouping: GroupingSpec,
    make: EdgeMaker<T>,
    flow: FlowControl,
    _time: PhantomData<fn() -> Tm>,
}

impl<T, Tm> Input<T, Tm> {
    /// Lets each sender queue at most `batches` batches to each receiver.
    pub fn capacity(mut self, batches: usize) -> Self {
        self.flow.capacity = Some(batches.max(1));
        self
    }

    /// What to do when the channel is full (default: block).
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.flow.overflow = policy;
        self
    }

    /// Pauses the sources upstream while the receiver's queue on this edge is
    /// above `high` (a fraction of its capacity), until it is below `low`.
    pub fn pause_sources_above(mut self, high: f64, low: f64) -> Self {
        let high = high.clamp(0.01, 1.0);
        self.flow.pause = Some(PauseWatermarks {
            high,
            low: low.clamp(0.0, high * 0.99),
        });
        self
    }
}

impl<T, Tm> Clone for Input<T, Tm> {
    fn clone(&self) -> Self {
        Input {
            job: self.job,
            node: self.node,
            channel: self.channel,
            grouping: self.grouping,
            make: self.make.clone(),
            flow: self.flow,
            _time: PhantomData,
        }
    }
}

/// A stream grouped by key `K` (fields grouping): the only input a keyed
/// operator (`type Key = ByKey<K>`) accepts.
pub struct KeyedStream<T, K, Tm = Unwatermarked> {
    input: Input<T, Tm>,
    key: KeyFn<T, K>,
}

impl<T, K, Tm> Clone for KeyedStream<T, K, Tm> {
    fn clone(&self) -> Self {
        KeyedStream {
            input: self.input.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> KeyedStream<T, K, Tm> {
    /// This fields-grouped stream as a plain input, for an operator that is
    /// not keyed (it receives all records of a key but no keyed context).
    pub fn as_input(self) -> Input<T, Tm> {
        self.input
    }

    /// See [`Input::capacity`].
    pub fn capacity(mut self, batches: usize) -> Self {
        self.input = self.input.capacity(batches);
        self
    }

    /// See [`Input::overflow`].
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.input = self.input.overflow(policy);
        self
    }

    /// See [`Input::pause_sources_above`].
    pub fn pause_sources_above(mut self, high: f64, low: f64) -> Self {
        self.input = self.input.pause_sources_above(high, low);
        self
    }
}

impl<T: Data, Tm: StreamTime> Stream<T, Tm> {
    #[doc(hidden)]
    pub fn __new(job: u64, node: NodeId, channel: u32) -> Self {
        Stream {
            job,
            node,
            channel,
            _type: PhantomData,
        }
    }

    fn with(self, grouping: GroupingSpec) -> Input<T, Tm> {
        Input {
            job: self.job,
            node: self.node,
            channel: self.channel,
            grouping,
            make: basic_maker(),
            flow: FlowControl::default(),
            _time: PhantomData,
        }
    }

    /// The default grouping, with capacity `batches`; see [`Input::capacity`].
    pub fn capacity(self, batches: usize) -> Input<T, Tm> {
        self.with(GroupingSpec::Auto).capacity(batches)
    }

    /// The default grouping, with an overflow policy; see [`Input::overflow`].
    pub fn overflow(self, policy: Overflow) -> Input<T, Tm> {
        self.with(GroupingSpec::Auto).overflow(policy)
    }

    /// The default grouping, with backpressure watermarks; see
    /// [`Input::pause_sources_above`].
    pub fn pause_sources_above(self, high: f64, low: f64) -> Input<T, Tm> {
        self.with(GroupingSpec::Auto).pause_sources_above(high, low)
    }

    /// Forward grouping: instance `i` feeds instance `i` (equal parallelism);
    /// the two components are fused into one task.
    pub fn forward(self) -> Input<T, Tm> {
        self.with(GroupingSpec::Fixed(GroupingKind::Forward))
    }

    /// Shuffle grouping: records go round-robin to the instances.
    pub fn shuffle(self) -> Input<T, Tm> {
        self.with(GroupingSpec::Fixed(GroupingKind::Shuffle))
    }

    /// Broadcast grouping: every instance receives every record.
    pub fn broadcast(self) -> Input<T, Tm> {
        self.with(GroupingSpec::Fixed(GroupingKind::Broadcast))
    }

    /// Global grouping: every record goes to instance 0.
    pub fn global(self) -> Input<T, Tm> {
        self.with(GroupingSpec::Fixed(GroupingKind::Global))
    }

    /// Fields grouping by `key`: every record with the same key goes to the
    /// same instance, through the [stable hash](crate::hash) and key groups.
    pub fn key_by<K: Key, F>(self, key: F) -> KeyedStream<T, K, Tm>
    where
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        // The dispatcher calls the key function through `Arc<F>`: a static call,
        // inlined into the routing loop. The receiver gets it as a `KeyFn`.
        let key = Arc::new(key);
        let route_key = key.clone();
        let make: EdgeMaker<T> = Arc::new(move |_, w: EdgeWiring| {
            let key = route_key.clone();
            let route = KeyRoute::new(
                move |v: &T| stable_hash(&key(v)),
                w.key_groups,
                w.targets.len() as u32,
            );
            dispatcher(route, w)
        });
        KeyedStream {
            input: Input {
                job: self.job,
                node: self.node,
                channel: self.channel,
                grouping: GroupingSpec::Fixed(GroupingKind::Key),
                make,
                flow: FlowControl::default(),
                _time: PhantomData,
            },
            key,
        }
    }

    /// Custom grouping: `pick(record, n_instances)` chooses the instance
    /// (taken modulo `n_instances`).
    pub fn partition_by(
        self,
        pick: impl Fn(&T, u32) -> u32 + Clone + Send + Sync + 'static,
    ) -> Input<T, Tm> {
        let make: EdgeMaker<T> =
            Arc::new(move |_, w: EdgeWiring| dispatcher(CustomRoute(pick.clone()), w));
        Input {
            job: self.job,
            node: self.node,
            channel: self.channel,
            grouping: GroupingSpec::Fixed(GroupingKind::Custom),
            make,
            flow: FlowControl::default(),
            _time: PhantomData,
        }
    }
}

/// The streams feeding one input port, and for keyed ports the key extractor
/// of each. `Tm` is the streams' common time marker.
pub struct Inputs<T: 'static, KK: KeyKind, Tm = Unwatermarked> {
    items: Vec<(Input<T, Tm>, KK::Extractor<T>)>,
}

/// Conversion into the inputs of a port partitioned as `KK`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be connected to this input",
    label = "the stream's record type, partitioning or time does not match this input",
    note = "an operator with `type Key = ByKey<K>` (keyed state) needs a stream keyed by `K`: use `.key_by(|record| ...)` on the stream (`.key(...)` in `job!`)",
    note = "an event-time operator (event-time windows and timers) needs a `Watermarked` stream: read from a watermark strategy placed after the source, such as `Watermarks::bounded(Duration::from_secs(4)).timestamps(|record| ...)`",
    note = "several streams into one input (fan-in) are given as an array or a Vec, and must all carry watermarks or none"
)]
pub trait IntoInputs<T: 'static, KK: KeyKind, Tm> {
    /// Converts.
    fn into_inputs(self) -> Inputs<T, KK, Tm>;
}

impl<T: Data, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for Stream<T, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(self.with(GroupingSpec::Auto), ())],
        }
    }
}

impl<T: Data, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for Input<T, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(self, ())],
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for KeyedStream<T, K, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(self.input, ())],
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> IntoInputs<T, ByKey<K>, Tm> for KeyedStream<T, K, Tm> {
    fn into_inputs(self) -> Inputs<T, ByKey<K>, Tm> {
        Inputs {
            items: vec![(self.input, self.key)],
        }
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime, X: IntoInputs<T, KK, Tm>> IntoInputs<T, KK, Tm>
    for Vec<X>
{
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        Inputs {
            items: self
                .into_iter()
                .flat_map(|x| x.into_inputs().items)
                .collect(),
        }
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime, X: IntoInputs<T, KK, Tm>, const N: usize>
    IntoInputs<T, KK, Tm> for [X; N]
{
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        Vec::from(self).into_inputs()
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime> IntoInputs<T, KK, Tm> for Inputs<T, KK, Tm> {
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        self
    }
}

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

/// Builds a source instance.
pub type SourceFactory =
    Box<dyn Fn(InstanceContext, OutputParts, Arc<InstanceCounters>) -> Box<dyn SourceTask> + Send>;
/// Builds an instance that reads its inputs from channels. The last argument
/// maps, per port, each sender index to the ordinal of its edge at that port.
pub type RootFactory = Box<
    dyn Fn(InstanceContext, OutputParts, Arc<InstanceCounters>, Vec<Vec<u32>>) -> Box<dyn InputTask>
        + Send,
>;
/// Builds an instance fused into its upstream's task: a `Box<dyn Edge<In>>`
/// boxed as `Any`.
pub type FusedFactory =
    Box<dyn Fn(InstanceContext, OutputParts, Arc<InstanceCounters>) -> Box<dyn Any + Send> + Send>;

/// How the runtime instantiates a component.
pub enum NodeFactory {
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

/// One component of a job graph.
pub struct NodeDef {
    name: Arc<str>,
    kind: ComponentKind,
    parallelism: u32,
    ports: Vec<PortInfo>,
    channels: Vec<ChannelInfo>,
    factory: NodeFactory,
}

impl NodeDef {
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
    /// Input ports.
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }
    /// Output channels.
    pub fn channels(&self) -> &[ChannelInfo] {
        &self.channels
    }
    /// How to instantiate it.
    pub fn factory(&self) -> &NodeFactory {
        &self.factory
    }
}

/// One edge: an output channel of one component into an input port of another.
pub struct EdgeDef {
    from: NodeId,
    channel: u32,
    to: NodeId,
    port: u32,
    grouping: GroupingKind,
    flow: FlowControl,
    make: Box<dyn Fn(GroupingKind, EdgeWiring) -> Box<dyn Any + Send> + Send + Sync>,
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
    /// The grouping (with `Auto` resolved).
    pub fn grouping(&self) -> GroupingKind {
        self.grouping
    }
    /// Capacity, overflow policy and backpressure watermarks.
    pub fn flow(&self) -> FlowControl {
        self.flow
    }
    /// Builds the channel dispatcher of this edge for one sending instance: a
    /// `Box<dyn Edge<T>>` boxed as `Any`.
    pub fn make_dispatcher(&self, wiring: EdgeWiring) -> Box<dyn Any + Send> {
        (self.make)(self.grouping, wiring)
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
    pub delivery: crate::checkpoint::Delivery,
    /// Worker threads that share the job's tasks (see
    /// [`JobBuilder::workers`]); `None`: one thread per task.
    pub workers: Option<u32>,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            channel_capacity: 16,
            key_groups: KeyGroups::DEFAULT,
            delivery: crate::checkpoint::Delivery::AtMostOnce,
            workers: None,
        }
    }
}

struct PendingEdge {
    from: NodeId,
    channel: u32,
    to: NodeId,
    port: u32,
    grouping: GroupingSpec,
    flow: FlowControl,
    job: u64,
    make: Box<dyn Fn(GroupingKind, EdgeWiring) -> Box<dyn Any + Send> + Send + Sync>,
}

static NEXT_JOB_ID: AtomicU64 = AtomicU64::new(1);

/// Builds a [`JobGraph`]: the typed API under `job!`.
pub struct JobBuilder {
    id: u64,
    name: String,
    nodes: Vec<NodeDef>,
    edges: Vec<PendingEdge>,
    config: JobConfig,
    /// Components keeping state their snapshots leave out.
    uncheckpointed: Vec<String>,
}

impl JobBuilder {
    /// A new, empty job named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        JobBuilder {
            id: NEXT_JOB_ID.fetch_add(1, Ordering::Relaxed),
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
            config: JobConfig::default(),
            uncheckpointed: Vec::new(),
        }
    }

    /// Sets the number of records per batch between tasks (default 1024).
    pub fn batch_size(&mut self, records: usize) -> &mut Self {
        self.config.batch_size = records.max(1);
        self
    }

    /// Sets the capacity of each channel, in batches (default 16).
    pub fn channel_capacity(&mut self, batches: usize) -> &mut Self {
        self.config.channel_capacity = batches.max(1);
        self
    }

    /// Runs the job's tasks on `workers` threads instead of one thread per
    /// task (`workers N;` in `job!`). Each worker takes turns among its tasks.
    /// Instance `i` of a component runs on worker `(offset + i) % workers`,
    /// the offset counting the instances of the components before it: with
    /// equal parallelisms, instance `i` of every component shares a worker,
    /// so `parallelism` equal to the cores keeps one thread per core, each
    /// with a whole slice of the pipeline (the worker model of Timely
    /// Dataflow).
    ///
    /// A worker runs a task only while every channel it sends into has room,
    /// and no step of a task ever blocks: backpressure holds tasks back
    /// between steps, not in the middle of one. So a step that emits a lot
    /// (a window firing every key) queues all of it beyond the channel's
    /// capacity, and a source whose `poll` blocks holds up its worker's other
    /// tasks. Jobs with such sources are better left one thread per task.
    ///
    /// `0` means one thread per task, the default.
    ///
    /// ```
    /// use streamwork_core::JobBuilder;
    /// let mut job = JobBuilder::new("on-two-cores");
    /// job.workers(2);
    /// # let _ = job;
    /// ```
    pub fn workers(&mut self, workers: u32) -> &mut Self {
        self.config.workers = (workers > 0).then_some(workers);
        self
    }

    /// Sets the number of key groups (default 128); it bounds the parallelism
    /// of keyed components.
    pub fn key_groups(&mut self, key_groups: KeyGroups) -> &mut Self {
        self.config.key_groups = key_groups;
        self
    }

    /// Declares the delivery the job promises (`delivery exactly_once;` in
    /// `job!`, which also checks its sources and sinks when it compiles). A
    /// job promising more than at-most-once may not drop records on any edge.
    pub fn delivery(&mut self, delivery: crate::checkpoint::Delivery) -> &mut Self {
        self.config.delivery = delivery;
        self
    }

    fn add_node(
        &mut self,
        name: &str,
        kind: ComponentKind,
        parallelism: u32,
        ports: Vec<PortInfo>,
        channels: Vec<ChannelInfo>,
        factory: NodeFactory,
    ) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(NodeDef {
            name: name.into(),
            kind,
            parallelism,
            ports,
            channels,
            factory,
        });
        id
    }

    fn connect<T: Data, KK: KeyKind, Tm>(
        &mut self,
        to: NodeId,
        port: u32,
        inputs: &Inputs<T, KK, Tm>,
    ) {
        for (input, _) in &inputs.items {
            let make = input.make.clone();
            self.edges.push(PendingEdge {
                from: input.node,
                channel: input.channel,
                to,
                port,
                grouping: input.grouping,
                flow: input.flow,
                job: input.job,
                make: Box::new(move |kind, wiring| Box::new(make(kind, wiring))),
            });
        }
    }

    /// Adds a source with `parallelism` instances, each a clone of `source`.
    pub fn source<S: Source>(
        &mut self,
        name: &str,
        parallelism: u32,
        source: S,
    ) -> <S::Out as Outputs>::Streams<Unwatermarked> {
        let factory: SourceFactory = Box::new(move |ctx, mut parts, counters| {
            let out = S::Out::assemble(&mut parts);
            Box::new(exec::SourceInstance::new(
                source.clone(),
                out,
                ctx,
                counters,
            ))
        });
        let node = self.add_node(
            name,
            ComponentKind::Source,
            parallelism,
            Vec::new(),
            S::Out::channels(),
            NodeFactory::Source(factory),
        );
        S::Out::streams::<Unwatermarked>(self.id, node)
    }

    /// Adds an operator with `parallelism` instances reading `inputs`.
    pub fn operator<O: Operator, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        operator: O,
        inputs: impl IntoInputs<O::In, O::Key, Tm>,
    ) -> <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>
    where
        O::Time: Admits<Tm>,
    {
        let inputs = inputs.into_inputs();
        if !operator.checkpoints_state() {
            self.uncheckpointed.push(name.to_string());
        }
        let keyed = std::any::type_name::<O::Key>() != std::any::type_name::<NoKey>();
        let extractors: Vec<_> = inputs.items.iter().map(|(_, x)| x.clone()).collect();
        let fused_extractors = extractors.clone();
        let root_op = operator.clone();
        let root: RootFactory = Box::new(move |ctx, mut parts, counters, senders| {
            let out = O::Out::assemble(&mut parts);
            let sender_edges = senders.into_iter().next().unwrap_or_default();
            Box::new(exec::OperatorInstance::new(
                root_op.clone(),
                out,
                ctx,
                counters,
                extractors.clone(),
                sender_edges,
            ))
        });
        let fused: FusedFactory = Box::new(move |ctx, mut parts, counters| {
            let out = O::Out::assemble(&mut parts);
            let instance: Box<dyn Edge<O::In>> = Box::new(exec::OperatorInstance::new(
                operator.clone(),
                out,
                ctx,
                counters,
                fused_extractors.clone(),
                Vec::new(),
            ));
            Box::new(instance)
        });
        let node = self.add_node(
            name,
            ComponentKind::Operator,
            parallelism,
            vec![PortInfo {
                name: "in",
                type_name: std::any::type_name::<O::In>(),
                keyed,
            }],
            O::Out::channels(),
            NodeFactory::Input {
                root,
                fused: Some(fused),
            },
        );
        self.connect(node, 0, &inputs);
        O::Out::streams::<<O::Time as TimeRequirement>::Out<Tm>>(self.id, node)
    }

    /// Adds a two-input operator reading `left` and `right`.
    pub fn co_operator<C: CoOperator, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        operator: C,
        left: impl IntoInputs<C::Left, C::Key, Tm>,
        right: impl IntoInputs<C::Right, C::Key, Tm>,
    ) -> <C::Out as Outputs>::Streams<<C::Time as TimeRequirement>::Out<Tm>>
    where
        C::Time: Admits<Tm>,
    {
        let (left, right) = (left.into_inputs(), right.into_inputs());
        if !operator.checkpoints_state() {
            self.uncheckpointed.push(name.to_string());
        }
        let keyed = std::any::type_name::<C::Key>() != std::any::type_name::<NoKey>();
        let left_keys: Vec<_> = left.items.iter().map(|(_, x)| x.clone()).collect();
        let right_keys: Vec<_> = right.items.iter().map(|(_, x)| x.clone()).collect();
        let root: RootFactory = Box::new(move |ctx, mut parts, counters, senders| {
            let out = C::Out::assemble(&mut parts);
            Box::new(exec::CoOperatorInstance::new(
                operator.clone(),
                out,
                ctx,
                counters,
                left_keys.clone(),
                right_keys.clone(),
                senders,
            ))
        });
        let node = self.add_node(
            name,
            ComponentKind::Operator,
            parallelism,
            vec![
                PortInfo {
                    name: "left",
                    type_name: std::any::type_name::<C::Left>(),
                    keyed,
                },
                PortInfo {
                    name: "right",
                    type_name: std::any::type_name::<C::Right>(),
                    keyed,
                },
            ],
            C::Out::channels(),
            NodeFactory::Input { root, fused: None },
        );
        self.connect(node, 0, &left);
        self.connect(node, 1, &right);
        C::Out::streams::<<C::Time as TimeRequirement>::Out<Tm>>(self.id, node)
    }

    /// Adds a sink with `parallelism` instances reading `inputs`.
    pub fn sink<S: Sink, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        sink: S,
        inputs: impl IntoInputs<S::In, NoKey, Tm>,
    ) {
        let inputs = inputs.into_inputs();
        let root_sink = sink.clone();
        let root: RootFactory = Box::new(move |ctx, _, counters, _| {
            Box::new(exec::SinkInstance::new(root_sink.clone(), ctx, counters))
        });
        let fused: FusedFactory = Box::new(move |ctx, _, counters| {
            let instance: Box<dyn Edge<S::In>> =
                Box::new(exec::SinkInstance::new(sink.clone(), ctx, counters));
            Box::new(instance)
        });
        let node = self.add_node(
            name,
            ComponentKind::Sink,
            parallelism,
            vec![PortInfo {
                name: "in",
                type_name: std::any::type_name::<S::In>(),
                keyed: false,
            }],
            Vec::new(),
            NodeFactory::Input {
                root,
                fused: Some(fused),
            },
        );
        self.connect(node, 0, &inputs);
    }

    /// Merges (unions) several streams of one type into one stream, through an
    /// identity operator named `name`.
    pub fn merge<T: Data, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        inputs: impl IntoInputs<T, NoKey, Tm>,
    ) -> Stream<T, Tm> {
        self.operator(name, parallelism, exec::Identity::<T>::new(), inputs)
    }

    /// Checks the graph and returns it, ready to run.
    pub fn build(self) -> Result<JobGraph, GraphError> {
        if !self.nodes.iter().any(|n| n.kind == ComponentKind::Source) {
            return Err(GraphError::NoSource { job: self.name });
        }
        let mut names = std::collections::HashSet::new();
        for node in &self.nodes {
            if !names.insert(node.name.clone()) {
                return Err(GraphError::DuplicateName {
                    name: node.name.to_string(),
                });
            }
            if node.parallelism == 0 {
                return Err(GraphError::ZeroParallelism {
                    component: node.name.to_string(),
                });
            }
            if node.ports.iter().any(|p| p.keyed)
                && node.parallelism > self.config.key_groups.count()
            {
                return Err(GraphError::TooManyInstances {
                    component: node.name.to_string(),
                    parallelism: node.parallelism,
                    key_groups: self.config.key_groups.count(),
                });
            }
        }
        if self.config.delivery != crate::checkpoint::Delivery::AtMostOnce
            && let Some(edge) = self.edges.iter().find(|e| e.flow.overflow.drops())
        {
            return Err(GraphError::DroppingEdge {
                from: self.nodes[edge.from.0 as usize].name.to_string(),
                to: self.nodes[edge.to.0 as usize].name.to_string(),
                delivery: format!("{:?}", self.config.delivery),
            });
        }
        if self.config.delivery != crate::checkpoint::Delivery::AtMostOnce
            && let Some(component) = self.uncheckpointed.first()
        {
            return Err(GraphError::UncheckpointedState {
                component: component.clone(),
                delivery: format!("{:?}", self.config.delivery),
            });
        }
        for (idx, node) in self.nodes.iter().enumerate() {
            for port in 0..node.ports.len() as u32 {
                if !self
                    .edges
                    .iter()
                    .any(|e| e.to.0 as usize == idx && e.port == port)
                {
                    return Err(GraphError::UnconnectedInput {
                        component: node.name.to_string(),
                        port,
                    });
                }
            }
        }
        let mut edges = Vec::with_capacity(self.edges.len());
        for e in self.edges {
            let from = &self.nodes[e.from.0 as usize];
            let to = &self.nodes[e.to.0 as usize];
            if e.job != self.id {
                return Err(GraphError::ForeignStream {
                    component: to.name.to_string(),
                });
            }
            let grouping = match e.grouping {
                // A flow-controlled edge needs a channel: never fused.
                GroupingSpec::Auto if e.flow != FlowControl::default() => GroupingKind::Shuffle,
                GroupingSpec::Auto if from.parallelism == to.parallelism => GroupingKind::Forward,
                GroupingSpec::Auto => GroupingKind::Shuffle,
                GroupingSpec::Fixed(kind) => kind,
            };
            if grouping == GroupingKind::Forward && from.parallelism != to.parallelism {
                return Err(GraphError::ForwardMismatch {
                    from: from.name.to_string(),
                    to: to.name.to_string(),
                    from_parallelism: from.parallelism,
                    to_parallelism: to.parallelism,
                });
            }
            edges.push(EdgeDef {
                from: e.from,
                channel: e.channel,
                to: e.to,
                port: e.port,
                grouping,
                flow: e.flow,
                make: e.make,
            });
        }
        Ok(JobGraph {
            name: self.name,
            nodes: self.nodes,
            edges,
            config: self.config,
        })
    }
}

/// A checked job graph, ready for the runtime.
pub struct JobGraph {
    name: String,
    nodes: Vec<NodeDef>,
    edges: Vec<EdgeDef>,
    config: JobConfig,
}

impl JobGraph {
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
        &self.nodes[id.0 as usize]
    }
    /// The graph as data: names, parallelism, groupings, channels.
    pub fn plan(&self) -> crate::plan::JobPlan {
        crate::plan::JobPlan::of(self)
    }
}
