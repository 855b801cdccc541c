//! Checking a job as built: every problem the types could not rule out is a
//! [`GraphError`] before anything runs.

use super::input::GroupingSpec;
use streamwork_core::NodeId;
use streamwork_core::checkpoint::Delivery;
use streamwork_core::flow::FlowControl;
use streamwork_core::grouping::GroupingKind;

use super::{ComponentKind, EdgeDef, GraphError, JobBuilder, JobGraph};

impl<D> JobBuilder<D> {
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
        let delivery = self.config.delivery;
        if delivery != Delivery::AtMostOnce
            && let Some(edge) = self.edges.iter().find(|e| e.flow.overflow.drops())
        {
            return Err(GraphError::DroppingEdge {
                from: self.nodes[edge.from.index()].name.to_string(),
                to: self.nodes[edge.to.index()].name.to_string(),
                delivery,
            });
        }
        if let Some((edge, pause)) = self
            .edges
            .iter()
            .find_map(|e| Some((e, e.flow.pause.filter(|p| !p.are_valid())?)))
        {
            return Err(GraphError::BadPauseWatermarks {
                from: self.nodes[edge.from.index()].name.to_string(),
                to: self.nodes[edge.to.index()].name.to_string(),
                high: pause.high,
                low: pause.low,
            });
        }
        if let Some((component, problem)) = self
            .nodes
            .iter()
            .find_map(|n| Some((n.name(), n.guarantee.problem(delivery)?)))
        {
            return Err(GraphError::CannotKeepDelivery {
                component: component.to_string(),
                delivery,
                problem,
            });
        }
        for (idx, node) in self.nodes.iter().enumerate() {
            for (channel, info) in node.channels.iter().enumerate() {
                let (from, channel) = (NodeId(idx as u32), channel as u32);
                let read = self
                    .edges
                    .iter()
                    .any(|e| e.from == from && e.channel == channel);
                if !read && !self.discarded.contains(&(from, channel)) {
                    return Err(GraphError::UnreadChannel {
                        component: node.name.to_string(),
                        channel: info.name.to_string(),
                    });
                }
            }
            for port in 0..node.ports.len() as u32 {
                if !self
                    .edges
                    .iter()
                    .any(|e| e.to.index() == idx && e.port == port)
                {
                    return Err(GraphError::UnconnectedInput {
                        component: node.name.to_string(),
                        port,
                    });
                }
            }
        }
        for (late, gate) in &self.gates {
            let read = late.is_some_and(|(node, channel)| {
                self.edges
                    .iter()
                    .any(|e| e.from == node && e.channel == channel)
            });
            if !read {
                gate.open();
            }
        }
        let mut edges = Vec::with_capacity(self.edges.len());
        for e in self.edges {
            let from = &self.nodes[e.from.index()];
            let to = &self.nodes[e.to.index()];
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
                factories: e.factories,
                exchange: e.exchange,
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
