//! An [`Operator`] instance: at the root of its task, reading channels, or
//! fused into its upstream's task as an [`Edge`]. Every operator is one:
//! one with several input ports (a join) reads each port's batches through
//! a [`ReadPort`] of the port's type.

use std::any::Any;

use streamwork_core::checkpoint::{Restore, SnapshotContext, StateBytes};
use streamwork_core::component::{KeyKind, TimeRequirement};
use streamwork_core::control::{Control, Disconnected};
use streamwork_core::edge::Edge;
use streamwork_core::id::RootId;
use streamwork_core::outputs::Outputs;
use streamwork_core::record::Record;
use streamwork_core::{Collector, Context, InstanceContext, Operator, TaskError, Timestamp};

use super::{Arrived, Env, Instance, Kind, Receives, downcast_anchored, rooted};
use crate::acking;
use crate::failure::Failed;
use crate::message::SenderIdx;

/// An operator, with the key extractor of each incoming edge.
pub(crate) struct OperatorKind<O: Operator> {
    operator: O,
    /// The key extractor of each edge into its single port (port 0, of
    /// type `O::In`): the hot path, and the only shape an operator fused
    /// into its upstream has.
    extractors: Vec<<O::Key as KeyKind>::Extractor<O::In>>,
    /// Each sender index's edge ordinal (at the root of a task).
    sender_edges: Vec<u32>,
    /// An operator with input ports of their own types: how each port's
    /// batches reach it (empty for one port of type `O::In`).
    ports: Vec<Box<dyn ReadPort<O>>>,
}

impl<O: Operator> OperatorKind<O> {
    pub(crate) fn new(
        operator: O,
        extractors: Vec<<O::Key as KeyKind>::Extractor<O::In>>,
        sender_edges: Vec<u32>,
    ) -> Self {
        OperatorKind {
            operator,
            extractors,
            sender_edges,
            ports: Vec::new(),
        }
    }

    /// An operator whose input ports (in order) are `ports`.
    pub(crate) fn with_ports(operator: O, ports: Vec<Box<dyn ReadPort<O>>>) -> Self {
        OperatorKind {
            operator,
            extractors: Vec::new(),
            sender_edges: Vec::new(),
            ports,
        }
    }
}

/// One input port of an operator with ports of their own types: how a
/// batch of the port's type reaches the operator.
pub(crate) trait ReadPort<O: Operator>: Send {
    /// Runs the records of `batch`, from sender `from`, through `operator`;
    /// returns how many there were.
    fn read(
        &self,
        operator: &mut O,
        out: &mut O::Out,
        ctx: &InstanceContext,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<u64, TaskError>;
}

/// A port of records of type `P`, each keyed by its edge's extractor and
/// turned into the operator's input by `into` (`Either::Left`, say).
pub(crate) struct Port<P: 'static, O: Operator, F> {
    extractors: Vec<<O::Key as KeyKind>::Extractor<P>>,
    /// Each sender index's edge ordinal into this port.
    sender_edges: Vec<u32>,
    into: F,
}

impl<P: 'static, O: Operator, F> Port<P, O, F> {
    pub(crate) fn new(
        extractors: Vec<<O::Key as KeyKind>::Extractor<P>>,
        sender_edges: Vec<u32>,
        into: F,
    ) -> Self {
        Port {
            extractors,
            sender_edges,
            into,
        }
    }
}

impl<P, O, F> ReadPort<O> for Port<P, O, F>
where
    P: streamwork_core::Data,
    O: Operator,
    F: Fn(P) -> O::In + Send,
{
    fn read(
        &self,
        operator: &mut O,
        out: &mut O::Out,
        ctx: &InstanceContext,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<u64, TaskError> {
        let (mut batch, anchors) = downcast_anchored::<P>(batch)?;
        let n = batch.len() as u64;
        let edge = self.sender_edges.get(from.0 as usize).copied().unwrap_or(0) as usize;
        let Some(extractor) = self.extractors.get(edge).or(self.extractors.first()) else {
            return Ok(0);
        };
        let into = &self.into;
        match anchors {
            None => run_records::<O, P>(operator, out, ctx, extractor, into, batch.drain()),
            anchors => {
                let records = rooted(batch.drain(), anchors);
                run_records::<O, P>(operator, out, ctx, extractor, into, records)
            }
        };
        Ok(n)
    }
}

impl<O: Operator> Kind for OperatorKind<O> {
    type Out = O::Out;
    const FORWARDS_WATERMARKS: bool = O::Time::FORWARDS_WATERMARKS;

    fn start(&mut self, env: &Env, restore: Option<&Restore<'_>>) -> Result<(), TaskError> {
        if let Some(restore) = restore {
            self.operator.restore(restore)?;
        }
        self.operator.open(&env.ctx);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut O::Out) {
        self.operator.on_watermark(watermark, out);
    }

    fn on_processing_time(
        &mut self,
        now: Timestamp,
        out: &mut O::Out,
        _: &Env,
    ) -> Result<(), TaskError> {
        self.operator.on_processing_time(now, out);
        Ok(())
    }

    fn before_barrier(&mut self, out: &mut O::Out) {
        self.operator.before_barrier(out);
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.operator.snapshot(ctx)
    }

    fn on_end(&mut self, out: &mut O::Out, _: &Env) -> Result<(), TaskError> {
        self.operator.on_end(out);
        Ok(())
    }
}

impl<O: Operator> Instance<OperatorKind<O>> {
    /// Runs the records of one batch from edge `edge` through the operator,
    /// then its end-of-batch hook.
    fn process(
        &mut self,
        edge: usize,
        records: impl Iterator<Item = Record<O::In>>,
    ) -> Result<u64, Failed> {
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            let OperatorKind {
                operator,
                extractors,
                ..
            } = kind;
            let Some(extractor) = extractors.get(edge).or(extractors.first()) else {
                return Ok(0);
            };
            let n = run_records::<O, O::In>(operator, out, &env.ctx, extractor, |v| v, records);
            out.set_time(None);
            if env.acker.is_some() {
                // What the batch's end emits derives from no one record.
                acking::set_current_root(RootId::UNTRACKED);
            }
            operator.on_batch_end(out);
            Ok(n)
        })
    }

    /// Lets the operator handle the batch in place, if its output is one
    /// collector of its input type and it can: the records it leaves go on
    /// as they are. Returns the records received, or `None` if it did not.
    fn process_in_place(
        &mut self,
        records: &mut Vec<Record<O::In>>,
    ) -> Result<Option<u64>, Failed> {
        let n = records.len() as u64;
        let Instance { kind, out, env, .. } = self;
        env.guard(|| {
            let Some(collector) = out
                .in_place()
                .and_then(|channel| channel.downcast_mut::<Collector<O::In>>())
            else {
                return Ok(None);
            };
            if !kind.operator.on_batch_in_place(records) {
                return Ok(None);
            }
            collector.push_batch(records);
            collector.set_time(None);
            kind.operator.on_batch_end(out);
            Ok(Some(n))
        })
    }

    /// Counts a batch and checks the outputs took it.
    fn account(&mut self, n: u64) -> Result<(), Failed> {
        let Instance { out, env, .. } = self;
        env.counters.add_in(n);
        env.counters.set_out(out.emitted());
        env.guard(|| Ok(out.check()?))
    }
}

/// The per-record loop of an operator, over records of one of its ports (of
/// type `P`, each made its input by `into`), a function of its own so that
/// the operator and its outputs arrive as distinct (`noalias`) references and
/// the optimizer can keep their fields in registers across records.
#[inline(never)]
fn run_records<O: Operator, P: 'static>(
    operator: &mut O,
    out: &mut O::Out,
    ctx: &InstanceContext,
    extractor: &<O::Key as KeyKind>::Extractor<P>,
    into: impl Fn(P) -> O::In,
    records: impl Iterator<Item = Record<P>>,
) -> u64 {
    let mut n = 0;
    for record in records {
        n += 1;
        let time = record.time;
        out.set_time(time);
        let key = O::Key::extract(extractor, &record.value);
        let mut context = Context::new(O::Key::as_ref(&key), &mut *out, time, ctx);
        operator.on_record(into(record.value), &mut context);
    }
    n
}

impl<O: Operator> Receives for OperatorKind<O> {
    fn on_batch(instance: &mut Instance<Self>, arrived: Arrived) -> Result<(), Failed> {
        if !instance.kind.ports.is_empty() {
            return instance.read_port(arrived);
        }
        let Arrived { from, batch, .. } = arrived;
        let (mut batch, anchors) = instance.env.guard(|| downcast_anchored::<O::In>(batch))?;
        let edge = instance
            .kind
            .sender_edges
            .get(from.0 as usize)
            .copied()
            .unwrap_or(0) as usize;
        // Without acking, the records go straight in: the hot path.
        let n = match anchors {
            None => instance.process(edge, batch.drain())?,
            anchors => instance.process(edge, rooted(batch.drain(), anchors))?,
        };
        let Instance { out, env, .. } = instance;
        env.guard(|| Ok(env.settle_acks(|| out.flush())?))?;
        instance.account(n)
    }

    fn on_port_end(instance: &mut Instance<Self>, port: usize) -> Result<(), Failed> {
        let Instance { kind, out, env, .. } = instance;
        if kind.ports.is_empty() {
            // One input: its end is `on_end`'s.
            return Ok(());
        }
        env.guard(|| {
            out.set_time(None);
            kind.operator.on_input_end(port as u32, out);
            Ok(())
        })
    }
}

impl<O: Operator> Instance<OperatorKind<O>> {
    /// Runs a batch of input port `port` through the operator's reader of
    /// that port, then its end-of-batch hook.
    fn read_port(&mut self, arrived: Arrived) -> Result<(), Failed> {
        let Arrived { port, from, batch } = arrived;
        let Instance { kind, out, env, .. } = self;
        let n = env.guard(|| {
            let OperatorKind {
                operator, ports, ..
            } = kind;
            let reader = ports.get(port).ok_or_else(|| {
                TaskError::Connector(streamwork_core::ConnectorError {
                    domain: streamwork_core::ErrorDomain::Internal,
                    message: format!(
                        "streamwork internal error: a batch reached input port {port} of an operator with {} ports",
                        ports.len()
                    ),
                    source: None,
                })
            })?;
            let n = reader.read(operator, out, &env.ctx, from, batch)?;
            out.set_time(None);
            if env.acker.is_some() {
                acking::set_current_root(RootId::UNTRACKED);
            }
            operator.on_batch_end(out);
            env.settle_acks(|| out.flush())?;
            Ok(n)
        })?;
        self.account(n)
    }
}

/// Operators fused into an upstream task receive batches through [`Edge`].
impl<O: Operator> Edge<O::In> for Instance<OperatorKind<O>> {
    fn open(&mut self) -> Result<(), Disconnected> {
        self.start().map_err(|Failed| Disconnected)
    }

    fn push(&mut self, records: &mut Vec<Record<O::In>>) -> Result<(), Disconnected> {
        let n = if self.env.acker.is_none()
            && let Some(n) = self
                .process_in_place(records)
                .map_err(|Failed| Disconnected)?
        {
            n
        } else {
            self.process(0, records.drain(..))
                .map_err(|Failed| Disconnected)?
        };
        self.account(n).map_err(|Failed| Disconnected)
    }

    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<O::In>>,
        roots: &mut Vec<RootId>,
    ) -> Result<(), Disconnected> {
        // Called while the upstream processes a record of its own: its root
        // is current again afterwards.
        let upstream = acking::current_root();
        let n = self.process(
            0,
            records
                .drain(..)
                .zip(roots.drain(..))
                .map(|(record, root)| {
                    acking::set_current_root(root);
                    record
                }),
        );
        acking::set_current_root(upstream);
        let n = n.map_err(|Failed| Disconnected)?;
        self.account(n).map_err(|Failed| Disconnected)
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        Instance::flush(self).map_err(|Failed| Disconnected)
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        Instance::control(self, control).map_err(|Failed| Disconnected)
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.tick(now).map_err(|Failed| Disconnected)
    }
}
