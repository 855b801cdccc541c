//! The typed job builder: components are added with [`JobBuilder::source`],
//! [`JobBuilder::operator`] (or, for inputs of several types,
//! [`JobBuilder::operator_with_ports`] and [`JobBuilder::two_input_operator`]) and
//! [`JobBuilder::sink`]; each returns typed [`Stream`] handles for its output
//! channels, and each input takes streams of the exact input type, so a type
//! mismatch on an edge is a compile error. [`JobBuilder::build`] checks the
//! graph and returns a [`JobGraph`], ready to run.
//!
//! ```
//! use streamwork::core::{Collector, Context, NoKey, Operator, Statefulness};
//! use streamwork::runtime::{Groupings, JobBuilder};
//! # use streamwork::core::{Source, SourcePoll, ConnectorError, Sink, Record};
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
//!     type Time = streamwork::core::AnyTime;
//!     fn statefulness(&self) -> Statefulness { Statefulness::Stateless }
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

mod check;
pub(crate) mod error;
pub(crate) mod factory;
mod flow;
mod graph;
pub mod input;
mod plan;
mod ports;
mod pre_aggregated;

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::GraphError;
pub use flow::{Flow, KeyedFlow};
pub(crate) use graph::ExchangeEnds;
pub use graph::{ComponentKind, EdgeDef, Guarantee, JobConfig, JobGraph, NodeDef, PortInfo};
pub use plan::{ComponentPlan, EdgePlan, JobPlan, StageRow};
pub use ports::InputPort;

pub use self::input::{
    Exchange, GroupingChoice, GroupingSpec, Groupings, Input, Inputs, IntoInputs, KeyedStream,
    RouteMaker, fan_in,
};
use streamwork_core::checkpoint::Delivery;
use streamwork_core::component::{
    Admits, KeyKind, NoKey, Operator, StreamTime, TimeRequirement, Unwatermarked,
};
use streamwork_core::edge::Edge;
use streamwork_core::grouping::{GroupingKind, KeyGroups};
use streamwork_core::lineage::Lineage;
use streamwork_core::outputs::Outputs;
use streamwork_core::ports::Either;
use streamwork_core::record::Data;
use streamwork_core::stream::Stream;
use streamwork_core::{JobId, NodeId};

use self::factory::{
    DispatcherFactory, EdgeFactories, EdgeWiring, FusedFactory, LineageFactory, NodeFactory,
    RootFactory, SourceFactory,
};
use crate::acking::RootedLineage;
use crate::combiner::{Combiner, Gate};
use crate::cut::ends::{EncodeExchange, ExchangeSource};
use crate::dispatch::ChannelDispatcher;
use crate::fan_out::FanOut;
use crate::instance::{Instance, NoOutputs, OperatorKind, SinkKind, SourceKind};
use crate::route::RouteContext;

/// An edge as added, before the graph is checked.
pub(crate) struct PendingEdge {
    from: NodeId,
    channel: u32,
    to: NodeId,
    port: u32,
    grouping: GroupingSpec,
    flow: streamwork_core::flow::FlowControl,
    job: JobId,
    factories: EdgeFactories,
    exchange: Option<std::sync::Arc<ExchangeEnds>>,
}

static NEXT_JOB_ID: AtomicU64 = AtomicU64::new(1);

/// Builds a [`JobGraph`]: the typed API under `job!`.
///
/// The delivery a job promises is in its type, `D` (see [`promise`]): a
/// builder made [`exactly_once`](JobBuilder::exactly_once) accepts only
/// replayable sources and transactional (or idempotent) sinks, one made
/// [`at_least_once`](JobBuilder::at_least_once) only replayable sources, as
/// `job!`'s `delivery` line does. Every channel of every component must be
/// read or [`discard`](JobBuilder::discard)ed, or [`build`](JobBuilder::build)
/// refuses the job.
pub struct JobBuilder<D = promise::AtMostOnce> {
    id: JobId,
    name: String,
    nodes: Vec<NodeDef>,
    edges: Vec<PendingEdge>,
    /// `(node, channel)` left unread on purpose.
    discarded: Vec<(NodeId, u32)>,
    /// The gates of pre-aggregating combiners, each opened by `build` unless
    /// a component reads its operator's channel of late records.
    gates: Vec<(Option<(NodeId, u32)>, Gate)>,
    config: JobConfig,
    /// The parallelism of a component `job!` declares without one.
    default_parallelism: u32,
    _promise: std::marker::PhantomData<D>,
}

/// The delivery a [`JobBuilder`] promises, as a type.
pub mod promise {
    use streamwork_core::checkpoint::{Delivery, Replayable, Transactional};
    use streamwork_core::{Sink, Source};

    /// A delivery promise.
    pub trait Promise: Send + 'static {
        /// The promise as a value.
        const DELIVERY: Delivery;
    }

    /// No promise: records may be lost on a failure.
    #[derive(Copy, Clone, Debug)]
    pub struct AtMostOnce;
    /// Every result at least once: sources must be replayable.
    #[derive(Copy, Clone, Debug)]
    pub struct AtLeastOnce;
    /// Every result exactly once: replayable sources, transactional sinks.
    #[derive(Copy, Clone, Debug)]
    pub struct ExactlyOnce;

    impl Promise for AtMostOnce {
        const DELIVERY: Delivery = Delivery::AtMostOnce;
    }
    impl Promise for AtLeastOnce {
        const DELIVERY: Delivery = Delivery::AtLeastOnce;
    }
    impl Promise for ExactlyOnce {
        const DELIVERY: Delivery = Delivery::ExactlyOnce;
    }

    /// A source a job promising `D` may read.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not replayable, and the job promises at-least-once or exactly-once delivery",
        label = "after a failure this source cannot resume from its checkpointed position",
        note = "read a replayable source (`FileSource`, `GeneratorSource`, `KafkaSource`), or build the job without the promise"
    )]
    pub trait SourceFor<D>: Source {}
    impl<S: Source> SourceFor<AtMostOnce> for S {}
    impl<S: Source + Replayable> SourceFor<AtLeastOnce> for S {}
    impl<S: Source + Replayable> SourceFor<ExactlyOnce> for S {}

    /// A sink a job promising `D` may write to.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is neither transactional nor idempotent, and the job promises exactly-once delivery",
        label = "what a replay writes again would be published twice",
        note = "write to a transactional sink (`FileSink::transactional`, `KafkaSink::transactional`) or an idempotent one (`UpsertFileSink`)"
    )]
    pub trait SinkFor<D>: Sink {}
    impl<S: Sink> SinkFor<AtMostOnce> for S {}
    impl<S: Sink> SinkFor<AtLeastOnce> for S {}
    impl<S: Sink + Transactional> SinkFor<ExactlyOnce> for S {}
}

impl JobBuilder {
    /// A new, empty job named `name`, promising nothing yet.
    pub fn new(name: impl Into<String>) -> Self {
        JobBuilder {
            id: JobId(NEXT_JOB_ID.fetch_add(1, Ordering::Relaxed)),
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
            discarded: Vec::new(),
            gates: Vec::new(),
            config: JobConfig::default(),
            default_parallelism: 1,
            _promise: std::marker::PhantomData,
        }
    }

    /// The same job, promising exactly-once delivery (`delivery
    /// exactly_once;` in `job!`): only replayable sources and transactional
    /// or idempotent sinks compile, no edge may drop records, and a run
    /// must take exactly-once checkpoints.
    ///
    /// ```compile_fail
    /// use streamwork::runtime::JobBuilder;
    /// # use streamwork::core::*;
    /// # #[derive(Clone)] struct Once;
    /// # impl Source for Once { type Out = Collector<u64>;
    /// #   fn poll(&mut self, _: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> { Ok(SourcePoll::Finished) } }
    /// let mut job = JobBuilder::new("promised").exactly_once();
    /// job.source("numbers", 1, Once); // not replayable: does not compile
    /// ```
    pub fn exactly_once(self) -> JobBuilder<promise::ExactlyOnce> {
        self.promising(Delivery::ExactlyOnce)
    }

    /// The same job, promising at-least-once delivery (`delivery
    /// at_least_once;` in `job!`): only replayable sources compile.
    pub fn at_least_once(self) -> JobBuilder<promise::AtLeastOnce> {
        self.promising(Delivery::AtLeastOnce)
    }

    fn promising<D>(mut self, delivery: Delivery) -> JobBuilder<D> {
        self.config.delivery = delivery;
        JobBuilder {
            id: self.id,
            name: self.name,
            nodes: self.nodes,
            edges: self.edges,
            discarded: self.discarded,
            gates: self.gates,
            config: self.config,
            default_parallelism: self.default_parallelism,
            _promise: std::marker::PhantomData,
        }
    }

    /// What `job!` declares with its `delivery` line, whose own checks
    /// stand for the types'. Not a public API.
    #[doc(hidden)]
    pub fn __declare_delivery(&mut self, delivery: Delivery) -> &mut Self {
        self.config.delivery = delivery;
        self
    }
}

impl<D> JobBuilder<D> {
    /// Reads nothing from `stream`, on purpose (`drop a.b;` in `job!`):
    /// without this, a channel no component reads is refused by
    /// [`build`](Self::build).
    pub fn discard<T: Data, Tm: StreamTime>(&mut self, stream: Stream<T, Tm>) -> &mut Self {
        self.discarded.push((stream.node(), stream.channel()));
        self
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

    /// Runs the job's tasks on `workers` threads (`workers N;` in `job!`);
    /// by default one per core ([`cores`](crate::cores)), `0` for
    /// one thread per task. Each worker takes turns among its tasks.
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
    /// tasks: so a task with a source or sink that
    /// [may block](streamwork_core::Source::may_block) (the default for a
    /// source or sink that does not say otherwise) runs as a worker of its
    /// own, and only the others share the `workers` threads.
    ///
    /// Fairness: a worker steps its tasks in turn, a source one poll and
    /// an input task at most 64 messages a turn, so a busy task does not
    /// starve the others on its worker; a task whose outputs are full is
    /// skipped until they have room.
    ///
    /// ```
    /// use streamwork::runtime::JobBuilder;
    /// let mut job = JobBuilder::new("on-two-cores");
    /// job.workers(2);
    /// # let _ = job;
    /// ```
    pub fn workers(&mut self, workers: u32) -> &mut Self {
        self.config.workers = (workers > 0).then_some(workers);
        self
    }

    /// The parallelism of every component `job!` declares without one
    /// (`parallelism N;`), and of what [`default_parallelism`] reads;
    /// 1 unless set.
    ///
    /// [`default_parallelism`]: Self::default_parallelism
    ///
    /// ```
    /// use streamwork::runtime::JobBuilder;
    /// let mut job = JobBuilder::new("wide");
    /// job.parallelism(4);
    /// assert_eq!(job.default_parallelism(), 4);
    /// ```
    pub fn parallelism(&mut self, parallelism: u32) -> &mut Self {
        self.default_parallelism = parallelism.max(1);
        self
    }

    /// The job-wide parallelism ([`parallelism`](Self::parallelism)).
    pub fn default_parallelism(&self) -> u32 {
        self.default_parallelism
    }

    /// Sets the number of key groups (default 128); it bounds the parallelism
    /// of keyed components.
    pub fn key_groups(&mut self, key_groups: KeyGroups) -> &mut Self {
        self.config.key_groups = key_groups;
        self
    }

    /// Puts a combiner (see [`combiner`](crate::combiner)) between each
    /// keyed input of `operator` (with `parallelism` instances) and its
    /// stream, if the operator [combines](Operator::COMBINES) and the job
    /// has combiners on: fused into the stream's task, named
    /// `NAME (combine)` in the plan. Not between one instance and one: there
    /// the exchange scatters nothing, and a combiner would only do the
    /// operator's per-key work twice.
    fn combined<O: Operator, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        operator: &O,
        inputs: Inputs<O::In, O::Key, Tm>,
    ) -> Inputs<O::In, O::Key, Tm> {
        if !O::COMBINES || !O::Key::KEYED || !self.config.combiners {
            return inputs;
        }
        let items = inputs.into_items();
        let several = items.len() > 1;
        let items = items
            .into_iter()
            .enumerate()
            .map(|(i, (input, extractor))| {
                if input.grouping() != GroupingSpec::Fixed(GroupingKind::Key) {
                    return (input, extractor);
                }
                let stream = input.stream();
                let sending = self.nodes[stream.node().index()].parallelism;
                if sending == 1 && parallelism == 1 {
                    return (input, extractor);
                }
                let step = combiner_name(name, several.then_some(i));
                let combiner = Combiner::new(operator.clone(), extractor.clone());
                let node = self.fused_after(&step, stream, combiner);
                (input.reading(Stream::__new(self.id, node, 0)), extractor)
            })
            .collect();
        Inputs::from_items(items)
    }

    /// Adds `operator` as `name`, reading `stream` through a forward edge
    /// at its component's parallelism, so that it fuses into the task that
    /// emits `stream` (a combiner).
    fn fused_after<T: Data, Tm: StreamTime, C: Operator<In = T, Key = NoKey>>(
        &mut self,
        name: &str,
        stream: Stream<T, Tm>,
        operator: C,
    ) -> NodeId {
        let sending = self.nodes[stream.node().index()].parallelism;
        let node = self.add_node(operator_node(name, sending, operator, vec![()]));
        let forward = Inputs::<_, NoKey, Tm>::from_items(vec![(stream.forward(), ())]);
        self.connect(node, 0, &forward);
        node
    }

    /// Whether keyed operators added after this call that can merge their
    /// records ([`Operator::COMBINES`], such as `reduce(f).associative()`) get a combiner
    /// before their keyed exchange (`combiners false;` in `job!`); on by
    /// default. A combiner merges each key's records in the task that
    /// sends them, so that fewer cross the exchange: the operator then
    /// emits fewer updates and ends with the same state. See
    /// [`combiner`](crate::combiner) for when it sends what it holds.
    ///
    /// ```
    /// use streamwork::runtime::JobBuilder;
    /// let mut job = JobBuilder::new("every-update");
    /// job.combiners(false);
    /// # let _ = job;
    /// ```
    pub fn combiners(&mut self, on: bool) -> &mut Self {
        self.config.combiners = on;
        self
    }

    fn add_node(&mut self, node: NodeDef) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        id
    }

    fn connect<T: Data, KK: KeyKind, Tm>(
        &mut self,
        to: NodeId,
        port: u32,
        inputs: &Inputs<T, KK, Tm>,
    ) {
        self.edges.extend(pending_edges(to, port, inputs));
    }

    /// Adds a source with `parallelism` instances, each a clone of `source`.
    pub fn source<S: promise::SourceFor<D>>(
        &mut self,
        name: &str,
        parallelism: u32,
        source: S,
    ) -> <S::Out as Outputs>::Streams<Unwatermarked> {
        let node = self.add_node(source_node(name, parallelism, source));
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
        let placing = pre_aggregated::Placing {
            job: self,
            name,
            parallelism,
            inputs: inputs.into_inputs(),
        };
        let placing = match placing.applies() {
            true => match operator.pre_aggregation(placing) {
                Ok(streams) => return streams,
                Err(placing) => placing,
            },
            false => placing,
        };
        let inputs = placing.inputs;
        let inputs = self.combined(name, parallelism, &operator, inputs);
        let extractors: Vec<_> = inputs.items().iter().map(|(_, x)| x.clone()).collect();
        let node = self.add_node(operator_node(name, parallelism, operator, extractors));
        self.connect(node, 0, &inputs);
        O::Out::streams::<<O::Time as TimeRequirement>::Out<Tm>>(self.id, node)
    }

    /// Adds a two-input operator (its input an [`Either`] of its ports'
    /// records) reading `left` and `right`: ports `left` and `right` of
    /// [`operator_with_ports`](Self::operator_with_ports).
    pub fn two_input_operator<O, L, R, Tm>(
        &mut self,
        name: &str,
        parallelism: u32,
        operator: O,
        left: impl IntoInputs<L, O::Key, Tm>,
        right: impl IntoInputs<R, O::Key, Tm>,
    ) -> <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>
    where
        O: Operator<In = Either<L, R>>,
        O::Time: Admits<Tm>,
        L: Data,
        R: Data,
        Tm: StreamTime,
    {
        let ports = vec![
            InputPort::new("left", left, Either::Left),
            InputPort::new("right", right, Either::Right),
        ];
        self.operator_with_ports(name, parallelism, operator, ports)
    }

    /// Adds a sink with `parallelism` instances reading `inputs`.
    pub fn sink<S: promise::SinkFor<D>, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        sink: S,
        inputs: impl IntoInputs<S::In, NoKey, Tm>,
    ) {
        let inputs = inputs.into_inputs();
        let node = self.add_node(sink_node(name, parallelism, sink));
        self.connect(node, 0, &inputs);
    }

    /// Merges (unions) several streams of one type into one stream, through an
    /// identity operator named `name` (a `map` of [`std::convert::identity`]).
    pub fn merge<T: Data, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        inputs: impl IntoInputs<T, NoKey, Tm>,
    ) -> Stream<T, Tm> {
        self.operator(
            name,
            parallelism,
            streamwork_core::ops::map(std::convert::identity::<T>),
            inputs,
        )
    }
}

/// The plan's name of the combiner before `operator`'s input `input` (its
/// only one: `None`).
fn combiner_name(operator: &str, input: Option<usize>) -> String {
    match input {
        Some(i) => format!("{operator} (combine {i})"),
        None => format!("{operator} (combine)"),
    }
}

/// The factories of an edge carrying `T`, routed by `route`.
pub(crate) fn edge_factories<T: Data>(route: RouteMaker<T>) -> EdgeFactories {
    let dispatcher: DispatcherFactory = Box::new(move |kind, wiring: EdgeWiring| {
        let partition = route(
            kind,
            RouteContext {
                source_instance: wiring.source_instance,
                targets: wiring.targets.len() as u32,
                key_groups: wiring.key_groups,
            },
        );
        let edge: Box<dyn Edge<T>> = Box::new(ChannelDispatcher::with_partition(
            partition,
            wiring.from,
            wiring.targets,
            wiring.batch_size,
        ));
        Box::new(edge) as Box<dyn Any + Send>
    });
    let lineage: LineageFactory = Box::new(|acker, source| {
        let lineage: Box<dyn Lineage<T>> = match source {
            Some((component, instance)) => Box::new(RootedLineage::source(
                acker.register::<T>(component, instance),
            )),
            None => Box::new(RootedLineage::<T>::inherited()),
        };
        Box::new(lineage) as Box<dyn Any + Send>
    });
    EdgeFactories {
        dispatcher,
        lineage,
        fan_out: fan_out::<T>,
    }
}

/// The edges of a channel of `T` (each a `Box<dyn Edge<T>>` boxed as `Any`)
/// as one.
fn fan_out<T: Data>(edges: Vec<Box<dyn Any + Send>>) -> Box<dyn Any + Send> {
    let edges = edges
        .into_iter()
        .map(|edge| match edge.downcast::<Box<dyn Edge<T>>>() {
            Ok(edge) => *edge,
            Err(_) => unreachable!(
                "streamwork internal error: an edge of another type than `{}` in its channel",
                std::any::type_name::<T>()
            ),
        })
        .collect();
    let edge: Box<dyn Edge<T>> = Box::new(FanOut::new(edges));
    Box::new(edge) as Box<dyn Any + Send>
}

/// A source component: `parallelism` clones of `source`.
pub(crate) fn source_node<S: streamwork_core::Source>(
    name: &str,
    parallelism: u32,
    source: S,
) -> NodeDef {
    let guarantee = Guarantee::Source {
        replayable: source.replayable(),
    };
    let split_input = source.split_input();
    let may_block = source.may_block();
    let factory: SourceFactory = Box::new(move |env, mut parts| {
        let out = S::Out::assemble(&mut parts);
        Box::new(Instance::new(SourceKind::new(source.clone()), out, env))
    });
    NodeDef {
        split_input,
        may_block,
        ..NodeDef::new(
            name,
            ComponentKind::Source,
            parallelism,
            Vec::new(),
            S::Out::channels(),
            guarantee,
            NodeFactory::Source(factory),
        )
    }
}

/// The ends of a keyed edge cut between parts of a graph: the operator that encodes
/// its records and the source that decodes them.
fn exchange_ends<T: Data>(exchange: Exchange<T>) -> ExchangeEnds {
    let watermarked = exchange.watermarked;
    let decode = exchange.decode;
    let encoder = exchange.clone();
    ExchangeEnds {
        type_name: std::any::type_name::<T>(),
        watermarked,
        encode: Box::new(move |name, writer| {
            operator_node(
                name,
                1,
                EncodeExchange::new(encoder.clone(), writer),
                vec![()],
            )
        }),
        decode: Box::new(move |name, inner| {
            source_node(name, 1, ExchangeSource::<T>::new(name, inner, decode))
        }),
    }
}

/// The edges of `inputs` into port `port` of node `to`.
fn pending_edges<T: Data, KK: KeyKind, Tm>(
    to: NodeId,
    port: u32,
    inputs: &Inputs<T, KK, Tm>,
) -> Vec<PendingEdge> {
    inputs
        .items()
        .iter()
        .map(|(input, _)| {
            let factories = edge_factories(input.route().clone());
            let exchange = input
                .exchange()
                .map(|exchange| std::sync::Arc::new(exchange_ends(exchange.clone())));
            let stream = input.stream();
            PendingEdge {
                from: stream.node(),
                channel: stream.channel(),
                to,
                port,
                grouping: input.grouping(),
                flow: input.flow(),
                job: stream.job(),
                factories,
                exchange,
            }
        })
        .collect()
}

/// An operator component reading one input port, whose edges' records
/// are keyed by `extractors` (one per edge).
pub(crate) fn operator_node<O: Operator>(
    name: &str,
    parallelism: u32,
    operator: O,
    extractors: Vec<<O::Key as KeyKind>::Extractor<O::In>>,
) -> NodeDef {
    let guarantee = Guarantee::Operator(operator.statefulness());
    let fused_extractors = extractors.clone();
    let root_operator = operator.clone();
    let root: RootFactory = Box::new(move |env, mut parts, senders| {
        let out = O::Out::assemble(&mut parts);
        let sender_edges = senders.into_iter().next().unwrap_or_default();
        let kind = OperatorKind::new(root_operator.clone(), extractors.clone(), sender_edges);
        Box::new(Instance::new(kind, out, env))
    });
    let fused: FusedFactory = Box::new(move |env, mut parts| {
        let out = O::Out::assemble(&mut parts);
        let kind = OperatorKind::new(operator.clone(), fused_extractors.clone(), Vec::new());
        let instance: Box<dyn Edge<O::In>> = Box::new(Instance::new(kind, out, env));
        Box::new(instance)
    });
    NodeDef::new(
        name,
        ComponentKind::Operator,
        parallelism,
        vec![PortInfo::of::<O::In>("in", O::Key::KEYED)],
        O::Out::channels(),
        guarantee,
        NodeFactory::Input {
            root,
            fused: Some(fused),
        },
    )
}

/// A sink component: `parallelism` clones of `sink`.
pub(crate) fn sink_node<S: streamwork_core::Sink>(
    name: &str,
    parallelism: u32,
    sink: S,
) -> NodeDef {
    let guarantee = Guarantee::Sink {
        exactly_once: sink.exactly_once(),
    };
    let staged_locally = sink.stages_locally();
    let may_block = sink.may_block();
    let root_sink = sink.clone();
    let root: RootFactory = Box::new(move |env, _, _| {
        Box::new(Instance::new(
            SinkKind::new(root_sink.clone()),
            NoOutputs,
            env,
        ))
    });
    let fused: FusedFactory = Box::new(move |env, _| {
        let instance: Box<dyn Edge<S::In>> =
            Box::new(Instance::new(SinkKind::new(sink.clone()), NoOutputs, env));
        Box::new(instance)
    });
    NodeDef {
        staged_locally,
        may_block,
        ..NodeDef::new(
            name,
            ComponentKind::Sink,
            parallelism,
            vec![PortInfo::of::<S::In>("in", false)],
            Vec::new(),
            guarantee,
            NodeFactory::Input {
                root,
                fused: Some(fused),
            },
        )
    }
}
