//! The reports of one thread: the root of the record it is processing, and
//! the XOR of the event ids it created or finished, per tree, until they are
//! sent.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use streamwork_core::hash::FastHashMap;
use streamwork_core::id::RootId;
use streamwork_core::record::Record;

use super::trees::Acker;

/// Where a record crossing a channel sits in its tree: the tree's root, and
/// this copy's own id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// The tree.
    pub root: RootId,
    /// This event's id.
    pub id: u64,
}

/// A batch sent through a channel of a job run with acking.
pub struct AnchoredBatch<T> {
    /// The records.
    pub records: Vec<Record<T>>,
    /// One anchor per record.
    pub anchors: Vec<Anchor>,
}

thread_local! {
    /// The root of the record the current thread is processing.
    static CURRENT_ROOT: Cell<RootId> = const { Cell::new(RootId::UNTRACKED) };
    /// Reports not yet sent: per tree, the XOR of the ids reported.
    static PENDING: RefCell<Pending> = RefCell::new(Pending::new());
}

struct Pending {
    xors: FastHashMap<RootId, u64>,
    random: u64,
}

impl Pending {
    fn new() -> Self {
        let seed = CURRENT_ROOT.with(|c| c as *const Cell<RootId> as u64)
            ^ Instant::now().elapsed().as_nanos() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        Pending {
            xors: FastHashMap::default(),
            random: seed,
        }
    }

    fn next_id(&mut self) -> u64 {
        super::tracker::random_id(&mut self.random)
    }
}

/// The root of the record being processed on this thread.
#[inline]
pub fn current_root() -> RootId {
    CURRENT_ROOT.with(Cell::get)
}

/// Sets the root of the record being processed; returns the previous one.
#[inline]
pub fn set_current_root(root: RootId) -> RootId {
    CURRENT_ROOT.with(|c| c.replace(root))
}

/// A fresh random event id, from this thread's generator.
#[inline]
pub(crate) fn new_id() -> u64 {
    PENDING.with(|p| p.borrow_mut().next_id())
}

/// Creates the id of a copy of a record of tree `root` sent into a channel,
/// and reports its creation.
#[inline]
pub fn create(root: RootId) -> Anchor {
    if !root.is_tracked() {
        return Anchor { root, id: 0 };
    }
    let id = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let id = p.next_id();
        *p.xors.entry(root).or_insert(0) ^= id;
        id
    });
    Anchor { root, id }
}

/// Reports that the event `anchor` is done with (processed, or written).
#[inline]
pub fn complete(anchor: Anchor) {
    if anchor.root.is_tracked() {
        PENDING.with(|p| *p.borrow_mut().xors.entry(anchor.root).or_insert(0) ^= anchor.id);
    }
}

/// Sends this thread's pending reports to their trackers.
pub fn send_pending(acker: &Acker) {
    let mut reports: Vec<(RootId, u64)> = PENDING.with(|p| p.borrow_mut().xors.drain().collect());
    if !reports.is_empty() {
        acker.report(&mut reports);
    }
}

#[cfg(test)]
pub(crate) fn nothing_pending() -> bool {
    PENDING.with(|p| p.borrow().xors.is_empty())
}
