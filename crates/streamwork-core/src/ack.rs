//! At-least-once by acking (chapter 5): the tracker of event trees.
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
//! use streamwork_core::ack::AckTracker;
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

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The id of one source event's tree.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RootId(u64);

impl RootId {
    /// The tree with this raw id.
    pub fn from_raw(raw: u64) -> Self {
        RootId(raw)
    }

    /// The raw id, as records carry it.
    pub fn raw(self) -> u64 {
        self.0
    }
}

struct Tree<P> {
    xor: u64,
    started: Instant,
    position: P,
}

/// Tracks the trees of events derived from source events; `P` is what the
/// source needs to replay one (an offset, a sequence number, the event
/// itself).
pub struct AckTracker<P> {
    trees: HashMap<RootId, Tree<P>>,
    timeout: Duration,
    next_root: u64,
    random: u64,
}

impl<P> AckTracker<P> {
    /// A tracker that gives up on a tree after `timeout`; `seed` makes the
    /// event ids of one tracker differ from another's.
    pub fn new(timeout: Duration, seed: u64) -> Self {
        AckTracker {
            trees: HashMap::new(),
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
        loop {
            // splitmix64: a full-period generator with well-mixed outputs.
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

    /// Starts tracking the source event at `position`: returns its tree and
    /// the id of the root event.
    pub fn begin(&mut self, position: P, now: Instant) -> (RootId, u64) {
        let root = RootId(self.next_root);
        self.next_root += 1;
        let id = self.new_id();
        self.trees.insert(
            root,
            Tree {
                xor: id,
                started: now,
                position,
            },
        );
        (root, id)
    }

    /// XORs `value` into the tree of `root`: the id of an event a component
    /// is done with, XOR the ids of the events it emitted from it. Returns
    /// the source position once the tree is complete. Reports for a tree
    /// that already completed, expired or failed are ignored (its replay
    /// starts a new tree).
    pub fn ack(&mut self, root: RootId, value: u64) -> Option<P> {
        let tree = self.trees.get_mut(&root)?;
        tree.xor ^= value;
        if tree.xor == 0 {
            self.trees.remove(&root).map(|t| t.position)
        } else {
            None
        }
    }

    /// A component failed on an event of `root`'s tree: the tree is
    /// abandoned and its source position returned for replay.
    pub fn fail(&mut self, root: RootId) -> Option<P> {
        self.trees.remove(&root).map(|t| t.position)
    }

    /// Abandons every tree older than the timeout at `now` and returns their
    /// source positions, oldest first, for replay.
    pub fn expire(&mut self, now: Instant) -> Vec<P> {
        let timeout = self.timeout;
        let mut expired: Vec<(RootId, Instant)> = self
            .trees
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(t.started) >= timeout)
            .map(|(root, t)| (*root, t.started))
            .collect();
        expired.sort_by_key(|(root, started)| (*started, root.0));
        expired
            .into_iter()
            .filter_map(|(root, _)| self.trees.remove(&root).map(|t| t.position))
            .collect()
    }

    /// Trees still in flight.
    pub fn pending(&self) -> usize {
        self.trees.len()
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
}
