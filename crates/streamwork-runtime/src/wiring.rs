//! From a job graph to tasks: which components are fused, which edges become
//! channels, and the sender index of every upstream instance at every port.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crossbeam_channel::{Receiver, Sender, bounded};
use streamwork_core::exec::{InputTask, InstanceCounters, SourceTask};
use streamwork_core::graph::{EdgeWiring, JobGraph, NodeFactory};
use streamwork_core::grouping::GroupingKind;
use streamwork_core::message::{ChannelSender, Envelope, SenderIdx};
use streamwork_core::outputs::OutputParts;
use streamwork_core::{ComponentKind, InstanceContext};

use crate::channel::PortSender;

/// What a task runs.
pub(crate) enum TaskBody {
    Source(Box<dyn SourceTask>),
    Input {
        task: Box<dyn InputTask>,
        /// Per port, one channel per sender, by sender index.
        ports: Vec<Vec<Receiver<Envelope>>>,
    },
}

/// One task: a root instance and everything fused into it.
pub(crate) struct Task {
    pub(crate) component: Arc<str>,
    pub(crate) instance: u32,
    pub(crate) body: TaskBody,
}

/// How the graph is laid out at run time.
pub(crate) struct Layout {
    /// Per node: the edge that fuses it into its upstream, if any.
    fused_by: Vec<Option<usize>>,
    /// Per (edge, sending instance): sender index at the target port.
    sender_idx: HashMap<(usize, u32), SenderIdx>,
    /// Per (node, port): sender index -> edge ordinal at that port.
    sender_edges: HashMap<(usize, usize), Vec<u32>>,
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
                .filter(|&e| edges[e].to().0 as usize == to)
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
        let mut n_senders = HashMap::new();
        for (to, node) in nodes.iter().enumerate() {
            for port in 0..node.ports().len() {
                let mut next = 0u32;
                let mut map = Vec::new();
                let incoming = (0..edges.len()).filter(|&e| {
                    edges[e].to().0 as usize == to && edges[e].port() as usize == port
                });
                for (ordinal, e) in incoming.enumerate() {
                    if fused_by[to] == Some(e) {
                        continue;
                    }
                    let upstream = graph.node(edges[e].from()).parallelism();
                    for instance in 0..upstream {
                        sender_idx.insert((e, instance), SenderIdx(next));
                        map.push(ordinal as u32);
                        next += 1;
                    }
                }
                sender_edges.insert((to, port), map);
                n_senders.insert((to, port), next);
            }
        }
        Layout {
            fused_by,
            sender_idx,
            sender_edges,
            n_senders,
        }
    }

    pub(crate) fn is_root(&self, node: usize) -> bool {
        self.fused_by[node].is_none()
    }
}

/// Builds every task of a graph, with its channels.
pub(crate) struct Builder<'g> {
    graph: &'g JobGraph,
    layout: Layout,
    abort: Arc<AtomicBool>,
    /// One channel per (node, instance, port, sender): each sender has its
    /// own queue into each receiver, drained round-robin, so that every
    /// upstream instance advances at the consumer's pace.
    senders: HashMap<(usize, u32, usize, u32), Sender<Envelope>>,
    receivers: HashMap<(usize, u32, usize, u32), Receiver<Envelope>>,
    pub(crate) counters: Vec<Vec<Arc<InstanceCounters>>>,
}

impl<'g> Builder<'g> {
    pub(crate) fn new(graph: &'g JobGraph, abort: Arc<AtomicBool>) -> Self {
        let layout = Layout::of(graph);
        let capacity = graph.config().channel_capacity;
        let mut senders = HashMap::new();
        let mut receivers = HashMap::new();
        for (node_idx, node) in graph.nodes().iter().enumerate() {
            if !layout.is_root(node_idx) {
                continue;
            }
            for instance in 0..node.parallelism() {
                for port in 0..node.ports().len() {
                    let n = layout.n_senders[&(node_idx, port)];
                    // The port's capacity is shared among its senders, at
                    // least two batches each so that a sender can keep one in
                    // flight while the receiver works on another.
                    let per_sender = capacity.div_ceil(n.max(1) as usize).max(2);
                    for sender in 0..n {
                        let (tx, rx) = bounded(per_sender);
                        senders.insert((node_idx, instance, port, sender), tx);
                        receivers.insert((node_idx, instance, port, sender), rx);
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
        Builder {
            graph,
            layout,
            abort,
            senders,
            receivers,
            counters,
        }
    }

    fn context(&self, node: usize, instance: u32) -> InstanceContext {
        let def = &self.graph.nodes()[node];
        InstanceContext::new(
            def.name_arc(),
            instance,
            def.parallelism(),
            self.graph.config().key_groups,
        )
    }

    fn outputs(&self, node: usize, instance: u32) -> OutputParts {
        let graph = self.graph;
        let def = &graph.nodes()[node];
        let mut channels: Vec<Vec<Box<dyn Any + Send>>> =
            (0..def.channels().len()).map(|_| Vec::new()).collect();
        for (e, edge) in graph.edges().iter().enumerate() {
            if edge.from().0 as usize != node {
                continue;
            }
            let to = edge.to().0 as usize;
            let part = if self.layout.fused_by[to] == Some(e) {
                self.fused(to, instance)
            } else {
                let port = edge.port() as usize;
                let from = self.layout.sender_idx[&(e, instance)];
                let targets = (0..graph.nodes()[to].parallelism())
                    .map(|target| {
                        let tx = self.senders[&(to, target, port, from.0)].clone();
                        Box::new(PortSender::new(tx, self.abort.clone())) as Box<dyn ChannelSender>
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
            channels[edge.channel() as usize].push(part);
        }
        OutputParts::new(channels, graph.config().batch_size)
    }

    fn fused(&self, node: usize, instance: u32) -> Box<dyn Any + Send> {
        let NodeFactory::Input {
            fused: Some(fused), ..
        } = self.graph.nodes()[node].factory()
        else {
            unreachable!("layout only fuses nodes with a fused factory")
        };
        fused(
            self.context(node, instance),
            self.outputs(node, instance),
            self.counters[node][instance as usize].clone(),
        )
    }

    /// Builds the task of root `node`, instance `instance`.
    pub(crate) fn task(&mut self, node: usize, instance: u32) -> Task {
        let def = &self.graph.nodes()[node];
        let ctx = self.context(node, instance);
        let outputs = self.outputs(node, instance);
        let counters = self.counters[node][instance as usize].clone();
        let body = match def.factory() {
            NodeFactory::Source(factory) => TaskBody::Source(factory(ctx, outputs, counters)),
            NodeFactory::Input { root, .. } => {
                let n_ports = def.ports().len();
                let sender_edges = (0..n_ports)
                    .map(|p| self.layout.sender_edges[&(node, p)].clone())
                    .collect();
                let ports = (0..n_ports)
                    .map(|p| {
                        (0..self.layout.n_senders[&(node, p)])
                            .map(|sender| {
                                self.receivers
                                    .remove(&(node, instance, p, sender))
                                    .unwrap_or_else(|| unreachable!("one receiver per sender"))
                            })
                            .collect()
                    })
                    .collect();
                TaskBody::Input {
                    task: root(ctx, outputs, counters, sender_edges),
                    ports,
                }
            }
        };
        Task {
            component: def.name_arc(),
            instance,
            body,
        }
    }

    /// The roots, sources first (so that consumers exist before producers run).
    pub(crate) fn roots(&self) -> Vec<(usize, u32)> {
        let mut roots = Vec::new();
        for (node, def) in self.graph.nodes().iter().enumerate() {
            if self.layout.is_root(node) {
                for instance in 0..def.parallelism() {
                    roots.push((node, instance));
                }
            }
        }
        roots.sort_by_key(|&(node, _)| self.graph.nodes()[node].kind() != ComponentKind::Source);
        roots
    }

    /// Drops the builder's own senders, so that a port disconnects once every
    /// task sending to it has ended.
    pub(crate) fn release_senders(&mut self) {
        self.senders.clear();
    }
}
