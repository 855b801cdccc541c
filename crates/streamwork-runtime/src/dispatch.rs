//! The dispatcher of a channel edge: routes each record of a batch into a
//! per-target batch and sends full batches through the task's channels.
//!
//! The route is the edge's [`Partition`]: one dynamic call per batch (or per
//! full target batch), inside which the per-record loop is monomorphised
//! over the route and its key function. Watermarks travel with the batch
//! they follow; with acking, every record sent gets an anchor of its own.

use crate::route::{Partition, Route, Target};
use streamwork_core::control::{Control, Disconnected};
use streamwork_core::edge::Edge;
use streamwork_core::flow::Overflow;
use streamwork_core::id::RootId;
use streamwork_core::record::{Data, Record};
use streamwork_core::time::Timestamp;

use crate::acking::{self, Anchor, AnchoredBatch};
use crate::batch::Returns;
use crate::message::{ChannelSender, Message, Payload, SenderIdx};

/// The dispatcher of a channel edge: routes records into per-target batches and
/// sends full batches through the engine's channels.
pub struct ChannelDispatcher<T> {
    route: Box<dyn Partition<T>>,
    from: SenderIdx,
    targets: Vec<Box<dyn ChannelSender>>,
    buffers: Vec<Vec<Record<T>>>,
    /// In a job run with acking: the anchor of each buffered record.
    anchors: Option<Vec<Vec<Anchor>>>,
    batch_size: usize,
    /// Per target: the watermark that follows its buffered records, sent
    /// right after them when the batch goes (watermarks coalesced per batch).
    pending: Vec<Option<Timestamp>>,
    /// Per target: full batches sent to other targets since its watermark
    /// became pending. Past the number of targets, its partial batch and the
    /// watermark go at once: a target that receives few records still sees
    /// event time advance, after at most that many batches.
    pending_age: Vec<u32>,
    /// Where sent buffers come back to, emptied, to be filled again.
    returns: Returns<T>,
}

impl<T: Data> ChannelDispatcher<T> {
    /// A dispatcher sending as `from` to `targets` (instance order), in batches
    /// of at most `batch_size` records, routing by `route`.
    pub fn new<R: Route<T>>(
        route: R,
        from: SenderIdx,
        targets: Vec<Box<dyn ChannelSender>>,
        batch_size: usize,
    ) -> Self {
        Self::with_partition(Box::new(route), from, targets, batch_size)
    }

    /// [`new`](Self::new), with the route already behind its [`Partition`].
    pub fn with_partition(
        route: Box<dyn Partition<T>>,
        from: SenderIdx,
        targets: Vec<Box<dyn ChannelSender>>,
        batch_size: usize,
    ) -> Self {
        let buffers = (0..targets.len())
            .map(|_| Vec::with_capacity(batch_size))
            .collect();
        let n = targets.len();
        ChannelDispatcher {
            route,
            from,
            targets,
            buffers,
            anchors: None,
            batch_size: batch_size.max(1),
            pending: vec![None; n],
            pending_age: vec![0; n],
            returns: Returns::new(),
        }
    }

    fn send(&mut self, target: usize) -> Result<(), Disconnected> {
        let mut batch = std::mem::replace(
            &mut self.buffers[target],
            self.returns.buffer(self.batch_size),
        );
        let mut anchors = self.anchors.as_mut().map(|anchors| {
            std::mem::replace(&mut anchors[target], Vec::with_capacity(self.batch_size))
        });
        let sender = &mut self.targets[target];
        if let Overflow::Sample(n) = sender.overflow()
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
            None => self.returns.payload(batch),
        };
        if records > 0 {
            sender.send(Message {
                from: self.from,
                records,
                payload: Payload::Batch(payload),
            })?;
        }
        if let Some(watermark) = self.pending[target].take() {
            self.pending_age[target] = 0;
            self.targets[target].send(Message {
                from: self.from,
                records: 0,
                payload: Payload::Control(Control::Watermark(watermark)),
            })?;
        }
        Ok(())
    }

    /// Sends the full batch of `target`; then, to every other target whose
    /// watermark has waited long enough, its partial batch and watermark.
    fn send_full(&mut self, target: usize) -> Result<(), Disconnected> {
        self.send(target)?;
        let patience = self.targets.len() as u32;
        for other in 0..self.pending.len() {
            if other != target && self.pending[other].is_some() {
                self.pending_age[other] += 1;
                if self.pending_age[other] > patience {
                    self.send(other)?;
                }
            }
        }
        Ok(())
    }

    /// Buffers `record` of tree `root` for `target`, with a fresh id.
    #[inline]
    fn buffer_rooted(
        &mut self,
        target: usize,
        record: Record<T>,
        root: RootId,
    ) -> Result<(), Disconnected> {
        self.buffers[target].push(record);
        let n = self.buffers.len();
        self.anchors
            .get_or_insert_with(|| (0..n).map(|_| Vec::new()).collect())[target]
            .push(acking::create(root));
        if self.buffers[target].len() >= self.batch_size {
            self.send_full(target)?;
        }
        Ok(())
    }
}

impl<T: Data> Edge<T> for ChannelDispatcher<T> {
    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected> {
        if let [buffer] = self.buffers.as_mut_slice() {
            // One target: every record goes there, whatever the route says
            // (a key route would hash each one for nothing). An empty buffer
            // takes the whole batch without a copy.
            if buffer.is_empty() {
                std::mem::swap(buffer, records);
            } else {
                buffer.append(records);
            }
            if buffer.len() >= self.batch_size {
                self.send_full(0)?;
            }
            return Ok(());
        }
        let mut records = records.drain(..);
        loop {
            let stopped = self
                .route
                .split(&mut records, &mut self.buffers, self.batch_size);
            for target in 0..self.buffers.len() {
                if self.buffers[target].len() >= self.batch_size {
                    self.send_full(target)?;
                }
            }
            if !stopped {
                return Ok(());
            }
        }
    }

    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<T>>,
        roots: &mut Vec<RootId>,
    ) -> Result<(), Disconnected> {
        let n_targets = self.targets.len() as u32;
        for (record, root) in records.drain(..).zip(roots.drain(..)) {
            match self.route.target_of(&record.value, n_targets) {
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
            if !self.buffers[target].is_empty() || self.pending[target].is_some() {
                self.send(target)?;
            }
        }
        Ok(())
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        if matches!(control, Control::Suspend | Control::Close) {
            // Each task on the other side learns of it on its own.
            return Ok(());
        }
        if let Control::Watermark(watermark) = control {
            // It follows the records buffered for each target: it goes with
            // them, or at once to a target with nothing buffered.
            for target in 0..self.buffers.len() {
                if self.buffers[target].is_empty() {
                    self.targets[target].send(Message {
                        from: self.from,
                        records: 0,
                        payload: Payload::Control(control.clone()),
                    })?;
                } else {
                    if self.pending[target].is_none() {
                        self.pending_age[target] = 0;
                    }
                    self.pending[target] = Some(*watermark);
                }
            }
            return Ok(());
        }
        self.flush()?;
        for target in &mut self.targets {
            target.send(Message {
                from: self.from,
                records: 0,
                payload: Payload::Control(control.clone()),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What one target received, as `b<records>` and `w<millis>`.
    #[derive(Clone, Default)]
    struct Received(Arc<Mutex<Vec<String>>>);

    impl Received {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl ChannelSender for Received {
        fn send(&mut self, envelope: Message) -> Result<(), Disconnected> {
            let entry = match envelope.payload {
                Payload::Batch(_) => format!("b{}", envelope.records),
                Payload::Control(Control::Watermark(t)) => format!("w{}", t.millis()),
                Payload::Control(Control::EndOfStream) => "end".to_string(),
                Payload::Control(other) => format!("{other:?}"),
            };
            self.0.lock().unwrap().push(entry);
            Ok(())
        }
    }

    /// Even values to target 0, odd ones to target 1.
    struct ByParity;

    impl Route<u64> for ByParity {
        fn route(&mut self, value: &u64, _targets: u32) -> Target {
            Target::One((*value % 2) as u32)
        }
    }

    fn dispatcher() -> (ChannelDispatcher<u64>, Received, Received) {
        let (even, odd) = (Received::default(), Received::default());
        let targets: Vec<Box<dyn ChannelSender>> =
            vec![Box::new(even.clone()), Box::new(odd.clone())];
        (
            ChannelDispatcher::new(ByParity, SenderIdx(0), targets, 4),
            even,
            odd,
        )
    }

    fn push(d: &mut ChannelDispatcher<u64>, values: impl IntoIterator<Item = u64>) {
        let mut records: Vec<Record<u64>> = values.into_iter().map(Record::new).collect();
        d.push(&mut records).unwrap();
    }

    fn watermark(d: &mut ChannelDispatcher<u64>, millis: i64) {
        d.control(&Control::Watermark(Timestamp::from_millis(millis)))
            .unwrap();
    }

    #[test]
    fn a_watermark_goes_with_the_batch_it_follows() {
        let (mut d, even, odd) = dispatcher();
        push(&mut d, [0, 1, 2]);
        watermark(&mut d, 10);
        // Both targets have records buffered: nothing is cut short.
        assert!(even.take().is_empty() && odd.take().is_empty());
        watermark(&mut d, 20);
        push(&mut d, [4, 6]);
        // The full batch goes, followed by the latest watermark only.
        assert_eq!(even.take(), ["b4", "w20"]);
        d.flush().unwrap();
        assert_eq!(odd.take(), ["b1", "w20"]);
        assert!(even.take().is_empty());
    }

    #[test]
    fn a_target_with_nothing_buffered_gets_the_watermark_at_once() {
        let (mut d, even, odd) = dispatcher();
        push(&mut d, [0]);
        watermark(&mut d, 5);
        assert!(even.take().is_empty());
        assert_eq!(odd.take(), ["w5"]);
    }

    #[test]
    fn a_target_that_receives_little_sees_event_time_after_a_few_batches() {
        let (mut d, even, odd) = dispatcher();
        push(&mut d, [1]);
        watermark(&mut d, 7);
        // Only even values follow: full batches for target 0.
        push(&mut d, (0..8).map(|i| i * 2));
        assert!(odd.take().is_empty(), "within its patience");
        push(&mut d, (8..12).map(|i| i * 2));
        assert_eq!(odd.take(), ["b1", "w7"], "past it");
        // Target 0 had nothing buffered when the watermark came.
        assert_eq!(even.take(), ["w7", "b4", "b4", "b4"]);
    }

    #[test]
    fn other_control_messages_follow_everything_buffered() {
        let (mut d, even, odd) = dispatcher();
        push(&mut d, [0, 1]);
        watermark(&mut d, 3);
        d.control(&Control::EndOfStream).unwrap();
        assert_eq!(even.take(), ["b1", "w3", "end"]);
        assert_eq!(odd.take(), ["b1", "w3", "end"]);
    }
}
