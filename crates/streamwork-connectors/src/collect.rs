//! Sinks that keep what they receive, for tests: as it arrives, or, in
//! their transactional form, once the checkpoint that covers it is complete.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use streamwork_core::{CheckpointId, ConnectorError, Data, InstanceContext, Record, Restore, Sink};

/// Records received so far, with the receiving instance.
type Received<T> = Arc<Mutex<Vec<(u32, Record<T>)>>>;

/// Keeps every record it receives, with the index of the instance that
/// received it, in a shared buffer the test reads after the job. Records are
/// appended once per flush, not per record.
///
/// ```
/// use streamwork::connectors::CollectSink;
/// let sink = CollectSink::<u64>::new();
/// assert!(sink.values().is_empty());
/// ```
pub struct CollectSink<T> {
    shared: Received<T>,
    staged: Staged<T>,
    pending: Vec<(u32, Record<T>)>,
    instance: u32,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            shared: self.shared.clone(),
            staged: self.staged.clone(),
            pending: Vec::new(),
            instance: self.instance,
        }
    }
}

impl<T: Data> Default for CollectSink<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Data> CollectSink<T> {
    /// An empty collector.
    pub fn new() -> Self {
        CollectSink {
            shared: Arc::new(Mutex::new(Vec::new())),
            staged: Arc::new(Mutex::new(BTreeMap::new())),
            pending: Vec::new(),
            instance: 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u32, Record<T>)>> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every value received, in arrival order.
    pub fn values(&self) -> Vec<T> {
        self.lock().iter().map(|(_, r)| r.value.clone()).collect()
    }

    /// Every record received, with the instance that received it.
    pub fn records(&self) -> Vec<(u32, Record<T>)> {
        self.lock().clone()
    }

    /// Values received by instance `instance`.
    pub fn values_of_instance(&self, instance: u32) -> Vec<T> {
        self.lock()
            .iter()
            .filter(|(i, _)| *i == instance)
            .map(|(_, r)| r.value.clone())
            .collect()
    }
}

impl<T: Data> Sink for CollectSink<T> {
    type In = T;

    /// Writes memory: never waits.
    fn may_block(&self) -> bool {
        false
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.instance = ctx.instance().0;
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.pending.push((self.instance, record));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if !self.pending.is_empty() {
            let mut pending = std::mem::take(&mut self.pending);
            self.lock().append(&mut pending);
        }
        Ok(())
    }
}

/// What transactional collectors staged, by instance and checkpoint, shared
/// by every run of the job in this process.
type Staged<T> = Arc<Mutex<BTreeMap<(u32, CheckpointId), Vec<(u32, Record<T>)>>>>;

impl<T: Data> CollectSink<T> {
    /// A transactional collector writing into this one: what a checkpoint
    /// covers becomes visible in [`values`](Self::values) once the
    /// checkpoint is complete, and a restarted run publishes what its
    /// restored checkpoint covers and discards the rest. Every
    /// transactional form of one collector shares what was staged, so a job
    /// built again and run again after a failure finds it. Exactly once
    /// across the runs of one process, for tests of exactly-once jobs; what it stages lives in memory, so a
    /// restart in another process loses it.
    ///
    /// ```
    /// use streamwork::connectors::CollectSink;
    /// let sink = CollectSink::<u64>::new();
    /// let writer = sink.transactional();
    /// # let _ = writer;
    /// ```
    pub fn transactional(&self) -> TransactionalCollectSink<T> {
        TransactionalCollectSink {
            committed: self.shared.clone(),
            staged: self.staged.clone(),
            pending: Vec::new(),
            instance: 0,
            checkpointed: false,
        }
    }
}

/// The transactional form of a [`CollectSink`] (see
/// [`CollectSink::transactional`]).
pub struct TransactionalCollectSink<T> {
    committed: Received<T>,
    staged: Staged<T>,
    pending: Vec<(u32, Record<T>)>,
    instance: u32,
    checkpointed: bool,
}

impl<T> Clone for TransactionalCollectSink<T> {
    fn clone(&self) -> Self {
        TransactionalCollectSink {
            committed: self.committed.clone(),
            staged: self.staged.clone(),
            pending: Vec::new(),
            instance: self.instance,
            checkpointed: self.checkpointed,
        }
    }
}

impl<T: Data> TransactionalCollectSink<T> {
    /// Publishes what `instances` staged for checkpoints `covered` accepts,
    /// and forgets it.
    fn publish(
        &self,
        instances: impl Fn(u32) -> bool,
        covered: impl Fn(u32, CheckpointId) -> bool,
    ) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let due: Vec<(u32, CheckpointId)> = staged
            .keys()
            .copied()
            .filter(|&(instance, checkpoint)| instances(instance) && covered(instance, checkpoint))
            .collect();
        let mut committed = self.committed.lock().unwrap_or_else(|p| p.into_inner());
        for key in due {
            if let Some(mut records) = staged.remove(&key) {
                committed.append(&mut records);
            }
        }
    }
}

impl<T: Data> Sink for TransactionalCollectSink<T> {
    type In = T;

    /// Writes memory: never waits.
    fn may_block(&self) -> bool {
        false
    }

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.instance = ctx.instance().0;
        self.checkpointed = ctx.checkpoints().is_some();
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.pending.push((self.instance, record));
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let pending = std::mem::take(&mut self.pending);
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((self.instance, checkpoint))
            .or_default()
            .extend(pending);
        Ok(())
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let me = self.instance;
        self.publish(|instance| instance == me, |_, staged| staged <= checkpoint);
        Ok(())
    }

    /// Publishes what the restored checkpoint covers (and, after a
    /// scale-down, what the removed instances staged: old instance `j` by
    /// new instance `j % parallelism`); discards what later checkpoints
    /// staged, which the replay writes again.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let (me, parallelism) = (restore.instance.0, restore.parallelism.max(1));
        let mine = |instance: u32| instance % parallelism == me;
        let checkpoint = restore.checkpoint;
        let ended = |instance: u32| {
            restore.is_final
                || restore
                    .ended
                    .contains(&streamwork_core::InstanceIdx(instance))
        };
        self.publish(mine, |instance, staged| {
            ended(instance) || staged <= checkpoint
        });
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&(instance, _), _| !mine(instance));
        Ok(())
    }

    /// Without checkpoints, everything becomes visible at the end.
    fn close(&mut self) -> Result<(), ConnectorError> {
        if !self.checkpointed {
            let mut pending = std::mem::take(&mut self.pending);
            self.committed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut pending);
        }
        Ok(())
    }
}

impl<T: Data> streamwork_core::checkpoint::Transactional for TransactionalCollectSink<T> {}
