//! Operators with any number of typed input ports:
//! [`JobBuilder::operator_with_ports`], each port an [`InputPort`] of its own
//! record type, turned into the operator's input as it arrives.
//!
//! A join is such an operator with two ports, its input an
//! [`Either`](streamwork_core::ports::Either) of theirs
//! ([`JobBuilder::two_input_operator`]); a union of streams of one type is an
//! operator with one port and several edges into it.

use super::input::{Inputs, IntoInputs};
use streamwork_core::component::{Admits, KeyKind, Operator, TimeRequirement};
use streamwork_core::outputs::Outputs;
use streamwork_core::record::Data;
use streamwork_core::{NodeId, StreamTime};

use super::factory::{NodeFactory, RootFactory};
use super::graph::{ComponentKind, Guarantee, NodeDef, PortInfo};
use super::{JobBuilder, PendingEdge};
use crate::instance::{Instance, OperatorKind, Port, ReadPort};

/// Makes the reader of one port, given each sender index's edge ordinal.
type ReaderFactory<O> = Box<dyn Fn(Vec<u32>) -> Box<dyn ReadPort<O>> + Send>;

/// One input port of an operator with several: the streams it reads, all of
/// type `P` and keyed as the operator requires, and how a record of `P`
/// becomes the operator's input.
///
/// ```
/// use streamwork::runtime::{InputPort, JobBuilder};
/// # use streamwork::prelude::*;
/// # #[derive(Clone)] struct Tagged;
/// # impl Operator for Tagged { type In = Result<u64, String>; type Key = NoKey; type Out = Collector<String>;
/// #   type Time = AnyTime; fn statefulness(&self) -> Statefulness { Statefulness::Stateless }
/// #   fn on_record(&mut self, v: Self::In, ctx: &mut Context<'_, NoKey, Collector<String>>) { ctx.emit(format!("{v:?}")) } }
/// let mut job = JobBuilder::new("two-types");
/// let numbers = job.source("numbers", 1, GeneratorSource::new(|i| i).take(3));
/// let words = job.source("words", 1, GeneratorSource::new(|i| format!("w{i}")).take(3));
/// let tagged = job.operator_with_ports(
///     "tagged",
///     1,
///     Tagged,
///     vec![
///         InputPort::new("numbers", numbers, Ok),
///         InputPort::new("words", words, Err),
///     ],
/// );
/// job.discard(tagged);
/// # job.build().unwrap();
/// ```
pub struct InputPort<O: Operator, Tm> {
    info: PortInfo,
    /// The port's edges, once the operator's node and the port's index
    /// are known.
    edges: Box<dyn FnOnce(NodeId, u32) -> Vec<PendingEdge>>,
    reader: ReaderFactory<O>,
    _time: std::marker::PhantomData<fn() -> Tm>,
}

impl<O: Operator, Tm: StreamTime> InputPort<O, Tm> {
    /// A port named `name` reading `inputs`, each record turned into the
    /// operator's input by `into` (an enum's variant, say).
    pub fn new<P: Data>(
        name: &'static str,
        inputs: impl IntoInputs<P, O::Key, Tm>,
        into: impl Fn(P) -> O::In + Clone + Send + 'static,
    ) -> Self {
        let inputs: Inputs<P, O::Key, Tm> = inputs.into_inputs();
        let extractors: Vec<_> = inputs.items().iter().map(|(_, x)| x.clone()).collect();
        InputPort {
            info: PortInfo::of::<P>(name, O::Key::KEYED),
            edges: Box::new(move |to, port| super::pending_edges(to, port, &inputs)),
            reader: Box::new(move |senders| {
                Box::new(Port::<P, O, _>::new(
                    extractors.clone(),
                    senders,
                    into.clone(),
                ))
            }),
            _time: std::marker::PhantomData,
        }
    }
}

impl<D> JobBuilder<D> {
    /// Adds an operator with `parallelism` instances whose input ports, in
    /// order, are `ports`: each of its own record type, every record handed
    /// to [`Operator::on_record`] as the operator's input, and the end of
    /// each port to [`Operator::on_input_end`]. Its instances are the roots
    /// of their tasks (an operator with several ports is never fused into
    /// an upstream one).
    pub fn operator_with_ports<O: Operator, Tm: StreamTime>(
        &mut self,
        name: &str,
        parallelism: u32,
        operator: O,
        ports: Vec<InputPort<O, Tm>>,
    ) -> <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>
    where
        O::Time: Admits<Tm>,
    {
        let guarantee = Guarantee::Operator(operator.statefulness());
        let mut infos = Vec::with_capacity(ports.len());
        let mut edges = Vec::with_capacity(ports.len());
        let mut readers = Vec::with_capacity(ports.len());
        for port in ports {
            infos.push(port.info);
            edges.push(port.edges);
            readers.push(port.reader);
        }
        let root: RootFactory = Box::new(move |env, mut parts, senders| {
            let out = O::Out::assemble(&mut parts);
            let mut senders = senders.into_iter();
            let ports: Vec<Box<dyn ReadPort<O>>> = readers
                .iter()
                .map(|reader| reader(senders.next().unwrap_or_default()))
                .collect();
            let kind = OperatorKind::with_ports(operator.clone(), ports);
            Box::new(Instance::new(kind, out, env))
        });
        let node = self.add_node(NodeDef::new(
            name,
            ComponentKind::Operator,
            parallelism,
            infos,
            O::Out::channels(),
            guarantee,
            NodeFactory::Input { root, fused: None },
        ));
        for (port, edges) in edges.into_iter().enumerate() {
            self.edges.extend(edges(node, port as u32));
        }
        O::Out::streams::<<O::Time as TimeRequirement>::Out<Tm>>(self.id, node)
    }
}
