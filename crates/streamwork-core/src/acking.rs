//! At-least-once by acking (chapter 5), wired through the runtime: which
//! tree each record belongs to, how the ids of its events are created and
//! reported, and where the reports go.
//!
//! A job run with acking gives every record a *root*: the id of the tree of
//! the source record it derives from (0: untracked, such as a window's
//! results, emitted from state rather than from one record).
//!
//! * A source's collector starts a tree for each record it emits, keeping a
//!   copy of the record to replay ([`SourceTrees`]).
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
//!   is reported done, so a tree reaches zero only when all its events are.
//!
//! A tree that has not reached zero within the timeout (a record dropped by
//! a full edge, say) is replayed by its source, as a new tree.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::ack::{AckTracker, RootId};
use crate::hash::FastHashMap;
use crate::record::{Data, Record};

/// Where a record crossing a channel sits in its tree: the tree's root, and
/// this copy's own id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// The tree (0: untracked).
    pub root: u64,
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

/// How many bits of a root number the trees of one tracker.
const SLOT_SHIFT: u32 = 40;

thread_local! {
    /// The root of the record the current thread is processing.
    static CURRENT_ROOT: Cell<u64> = const { Cell::new(0) };
    /// Reports not yet sent: per tree, the XOR of the ids reported.
    static PENDING: RefCell<Pending> = RefCell::new(Pending::new());
}

struct Pending {
    xors: FastHashMap<u64, u64>,
    random: u64,
}

impl Pending {
    fn new() -> Self {
        let seed = CURRENT_ROOT.with(|c| c as *const Cell<u64> as u64)
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
        loop {
            self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.random;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            if z != 0 {
                return z;
            }
        }
    }
}

/// The root of the record being processed on this thread.
#[inline]
pub fn current_root() -> u64 {
    CURRENT_ROOT.with(Cell::get)
}

/// Sets the root of the record being processed; returns the previous one.
#[inline]
pub fn set_current_root(root: u64) -> u64 {
    CURRENT_ROOT.with(|c| c.replace(root))
}

/// A fresh random event id, from this thread's generator.
#[inline]
pub fn new_id() -> u64 {
    PENDING.with(|p| p.borrow_mut().next_id())
}

/// Creates the id of a copy of a record of tree `root` sent into a channel,
/// and reports its creation.
#[inline]
pub fn create(root: u64) -> Anchor {
    if root == 0 {
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
    if anchor.root != 0 {
        PENDING.with(|p| *p.borrow_mut().xors.entry(anchor.root).or_insert(0) ^= anchor.id);
    }
}

/// Sends this thread's pending reports to their trackers.
pub fn send_pending(acker: &Acker) {
    let mut reports: Vec<(u64, u64)> = PENDING.with(|p| p.borrow_mut().xors.drain().collect());
    if !reports.is_empty() {
        acker.report(&mut reports);
    }
}

/// A tracker of the trees of one source collector, as the acker sees it.
trait Trees: Send + Sync {
    fn report(&self, reports: &[(u64, u64)]);
    fn pending(&self) -> usize;
}

/// The trees started by one output channel of one source instance, with a
/// copy of each record to replay it.
pub struct SourceTrees<T> {
    tracker: Mutex<AckTracker<Record<T>>>,
    next_root: AtomicU64,
    completed: AtomicU64,
    replayed: AtomicU64,
}

/// A tree a source's collector has numbered but not yet handed to its
/// tracker: its root, the root event's id, and the record.
pub type FreshTree<T> = (u64, u64, Record<T>);

impl<T: Data> SourceTrees<T> {
    /// Numbers the tree of a new source record (no lock): the collector
    /// hands it over with [`begin_all`](Self::begin_all) before it
    /// dispatches the record.
    #[inline]
    pub fn next_root(&self) -> u64 {
        self.next_root.fetch_add(1, Ordering::Relaxed)
    }

    /// Starts tracking `fresh` trees, under one lock.
    pub fn begin_all(&self, fresh: &mut Vec<FreshTree<T>>) {
        if fresh.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut tracker = self.lock();
        for (root, id, record) in fresh.drain(..) {
            tracker.begin_at(RootId::from_raw(root), id, record, now);
        }
    }

    /// The records of trees that timed out, for replay as new trees.
    pub fn expired(&self) -> Vec<Record<T>> {
        let expired = self.lock().expire(Instant::now());
        self.replayed
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        expired
    }

    /// Trees completed so far.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Records replayed so far.
    pub fn replayed(&self) -> u64 {
        self.replayed.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AckTracker<Record<T>>> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Data> Trees for SourceTrees<T> {
    fn report(&self, reports: &[(u64, u64)]) {
        let mut tracker = self.lock();
        let mut completed = 0;
        for &(root, xor) in reports {
            if tracker.ack(RootId::from_raw(root), xor).is_some() {
                completed += 1;
            }
        }
        drop(tracker);
        self.completed.fetch_add(completed, Ordering::Relaxed);
    }

    fn pending(&self) -> usize {
        self.lock().pending()
    }
}

/// Acking for one run of a job: the trackers of every source collector,
/// where tasks send their reports.
pub struct Acker {
    timeout: Duration,
    aborted: Arc<AtomicBool>,
    trackers: RwLock<Vec<Arc<dyn Trees>>>,
    owners: Mutex<Vec<(Arc<str>, u32)>>,
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acker")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What acking did in one run, per source instance.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AckStats {
    /// Trees completed.
    pub completed: u64,
    /// Records replayed after their tree timed out.
    pub replayed: u64,
}

impl Acker {
    /// Acking that replays a tree not complete after `timeout`; `aborted`
    /// turns true when the job fails (sources stop waiting for their trees).
    pub fn new(timeout: Duration, aborted: Arc<AtomicBool>) -> Self {
        Acker {
            timeout,
            aborted,
            trackers: RwLock::new(Vec::new()),
            owners: Mutex::new(Vec::new()),
        }
    }

    /// The trees of one output channel of source `component`'s instance
    /// `instance`.
    pub fn register<T: Data>(&self, component: Arc<str>, instance: u32) -> Arc<SourceTrees<T>> {
        let mut trackers = self.trackers.write().unwrap_or_else(|p| p.into_inner());
        let slot = trackers.len() as u64 + 1;
        let trees = Arc::new(SourceTrees {
            tracker: Mutex::new(AckTracker::new(
                self.timeout,
                slot.wrapping_mul(0x2545_f491_4f6c_dd1d),
            )),
            next_root: AtomicU64::new(slot << SLOT_SHIFT),
            completed: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
        });
        trackers.push(trees.clone());
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((component, instance));
        trees
    }

    fn report(&self, reports: &mut [(u64, u64)]) {
        // One lock per tracker: the reports grouped by slot.
        reports.sort_unstable_by_key(|&(root, _)| root >> SLOT_SHIFT);
        let trackers = self.trackers.read().unwrap_or_else(|p| p.into_inner());
        for group in reports.chunk_by(|a, b| a.0 >> SLOT_SHIFT == b.0 >> SLOT_SHIFT) {
            let slot = (group[0].0 >> SLOT_SHIFT) as usize;
            if let Some(trees) = slot.checked_sub(1).and_then(|i| trackers.get(i)) {
                trees.report(group);
            }
        }
    }

    /// Trees of `component`'s instance `instance` still in flight.
    pub fn pending_of(&self, component: &str, instance: u32) -> usize {
        let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        let trackers = self.trackers.read().unwrap_or_else(|p| p.into_inner());
        owners
            .iter()
            .zip(trackers.iter())
            .filter(|((c, i), _)| &**c == component && *i == instance)
            .map(|(_, t)| t.pending())
            .sum()
    }

    /// Whether the job has failed.
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    /// The tree timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(trees: &SourceTrees<u32>, value: u32) -> Anchor {
        let (root, id) = (trees.next_root(), new_id());
        trees.begin_all(&mut vec![(root, id, Record::new(value))]);
        Anchor { root, id }
    }

    #[test]
    fn a_tree_completes_when_its_events_are_done_in_any_order() {
        let acker = Acker::new(Duration::from_secs(60), Arc::new(AtomicBool::new(false)));
        let trees = acker.register::<u32>("source".into(), 0);
        // The source starts a tree and dispatches its record into a channel.
        let root = begin(&trees, 7);
        let sent = create(root.root);
        complete(root);
        // The receiver emits two copies downstream, then is done.
        let (a, b) = (create(root.root), create(root.root));
        complete(sent);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", 0), 1);
        complete(b);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", 0), 1);
        complete(a);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", 0), 0);
        assert_eq!(trees.completed(), 1);
    }

    #[test]
    fn an_incomplete_tree_is_replayed_after_the_timeout() {
        let acker = Acker::new(Duration::ZERO, Arc::new(AtomicBool::new(false)));
        let trees = acker.register::<u32>("source".into(), 0);
        let root = begin(&trees, 9);
        let _lost = create(root.root);
        complete(root);
        send_pending(&acker);
        assert_eq!(trees.expired(), vec![Record::new(9)]);
        assert_eq!(trees.replayed(), 1);
        assert_eq!(acker.pending_of("source", 0), 0);
    }

    #[test]
    fn untracked_records_report_nothing() {
        assert_eq!(create(0), Anchor { root: 0, id: 0 });
        complete(Anchor { root: 0, id: 5 });
        PENDING.with(|p| assert!(p.borrow().xors.is_empty()));
    }
}
