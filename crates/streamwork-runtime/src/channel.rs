//! Bounded channels between tasks, and the sending half the dispatchers use.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{SendTimeoutError, Sender, TrySendError};
use streamwork_core::message::{ChannelSender, Disconnected, Envelope};

/// How often a blocked sender or receiver looks at the abort flag.
pub(crate) const ABORT_POLL: Duration = Duration::from_millis(50);

/// Sends into one instance's input port. A full channel blocks the sender
/// (backpressure); a job abort unblocks it with [`Disconnected`].
pub(crate) struct PortSender {
    sender: Sender<Envelope>,
    abort: Arc<AtomicBool>,
}

impl PortSender {
    pub(crate) fn new(sender: Sender<Envelope>, abort: Arc<AtomicBool>) -> Self {
        PortSender { sender, abort }
    }
}

impl ChannelSender for PortSender {
    fn send(&mut self, envelope: Envelope) -> Result<(), Disconnected> {
        let mut envelope = match self.sender.try_send(envelope) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(_)) => return Err(Disconnected),
            Err(TrySendError::Full(envelope)) => envelope,
        };
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Err(Disconnected);
            }
            match self.sender.send_timeout(envelope, ABORT_POLL) {
                Ok(()) => return Ok(()),
                Err(SendTimeoutError::Disconnected(_)) => return Err(Disconnected),
                Err(SendTimeoutError::Timeout(back)) => envelope = back,
            }
        }
    }
}
