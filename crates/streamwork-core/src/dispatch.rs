//! Edges out of a component instance: the dispatcher of a channel edge, and the
//! trait a fused downstream instance implements.
//!
//! A [`Collector`](crate::Collector) hands its buffered records to each of its
//! edges a batch at a time: one dynamic call per batch and edge. A
//! [`ChannelDispatcher`] routes each record of the batch (monomorphised
//! [`Route`]) into a per-target buffer and sends a buffer as one message when it
//! is full or when the collector flushes. A fused edge instead runs the
//! downstream operator directly on the batch, on the same thread.

use crate::acking::{self, Anchor, AnchoredBatch};
use crate::grouping::{Route, Target};
use crate::message::{ChannelSender, Control, Disconnected, Envelope, Payload, SenderIdx};
use crate::record::{Data, Record};

/// One outgoing edge of a collector.
pub trait Edge<T>: Send {
    /// Takes every record of `records` (leaving it empty, capacity kept).
    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected>;
    /// [`push`](Self::push) in a job run with acking: `roots[i]` is the
    /// tree of `records[i]` (see [`acking`](crate::acking)). The default
    /// forgets the roots: for edges that end every tree they receive.
    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<T>>,
        roots: &mut Vec<u64>,
    ) -> Result<(), Disconnected> {
        roots.clear();
        self.push(records)
    }
    /// Sends whatever is buffered now (adaptive flushing).
    fn flush(&mut self) -> Result<(), Disconnected>;
    /// Delivers a control message to every target, after flushing.
    fn control(&mut self, control: &Control) -> Result<(), Disconnected>;
    /// The wall clock reads `now`: a fused downstream fires its
    /// processing-time timers. Channels ignore it (their receivers tick
    /// themselves).
    fn on_processing_time(&mut self, now: crate::Timestamp) -> Result<(), Disconnected> {
        let _ = now;
        Ok(())
    }
}

/// The dispatcher of a channel edge: routes records into per-target batches and
/// sends full batches through the runtime's channels.
pub struct ChannelDispatcher<T, R> {
    route: R,
    from: SenderIdx,
    targets: Vec<Box<dyn ChannelSender>>,
    buffers: Vec<Vec<Record<T>>>,
    /// In a job run with acking: the anchor of each buffered record.
    anchors: Option<Vec<Vec<Anchor>>>,
    batch_size: usize,
}

impl<T: Data, R: Route<T>> ChannelDispatcher<T, R> {
    /// A dispatcher sending as `from` to `targets` (instance order), in batches
    /// of at most `batch_size` records.
    pub fn new(
        route: R,
        from: SenderIdx,
        targets: Vec<Box<dyn ChannelSender>>,
        batch_size: usize,
    ) -> Self {
        let buffers = (0..targets.len())
            .map(|_| Vec::with_capacity(batch_size))
            .collect();
        ChannelDispatcher {
            route,
            from,
            targets,
            buffers,
            anchors: None,
            batch_size: batch_size.max(1),
        }
    }

    fn send(&mut self, target: usize) -> Result<(), Disconnected> {
        let mut batch = std::mem::replace(
            &mut self.buffers[target],
            Vec::with_capacity(self.batch_size),
        );
        let mut anchors = self.anchors.as_mut().map(|anchors| {
            std::mem::replace(&mut anchors[target], Vec::with_capacity(self.batch_size))
        });
        let sender = &mut self.targets[target];
        if let crate::flow::Overflow::Sample(n) = sender.overflow()
            && sender.is_full()
        {
            // Keep one record in `n` of what the full channel cannot take
            // (with acking, the trees of the others time out and replay).
            let before = batch.len();
            let keep = |i: usize| i.is_multiple_of(n.max(1) as usize);
            let mut i = 0usize;
            batch.retain(|_| {
                i += 1;
                keep(i - 1)
            });
            if let Some(anchors) = anchors.as_mut() {
                let mut i = 0usize;
                anchors.retain(|_| {
                    i += 1;
                    keep(i - 1)
                });
            }
            sender.count_dropped(before - batch.len());
        }
        let records = batch.len();
        let payload: Box<dyn std::any::Any + Send> = match anchors {
            Some(anchors) => Box::new(AnchoredBatch {
                records: batch,
                anchors,
            }),
            None => Box::new(batch),
        };
        sender.send(Envelope {
            from: self.from,
            records,
            payload: Payload::Batch(payload),
        })
    }

    /// Buffers `record` of tree `root` for `target`, with a fresh id.
    #[inline]
    fn buffer_rooted(
        &mut self,
        target: usize,
        record: Record<T>,
        root: u64,
    ) -> Result<(), Disconnected> {
        self.buffers[target].push(record);
        let n = self.buffers.len();
        self.anchors
            .get_or_insert_with(|| (0..n).map(|_| Vec::new()).collect())[target]
            .push(acking::create(root));
        if self.buffers[target].len() >= self.batch_size {
            self.send(target)?;
        }
        Ok(())
    }
}

impl<T: Data, R: Route<T>> Edge<T> for ChannelDispatcher<T, R> {
    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected> {
        let n_targets = self.targets.len() as u32;
        for record in records.drain(..) {
            match self.route.route(&record.value, n_targets) {
                Target::One(target) => {
                    let target = target as usize;
                    self.buffers[target].push(record);
                    if self.buffers[target].len() >= self.batch_size {
                        self.send(target)?;
                    }
                }
                Target::All => {
                    for target in 0..self.buffers.len() {
                        self.buffers[target].push(record.clone());
                        if self.buffers[target].len() >= self.batch_size {
                            self.send(target)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<T>>,
        roots: &mut Vec<u64>,
    ) -> Result<(), Disconnected> {
        let n_targets = self.targets.len() as u32;
        for (record, root) in records.drain(..).zip(roots.drain(..)) {
            match self.route.route(&record.value, n_targets) {
                Target::One(target) => self.buffer_rooted(target as usize, record, root)?,
                Target::All => {
                    // Every copy is an event of the tree with an id of its own.
                    for target in 0..self.buffers.len() {
                        self.buffer_rooted(target, record.clone(), root)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        for target in 0..self.buffers.len() {
            if !self.buffers[target].is_empty() {
                self.send(target)?;
            }
        }
        Ok(())
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        self.flush()?;
        for target in &mut self.targets {
            target.send(Envelope {
                from: self.from,
                records: 0,
                payload: Payload::Control(control.clone()),
            })?;
        }
        Ok(())
    }
}
