//! A part of a job graph run as a job of its own, the edges it cuts carried
//! as encoded records: what a runner that spreads one job over several
//! processes builds each process's jobs from (`streamwork-scaleout` decides
//! where to cut, and what carries the cut edges).
//!
//! An edge can be cut when its records can leave the process: a keyed edge
//! made by `key_by`, whose records are [`Portable`](streamwork_core::Portable)
//! ([`EdgeDef::cut_ends`]). [`JobGraph::into_part`] keeps some of the
//! graph's components, each at parallelism 1, and replaces each cut edge by
//! its two ends (`ends.rs`, typed where `key_by` knew the record type):
//!
//! * an edge leaving the part ends in an operator that encodes each record
//!   into an [`Envelope`] (its key's hash and its bytes), then in the sink
//!   the runner gives for it;
//! * an edge entering the part starts at the source the runner gives for it
//!   ([`EnvelopeSource`]), whose envelopes are decoded back into records.
//!
//! A runner's sinks keep exactly-once when they publish only what completed
//! checkpoints cover, and publish it again after a restore, numbered so
//! that the reading part's source drops what it already read: then what
//! the next part reads is what the restored part had written, whatever a
//! replay computes, and operators need not be deterministic. Such a sink
//! says so ([`Sink::exactly_once`]); one that does not keeps the part's job
//! from promising exactly-once, as any sink would.
//!
//! ```
//! use streamwork::prelude::*;
//! use streamwork::runtime::cut::GraphPart;
//! use streamwork::connectors::CollectSink;
//!
//! let graph = job! {
//!     source words = VecSource::new(vec!["a".to_string()]);
//!     operator counted = map(|w: String| w.len() as u64) <- words.key(|w: &String| w.clone());
//!     sink out = CollectSink::new() <- counted;
//! }?;
//! // The keyed edge into `counted` is the one that can be cut.
//! let cut = graph.edges().iter().position(|e| e.cut_ends().is_some()).unwrap();
//! assert_eq!(graph.edge_name(cut), "counted-in");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod ends;
mod envelope;

use std::any::Any;
use std::sync::Arc;

use streamwork_core::grouping::GroupingKind;
use streamwork_core::stream::Stream;
use streamwork_core::{Collector, JobId, NodeId, Sink, Source};

pub use self::ends::EnvelopeSource;
pub use self::envelope::Envelope;
use crate::builder::input::Groupings;
use crate::builder::{EdgeDef, JobGraph, edge_factories, sink_node};

/// Why a part of a graph cannot be made.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{component}` {problem}; {fix}")]
pub struct CutError {
    /// The component at fault.
    pub component: String,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

streamwork_core::debug_as_display!(CutError);

/// What a planner knows of an edge that can be cut
/// ([`EdgeDef::cut_ends`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutEnds {
    /// Its records' Rust type.
    pub record_type: &'static str,
    /// Whether the stream carries watermarks (which do not cross a cut).
    pub watermarked: bool,
}

/// The part of a graph [`JobGraph::into_part`] makes a job of.
#[derive(Clone)]
pub struct GraphPart<'a> {
    /// Its name: the part's job is named `JOB/NAME`.
    pub name: &'a str,
    /// The components it keeps, each at parallelism 1.
    pub nodes: &'a [NodeId],
    /// Which share of the whole job it runs: its instances are told they
    /// are instance `share` of `shares` (their key groups, their part of
    /// checkpoints, so that a part restored at another count takes its
    /// keys' state by key group), and its sources, and the sources of the
    /// edges it reads, that they read partition `share`.
    pub share: u32,
    /// How many shares the job is run as.
    pub shares: u32,
    /// What its sources are given (see
    /// [`InstanceContext::runner_link`](streamwork_core::InstanceContext::runner_link)).
    pub link: Option<Arc<dyn Any + Send + Sync>>,
}

impl JobGraph {
    /// The name of edge `edge` (an index into [`edges`](Self::edges)):
    /// `COMPONENT-PORT` of the component it enters (`count-in`,
    /// `joined-left`). A cut edge's ends are named after it
    /// (`NAME:encode`, `NAME:write`, `NAME:read`).
    pub fn edge_name(&self, edge: usize) -> String {
        let edge = &self.edges()[edge];
        let to = self.node(edge.to());
        format!("{}-{}", to.name(), to.ports()[edge.port() as usize].name)
    }

    /// The job of `part` of this graph (see the [module docs](self)): each
    /// edge that leaves it ends in the sink `output` makes for the edge's
    /// index, each edge that enters it starts at the source `input` makes
    /// (or the first error either returns). An edge with one end in the
    /// part that cannot be cut is refused.
    pub fn into_part<I, O>(
        self,
        part: GraphPart<'_>,
        mut input: impl FnMut(usize) -> Result<I, CutError>,
        mut output: impl FnMut(usize) -> Result<O, CutError>,
    ) -> Result<JobGraph, CutError>
    where
        I: Source<Out = Collector<Envelope>>,
        O: Sink<In = Envelope>,
    {
        let names: Vec<String> = (0..self.edges().len()).map(|e| self.edge_name(e)).collect();
        let JobGraph {
            name,
            nodes,
            edges,
            config,
        } = self;
        let mut index = vec![None; nodes.len()];
        let mut kept = Vec::new();
        let node_names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        for (old, mut node) in nodes.into_iter().enumerate() {
            if part.nodes.contains(&NodeId(old as u32)) {
                node.parallelism = 1;
                if node.kind == crate::builder::ComponentKind::Source {
                    node.assigned = Some(Arc::from([part.share as i32]));
                    node.link = part.link.clone();
                }
                index[old] = Some(NodeId(kept.len() as u32));
                kept.push(node);
            }
        }
        let mut new_edges = Vec::new();
        for (old, edge) in edges.into_iter().enumerate() {
            let (from, to) = (index[edge.from.index()], index[edge.to.index()]);
            let name = &names[old];
            let ends = match (from, to) {
                (Some(from), Some(to)) => {
                    new_edges.push(EdgeDef { from, to, ..edge });
                    continue;
                }
                (None, None) => continue,
                _ => edge.exchange.clone().ok_or_else(|| CutError {
                    component: node_names[edge.to.index()].clone(),
                    problem: format!(
                        "reads `{}` through an edge that leaves the part `{}` but cannot be cut: only a keyed edge (`key_by`) carries its records out of the process",
                        node_names[edge.from.index()],
                        part.name
                    ),
                    fix: "key the edge, or keep both of its ends in one part".to_string(),
                })?,
            };
            if let Some(from) = from {
                let encode = NodeId(kept.len() as u32);
                kept.push(ends.encode_node(&format!("{name}:encode"), part.share));
                let write = NodeId(kept.len() as u32);
                // What it keeps of a delivery promise is what the sink
                // says: a runner's writes ahead, deduplicated by the
                // reader, and says so (see above).
                kept.push(sink_node(&format!("{name}:write"), 1, output(old)?));
                new_edges.push(EdgeDef {
                    from,
                    to: encode,
                    port: 0,
                    grouping: GroupingKind::Forward,
                    ..edge
                });
                let route = Stream::<Envelope>::__new(JobId(0), encode, 0)
                    .forward()
                    .route()
                    .clone();
                let factories = edge_factories(route);
                new_edges.push(EdgeDef {
                    from: encode,
                    channel: 0,
                    to: write,
                    port: 0,
                    grouping: GroupingKind::Forward,
                    flow: Default::default(),
                    factories,
                    exchange: None,
                });
            } else if let Some(to) = to {
                let read = NodeId(kept.len() as u32);
                let mut node = ends.decode_node(&format!("{name}:read"), Box::new(input(old)?));
                node.assigned = Some(Arc::from([part.share as i32]));
                kept.push(node);
                new_edges.push(EdgeDef {
                    from: read,
                    channel: 0,
                    to,
                    ..edge
                });
            }
        }
        let share = Some((part.share, part.shares.max(part.share + 1)));
        for node in &mut kept {
            node.share = share;
        }
        Ok(JobGraph {
            name: format!("{name}/{}", part.name),
            nodes: kept,
            edges: new_edges,
            config,
        })
    }
}

impl EdgeDef {
    /// Whether this edge can be cut, and what a planner knows of it: a
    /// keyed edge made by `key_by`, whose records are
    /// [`Portable`](streamwork_core::Portable).
    pub fn cut_ends(&self) -> Option<CutEnds> {
        self.exchange.as_ref().map(|ends| CutEnds {
            record_type: ends.type_name,
            watermarked: ends.watermarked,
        })
    }
}
