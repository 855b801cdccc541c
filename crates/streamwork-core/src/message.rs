//! What travels on a channel between tasks: batches of records and in-band control.
//!
//! Control messages travel in the same channel as data, in order, so that every
//! record sent before an end-of-stream (and, later, before a watermark or a
//! checkpoint barrier) is delivered before it.

use std::any::Any;

/// Index of one sender (an upstream instance on one edge) among all senders into
/// one input port of one instance. The runtime assigns them densely from 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderIdx(pub u32);

/// In-band control messages.
///
/// The enum is `#[non_exhaustive]`: watermarks and checkpoint barriers join it
/// with the issues that build them, and travel in order with the data just as
/// end-of-stream does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control {
    /// The sender will send nothing more.
    EndOfStream,
    /// Event time has reached this point on the sender's stream: no record
    /// with an earlier timestamp will follow (records with an earlier one are
    /// late). A watermark from an idle sender makes it active again.
    Watermark(crate::Timestamp),
    /// The sender is idle: until it sends again, it does not hold back the
    /// event time of its receivers.
    Idle,
    /// Checkpoint barrier (chapter 10): everything the sender sent before
    /// belongs to this checkpoint, everything after to the next.
    Barrier(u64),
}

/// The payload of one message.
pub enum Payload {
    /// A batch of records: a `Vec<Record<T>>` for the port's type `T`, erased so
    /// that the runtime can move it without knowing `T`. It is downcast once per
    /// batch, never per record.
    Batch(Box<dyn Any + Send>),
    /// A control message.
    Control(Control),
}

/// A message addressed to one input port of one instance.
pub struct Envelope {
    /// Who sent it.
    pub from: SenderIdx,
    /// Records in the batch (0 for control messages): what an overflow policy
    /// counts when it drops the batch.
    pub records: usize,
    /// What it carries.
    pub payload: Payload,
}

/// The receiving side is gone: the downstream task has stopped (it failed, or the
/// job is being torn down). The message that could not be delivered is dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("downstream channel disconnected")]
pub struct Disconnected;

/// The sending half of one channel into one instance's input port, as the
/// runtime provides it. Blocking on a full channel is backpressure.
pub trait ChannelSender: Send {
    /// Sends `envelope`; when the channel is full, applies the edge's overflow
    /// policy (by default, blocks: backpressure).
    fn send(&mut self, envelope: Envelope) -> Result<(), Disconnected>;

    /// The edge's overflow policy.
    fn overflow(&self) -> crate::flow::Overflow {
        crate::flow::Overflow::Block
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
