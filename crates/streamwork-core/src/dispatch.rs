//! Edges out of a component instance: the dispatcher of a channel edge, and the
//! trait a fused downstream instance implements.
//!
//! A [`Collector`](crate::Collector) hands its buffered records to each of its
//! edges a batch at a time: one dynamic call per batch and edge. A
//! [`ChannelDispatcher`] routes each record of the batch (monomorphised
//! [`Route`]) into a per-target buffer and sends a buffer as one message when it
//! is full or when the collector flushes. A fused edge instead runs the
//! downstream operator directly on the batch, on the same thread.

use crate::grouping::{Route, Target};
use crate::message::{ChannelSender, Control, Disconnected, Envelope, Payload, SenderIdx};
use crate::record::{Data, Record};

/// One outgoing edge of a collector.
pub trait Edge<T>: Send {
    /// Takes every record of `records` (leaving it empty, capacity kept).
    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected>;
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
            batch_size: batch_size.max(1),
        }
    }

    fn send(&mut self, target: usize) -> Result<(), Disconnected> {
        let mut batch = std::mem::replace(
            &mut self.buffers[target],
            Vec::with_capacity(self.batch_size),
        );
        let sender = &mut self.targets[target];
        if let crate::flow::Overflow::Sample(n) = sender.overflow()
            && sender.is_full()
        {
            // Keep one record in `n` of what the full channel cannot take.
            let before = batch.len();
            let mut i = 0u32;
            batch.retain(|_| {
                i = i.wrapping_add(1);
                (i - 1).is_multiple_of(n.max(1))
            });
            sender.count_dropped(before - batch.len());
        }
        sender.send(Envelope {
            from: self.from,
            records: batch.len(),
            payload: Payload::Batch(Box::new(batch)),
        })
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
