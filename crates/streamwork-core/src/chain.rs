//! What an instance's incremental snapshots build on: [`SnapshotChain`].
//!
//! State kept in a versioned keyed table (`KeyedState`, or the `CowMap` of
//! the state crate) can be snapshotted *whole* (every entry) or as a
//! *delta*: the entries written and the keys removed since the newest
//! snapshot of this run whose checkpoint is known to be complete (its
//! record mapped back from the log), never one that may not have completed.
//! A delta names its *chain*, the records a restore reads in order: a whole
//! one, then deltas; the checkpoint keeps them (`StateBytes::builds_on`).
//! So a checkpoint writes what changed, not the whole state, as Flink's
//! changelog and RocksDB's incremental checkpoints do.
//!
//! A chain is bounded: a snapshot is whole again once the chain's records
//! add up to twice what a whole one would write now, or the chain would
//! pass [`MAX_CHAIN`] records, so that a restore reads at most about twice
//! the state, and retention frees what no chain reads. A state that grows
//! (new keys, as a join's or a top-N's) writes each entry about once; one
//! that rewrites its keys is written whole about once per its size in
//! deltas.
//!
//! ```
//! use std::sync::{Arc, OnceLock};
//! use streamwork::core::CheckpointId;
//! use streamwork::core::chain::{ChainPlan, SnapshotChain};
//!
//! let mut chain = SnapshotChain::default();
//! let (plan, _) = chain.plan(CheckpointId::NONE, 10);
//! assert!(matches!(plan, ChainPlan::Whole));
//! chain.taken(CheckpointId::new(1), 1, 10, plan, Arc::new(OnceLock::new()));
//! // Checkpoint 1 is not known to be complete (its record was not mapped
//! // back): the next snapshot is whole too.
//! assert!(matches!(chain.plan(CheckpointId::new(1), 10).0, ChainPlan::Whole));
//! ```

use std::sync::{Arc, OnceLock};

use crate::checkpoint::SharedBytes;
use crate::id::CheckpointId;

/// Marks a table entry written in `epoch` (the epoch a versioned table
/// stamps its entries with): a store only on the entry's first write of the
/// epoch, so that a key written again and again costs a compare.
#[inline(always)]
pub fn stamp(version: &mut u32, epoch: u32) {
    if *version != epoch {
        *version = epoch;
    }
}

/// A versioned table's clock and removals: the current epoch (1 plus the
/// freezes so far), with which the table stamps the entries it writes, the
/// keys it removed in each epoch once it has been frozen (a table never
/// frozen is never asked what changed), and the epoch it was last cleared
/// in.
///
/// ```
/// use streamwork::core::chain::Epochs;
///
/// let mut epochs: Epochs<&str> = Epochs::default();
/// epochs.removed("a"); // never frozen: not noted
/// let first = epochs.freeze();
/// epochs.removed("b");
/// let second = epochs.freeze();
/// assert_eq!((first.epoch(), second.epoch(), epochs.now()), (1, 2, 3));
/// assert_eq!(second.removed_since(first.epoch()).collect::<Vec<_>>(), [&"b"]);
/// ```
#[derive(Clone, Debug)]
pub struct Epochs<K> {
    epoch: u32,
    removing: Vec<K>,
    removed: Vec<(u32, Arc<[K]>)>,
    cleared_at: u32,
}

impl<K> Default for Epochs<K> {
    fn default() -> Self {
        Epochs {
            epoch: 1,
            removing: Vec::new(),
            removed: Vec::new(),
            cleared_at: 0,
        }
    }
}

impl<K> Epochs<K> {
    /// The current epoch: what an entry written now is stamped with.
    #[inline]
    pub fn now(&self) -> u32 {
        self.epoch
    }

    /// Whether removals are noted: once the table has been frozen.
    #[inline]
    pub fn tracks(&self) -> bool {
        self.epoch > 1
    }

    /// Notes that `key` was removed.
    #[inline]
    pub fn removed(&mut self, key: K) {
        if self.tracks() {
            self.removing.push(key);
        }
    }

    /// Notes that everything was removed at once: what changed since an
    /// earlier epoch is the whole table, and no removal need be kept.
    pub fn cleared(&mut self) {
        self.cleared_at = self.epoch;
        self.removing.clear();
        self.removed.clear();
    }

    /// [`FrozenEpochs::whole_since`], asked before the freeze: whether a
    /// snapshot of a table holding `entries` that would build on the
    /// freeze of `epoch` should be whole instead.
    pub fn whole_since(&self, epoch: u32, entries: usize) -> bool {
        let removed = removed_count_since(&self.removed, epoch) + self.removing.len();
        self.cleared_at > epoch || whole_is_smaller(entries, removed)
    }

    /// Forgets the removals up to the freeze of `epoch`: no view will be
    /// asked what changed since an epoch before it.
    pub fn forget_through(&mut self, epoch: u32) {
        self.removed.retain(|(at, _)| *at > epoch);
    }

    /// Closes the current epoch for a freeze of the table: what the frozen
    /// view knows of removals. Writes after it are of the next epoch.
    pub fn freeze(&mut self) -> FrozenEpochs<K> {
        if !self.removing.is_empty() {
            let removing = std::mem::take(&mut self.removing);
            self.removed.push((self.epoch, removing.into()));
        }
        let frozen = FrozenEpochs {
            epoch: self.epoch,
            removed: self.removed.clone(),
            cleared_at: self.cleared_at,
        };
        self.epoch = self.epoch.saturating_add(1);
        frozen
    }
}

/// What a frozen view of a versioned table knows of its epochs: the one it
/// was frozen in, and the removals since earlier ones (see [`Epochs`]).
#[derive(Clone, Debug)]
pub struct FrozenEpochs<K> {
    epoch: u32,
    removed: Vec<(u32, Arc<[K]>)>,
    cleared_at: u32,
}

impl<K> FrozenEpochs<K> {
    /// The epoch it was frozen in: what a later view's changes are
    /// relative to.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether the table was cleared after the freeze of `epoch`: then what
    /// changed since is everything.
    pub fn cleared_since(&self, epoch: u32) -> bool {
        self.cleared_at > epoch
    }

    /// The keys removed after the freeze of `epoch` (some may hold a value
    /// again), unless forgotten ([`Epochs::forget_through`]).
    pub fn removed_since(&self, epoch: u32) -> impl Iterator<Item = &K> {
        self.removed
            .iter()
            .filter(move |(at, _)| *at > epoch)
            .flat_map(|(_, keys)| keys.iter())
    }

    /// How many keys were removed after the freeze of `epoch`.
    pub fn removed_count_since(&self, epoch: u32) -> usize {
        removed_count_since(&self.removed, epoch)
    }

    /// Whether a snapshot of a table now holding `entries` that would
    /// build on the freeze of `epoch` should be whole instead: the table
    /// was cleared since, or more keys went than are left
    /// ([`whole_is_smaller`]).
    pub fn whole_since(&self, epoch: u32, entries: usize) -> bool {
        self.cleared_since(epoch) || whole_is_smaller(entries, self.removed_count_since(epoch))
    }
}

/// How many keys the epochs after `epoch` removed.
fn removed_count_since<K>(removed: &[(u32, Arc<[K]>)], epoch: u32) -> usize {
    removed
        .iter()
        .filter(|(at, _)| *at > epoch)
        .map(|(_, keys)| keys.len())
        .sum()
}

/// Whether a whole snapshot of `entries` is smaller than a delta that
/// removes `removed` keys: when more keys went since the snapshot a delta
/// would build on than are left, a restore would read the old state only to
/// remove most of it.
pub fn whole_is_smaller(entries: usize, removed: usize) -> bool {
    removed > entries
}

/// The most records a chain has: one whole snapshot and deltas. With a
/// checkpoint every 10 s, a whole one at least every 10 minutes (the
/// default period of Flink's changelog backend's materialization), so
/// that a whole record does not keep old log segments for longer.
pub const MAX_CHAIN: usize = 64;

/// One snapshot this instance took in this run.
#[derive(Debug)]
struct Link {
    checkpoint: CheckpointId,
    /// The map's epoch when frozen for it.
    epoch: u32,
    /// The checkpoints of the records before its own in its chain.
    before: Vec<CheckpointId>,
    /// Their sizes, in bytes.
    sizes: Vec<u64>,
    /// Entries the state held at its chain's whole snapshot.
    whole_entries: u64,
    /// Its record, once its checkpoint is complete.
    written: Arc<OnceLock<SharedBytes>>,
}

/// What the next snapshot writes.
#[derive(Clone, Debug)]
pub enum ChainPlan {
    /// Every entry.
    Whole,
    /// What changed since the freeze of epoch `since`, read after the
    /// records of the checkpoints `before` (a whole one first).
    Delta {
        /// The epoch of the snapshot it builds on.
        since: u32,
        /// The checkpoints of the chain's earlier records, in order.
        before: Vec<CheckpointId>,
        /// Their sizes, in bytes.
        sizes: Vec<u64>,
        /// Entries the state held at the chain's whole snapshot.
        whole_entries: u64,
    },
}

impl ChainPlan {
    /// This plan, or [`Whole`](ChainPlan::Whole) if it is a delta on the
    /// freeze of an epoch for which `whole_since` says a whole snapshot is
    /// better (see [`FrozenEpochs::whole_since`]).
    pub fn or_whole_if(self, whole_since: impl FnOnce(u32) -> bool) -> ChainPlan {
        match self {
            ChainPlan::Delta { since, .. } if whole_since(since) => ChainPlan::Whole,
            plan => plan,
        }
    }
}

/// The snapshots one instance took in this run that a later one may build
/// on. A restored or new instance has none: its first snapshot is whole.
#[derive(Debug, Default)]
pub struct SnapshotChain {
    links: Vec<Link>,
}

/// A clone is another instance's: it builds on no snapshot of this one.
impl Clone for SnapshotChain {
    fn clone(&self) -> Self {
        SnapshotChain::default()
    }
}

impl SnapshotChain {
    /// What the next snapshot of a state holding `entries` writes, given
    /// the newest checkpoint known to be complete, and the epoch up to
    /// which the map may forget its removals (that of the snapshot it
    /// builds on: no later snapshot builds on an older one).
    ///
    /// Whole once the chain would pass [`MAX_CHAIN`] records, or once its
    /// records add up to twice what a whole snapshot would write now (the
    /// chain's whole record, scaled by how the number of entries changed
    /// since): a restore then reads at most about twice the state. Deltas
    /// that only add keys never make it whole; deltas that rewrite the
    /// same keys do once they add up to the state. (The caller also takes
    /// a whole one when more keys went than are left: see
    /// [`whole_is_smaller`].)
    pub fn plan(&mut self, completed: CheckpointId, entries: usize) -> (ChainPlan, Option<u32>) {
        let Some(at) = self.links.iter().rposition(|l| {
            !l.checkpoint.is_final() && l.checkpoint <= completed && l.written.get().is_some()
        }) else {
            return (ChainPlan::Whole, None);
        };
        self.links.drain(..at);
        let base = &self.links[0];
        let own = base
            .written
            .get()
            .map_or(0, |record| record.bytes().len() as u64);
        let mut sizes = base.sizes.clone();
        sizes.push(own);
        let mut before = base.before.clone();
        before.push(base.checkpoint);
        let read: u128 = sizes.iter().map(|&size| u128::from(size)).sum();
        let whole_now =
            u128::from(sizes[0]) * entries as u128 / u128::from(base.whole_entries.max(1));
        let plan = if before.len() >= MAX_CHAIN || read >= 2 * whole_now {
            ChainPlan::Whole
        } else {
            ChainPlan::Delta {
                since: base.epoch,
                before,
                sizes,
                whole_entries: base.whole_entries,
            }
        };
        (plan, Some(base.epoch))
    }

    /// Notes the snapshot of `checkpoint` of a state holding `entries`,
    /// taken at the map's `epoch` as `plan` said, whose record `written`
    /// names once complete.
    pub fn taken(
        &mut self,
        checkpoint: CheckpointId,
        epoch: u32,
        entries: usize,
        plan: ChainPlan,
        written: Arc<OnceLock<SharedBytes>>,
    ) {
        let (before, sizes, whole_entries) = match plan {
            ChainPlan::Whole => (Vec::new(), Vec::new(), entries as u64),
            ChainPlan::Delta {
                before,
                sizes,
                whole_entries,
                ..
            } => (before, sizes, whole_entries),
        };
        self.links.push(Link {
            checkpoint,
            epoch,
            before,
            sizes,
            whole_entries,
            written,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(chain: &SnapshotChain, checkpoint: u64, bytes: usize) {
        let link = chain
            .links
            .iter()
            .find(|l| l.checkpoint == CheckpointId::new(checkpoint))
            .unwrap();
        let owner: Arc<Vec<u8>> = Arc::new(vec![0; bytes]);
        let record = SharedBytes::new(owner, 0..bytes).unwrap();
        link.written.set(record).unwrap();
    }

    fn take(chain: &mut SnapshotChain, checkpoint: u64, completed: u64, epoch: u32) -> ChainPlan {
        take_of(chain, checkpoint, completed, epoch, 100)
    }

    fn take_of(
        chain: &mut SnapshotChain,
        checkpoint: u64,
        completed: u64,
        epoch: u32,
        entries: usize,
    ) -> ChainPlan {
        let (plan, _) = chain.plan(CheckpointId::new(completed), entries);
        chain.taken(
            CheckpointId::new(checkpoint),
            epoch,
            entries,
            plan.clone(),
            Arc::new(OnceLock::new()),
        );
        plan
    }

    #[test]
    fn a_delta_builds_only_on_a_complete_snapshot_and_the_chain_is_bounded() {
        let mut chain = SnapshotChain::default();
        // Nothing complete yet: whole.
        assert!(matches!(take(&mut chain, 1, 0, 1), ChainPlan::Whole));
        // Checkpoint 1 not complete yet (its record not mapped back): whole.
        assert!(matches!(take(&mut chain, 2, 1, 2), ChainPlan::Whole));
        complete(&chain, 1, 1000);
        match take(&mut chain, 3, 1, 3) {
            ChainPlan::Delta { since, before, .. } => {
                assert_eq!((since, before), (1, vec![CheckpointId::new(1)]));
            }
            ChainPlan::Whole => panic!("checkpoint 1 is complete"),
        }
        // 2 is whole and complete: the delta of 4 builds on it alone.
        complete(&chain, 2, 1000);
        complete(&chain, 3, 10);
        match take(&mut chain, 4, 3, 4) {
            ChainPlan::Delta { since, before, .. } => {
                assert_eq!(
                    (since, before),
                    (3, vec![CheckpointId::new(1), CheckpointId::new(3)])
                );
            }
            ChainPlan::Whole => panic!("3 is complete"),
        }
        // Deltas as large as the whole record: whole again.
        complete(&chain, 4, 990);
        assert!(matches!(take(&mut chain, 5, 4, 5), ChainPlan::Whole));
    }

    #[test]
    fn deltas_are_weighed_against_the_state_as_it_grew() {
        let mut chain = SnapshotChain::default();
        take_of(&mut chain, 1, 0, 1, 100);
        complete(&chain, 1, 1000);
        assert!(matches!(
            take_of(&mut chain, 2, 1, 2, 400),
            ChainPlan::Delta { .. }
        ));
        // Deltas larger than the first whole record, but the state is four
        // times what it was: a whole one now would be about 4000 bytes, and
        // a restore reads 1000 + 1500 + 2600 of them: less than twice that.
        complete(&chain, 2, 1500);
        assert!(matches!(
            take_of(&mut chain, 3, 2, 3, 400),
            ChainPlan::Delta { .. }
        ));
        complete(&chain, 3, 2600);
        assert!(matches!(
            take_of(&mut chain, 4, 3, 4, 400),
            ChainPlan::Delta { .. }
        ));
        // 1000 + 1500 + 2600 + 2900 = 8000: twice the state. Whole again.
        complete(&chain, 4, 2900);
        assert!(matches!(
            take_of(&mut chain, 5, 4, 5, 400),
            ChainPlan::Whole
        ));
    }

    #[test]
    fn a_chain_never_passes_its_bound() {
        let mut chain = SnapshotChain::default();
        take(&mut chain, 1, 0, 1);
        complete(&chain, 1, 1_000_000);
        let mut longest = 0;
        for checkpoint in 2..2 * MAX_CHAIN as u64 {
            let plan = take(&mut chain, checkpoint, checkpoint - 1, checkpoint as u32);
            if let ChainPlan::Delta { before, .. } = &plan {
                longest = longest.max(before.len() + 1);
            }
            complete(&chain, checkpoint, 1);
        }
        assert_eq!(longest, MAX_CHAIN);
    }
}
