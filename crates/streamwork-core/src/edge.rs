//! The edge out of a collector: where one output channel's batches go.
//!
//! A [`Collector`](crate::Collector) hands its buffered records to its edge a
//! batch at a time: one dynamic call per batch. The engine implements
//! [`Edge`]: a channel dispatcher routes each record of the batch into a
//! per-target batch and sends it to another task; a fused instance runs the
//! downstream component directly on the batch, on the same thread; the
//! fan-out of a channel several components read hands the batch to each of
//! theirs.

use crate::control::{Control, Disconnected};
use crate::id::RootId;
use crate::record::Record;
use crate::time::Timestamp;

/// One outgoing edge of a collector.
pub trait Edge<T>: Send {
    /// Prepares the edge before the first record: a fused downstream
    /// instance restores its state and opens. Channels need nothing.
    fn open(&mut self) -> Result<(), Disconnected> {
        Ok(())
    }

    /// Takes every record of `records` (leaving it empty, capacity kept).
    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected>;

    /// [`push`](Self::push) in a job run with acking: `roots[i]` is the
    /// tree of `records[i]` (see [`Lineage`](crate::lineage::Lineage)). The
    /// default forgets the roots: for edges that end every tree they receive.
    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<T>>,
        roots: &mut Vec<RootId>,
    ) -> Result<(), Disconnected> {
        roots.clear();
        self.push(records)
    }

    /// Sends whatever is buffered now (adaptive flushing).
    fn flush(&mut self) -> Result<(), Disconnected>;

    /// Delivers a control message to every target, after what was pushed
    /// before it.
    fn control(&mut self, control: &Control) -> Result<(), Disconnected>;

    /// The wall clock reads `now`: a fused downstream fires its
    /// processing-time timers. Channels ignore it (their receivers tick
    /// themselves).
    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        let _ = now;
        Ok(())
    }
}
