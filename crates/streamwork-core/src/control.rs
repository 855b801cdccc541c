//! In-band control: what travels with the records, in order, besides them.
//!
//! Control messages travel in the same channels as data, so that every record
//! sent before an end-of-stream, a watermark or a checkpoint barrier is
//! delivered before it.

use crate::id::CheckpointId;

/// In-band control messages.
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
    Barrier(CheckpointId),
    /// The job stops at a savepoint: the receiver stops where it is without
    /// ending its input (nothing is drained; a sink makes what completed
    /// checkpoints staged visible). Passed on to what is fused downstream,
    /// never sent through a channel: every task learns of it on its own.
    Suspend,
    /// Every instance has ended and the job's final checkpoint (if it takes
    /// checkpoints) is complete: a sink commits it, and every instance
    /// releases its resources. Passed on to what is fused downstream, never
    /// sent through a channel.
    Close,
}

/// Records could not be delivered downstream: the receiving task has stopped,
/// or an instance fused downstream has failed. Either way the job is already
/// failing, and the failure that started it is reported in its place; the
/// records are dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("downstream channel disconnected")]
pub struct Disconnected;
