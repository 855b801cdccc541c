//! What travels on a channel between tasks: batches of records and in-band
//! control, addressed by sender, and the sending half a dispatcher uses.

use std::any::Any;

use streamwork_core::control::{Control, Disconnected};
use streamwork_core::flow::Overflow;

/// Index of one sender (an upstream instance on one edge) among all senders
/// into one input port of one instance, assigned densely from 0 by the wiring.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderIdx(pub u32);

/// The payload of one message.
pub enum Payload {
    /// A batch of records: a `Vec<Record<T>>` for the port's type `T` (or,
    /// with acking, an `AnchoredBatch<T>`), erased so that the task loops can
    /// move it without knowing `T`. It is downcast once per batch, never per
    /// record.
    Batch(Box<dyn Any + Send>),
    /// A control message.
    Control(Control),
}

/// A message addressed to one input port of one instance.
pub struct Message {
    /// Who sent it.
    pub from: SenderIdx,
    /// Records in the batch (0 for control messages): what an overflow policy
    /// counts when it drops the batch.
    pub records: usize,
    /// What it carries.
    pub payload: Payload,
}

/// The sending half of one channel into one instance's input port. Blocking
/// on a full channel is backpressure.
pub trait ChannelSender: Send {
    /// Sends `envelope`; when the channel is full, applies the edge's overflow
    /// policy (by default, blocks: backpressure).
    fn send(&mut self, envelope: Message) -> Result<(), Disconnected>;

    /// The edge's overflow policy.
    fn overflow(&self) -> Overflow {
        Overflow::Block
    }

    /// Whether a send now would find the channel full.
    fn is_full(&self) -> bool {
        false
    }

    /// Counts `records` dropped by the overflow policy before sending.
    fn count_dropped(&self, records: usize) {
        let _ = records;
    }
}
