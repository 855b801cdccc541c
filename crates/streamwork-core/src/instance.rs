//! What one instance knows about where it runs: its component, index,
//! parallelism, the job's key groups, its checkpoints, and how it may hold
//! back the source of its task.

use std::sync::Arc;

use crate::checkpoint::{CheckpointView, Restore};
use crate::grouping::KeyGroups;
use crate::id::InstanceIdx;

/// A condition for polling the source of a task, registered by an instance
/// fused into it (a watermark strategy aligning its instances): while it
/// returns `false`, the engine does not poll the source.
pub type PollGate = Arc<dyn Fn() -> bool + Send + Sync>;

/// Where the gates of one source task are registered: given by the engine
/// to the instances fused into a source task, and to no other.
pub type PollGates = Arc<dyn Fn(PollGate) + Send + Sync>;

/// What one instance knows about where it runs, given to `open`.
#[derive(Clone)]
pub struct InstanceContext {
    component: Arc<str>,
    instance: InstanceIdx,
    parallelism: u32,
    key_groups: KeyGroups,
    checkpoints: Option<CheckpointView>,
    poll_gates: Option<PollGates>,
    batch_size: usize,
    acking: bool,
    assigned: Option<Arc<[i32]>>,
    link: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for InstanceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceContext")
            .field("component", &self.component)
            .field("instance", &self.instance)
            .field("parallelism", &self.parallelism)
            .field("key_groups", &self.key_groups)
            .field("checkpoints", &self.checkpoints)
            .finish_non_exhaustive()
    }
}

impl InstanceContext {
    /// Context of instance `instance` of `parallelism` instances of `component`.
    pub fn new(
        component: impl Into<Arc<str>>,
        instance: InstanceIdx,
        parallelism: u32,
        key_groups: KeyGroups,
    ) -> Self {
        InstanceContext {
            component: component.into(),
            instance,
            parallelism,
            key_groups,
            checkpoints: None,
            poll_gates: None,
            batch_size: crate::collector::DEFAULT_BATCH_SIZE,
            acking: false,
            assigned: None,
            link: None,
        }
    }

    /// The same context, with what the runner that assigned the source its
    /// splits gives it to report to (see [`runner_link`](Self::runner_link)).
    pub fn with_runner_link(mut self, link: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.link = Some(link);
        self
    }

    /// What a runner that shares out a source's splits gives the sources it
    /// assigns splits to, if it is a `T` (a scale-out runner's record
    /// of each split's progress, say).
    pub fn runner_link<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.link.clone()?.downcast::<T>().ok()
    }

    /// The same context, for a source told which splits of its input to
    /// read (by a runner that shares the splits out).
    pub fn with_assigned_splits(mut self, splits: Arc<[i32]>) -> Self {
        self.assigned = Some(splits);
        self
    }

    /// The splits of its input a source is told to read, if a runner shares
    /// them out (see [`Source::split_input`](crate::Source::split_input)).
    pub fn assigned_splits(&self) -> Option<&[i32]> {
        self.assigned.as_deref()
    }

    /// The same context, in a job of batches of `records` records.
    pub fn with_batch_size(mut self, records: usize) -> Self {
        self.batch_size = records.max(1);
        self
    }

    /// The records per batch of the job: a source emits about this many a
    /// poll (a poll is what the engine can hold back between, for
    /// backpressure and alignment).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The same context, in a run that tracks each record's tree of
    /// descendants (acking, for at-least-once delivery without checkpoints).
    pub fn with_acking(mut self, acking: bool) -> Self {
        self.acking = acking;
        self
    }

    /// Whether the run tracks each record's descendants (acking): then an
    /// operator must emit what a record causes while the record is being
    /// processed, or the record's tree completes without it. A combiner
    /// passes records through unmerged in such a run.
    pub fn acking(&self) -> bool {
        self.acking
    }

    /// The same context, in a job that takes checkpoints.
    pub fn with_checkpoints(mut self, checkpoints: CheckpointView) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// The same context, for an instance fused into a source task whose
    /// polls wait for the gates registered through `gates`.
    pub fn with_poll_gates(mut self, gates: PollGates) -> Self {
        self.poll_gates = Some(gates);
        self
    }

    /// Holds back the polls of the source this instance is fused into while
    /// `gate` returns `false`; returns whether it does (`false`: the
    /// instance is not fused into a source task, and cannot hold one back).
    pub fn gate_source(&self, gate: PollGate) -> bool {
        match &self.poll_gates {
            Some(gates) => {
                gates(gate);
                true
            }
            None => false,
        }
    }

    /// The job's checkpoints, if it takes them.
    pub fn checkpoints(&self) -> Option<&CheckpointView> {
        self.checkpoints.as_ref()
    }

    /// The state a previous run checkpointed for this instance's component,
    /// if the job restores from a checkpoint.
    pub fn restore(&self) -> Option<Restore<'_>> {
        self.checkpoints.as_ref()?.restore_for(
            &self.component,
            self.instance,
            self.parallelism,
            self.key_groups,
        )
    }

    /// What a run that takes checkpoints restores this instance from: the
    /// checkpoint's state, or [`Restore::nothing`] when it starts from
    /// none. `None` in a run without checkpoints.
    pub fn recovery(&self) -> Option<Restore<'_>> {
        self.checkpoints.as_ref()?;
        Some(self.restore().unwrap_or_else(|| {
            Restore::nothing(
                &self.component,
                self.instance,
                self.parallelism,
                self.key_groups,
            )
        }))
    }

    /// The component's name, as given in the job.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// The component's name, shared.
    pub fn component_arc(&self) -> Arc<str> {
        self.component.clone()
    }

    /// This instance's index, in `0..parallelism`.
    pub fn instance(&self) -> InstanceIdx {
        self.instance
    }

    /// How many instances the component has.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The job's key groups.
    pub fn key_groups(&self) -> KeyGroups {
        self.key_groups
    }
}
