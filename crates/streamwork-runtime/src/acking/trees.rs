//! The trees of every source collector of one run, and the acker that
//! routes each thread's reports to them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use streamwork_core::id::{InstanceIdx, RootId};
use streamwork_core::record::{Data, Record};

use super::tracker::AckTracker;

/// How many bits of a root number the trees of one tracker.
const SLOT_SHIFT: u32 = 40;

/// A tracker of the trees of one source collector, as the acker sees it.
trait Trees: Send + Sync {
    fn report(&self, reports: &[(RootId, u64)]);
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
pub(crate) type FreshTree<T> = (RootId, u64, Record<T>);

impl<T: Data> SourceTrees<T> {
    /// Numbers the tree of a new source record (no lock): the collector
    /// hands it over with `begin_all` before it
    /// dispatches the record.
    #[inline]
    pub fn next_root(&self) -> RootId {
        RootId::from_raw(self.next_root.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts tracking `fresh` trees, under one lock.
    pub(crate) fn begin_all(&self, fresh: &mut Vec<FreshTree<T>>) {
        if fresh.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut tracker = self.lock();
        for (root, id, record) in fresh.drain(..) {
            tracker.begin_at(root, id, record, now);
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
    fn report(&self, reports: &[(RootId, u64)]) {
        let mut tracker = self.lock();
        let mut completed = 0;
        for &(root, xor) in reports {
            if tracker.ack(root, xor).is_some() {
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
    owners: Mutex<Vec<(Arc<str>, InstanceIdx)>>,
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
    pub fn register<T: Data>(
        &self,
        component: Arc<str>,
        instance: InstanceIdx,
    ) -> Arc<SourceTrees<T>> {
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

    pub(crate) fn report(&self, reports: &mut [(RootId, u64)]) {
        // One lock per tracker: the reports grouped by slot.
        let slot_of = |root: RootId| root.raw() >> SLOT_SHIFT;
        reports.sort_unstable_by_key(|&(root, _)| slot_of(root));
        let trackers = self.trackers.read().unwrap_or_else(|p| p.into_inner());
        for group in reports.chunk_by(|a, b| slot_of(a.0) == slot_of(b.0)) {
            let slot = slot_of(group[0].0) as usize;
            if let Some(trees) = slot.checked_sub(1).and_then(|i| trackers.get(i)) {
                trees.report(group);
            }
        }
    }

    /// Trees of `component`'s instance `instance` still in flight.
    pub fn pending_of(&self, component: &str, instance: InstanceIdx) -> usize {
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
    use super::super::Anchor;
    use super::super::reports::{complete, create, new_id, nothing_pending, send_pending};
    use super::*;

    fn begin(trees: &SourceTrees<u32>, value: u32) -> Anchor {
        let (root, id) = (trees.next_root(), new_id());
        trees.begin_all(&mut vec![(root, id, Record::new(value))]);
        Anchor { root, id }
    }

    fn source() -> (Acker, Arc<SourceTrees<u32>>) {
        let acker = Acker::new(Duration::from_secs(60), Arc::new(AtomicBool::new(false)));
        let trees = acker.register::<u32>("source".into(), InstanceIdx(0));
        (acker, trees)
    }

    #[test]
    fn a_tree_completes_when_its_events_are_done_in_any_order() {
        let (acker, trees) = source();
        // The source starts a tree and dispatches its record into a channel.
        let root = begin(&trees, 7);
        let sent = create(root.root);
        complete(root);
        // The receiver emits two copies downstream, then is done.
        let (a, b) = (create(root.root), create(root.root));
        complete(sent);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", InstanceIdx(0)), 1);
        complete(b);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", InstanceIdx(0)), 1);
        complete(a);
        send_pending(&acker);
        assert_eq!(acker.pending_of("source", InstanceIdx(0)), 0);
        assert_eq!(trees.completed(), 1);
    }

    #[test]
    fn an_incomplete_tree_is_replayed_after_the_timeout() {
        let acker = Acker::new(Duration::ZERO, Arc::new(AtomicBool::new(false)));
        let trees = acker.register::<u32>("source".into(), InstanceIdx(0));
        let root = begin(&trees, 9);
        let _lost = create(root.root);
        complete(root);
        send_pending(&acker);
        assert_eq!(trees.expired(), vec![Record::new(9)]);
        assert_eq!(trees.replayed(), 1);
        assert_eq!(acker.pending_of("source", InstanceIdx(0)), 0);
    }

    #[test]
    fn untracked_records_report_nothing() {
        assert_eq!(
            create(RootId::UNTRACKED),
            Anchor {
                root: RootId::UNTRACKED,
                id: 0
            }
        );
        complete(Anchor {
            root: RootId::UNTRACKED,
            id: 5,
        });
        assert!(nothing_pending());
    }
}
