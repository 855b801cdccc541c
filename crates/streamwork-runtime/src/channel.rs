//! Bounded channels between tasks, and the sending half the dispatchers use,
//! which applies the edge's overflow policy and measures backpressure.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TryRecvError, TrySendError};
use streamwork_core::flow::Overflow;
use streamwork_core::message::{ChannelSender, Disconnected, Envelope, Payload};

use crate::metrics::TaskTimes;

/// How often a blocked sender or receiver looks at the abort flag.
pub(crate) const ABORT_POLL: Duration = Duration::from_millis(50);

/// Sends into one instance's input port. A full channel blocks the sender
/// (backpressure, timed into the sending task's times) or, by the edge's
/// policy, drops records (counted); a job abort unblocks it with
/// [`Disconnected`].
pub(crate) struct PortSender {
    sender: Sender<Envelope>,
    abort: Arc<AtomicBool>,
    times: Arc<TaskTimes>,
    overflow: Overflow,
    dropped: Arc<AtomicU64>,
    /// The receiving end, for dropping the oldest queued batch.
    oldest: Option<Receiver<Envelope>>,
}

impl PortSender {
    pub(crate) fn new(
        sender: Sender<Envelope>,
        abort: Arc<AtomicBool>,
        times: Arc<TaskTimes>,
        overflow: Overflow,
        dropped: Arc<AtomicU64>,
        oldest: Option<Receiver<Envelope>>,
    ) -> Self {
        PortSender {
            sender,
            abort,
            times,
            overflow,
            dropped,
            oldest,
        }
    }

    /// Blocks until `envelope` is sent (or the job aborts).
    fn block(&mut self, mut envelope: Envelope) -> Result<(), Disconnected> {
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
    fn drop_oldest(&mut self, envelope: Envelope) -> Result<(), Disconnected> {
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
                    match oldest.try_recv() {
                        Ok(Envelope {
                            payload: Payload::Batch(_),
                            records,
                            ..
                        }) => {
                            self.dropped.fetch_add(records as u64, Ordering::Relaxed);
                        }
                        Ok(control) => controls.push(control),
                        // The receiver took everything meanwhile: try again.
                        Err(TryRecvError::Empty) => {}
                        Err(TryRecvError::Disconnected) => return Err(Disconnected),
                    }
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
    fn send(&mut self, envelope: Envelope) -> Result<(), Disconnected> {
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
        self.sender.is_full()
    }

    fn count_dropped(&self, records: usize) {
        self.dropped.fetch_add(records as u64, Ordering::Relaxed);
    }
}
