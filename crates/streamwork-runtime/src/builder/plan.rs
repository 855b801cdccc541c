//! The job graph as data, with the names used in the job: for the web view,
//! documentation, and tests. Renders as Mermaid or Graphviz DOT text.

use std::fmt::Write;

use streamwork_core::grouping::GroupingKind;

use super::graph::{ComponentKind, JobGraph};

/// One component of a [`JobPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentPlan {
    /// Name given in the job.
    pub name: String,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// Number of instances.
    pub parallelism: u32,
    /// Input port names and types.
    pub inputs: Vec<(String, String)>,
    /// Output channel names and types.
    pub channels: Vec<(String, String)>,
}

/// One edge of a [`JobPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgePlan {
    /// Upstream component name.
    pub from: String,
    /// Upstream channel name.
    pub channel: String,
    /// Downstream component name.
    pub to: String,
    /// Downstream port name.
    pub port: String,
    /// Grouping.
    pub grouping: GroupingKind,
}

/// One stage of a job run as stages across processes, as a runner cut it
/// (see [`JobPlan::with_stages`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageRow {
    /// The stage's name.
    pub name: String,
    /// Its components.
    pub components: Vec<String>,
    /// The logs it reads: its source's, or those of the exchanges into it.
    pub reads: Vec<String>,
    /// The logs of the exchanges it writes.
    pub writes: Vec<String>,
    /// Its partitions: one job each, given to one process of the group
    /// (`None`: those of its source's log).
    pub partitions: Option<u32>,
}

/// The shape of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// The job's name.
    pub name: String,
    /// Components in the order they were added.
    pub components: Vec<ComponentPlan>,
    /// Edges.
    pub edges: Vec<EdgePlan>,
    /// Its stages and their logs, when it runs as stages.
    pub stages: Vec<StageRow>,
}

impl JobPlan {
    pub(crate) fn of(graph: &JobGraph) -> Self {
        let components = graph
            .nodes()
            .iter()
            .map(|n| ComponentPlan {
                name: n.name().to_string(),
                kind: n.kind(),
                parallelism: n.parallelism(),
                inputs: n
                    .ports()
                    .iter()
                    .map(|p| (p.name.to_string(), p.type_name.to_string()))
                    .collect(),
                channels: n
                    .channels()
                    .iter()
                    .map(|c| (c.name.to_string(), c.type_name.to_string()))
                    .collect(),
            })
            .collect();
        let edges = graph
            .edges()
            .iter()
            .map(|e| {
                let from = graph.node(e.from());
                let to = graph.node(e.to());
                EdgePlan {
                    from: from.name().to_string(),
                    channel: from.channels()[e.channel() as usize].name.to_string(),
                    to: to.name().to_string(),
                    port: to.ports()[e.port() as usize].name.to_string(),
                    grouping: e.grouping(),
                }
            })
            .collect();
        JobPlan {
            name: graph.name().to_string(),
            components,
            edges,
            stages: Vec::new(),
        }
    }

    /// The same plan, with the stages a runner cut the job into, to be
    /// shown beside it (the `rows` of scale-out's plan of stages):
    /// what the job page shows of a job run across processes.
    pub fn with_stages(mut self, stages: Vec<StageRow>) -> Self {
        self.stages = stages;
        self
    }

    fn edge_label(&self, e: &EdgePlan) -> String {
        let mut label = e.grouping.to_string();
        if e.channel != "out" {
            label = format!("{}: {label}", e.channel);
        }
        if e.port != "in" {
            label = format!("{label} → {}", e.port);
        }
        label
    }

    /// Mermaid flowchart text.
    ///
    /// ```text
    /// flowchart LR
    ///   n0(["source ×1"]) ...
    /// ```
    pub fn to_mermaid(&self) -> String {
        let mut s = String::from("flowchart LR\n");
        for (i, c) in self.components.iter().enumerate() {
            let label = format!("{} ×{}", c.name, c.parallelism);
            let _ = match c.kind {
                ComponentKind::Source => writeln!(s, "  n{i}([\"{label}\"])"),
                ComponentKind::Operator => writeln!(s, "  n{i}[\"{label}\"]"),
                ComponentKind::Sink => writeln!(s, "  n{i}[(\"{label}\")]"),
            };
        }
        for e in &self.edges {
            let _ = writeln!(
                s,
                "  n{} -->|{}| n{}",
                self.index(&e.from),
                self.edge_label(e),
                self.index(&e.to)
            );
        }
        s
    }

    /// Graphviz DOT text.
    pub fn to_dot(&self) -> String {
        let mut s = format!(
            "digraph \"{}\" {{\n  rankdir=LR;\n",
            self.name.replace('"', "'")
        );
        for (i, c) in self.components.iter().enumerate() {
            let shape = match c.kind {
                ComponentKind::Source => "invhouse",
                ComponentKind::Operator => "box",
                ComponentKind::Sink => "house",
            };
            let _ = writeln!(
                s,
                "  n{i} [label=\"{} ×{}\", shape={shape}];",
                c.name, c.parallelism
            );
        }
        for e in &self.edges {
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{}\"];",
                self.index(&e.from),
                self.index(&e.to),
                self.edge_label(e)
            );
        }
        s.push_str("}\n");
        s
    }

    fn index(&self, name: &str) -> usize {
        self.components
            .iter()
            .position(|c| c.name == name)
            .unwrap_or(usize::MAX)
    }
}

impl JobGraph {
    /// The graph as data: names, parallelism, groupings, channels.
    pub fn plan(&self) -> JobPlan {
        JobPlan::of(self)
    }
}
