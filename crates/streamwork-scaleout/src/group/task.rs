//! What a partition runs: the task a job is built from, and how the
//! group's topics map to jobs or stages.

use std::sync::Arc;

use crate::stages::StagePlan;
use streamwork_connectors::kafka::{KafkaSource, SourceProgress};
use streamwork_runtime::JobGraph;

use crate::error::GroupError;
use crate::layout::Layout;

/// One partition this process owns: what its job is built from.
pub struct PartitionTask {
    pub(super) brokers: String,
    pub(super) group: String,
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) extra: Vec<(String, String)>,
    pub(super) progress: Arc<SourceProgress>,
    /// Every topic the task reads (the first its own), with its progress.
    pub(super) reads: Vec<(String, Arc<SourceProgress>)>,
}

impl PartitionTask {
    /// The partition's topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The brokers, for the job's sinks.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// The progress of the task's reading of `topic`.
    pub(super) fn progress_of(&self, topic: &str) -> Arc<SourceProgress> {
        self.reads
            .iter()
            .find(|(t, _)| t == topic)
            .map_or_else(|| self.progress.clone(), |(_, p)| p.clone())
    }

    /// The job's source: this partition, from its checkpointed position.
    /// Use it at parallelism 1.
    pub fn source(&self) -> KafkaSource {
        let mut source = KafkaSource::new(&self.brokers, &self.topic, &self.group)
            .assign([self.partition])
            .report_to(self.progress.clone());
        for (key, value) in &self.extra {
            source = source.property(key, value);
        }
        source
    }
}

pub(super) type Build = Arc<dyn Fn(&PartitionTask) -> Result<JobGraph, GroupError> + Send + Sync>;

/// What the partitions of the group's topics are the partitions of.
#[derive(Clone, Debug)]
pub(super) enum Routing {
    /// [`GroupRunner::run`]: each is a job of its own.
    Partitions,
    /// [`GroupRunner::run_job`]: each partition of a stage's first topic
    /// is a partition of that stage.
    Stages {
        plan: StagePlan,
        /// The topics each stage reads, its first one first, by stage.
        reads: Vec<Vec<String>>,
        /// Where each stage's partitions keep their checkpoints.
        layout: Layout,
    },
}

impl Routing {
    /// The stage a topic is the first topic of, its name, and the topics it
    /// reads.
    pub(super) fn task_of(&self, topic: &str) -> (Option<usize>, String, Vec<String>) {
        match self {
            Routing::Partitions => (None, topic.to_string(), vec![topic.to_string()]),
            Routing::Stages { plan, reads, .. } => {
                match reads
                    .iter()
                    .position(|r| r.first().map(String::as_str) == Some(topic))
                {
                    Some(stage) => (
                        Some(stage),
                        plan.stages[stage].name.clone(),
                        reads[stage].clone(),
                    ),
                    None => (None, topic.to_string(), vec![topic.to_string()]),
                }
            }
        }
    }

    /// Where the checkpoints of partition `partition` of the task named
    /// `name` (of stage `stage`) are, relative to the group's.
    pub(super) fn path(&self, stage: Option<usize>, name: &str, partition: i32) -> String {
        match (self, stage) {
            (Routing::Stages { layout, .. }, Some(stage)) => {
                layout.stages[stage].path(partition as u32)
            }
            _ => format!("{name}/{partition}"),
        }
    }

    /// For a partition of a stage that was rescaled: the stage's name,
    /// generation and partition count before, which the partition restores
    /// from until it has checkpoints of its own, and the components that
    /// start anew (its exchange ends).
    pub(super) fn rescaled(&self, stage: Option<usize>) -> Option<(String, u32, u32, Vec<String>)> {
        let (Routing::Stages { plan, layout, .. }, Some(stage)) = (self, stage) else {
            return None;
        };
        let (generation, partitions) = layout.stages[stage].from?;
        let mut fresh = Vec::new();
        for exchange in &plan.exchanges {
            if exchange.to_stage == stage {
                fresh.push(format!("{}:read", exchange.name));
            }
            if exchange.from_stage == stage {
                fresh.push(format!("{}:encode", exchange.name));
                fresh.push(format!("{}:write", exchange.name));
            }
        }
        Some((
            layout.stages[stage].name.clone(),
            generation,
            partitions,
            fresh,
        ))
    }
}
