//! From a job graph to tasks: which components are fused, which edges become
//! channels, the sender index of every upstream instance at every port, and
//! the environment, measurements and flow control each instance and task
//! carries.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use streamwork_core::checkpoint::CheckpointView;
use streamwork_core::flow::Overflow;
use streamwork_core::grouping::GroupingKind;
use streamwork_core::outputs::{ChannelParts, OutputParts};
use streamwork_core::{InstanceContext, InstanceIdx};

use crate::acking::Acker;
use crate::builder::factory::{EdgeWiring, FanOutFactory, NodeFactory};
use crate::builder::{ComponentKind, JobGraph};
use crate::channel::PortSender;
use crate::checkpoint::CheckpointLink;
use crate::failure::Failure;
use crate::instance::{Env, InstanceCounters};
use crate::message::{ChannelSender, Message, SenderIdx};
use crate::metrics::{ComponentInfo, PauseFlag, Registry, TaskTimes};
use crate::task::{InputChannel, OutputChannel, SourceGates, SourceStarts, Task, TaskBody};

/// How the graph is laid out at run time.
pub(crate) struct Layout {
    /// Per node: the edge that fuses it into its upstream, if any.
    fused_by: Vec<Option<usize>>,
    /// Per (edge, sending instance): sender index at the target port.
    sender_idx: HashMap<(usize, InstanceIdx), SenderIdx>,
    /// Per (node, port): sender index -> edge ordinal at that port.
    sender_edges: HashMap<(usize, usize), Vec<u32>>,
    /// Per (node, port): sender index -> edge index.
    sender_edge_ids: HashMap<(usize, usize), Vec<usize>>,
    /// Per (node, port): number of senders.
    n_senders: HashMap<(usize, usize), u32>,
}

impl Layout {
    pub(crate) fn of(graph: &JobGraph) -> Layout {
        let nodes = graph.nodes();
        let edges = graph.edges();
        let mut fused_by = vec![None; nodes.len()];
        for (to, node) in nodes.iter().enumerate() {
            let incoming: Vec<usize> = (0..edges.len())
                .filter(|&e| edges[e].to().index() == to)
                .collect();
            let fusable = matches!(node.factory(), NodeFactory::Input { fused: Some(_), .. })
                && node.ports().len() == 1
                && incoming.len() == 1
                && edges[incoming[0]].grouping() == GroupingKind::Forward;
            if fusable {
                fused_by[to] = Some(incoming[0]);
            }
        }
        let mut sender_idx = HashMap::new();
        let mut sender_edges = HashMap::new();
        let mut sender_edge_ids = HashMap::new();
        let mut n_senders = HashMap::new();
        for (to, node) in nodes.iter().enumerate() {
            for port in 0..node.ports().len() {
                let mut next = 0u32;
                let (mut ordinals, mut ids) = (Vec::new(), Vec::new());
                let incoming = (0..edges.len())
                    .filter(|&e| edges[e].to().index() == to && edges[e].port() as usize == port);
                for (ordinal, e) in incoming.enumerate() {
                    if fused_by[to] == Some(e) {
                        continue;
                    }
                    let upstream = graph.node(edges[e].from()).parallelism();
                    for instance in 0..upstream {
                        sender_idx.insert((e, InstanceIdx(instance)), SenderIdx(next));
                        ordinals.push(ordinal as u32);
                        ids.push(e);
                        next += 1;
                    }
                }
                sender_edges.insert((to, port), ordinals);
                sender_edge_ids.insert((to, port), ids);
                n_senders.insert((to, port), next);
            }
        }
        Layout {
            fused_by,
            sender_idx,
            sender_edges,
            sender_edge_ids,
            n_senders,
        }
    }

    pub(crate) fn is_root(&self, node: usize) -> bool {
        self.fused_by[node].is_none()
    }

    /// The root of the task `node` runs in: itself, or the root of what
    /// it is fused into.
    fn root_of(&self, graph: &JobGraph, mut node: usize) -> usize {
        while let Some(edge) = self.fused_by[node] {
            node = graph.edges()[edge].from().index();
        }
        node
    }
}

/// Channel key: (node, instance, port, sender).
type ChannelKey = (usize, InstanceIdx, usize, u32);

/// What every instance of a run shares: its checkpoints, acking and failure.
#[derive(Clone)]
pub(crate) struct Shared {
    /// The job's checkpoints as instances see them, if it takes checkpoints.
    pub(crate) view: Option<CheckpointView>,
    /// The instances' connection to the coordinator.
    pub(crate) link: Option<CheckpointLink>,
    /// The job's acker, if it runs with acking.
    pub(crate) acker: Option<Arc<Acker>>,
    /// The job's failure.
    pub(crate) failure: Failure,
}

/// Builds every task of a graph, with its channels.
pub(crate) struct TaskBuilder<'g> {
    graph: &'g JobGraph,
    layout: Layout,
    shared: Shared,
    abort: Arc<AtomicBool>,
    /// One channel per (node, instance, port, sender): each sender has its
    /// own queue into each receiver, drained round-robin, so that every
    /// upstream instance advances at the consumer's pace. Per channel: its
    /// sending end and its capacity in messages.
    senders: HashMap<ChannelKey, (Sender<Message>, usize)>,
    receivers: HashMap<ChannelKey, (Receiver<Message>, usize)>,
    /// Receiving ends kept by senders of drop-oldest edges.
    oldest: HashMap<ChannelKey, Receiver<Message>>,
    counters: Vec<Vec<Arc<InstanceCounters>>>,
    times: Vec<Vec<Option<Arc<TaskTimes>>>>,
    /// Records dropped on each edge.
    dropped: Vec<Arc<AtomicU64>>,
    /// Per node with backpressure watermarks on an input edge.
    pause_flags: HashMap<usize, Arc<PauseFlag>>,
    /// The job runs on workers: channels are unbounded, their capacity
    /// enforced between steps.
    on_workers: bool,
    /// The output channels of the task being built.
    task_outputs: Vec<OutputChannel>,
    /// The polling conditions of the source task being built.
    task_gates: Option<SourceGates>,
    /// The job's source tasks, counted as they are built, uncounted as
    /// they start.
    source_starts: SourceStarts,
}

impl<'g> TaskBuilder<'g> {
    pub(crate) fn new(graph: &'g JobGraph, shared: Shared) -> Self {
        let layout = Layout::of(graph);
        let capacity = graph.config().channel_capacity;
        let on_workers = graph.config().workers.is_some();
        let edges = graph.edges();
        let mut senders = HashMap::new();
        let mut receivers = HashMap::new();
        let mut oldest = HashMap::new();
        let mut pause_flags = HashMap::new();
        for (node_idx, node) in graph.nodes().iter().enumerate() {
            if !layout.is_root(node_idx) {
                continue;
            }
            for port in 0..node.ports().len() {
                let n = layout.n_senders[&(node_idx, port)];
                let ids = &layout.sender_edge_ids[&(node_idx, port)];
                for &e in ids {
                    if edges[e].flow().pause.is_some() {
                        pause_flags
                            .entry(node_idx)
                            .or_insert_with(|| Arc::new(PauseFlag::default()));
                    }
                }
                for instance in 0..node.parallelism() {
                    for sender in 0..n {
                        let flow = edges[ids[sender as usize]].flow();
                        // The port's capacity is shared among its senders, at
                        // least two batches each so that a sender can keep one
                        // in flight while the receiver works on another.
                        let per_sender = flow
                            .capacity
                            .unwrap_or_else(|| capacity.div_ceil(n.max(1) as usize).max(2));
                        let (tx, rx) = if on_workers {
                            unbounded()
                        } else {
                            bounded(per_sender)
                        };
                        let key = (node_idx, InstanceIdx(instance), port, sender);
                        if flow.overflow == Overflow::DropOldest {
                            oldest.insert(key, rx.clone());
                        }
                        senders.insert(key, (tx, per_sender));
                        receivers.insert(key, (rx, per_sender));
                    }
                }
            }
        }
        let counters = graph
            .nodes()
            .iter()
            .map(|n| {
                (0..n.parallelism())
                    .map(|_| Arc::new(InstanceCounters::default()))
                    .collect()
            })
            .collect();
        let times = graph
            .nodes()
            .iter()
            .map(|n| vec![None; n.parallelism() as usize])
            .collect();
        let abort = shared.failure.abort_flag().clone();
        TaskBuilder {
            graph,
            layout,
            shared,
            abort,
            senders,
            receivers,
            oldest,
            counters,
            times,
            dropped: edges.iter().map(|_| Arc::new(AtomicU64::new(0))).collect(),
            pause_flags,
            on_workers,
            task_outputs: Vec::new(),
            task_gates: None,
            source_starts: SourceStarts::default(),
        }
    }

    /// The environment of `node`'s instance `instance`.
    fn env(&self, node: usize, instance: InstanceIdx) -> Env {
        let def = &self.graph.nodes()[node];
        // One partition of a stage stands for that partition's instance of
        // the whole job.
        let (told, parallelism) = match def.share {
            Some((partition, partitions)) => (InstanceIdx(partition), partitions),
            None => (instance, def.parallelism()),
        };
        let mut ctx = InstanceContext::new(
            def.name_arc(),
            told,
            parallelism,
            self.graph.config().key_groups,
        )
        .with_batch_size(self.graph.config().batch_size)
        .with_acking(self.shared.acker.is_some());
        if let Some(view) = &self.shared.view {
            ctx = ctx.with_checkpoints(view.clone());
        }
        if let Some(gates) = &self.task_gates {
            ctx = ctx.with_poll_gates(gates.registry());
        }
        if let Some(assigned) = &def.assigned {
            ctx = ctx.with_assigned_splits(assigned.clone());
        }
        if let Some(link) = &def.link {
            ctx = ctx.with_runner_link(link.clone());
        }
        Env {
            ctx,
            counters: self.counters[node][instance.index()].clone(),
            checkpoints: self.shared.link.clone(),
            acker: self.shared.acker.clone(),
            failure: self.shared.failure.clone(),
        }
    }

    fn outputs(
        &mut self,
        node: usize,
        instance: InstanceIdx,
        times: &Arc<TaskTimes>,
    ) -> OutputParts {
        let graph = self.graph;
        let def = &graph.nodes()[node];
        let mut channels: Vec<ChannelParts> = (0..def.channels().len())
            .map(|_| ChannelParts::default())
            .collect();
        let mut edges: Vec<ChannelEdges> = (0..channels.len())
            .map(|_| ChannelEdges::default())
            .collect();
        for (e, edge) in graph.edges().iter().enumerate() {
            if edge.from().index() != node {
                continue;
            }
            let to = edge.to().index();
            let part = if self.layout.fused_by[to] == Some(e) {
                self.fused(to, instance, times)
            } else {
                let port = edge.port() as usize;
                let from = self.layout.sender_idx[&(e, instance)];
                let flow = edge.flow();
                let targets = (0..graph.nodes()[to].parallelism())
                    .map(|target| {
                        let key = (to, InstanceIdx(target), port, from.0);
                        let (sender, capacity) = &self.senders[&key];
                        // On workers, a full channel holds the task back,
                        // unless its edge drops whole batches instead. A
                        // sampling edge samples the batch that meets its
                        // full queue and is held past it: one batch over,
                        // as a sender blocked on threads holds one.
                        if self.on_workers && flow.overflow.waits() {
                            let over = usize::from(matches!(flow.overflow, Overflow::Sample(_)));
                            self.task_outputs.push(OutputChannel {
                                sender: sender.clone(),
                                capacity: *capacity + over,
                            });
                        }
                        let port_sender = PortSender {
                            sender: sender.clone(),
                            abort: self.abort.clone(),
                            times: times.clone(),
                            overflow: flow.overflow,
                            dropped: self.dropped[e].clone(),
                            oldest: self.oldest.get(&key).cloned(),
                            soft_capacity: self.on_workers.then_some(*capacity),
                        };
                        Box::new(port_sender) as Box<dyn ChannelSender>
                    })
                    .collect();
                edge.make_dispatcher(EdgeWiring {
                    from,
                    targets,
                    batch_size: graph.config().batch_size,
                    source_instance: instance,
                    key_groups: graph.config().key_groups,
                })
            };
            let channel = &mut channels[edge.channel() as usize];
            if channel.lineage.is_none()
                && let Some(acker) = &self.shared.acker
            {
                // One lineage per channel, made by (any) edge out of it,
                // which knows the channel's record type.
                let source =
                    (def.kind() == ComponentKind::Source).then(|| (def.name_arc(), instance));
                channel.lineage = Some((edge.factories.lineage)(acker, source));
            }
            let channel_edges = &mut edges[edge.channel() as usize];
            channel_edges.parts.push(part);
            channel_edges.fan_out = Some(edge.factories.fan_out);
        }
        for (channel, edges) in channels.iter_mut().zip(edges) {
            channel.edge = edges.joined();
        }
        OutputParts::new(channels, graph.config().batch_size)
    }

    fn fused(
        &mut self,
        node: usize,
        instance: InstanceIdx,
        times: &Arc<TaskTimes>,
    ) -> Box<dyn Any + Send> {
        self.times[node][instance.index()] = Some(times.clone());
        let outputs = self.outputs(node, instance, times);
        let NodeFactory::Input {
            fused: Some(fused), ..
        } = self.graph.nodes()[node].factory()
        else {
            unreachable!("layout only fuses nodes with a fused factory")
        };
        fused(self.env(node, instance), outputs)
    }

    /// The pause requests of every component downstream of `node`.
    fn downstream_pauses(&self, node: usize) -> Vec<Arc<PauseFlag>> {
        let edges = self.graph.edges();
        let mut seen = vec![false; self.graph.nodes().len()];
        let mut todo = vec![node];
        let mut flags = Vec::new();
        while let Some(n) = todo.pop() {
            for edge in edges.iter().filter(|e| e.from().index() == n) {
                let to = edge.to().index();
                if !seen[to] {
                    seen[to] = true;
                    if let Some(flag) = self.pause_flags.get(&to) {
                        flags.push(flag.clone());
                    }
                    todo.push(to);
                }
            }
        }
        flags
    }

    /// Builds the task of root `node`, instance `instance`.
    pub(crate) fn task(&mut self, node: usize, instance: InstanceIdx) -> Task {
        let def = &self.graph.nodes()[node];
        let times = Arc::new(TaskTimes::default());
        self.times[node][instance.index()] = Some(times.clone());
        self.task_gates = (def.kind() == ComponentKind::Source).then(|| self.source_starts.gates());
        let env = self.env(node, instance);
        let outputs = self.outputs(node, instance, &times);
        let body = match def.factory() {
            NodeFactory::Source(factory) => TaskBody::Source {
                task: factory(env, outputs),
                pauses: self.downstream_pauses(node),
                gates: self.task_gates.take().unwrap_or_default(),
            },
            NodeFactory::Input { root, .. } => {
                let n_ports = def.ports().len();
                let sender_edges = (0..n_ports)
                    .map(|p| self.layout.sender_edges[&(node, p)].clone())
                    .collect();
                let edges = self.graph.edges();
                let ports = (0..n_ports)
                    .map(|p| {
                        let ids = self.layout.sender_edge_ids[&(node, p)].clone();
                        (0..self.layout.n_senders[&(node, p)])
                            .map(|sender| {
                                let (receiver, capacity) = self
                                    .receivers
                                    .remove(&(node, instance, p, sender))
                                    .unwrap_or_else(|| unreachable!("one receiver per sender"));
                                InputChannel {
                                    receiver,
                                    capacity,
                                    pause: edges[ids[sender as usize]].flow().pause,
                                }
                            })
                            .collect()
                    })
                    .collect();
                TaskBody::Input {
                    task: root(env, outputs, sender_edges),
                    ports,
                    pause: self.pause_flags.get(&node).cloned(),
                }
            }
        };
        self.task_gates = None;
        Task {
            component: def.name_arc(),
            instance,
            times,
            body,
            outputs: std::mem::take(&mut self.task_outputs),
        }
    }

    /// The roots, sources first (so that consumers exist before producers run).
    pub(crate) fn roots(&self) -> Vec<(usize, InstanceIdx)> {
        let mut roots = Vec::new();
        for (node, def) in self.graph.nodes().iter().enumerate() {
            if self.layout.is_root(node) {
                for instance in 0..def.parallelism() {
                    roots.push((node, InstanceIdx(instance)));
                }
            }
        }
        roots.sort_by_key(|&(node, _)| self.graph.nodes()[node].kind() != ComponentKind::Source);
        roots
    }

    /// The roots whose tasks run a source or sink that may wait for
    /// something outside the job ([`Source::may_block`](streamwork_core::Source::may_block)):
    /// on workers, each of their tasks gets a thread of its own.
    pub(crate) fn blocking_roots(&self) -> std::collections::HashSet<usize> {
        (0..self.graph.nodes().len())
            .filter(|&node| self.graph.nodes()[node].may_block)
            .map(|node| self.layout.root_of(self.graph, node))
            .collect()
    }

    /// Drops the builder's own senders, so that a port disconnects once every
    /// task sending to it has ended.
    pub(crate) fn release_senders(&mut self) {
        self.senders.clear();
    }

    /// The measurements of the job, once every task is built.
    pub(crate) fn registry(&mut self) -> Registry {
        let graph = self.graph;
        let edges = graph.edges();
        let components = graph
            .nodes()
            .iter()
            .enumerate()
            .map(|(n, def)| ComponentInfo {
                name: def.name().to_string(),
                kind: def.kind(),
                counters: self.counters[n].clone(),
                times: self.times[n]
                    .iter()
                    .map(|t| t.clone().unwrap_or_default())
                    .collect(),
                upstream: edges
                    .iter()
                    .filter(|e| e.to().index() == n)
                    .map(|e| e.from().index())
                    .collect(),
            })
            .collect();
        Registry {
            job: graph.name().to_string(),
            components,
            edges: edges
                .iter()
                .enumerate()
                .map(|(i, e)| (e.from().index(), e.to().index(), self.dropped[i].clone()))
                .collect(),
            pause_flags: self
                .pause_flags
                .iter()
                .map(|(n, f)| (*n, f.clone()))
                .collect(),
            monitor: Default::default(),
            checkpoints: Default::default(),
            looked: Default::default(),
            stop: AtomicBool::new(false),
        }
    }
}

/// The edges out of one channel of one instance, as wired, and how to join
/// them (any of them knows the channel's record type).
#[derive(Default)]
struct ChannelEdges {
    parts: Vec<Box<dyn Any + Send>>,
    fan_out: Option<FanOutFactory>,
}

impl ChannelEdges {
    /// The one edge its collector hands batches to: the fan-out of several,
    /// the only one, or none.
    fn joined(mut self) -> Option<Box<dyn Any + Send>> {
        match self.fan_out {
            Some(fan_out) if self.parts.len() > 1 => Some(fan_out(self.parts)),
            _ => self.parts.pop(),
        }
    }
}
