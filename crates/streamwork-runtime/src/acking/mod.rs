//! At-least-once by acking (chapter 5), wired through the data path: which
//! tree each record belongs to, how the ids of its events are created and
//! reported, and where the reports go.
//!
//! A job run with acking gives every record a root: the [`RootId`] of the
//! tree of the source record it derives from ([`RootId::UNTRACKED`] for a
//! record of no tree, such as a window's result, emitted from state rather
//! than from one record).
//!
//! * A source's collector starts a tree for each record it emits, keeping a
//!   copy of the record to replay ([`SourceTrees`], through the collector's
//!   [`Lineage`](streamwork_core::lineage::Lineage): [`RootedLineage`]).
//! * Inside a task, records move with their roots only: an operator's
//!   outputs inherit the root of the record being processed.
//! * Where a record crosses a channel, the dispatcher gives the copy it sends
//!   a fresh random id (an [`Anchor`]) and reports the id's creation; the
//!   receiving task reports the id's completion when it processes the
//!   record. A sink's completion is reported once the batch is written and
//!   flushed.
//! * Reports are XORed per tree in the task and sent to the tree's tracker
//!   at the end of each batch, after the task has dispatched everything the
//!   batch produced: every id is reported created no later than its parent
//!   is reported done, so a tree reaches zero only when all its events are
//!   ([`AckTracker`]).
//!
//! A tree that has not reached zero within the timeout (a record dropped by
//! a full edge, say) is replayed by its source, as a new tree.
//!
//! [`RootId`]: streamwork_core::RootId
//! [`RootId::UNTRACKED`]: streamwork_core::RootId::UNTRACKED

mod lineage;
mod reports;
mod tracker;
mod trees;

pub use lineage::RootedLineage;
pub use reports::{
    Anchor, AnchoredBatch, complete, create, current_root, send_pending, set_current_root,
};
pub use tracker::AckTracker;
pub use trees::{AckStats, Acker, SourceTrees};
