//! Lineage: the tree each record belongs to, in a job run with acking
//! (chapter 5, at-least-once by acking).
//!
//! A collector in such a job notes, for every record it buffers, the
//! [`RootId`](crate::RootId) of the source record it derives from, and hands
//! the roots to its edges with the records ([`Edge::push_rooted`]). What a
//! root is, how trees are tracked and replayed, is the engine's business: it
//! gives the collector a [`Lineage`] that does it. A job without acking has
//! none, and its collectors pay one comparison per record for the
//! possibility (the batch threshold).

use crate::control::Disconnected;
use crate::edge::Edge;
use crate::record::Record;

/// What a collector does with the lineage of its records, in a job run with
/// acking.
pub trait Lineage<T>: Send {
    /// Notes the root of each of `records`, just buffered, in order.
    fn note(&mut self, records: &[Record<T>]);

    /// Hands every buffered record, with its root, to `edge`
    /// ([`Edge::push_rooted`]), and leaves `records` empty.
    fn dispatch(
        &mut self,
        records: &mut Vec<Record<T>>,
        edge: &mut dyn Edge<T>,
    ) -> Result<(), Disconnected>;

    /// Forgets the roots of the buffered records: they were taken, or
    /// dropped by a channel nobody reads (their trees end there).
    fn discard(&mut self);

    /// Records to emit again before the next flush: for a source's
    /// collector, those whose trees timed out.
    fn replays(&mut self) -> Vec<Record<T>>;
}
