//! The tracker of event trees (Storm's XOR acking).
//!
//! Every source event is the root of a tree of the events derived from it.
//! Each event gets a random 64-bit id. The tracker keeps, per root, the XOR
//! of the ids it was told about: the root's id when the source emits it;
//! then each component that finishes with an event reports the event's id
//! XOR the ids of the events it emitted from it (a sink, or an operator that
//! filters the event out, reports the id alone: the event leaves the tree
//! early). Every id thus enters the XOR exactly twice, once when created and
//! once when done, so the value returns to zero exactly when the whole tree
//! is processed, whatever the order the reports arrive in, in constant
//! memory per root. A tree that does not complete within the timeout, or
//! that a component fails, is handed back for the source to replay.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use streamwork::runtime::acking::AckTracker;
//!
//! let mut tracker = AckTracker::new(Duration::from_secs(30), 7);
//! let now = Instant::now();
//! // The source emits line 12 of its file.
//! let (root, line) = tracker.begin(12u64, now);
//! // A splitter emits two words from it and is done with the line.
//! let (a, b) = (tracker.new_id(), tracker.new_id());
//! assert_eq!(tracker.ack(root, line ^ a ^ b), None);
//! // A counter drops the first word; the sink writes the second.
//! assert_eq!(tracker.ack(root, a), None);
//! assert_eq!(tracker.ack(root, b), Some(12)); // the tree is complete
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use streamwork_core::id::RootId;

struct Tree<P> {
    xor: u64,
    started: Instant,
    position: P,
}

/// Tracks the trees of events derived from source events; `P` is what the
/// source needs to replay one (an offset, a sequence number, the event
/// itself).
pub struct AckTracker<P> {
    /// By root, from root `base` on: roots are numbered in the order trees
    /// start, so a tree is found by subtraction and the oldest come first.
    /// A completed tree leaves a hole until the trees before it are done.
    trees: VecDeque<Option<Tree<P>>>,
    base: u64,
    live: usize,
    timeout: Duration,
    next_root: u64,
    random: u64,
}

impl<P> AckTracker<P> {
    /// A tracker that gives up on a tree after `timeout`; `seed` makes the
    /// event ids of one tracker differ from another's.
    pub fn new(timeout: Duration, seed: u64) -> Self {
        AckTracker {
            trees: VecDeque::new(),
            base: 0,
            live: 0,
            timeout,
            next_root: 0,
            random: seed ^ 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The same tracker numbering its trees from `first` on (so that the
    /// trees of several trackers have distinct ids).
    pub fn starting_at(mut self, first: u64) -> Self {
        self.next_root = first;
        self
    }

    /// A fresh, non-zero, random event id.
    pub fn new_id(&mut self) -> u64 {
        random_id(&mut self.random)
    }

    /// Starts tracking the source event at `position`: returns its tree and
    /// the id of the root event.
    pub fn begin(&mut self, position: P, now: Instant) -> (RootId, u64) {
        let root = RootId::from_raw(self.next_root);
        let id = self.new_id();
        self.begin_at(root, id, position, now);
        (root, id)
    }

    /// Starts tracking a tree whose root and root event id the caller chose.
    /// Roots must increase with time, as [`begin`](Self::begin) numbers
    /// them; a root not above the last one is ignored.
    pub fn begin_at(&mut self, root: RootId, id: u64, position: P, now: Instant) {
        if self.trees.is_empty() {
            self.base = root.raw();
        }
        let Some(index) = root.raw().checked_sub(self.base).map(|i| i as usize) else {
            return;
        };
        if index < self.trees.len() {
            return;
        }
        self.trees.resize_with(index, || None);
        self.trees.push_back(Some(Tree {
            xor: id,
            started: now,
            position,
        }));
        self.live += 1;
        self.next_root = self.next_root.max(root.raw() + 1);
    }

    fn slot(&mut self, root: RootId) -> Option<&mut Option<Tree<P>>> {
        let index = root.raw().checked_sub(self.base)?;
        self.trees.get_mut(usize::try_from(index).ok()?)
    }

    /// Removes the tree of `root`, and the holes at the front.
    fn take(&mut self, root: RootId) -> Option<P> {
        let tree = self.slot(root)?.take()?;
        self.live -= 1;
        while let Some(None) = self.trees.front() {
            self.trees.pop_front();
            self.base += 1;
        }
        Some(tree.position)
    }

    /// XORs `value` into the tree of `root`: the id of an event a component
    /// is done with, XOR the ids of the events it emitted from it. Returns
    /// the source position once the tree is complete. Reports for a tree
    /// that already completed, expired or failed are ignored (its replay
    /// starts a new tree).
    pub fn ack(&mut self, root: RootId, value: u64) -> Option<P> {
        let tree = self.slot(root)?.as_mut()?;
        tree.xor ^= value;
        if tree.xor == 0 { self.take(root) } else { None }
    }

    /// A component failed on an event of `root`'s tree: the tree is
    /// abandoned and its source position returned for replay.
    pub fn fail(&mut self, root: RootId) -> Option<P> {
        self.take(root)
    }

    /// Abandons every tree older than the timeout at `now` and returns their
    /// source positions, oldest first, for replay. Trees start in root
    /// order, so this looks at the expired ones and the next only.
    pub fn expire(&mut self, now: Instant) -> Vec<P> {
        let mut expired = Vec::new();
        while let Some(front) = self.trees.front() {
            match front {
                Some(tree) if now.saturating_duration_since(tree.started) < self.timeout => break,
                Some(_) => {
                    if let Some(Some(tree)) = self.trees.pop_front() {
                        self.live -= 1;
                        expired.push(tree.position);
                    }
                }
                None => {
                    self.trees.pop_front();
                }
            }
            self.base += 1;
        }
        expired
    }

    /// Trees still in flight.
    pub fn pending(&self) -> usize {
        self.live
    }
}

/// The next non-zero id of the generator whose state is `random`:
/// splitmix64, a full-period generator with well-mixed outputs.
pub(crate) fn random_id(random: &mut u64) -> u64 {
    loop {
        *random = random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *random;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z != 0 {
            return z;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fan_out_tree_completes_when_every_branch_is_done() {
        let mut t = AckTracker::new(Duration::from_secs(1), 1);
        let now = Instant::now();
        let (root, id) = t.begin("line 1", now);
        let children: Vec<u64> = (0..3).map(|_| t.new_id()).collect();
        let all = children.iter().fold(id, |x, c| x ^ c);
        assert_eq!(t.ack(root, all), None);
        assert_eq!(t.ack(root, children[0]), None);
        assert_eq!(t.ack(root, children[2]), None);
        assert_eq!(t.pending(), 1);
        assert_eq!(t.ack(root, children[1]), Some("line 1"));
        assert_eq!(t.pending(), 0);
        // A late duplicate report changes nothing.
        assert_eq!(t.ack(root, children[1]), None);
    }

    #[test]
    fn an_event_leaving_the_tree_early_acks_at_once() {
        let mut t = AckTracker::new(Duration::from_secs(1), 2);
        let (root, id) = t.begin(5u32, Instant::now());
        // Filtered out by the first operator: done, nothing emitted.
        assert_eq!(t.ack(root, id), Some(5));
    }

    #[test]
    fn timed_out_and_failed_trees_are_handed_back_for_replay() {
        let mut t = AckTracker::new(Duration::from_millis(100), 3);
        let start = Instant::now();
        let (first, _) = t.begin(1u64, start);
        let (second, _) = t.begin(2u64, start + Duration::from_millis(50));
        let (third, id) = t.begin(3u64, start + Duration::from_millis(60));
        assert!(t.expire(start + Duration::from_millis(99)).is_empty());
        assert_eq!(t.expire(start + Duration::from_millis(150)), vec![1, 2]);
        assert_eq!(t.ack(first, 0), None, "an expired tree is gone");
        assert_eq!(t.ack(second, 1), None);
        assert_eq!(t.fail(third), Some(3));
        assert_eq!(t.ack(third, id), None);
        assert_eq!(t.pending(), 0);
    }

    /// One tree of the property below: its root, the events not yet
    /// reported done (id, children to create), and the shape consumed.
    type Work = (RootId, Vec<(u64, usize)>, usize);

    proptest::proptest! {
        /// Any tree (each event emitting up to three children), its events
        /// done in any order, other trees interleaved: a tree completes
        /// exactly when its last event is reported done, never before.
        #[test]
        fn a_tree_completes_exactly_with_its_last_event(
            shapes in proptest::collection::vec(proptest::collection::vec(0usize..4, 1..20), 1..6),
            order in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..200),
        ) {
            let mut t = AckTracker::new(Duration::from_secs(60), 9);
            let now = Instant::now();
            // Per tree: the events still to report, as (id, children left to create).
            let mut work: Vec<Work> = Vec::new();
            for (n, shape) in shapes.iter().enumerate() {
                let (root, id) = t.begin(n, now);
                work.push((root, vec![(id, shape[0])], 1));
            }
            let mut picks = order.into_iter().chain(std::iter::repeat(0));
            let mut completed = vec![false; shapes.len()];
            while work.iter().any(|(_, open, _)| !open.is_empty()) {
                let live: Vec<usize> = (0..work.len()).filter(|&i| !work[i].1.is_empty()).collect();
                let pick = picks.next().unwrap_or(0) as usize;
                let tree = live[pick % live.len()];
                let (root, open, next_shape) = &mut work[tree];
                let event = pick / live.len() % open.len();
                let (id, children) = open.swap_remove(event);
                // Done with `id`: emit its children, then report.
                let mut report = id;
                for _ in 0..children {
                    let child = t.new_id();
                    report ^= child;
                    let grandchildren = shapes[tree].get(*next_shape).copied().unwrap_or(0);
                    *next_shape += 1;
                    open.push((child, grandchildren));
                }
                let done = t.ack(*root, report);
                proptest::prop_assert_eq!(done.is_some(), open.is_empty(), "tree {}", tree);
                if let Some(position) = done {
                    proptest::prop_assert_eq!(position, tree);
                    proptest::prop_assert!(!completed[tree]);
                    completed[tree] = true;
                }
            }
            proptest::prop_assert!(completed.iter().all(|&c| c));
            proptest::prop_assert_eq!(t.pending(), 0);
        }
    }
}
