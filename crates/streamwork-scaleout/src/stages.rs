//! A job as stages: the parts of its graph between keyed exchanges, each
//! run as its own job per partition, in several processes, with each keyed
//! exchange carried by a partitioned log (the model of Kafka Streams'
//! sub-topologies).
//!
//! [`StagePlan::of`] cuts the graph at every keyed edge (`.key_by(...)`);
//! what stays connected is a stage. A stage reads either one source of a
//! partitioned log (a Kafka topic) or the exchanges that enter it; each
//! exchange has as many partitions as the parallelism of the component it
//! enters. [`StagePlan::stage_job`] makes the job of one partition of one
//! stage through the engine's [`JobGraph::into_part`]: the stage's
//! components, each at parallelism 1, the source told its partition, each
//! exchange leaving the stage ending in an operator that encodes its
//! records and the runner's sink, each exchange entering it starting at the
//! runner's source.
//!
//! The runner's sink must publish what a stage writes only once the
//! checkpoint that covers it is complete, and the same records again after
//! a restore from it (write-ahead): then what the next stage reads is what
//! the restored stage had written, whatever a replay computes, and
//! operators need not be deterministic. The group runner's does.
//!
//! What cannot run as stages is refused by name, with the fix: a global,
//! broadcast or custom grouping (across processes they would reach one
//! partition's instance only), an event-time exchange (watermarks do not
//! cross processes yet), and a stage that reads two sources.
//!
//! ```
//! use streamwork::prelude::*;
//! use streamwork::connectors::CollectSink;
//! use streamwork::scaleout::stages::StagePlan;
//!
//! #[derive(Clone)]
//! struct Topic;
//! impl Source for Topic {
//!     type Out = Collector<String>;
//!     fn split_input(&self) -> Option<String> { Some("words".into()) }
//!     fn poll(&mut self, _: &mut Collector<String>) -> Result<SourcePoll, ConnectorError> {
//!         Ok(SourcePoll::Finished)
//!     }
//! }
//!
//! let graph = job! {
//!     source words = Topic;
//!     operator sizes[2] = map(|w: String| w.len() as u64) <- words.key(|w: &String| w.clone());
//!     sink out = CollectSink::new() <- sizes;
//! }?;
//! let plan = StagePlan::of(&graph)?;
//! assert_eq!(plan.stages.len(), 2);
//! assert_eq!(plan.exchanges[0].log_name("wc"), "wc-sizes-in-repartition");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use streamwork_core::grouping::GroupingKind;
use streamwork_core::{Collector, KeyGroups, NodeId, Sink, Source};
use streamwork_runtime::cut::Envelope;
use streamwork_runtime::cut::{CutError, GraphPart};
use streamwork_runtime::{ComponentKind, JobGraph, NodeDef, StageRow};

/// Why a job cannot run as stages.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("the job cannot run as stages: `{component}` {problem}; {fix}")]
pub struct StageError {
    /// The component at fault.
    pub component: String,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

streamwork_core::debug_as_display!(StageError);

fn refuse(component: &str, problem: impl Into<String>, fix: impl Into<String>) -> StageError {
    StageError {
        component: component.to_string(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// A job cut into stages at its keyed exchanges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlan {
    /// The job's name.
    pub job: String,
    /// The stages, those that read sources first.
    pub stages: Vec<Stage>,
    /// The keyed exchanges between them.
    pub exchanges: Vec<ExchangePlan>,
    /// The job's key groups: a record goes to the exchange partition that
    /// owns its key's group, as it would go to that instance in one process
    /// ([`KeyGroups::route`]).
    pub key_groups: KeyGroups,
}

/// One stage: components that stay together, run as one job per partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// Its name: its source's, or that of the component its first exchange
    /// enters.
    pub name: String,
    /// Its components, in the job's order.
    pub components: Vec<String>,
    /// The partitioned log its source reads (a stage that reads a source).
    pub log: Option<String>,
    /// The exchanges it reads (indexes into [`StagePlan::exchanges`]).
    pub inputs: Vec<usize>,
    /// The exchanges it writes.
    pub outputs: Vec<usize>,
    /// The partitions of the exchanges it reads (a stage that reads
    /// exchanges).
    pub partitions: Option<u32>,
    nodes: Vec<NodeId>,
}

/// One keyed exchange between two stages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangePlan {
    /// `COMPONENT-PORT` of the component it enters (`count-in`,
    /// `joined-left`): what its log is named after.
    pub name: String,
    /// The component that writes it.
    pub from: String,
    /// The component that reads it.
    pub to: String,
    /// Its records' Rust type.
    pub record_type: &'static str,
    /// Its partitions: the parallelism of the component it enters.
    pub partitions: u32,
    /// The stage that writes it.
    pub from_stage: usize,
    /// The stage that reads it.
    pub to_stage: usize,
    edge: usize,
}

impl ExchangePlan {
    /// The log (topic) of this exchange in a job run under `prefix` (the
    /// consumer group): `PREFIX-NAME-repartition`, as Kafka Streams names
    /// its repartition topics.
    pub fn log_name(&self, prefix: &str) -> String {
        format!("{prefix}-{}-repartition", self.name)
    }
}

impl StagePlan {
    /// The stage that reads partitioned log `log`, or whose exchange's log
    /// it is, under `prefix`.
    pub fn stage_of_log(&self, prefix: &str, log: &str) -> Option<usize> {
        if let Some(index) = self
            .stages
            .iter()
            .position(|s| s.log.as_deref() == Some(log))
        {
            return Some(index);
        }
        self.exchanges
            .iter()
            .find(|x| x.log_name(prefix) == log)
            .map(|x| x.to_stage)
    }
}

impl fmt::Display for StagePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "job `{}` as {} stages:", self.job, self.stages.len())?;
        for (index, stage) in self.stages.iter().enumerate() {
            let reads = match (&stage.log, stage.partitions) {
                (Some(log), _) => format!("log `{log}`"),
                (None, Some(partitions)) => format!(
                    "{} ({partitions} partitions)",
                    stage
                        .inputs
                        .iter()
                        .map(|&x| format!("exchange `{}`", self.exchanges[x].name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                (None, None) => "nothing".to_string(),
            };
            writeln!(
                f,
                "  stage {index} `{}`: {} — reads {reads}",
                stage.name,
                stage.components.join(" → ")
            )?;
        }
        for exchange in &self.exchanges {
            writeln!(
                f,
                "  exchange `{}`: `{}` → `{}`, {} partitions of `{}`",
                exchange.name,
                exchange.from,
                exchange.to,
                exchange.partitions,
                exchange.record_type
            )?;
        }
        Ok(())
    }
}

/// Union-find over the job's components.
struct Components(Vec<usize>);

impl Components {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[a.max(b)] = a.min(b);
        }
    }
}

impl StagePlan {
    /// Job `graph` cut into stages at its keyed exchanges (see the [module
    /// docs](self)), or why it cannot be.
    pub fn of(graph: &JobGraph) -> Result<StagePlan, StageError> {
        let nodes = graph.nodes();
        let mut components = Components((0..nodes.len()).collect());
        let mut cut = Vec::new();
        for (index, edge) in graph.edges().iter().enumerate() {
            let to = nodes[edge.to().index()].name();
            match edge.grouping() {
                GroupingKind::Key => {
                    let Some(ends) = edge.cut_ends() else {
                        return Err(refuse(
                            to,
                            "reads a keyed grouping chosen at run time (`grouped`), which cannot cross processes",
                            "key the stream with `.key_by(...)` (`.key(...)` in `job!`)",
                        ));
                    };
                    if ends.watermarked {
                        return Err(refuse(
                            to,
                            "reads a watermarked stream through a keyed exchange, and watermarks do not cross processes",
                            "place the watermark strategy after the exchange (event time from the records themselves), or run the job in one process",
                        ));
                    }
                    cut.push(index);
                }
                GroupingKind::Shuffle | GroupingKind::Forward => {
                    components.union(edge.from().index(), edge.to().index());
                }
                GroupingKind::Global => {
                    return Err(refuse(
                        to,
                        "reads a global grouping, which across processes would gather one partition's records only",
                        "key the stream by a constant (`.key(|_| 0)`) and give the component parallelism 1",
                    ));
                }
                GroupingKind::Broadcast | GroupingKind::Custom => {
                    return Err(refuse(
                        to,
                        format!(
                            "reads a {:?} grouping, which across processes would reach one partition's instance only",
                            edge.grouping()
                        ),
                        "key the stream (`.key(...)`) instead, or run the job in one process",
                    ));
                }
            }
        }
        // Stages in the order of their first component (sources come first
        // in a job built from its sources on).
        let mut roots: Vec<usize> = Vec::new();
        let mut stage_of = vec![0; nodes.len()];
        for (node, stage_of) in stage_of.iter_mut().enumerate() {
            let root = components.find(node);
            *stage_of = match roots.iter().position(|&r| r == root) {
                Some(stage) => stage,
                None => {
                    roots.push(root);
                    roots.len() - 1
                }
            };
        }
        let mut stages: Vec<Stage> = (0..roots.len())
            .map(|_| Stage {
                name: String::new(),
                components: Vec::new(),
                log: None,
                inputs: Vec::new(),
                outputs: Vec::new(),
                partitions: None,
                nodes: Vec::new(),
            })
            .collect();
        for (node, def) in nodes.iter().enumerate() {
            let stage = &mut stages[stage_of[node]];
            stage.components.push(def.name().to_string());
            stage.nodes.push(NodeId(node as u32));
        }
        let mut exchanges = Vec::new();
        for &index in &cut {
            let edge = &graph.edges()[index];
            let (from, to) = (nodes[edge.from().index()].name(), &nodes[edge.to().index()]);
            let (from_stage, to_stage) =
                (stage_of[edge.from().index()], stage_of[edge.to().index()]);
            if from_stage == to_stage {
                return Err(refuse(
                    to.name(),
                    format!(
                        "reads `{from}` through a keyed exchange and through another path that is not keyed, so both ends would be in one stage"
                    ),
                    "key every path between the two, or none",
                ));
            }
            let record_type = edge.cut_ends().map(|e| e.record_type).unwrap_or("?");
            exchanges.push(ExchangePlan {
                name: graph.edge_name(index),
                from: from.to_string(),
                to: to.name().to_string(),
                record_type,
                partitions: to.parallelism(),
                from_stage,
                to_stage,
                edge: index,
            });
            stages[from_stage].outputs.push(exchanges.len() - 1);
            stages[to_stage].inputs.push(exchanges.len() - 1);
        }
        for stage in &mut stages {
            let sources: Vec<&NodeDef> = stage
                .nodes
                .iter()
                .map(|n| &nodes[n.index()])
                .filter(|n| n.kind() == ComponentKind::Source)
                .collect();
            match sources.as_slice() {
                [] => {
                    let Some(&first) = stage.inputs.first() else {
                        let name = stage.components.first().cloned().unwrap_or_default();
                        return Err(refuse(
                            &name,
                            "reads neither a source nor an exchange",
                            "connect it to the job's source",
                        ));
                    };
                    let first = &exchanges[first];
                    stage.name = first.to.clone();
                    for &x in &stage.inputs {
                        if exchanges[x].partitions != first.partitions {
                            return Err(refuse(
                                &exchanges[x].to,
                                format!(
                                    "has parallelism {} and `{}` of the same stage {}: the exchanges into one stage are partitioned alike",
                                    exchanges[x].partitions, first.to, first.partitions
                                ),
                                "give the components a stage's exchanges enter the same parallelism",
                            ));
                        }
                    }
                    stage.partitions = Some(first.partitions);
                }
                [source] => {
                    stage.name = source.name().to_string();
                    let Some(log) = source.split_input() else {
                        return Err(refuse(
                            source.name(),
                            "is not a partitioned log, so the job cannot be split by its partitions",
                            "read a Kafka topic (`KafkaSource`), or run the job in one process",
                        ));
                    };
                    if let Some(&x) = stage.inputs.first() {
                        return Err(refuse(
                            &exchanges[x].to,
                            format!(
                                "reads an exchange into the stage of source `{}`: a stage reads a source or exchanges, not both",
                                source.name()
                            ),
                            "key the source's stream too (`.key(...)`), so that both are exchanges",
                        ));
                    }
                    stage.log = Some(log.to_string());
                }
                [first, second, ..] => {
                    return Err(refuse(
                        second.name(),
                        format!(
                            "is in one stage with source `{}`: a stage reads one source",
                            first.name()
                        ),
                        "key the sources' streams (`.key(...)`) before they meet",
                    ));
                }
            }
        }
        // Stages that read sources first, then in the order of their
        // exchanges.
        let order: Vec<usize> = {
            let mut order: Vec<usize> = (0..stages.len())
                .filter(|&s| stages[s].log.is_some())
                .collect();
            let mut placed: BTreeSet<usize> = order.iter().copied().collect();
            while placed.len() < stages.len() {
                let before = placed.len();
                for (s, stage) in stages.iter().enumerate() {
                    if !placed.contains(&s)
                        && stage
                            .inputs
                            .iter()
                            .all(|&x| placed.contains(&exchanges[x].from_stage))
                    {
                        placed.insert(s);
                        order.push(s);
                    }
                }
                if placed.len() == before {
                    let s = (0..stages.len()).find(|s| !placed.contains(s)).unwrap_or(0);
                    return Err(refuse(
                        &stages[s].name,
                        "is in a cycle of stages",
                        "a job's stages form no cycle: key the paths differently",
                    ));
                }
            }
            order
        };
        let mut renumber = vec![0; stages.len()];
        for (new, &old) in order.iter().enumerate() {
            renumber[old] = new;
        }
        for exchange in &mut exchanges {
            exchange.from_stage = renumber[exchange.from_stage];
            exchange.to_stage = renumber[exchange.to_stage];
        }
        let mut slots: Vec<Option<Stage>> = stages.into_iter().map(Some).collect();
        let stages = order.iter().filter_map(|&s| slots[s].take()).collect();
        Ok(StagePlan {
            job: graph.name().to_string(),
            stages,
            exchanges,
            key_groups: graph.config().key_groups,
        })
    }

    /// The job of partition `partition` of the `partitions` of stage
    /// `stage` of this plan, made from `graph`, the job the plan was made
    /// from ([`of`](Self::of)): the stage's components at parallelism 1,
    /// each instance told it is instance `partition` of `partitions` (its
    /// key groups and its part of checkpoints are that instance's of the
    /// whole job, so that a stage restored at another partition count takes
    /// its keys' state by key group), its source told to read partition
    /// `partition`, each exchange it writes numbered by writer `partition`
    /// into the sink `output` makes for it, each exchange it reads from the
    /// source `input` makes for it. The source is given `link` (see
    /// [`InstanceContext::runner_link`](streamwork_core::InstanceContext::runner_link)).
    ///
    /// The exchange sinks keep exactly-once when they publish only what
    /// completed checkpoints cover, and publish it again after a restore,
    /// numbered so that the reading stage's source drops what it already
    /// read ([`EnvelopeSource`](streamwork_runtime::cut::EnvelopeSource)s
    /// must); what they claim ([`Sink::exactly_once`]) is what the stage's
    /// job is checked against.
    #[allow(clippy::too_many_arguments)]
    pub fn stage_job<I, O>(
        &self,
        graph: JobGraph,
        stage: usize,
        partition: u32,
        partitions: u32,
        link: Option<Arc<dyn std::any::Any + Send + Sync>>,
        mut input: impl FnMut(&ExchangePlan) -> I,
        mut output: impl FnMut(&ExchangePlan) -> O,
    ) -> Result<JobGraph, StageError>
    where
        I: Source<Out = Collector<Envelope>>,
        O: Sink<In = Envelope>,
    {
        let Some(this) = self.stages.get(stage) else {
            return Err(refuse(
                &self.job,
                format!("has {} stages, not stage {stage}", self.stages.len()),
                "ask for a stage of the plan",
            ));
        };
        if graph.nodes().len() != self.stages.iter().map(|s| s.nodes.len()).sum::<usize>() {
            return Err(refuse(
                graph.name(),
                "is not the job the stage plan was made from",
                "make the plan from the same job",
            ));
        }
        let exchange_of = |edge: usize| {
            self.exchanges
                .iter()
                .find(|x| x.edge == edge)
                .ok_or_else(|| {
                    CutError::from(refuse(
                        &this.name,
                        format!("is cut at edge {edge}, which is no exchange of the plan"),
                        "make the plan from the same job",
                    ))
                })
        };
        let part = GraphPart {
            name: &this.name,
            nodes: &this.nodes,
            share: partition,
            shares: partitions,
            link,
        };
        Ok(graph.into_part(
            part,
            |edge| exchange_of(edge).map(&mut input),
            |edge| exchange_of(edge).map(&mut output),
        )?)
    }

    /// The stages as the job page shows them, with the logs of their
    /// exchanges named under `prefix` (the consumer group): for
    /// [`JobPlan::with_stages`](streamwork_runtime::JobPlan::with_stages).
    pub fn rows(&self, prefix: &str) -> Vec<StageRow> {
        self.stages
            .iter()
            .map(|stage| StageRow {
                name: stage.name.clone(),
                components: stage.components.clone(),
                reads: match &stage.log {
                    Some(log) => vec![log.clone()],
                    None => stage
                        .inputs
                        .iter()
                        .map(|&x| self.exchanges[x].log_name(prefix))
                        .collect(),
                },
                writes: stage
                    .outputs
                    .iter()
                    .map(|&x| self.exchanges[x].log_name(prefix))
                    .collect(),
                partitions: stage.partitions,
            })
            .collect()
    }
}

impl From<StageError> for CutError {
    fn from(error: StageError) -> Self {
        CutError {
            component: error.component,
            problem: error.problem,
            fix: error.fix,
        }
    }
}

impl From<CutError> for StageError {
    fn from(error: CutError) -> Self {
        StageError {
            component: error.component,
            problem: error.problem,
            fix: error.fix,
        }
    }
}
