//! Bounded channels between tasks, and the sending half the dispatchers use,
//! which applies the edge's overflow policy and measures backpressure.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TryRecvError, TrySendError};
use streamwork_core::control::Disconnected;
use streamwork_core::flow::Overflow;

use crate::message::{ChannelSender, Message, Payload};
use crate::metrics::TaskTimes;

/// How often a blocked sender or receiver looks at the abort flag.
pub(crate) const ABORT_POLL: Duration = Duration::from_millis(50);

/// Sends into one instance's input port. A full channel blocks the sender
/// (backpressure, timed into the sending task's times) or, by the edge's
/// policy, drops records (counted); a job abort unblocks it with
/// [`Disconnected`].
pub(crate) struct PortSender {
    pub(crate) sender: Sender<Message>,
    /// Set when the job aborts: unblocks a blocked send.
    pub(crate) abort: Arc<AtomicBool>,
    /// The sending task's times, into which time blocked is added.
    pub(crate) times: Arc<TaskTimes>,
    pub(crate) overflow: Overflow,
    /// Records dropped on the edge, counted.
    pub(crate) dropped: Arc<AtomicU64>,
    /// The receiving end, for dropping the oldest queued batch.
    pub(crate) oldest: Option<Receiver<Message>>,
    /// On workers: the channel is unbounded and this is its capacity. A send
    /// never blocks (a step of a task must not wait for another task of the
    /// same worker); past the capacity, a dropping overflow policy drops,
    /// and the worker holds the task back before its next step.
    pub(crate) soft_capacity: Option<usize>,
}

impl PortSender {
    /// A send into the unbounded channel of a task run on a worker.
    fn send_soft(&mut self, envelope: Message, capacity: usize) -> Result<(), Disconnected> {
        let over = matches!(envelope.payload, Payload::Batch(_)) && self.sender.len() >= capacity;
        let mut controls = Vec::new();
        match self.overflow {
            Overflow::DropNewest if over => {
                self.dropped
                    .fetch_add(envelope.records as u64, Ordering::Relaxed);
                return Ok(());
            }
            Overflow::DropOldest if over => {
                if let Some(oldest) = self.oldest.clone() {
                    while self.sender.len() >= capacity {
                        if !self.take_oldest(&oldest, &mut controls)? {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
        for envelope in std::iter::once(envelope).chain(controls) {
            self.sender.send(envelope).map_err(|_| Disconnected)?;
        }
        Ok(())
    }

    /// Takes the oldest queued message: a batch is dropped (and counted), a
    /// control message set aside in `controls`. Returns whether there was one.
    fn take_oldest(
        &mut self,
        oldest: &Receiver<Message>,
        controls: &mut Vec<Message>,
    ) -> Result<bool, Disconnected> {
        match oldest.try_recv() {
            Ok(Message {
                payload: Payload::Batch(_),
                records,
                ..
            }) => {
                self.dropped.fetch_add(records as u64, Ordering::Relaxed);
                Ok(true)
            }
            Ok(control) => {
                controls.push(control);
                Ok(true)
            }
            Err(TryRecvError::Empty) => Ok(false),
            Err(TryRecvError::Disconnected) => Err(Disconnected),
        }
    }

    /// Blocks until `envelope` is sent (or the job aborts).
    fn block(&mut self, mut envelope: Message) -> Result<(), Disconnected> {
        let started = Instant::now();
        let result = loop {
            if self.abort.load(Ordering::Relaxed) {
                break Err(Disconnected);
            }
            match self.sender.send_timeout(envelope, ABORT_POLL) {
                Ok(()) => break Ok(()),
                Err(SendTimeoutError::Disconnected(_)) => break Err(Disconnected),
                Err(SendTimeoutError::Timeout(back)) => envelope = back,
            }
        };
        self.times.add_backpressured(started.elapsed());
        result
    }

    /// Makes room by dropping queued batches, oldest first; control messages
    /// taken out on the way are sent again after `envelope` (a watermark that
    /// arrives later is still correct).
    fn drop_oldest(&mut self, envelope: Message) -> Result<(), Disconnected> {
        let Some(oldest) = self.oldest.clone() else {
            return self.block(envelope);
        };
        let mut envelope = envelope;
        let mut controls = Vec::new();
        loop {
            match self.sender.try_send(envelope) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(Disconnected),
                Err(TrySendError::Full(back)) => {
                    envelope = back;
                    // If the receiver took everything meanwhile: try again.
                    self.take_oldest(&oldest, &mut controls)?;
                }
            }
        }
        for control in controls {
            self.block(control)?;
        }
        Ok(())
    }
}

impl ChannelSender for PortSender {
    fn send(&mut self, envelope: Message) -> Result<(), Disconnected> {
        if let Some(capacity) = self.soft_capacity {
            return self.send_soft(envelope, capacity);
        }
        let envelope = match self.sender.try_send(envelope) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(_)) => return Err(Disconnected),
            Err(TrySendError::Full(envelope)) => envelope,
        };
        let is_batch = matches!(envelope.payload, Payload::Batch(_));
        match self.overflow {
            Overflow::DropNewest if is_batch => {
                self.dropped
                    .fetch_add(envelope.records as u64, Ordering::Relaxed);
                Ok(())
            }
            Overflow::DropOldest if is_batch => self.drop_oldest(envelope),
            _ => self.block(envelope),
        }
    }

    fn overflow(&self) -> Overflow {
        self.overflow
    }

    fn is_full(&self) -> bool {
        match self.soft_capacity {
            Some(capacity) => self.sender.len() >= capacity,
            None => self.sender.is_full(),
        }
    }

    fn count_dropped(&self, records: usize) {
        self.dropped.fetch_add(records as u64, Ordering::Relaxed);
    }
}
