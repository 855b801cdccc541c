//! Incremental keyed snapshots: what one instance's snapshot of a keyed map
//! ([`CowMap`](crate::CowMap)) builds on.
//!
//! A snapshot is *whole* (every entry, the layout a full snapshot always
//! had) or a *delta*: the entries written and the keys removed since the
//! newest snapshot of this run whose checkpoint is known to be complete
//! (its record mapped back from the log), never one that may not have
//! completed. A delta's snapshot names its *chain*, the records a restore
//! reads in order: a whole one, then deltas; the checkpoint keeps them
//! (`StateBytes::builds_on`). So a checkpoint writes what changed, not the
//! whole state, as Flink's changelog and RocksDB's incremental checkpoints
//! do.
//!
//! A chain is bounded: a snapshot is whole again once the deltas since the
//! last whole one add up to its size, or the chain would pass
//! [`MAX_CHAIN`] records, so that a restore reads at most about twice the
//! state, and retention frees what no chain reads.

use std::sync::{Arc, OnceLock};

use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::grouping::KeyGroups;
use streamwork_core::hash::stable_hash;
use streamwork_core::state::Key;
use streamwork_core::{CheckpointId, SharedBytes};

/// In a chain's list of checkpoints, the checkpoint the list is written in
/// (a final part stands for its instance in later checkpoints, whose ids it
/// cannot know).
pub(crate) const THIS_CHECKPOINT: u64 = 0;

/// The most records a chain has: one whole snapshot and deltas.
pub const MAX_CHAIN: usize = 8;

/// The inline part of a delta snapshot: the instance's metadata and the
/// checkpoints whose records a restore reads, whole one first.
#[derive(Archive, Serialize, Deserialize)]
pub struct ChainManifest<M> {
    /// Instance-wide metadata (event time reached, say).
    pub meta: M,
    /// The job's number of key groups when it was written.
    pub key_groups: u32,
    /// The checkpoints holding the chain's records, in order
    /// (`0`: the checkpoint the manifest is in).
    pub chain: Vec<u64>,
}

/// A delta record: per key group, the keys removed and the entries
/// written since the snapshot it follows.
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedDelta<K, V> {
    /// The job's number of key groups when it was written.
    pub key_groups: u32,
    /// What changed, by key group.
    pub groups: Vec<DeltaGroup<K, V>>,
}

/// What changed in one key group: removals apply before the entries (a key
/// removed and written again is written).
#[derive(Archive, Serialize, Deserialize)]
pub struct DeltaGroup<K, V> {
    /// The key group.
    pub group: u32,
    /// Keys removed.
    pub removed: Vec<K>,
    /// Keys written, with their values now.
    pub entries: Vec<(K, V)>,
}

/// `entries` and `removed` grouped by key group, in group order, without
/// empty groups.
pub(crate) fn group_delta<K: Key, V>(
    entries: Vec<(K, V)>,
    removed: Vec<K>,
    key_groups: KeyGroups,
) -> Vec<DeltaGroup<K, V>> {
    let mut groups: Vec<DeltaGroup<K, V>> = (0..key_groups.count())
        .map(|group| DeltaGroup {
            group,
            removed: Vec::new(),
            entries: Vec::new(),
        })
        .collect();
    for key in removed {
        groups[key_groups.key_group(stable_hash(&key)) as usize]
            .removed
            .push(key);
    }
    for (key, value) in entries {
        groups[key_groups.key_group(stable_hash(&key)) as usize]
            .entries
            .push((key, value));
    }
    groups.retain(|g| !g.removed.is_empty() || !g.entries.is_empty());
    groups
}

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
    /// Its record, once its checkpoint is complete.
    written: Arc<OnceLock<SharedBytes>>,
}

/// What the next snapshot writes.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Every entry.
    Whole,
    /// What changed since the freeze of `since`, after the records of
    /// `before`.
    Delta {
        since: u32,
        before: Vec<CheckpointId>,
        sizes: Vec<u64>,
    },
}

/// The snapshots one instance took in this run that a later one may build
/// on. A restored or new instance has none: its first snapshot is whole.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    links: Vec<Link>,
}

impl Chain {
    /// What the next snapshot writes, given the newest checkpoint known to
    /// be complete, and the epoch up to which the map may forget its
    /// removals (that of the snapshot it builds on: no later snapshot
    /// builds on an older one).
    pub(crate) fn plan(&mut self, completed: CheckpointId) -> (Plan, Option<u32>) {
        let Some(at) = self.links.iter().rposition(|l| {
            !l.checkpoint.is_final() && l.checkpoint <= completed && l.written.get().is_some()
        }) else {
            return (Plan::Whole, None);
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
        let deltas: u64 = sizes[1..].iter().sum();
        let plan = if before.len() >= MAX_CHAIN || deltas >= sizes[0] {
            Plan::Whole
        } else {
            Plan::Delta {
                since: base.epoch,
                before,
                sizes,
            }
        };
        (plan, Some(base.epoch))
    }

    /// Notes the snapshot of `checkpoint`, taken at the map's `epoch` as
    /// `plan` said, whose record `written` names once complete.
    pub(crate) fn taken(
        &mut self,
        checkpoint: CheckpointId,
        epoch: u32,
        plan: Plan,
        written: Arc<OnceLock<SharedBytes>>,
    ) {
        let (before, sizes) = match plan {
            Plan::Whole => (Vec::new(), Vec::new()),
            Plan::Delta { before, sizes, .. } => (before, sizes),
        };
        self.links.push(Link {
            checkpoint,
            epoch,
            before,
            sizes,
            written,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(chain: &Chain, checkpoint: u64, bytes: usize) {
        let link = chain
            .links
            .iter()
            .find(|l| l.checkpoint == CheckpointId::new(checkpoint))
            .unwrap();
        let owner: Arc<Vec<u8>> = Arc::new(vec![0; bytes]);
        let record = SharedBytes::new(owner, 0..bytes).unwrap();
        link.written.set(record).unwrap();
    }

    fn take(chain: &mut Chain, checkpoint: u64, completed: u64, epoch: u32) -> Plan {
        let (plan, _) = chain.plan(CheckpointId::new(completed));
        let shown = match &plan {
            Plan::Whole => Plan::Whole,
            Plan::Delta {
                since,
                before,
                sizes,
            } => Plan::Delta {
                since: *since,
                before: before.clone(),
                sizes: sizes.clone(),
            },
        };
        chain.taken(
            CheckpointId::new(checkpoint),
            epoch,
            plan,
            Arc::new(OnceLock::new()),
        );
        shown
    }

    #[test]
    fn a_delta_builds_only_on_a_complete_snapshot_and_the_chain_is_bounded() {
        let mut chain = Chain::default();
        // Nothing complete yet: whole.
        assert!(matches!(take(&mut chain, 1, 0, 1), Plan::Whole));
        // Checkpoint 1 not complete yet (its record not mapped back): whole.
        assert!(matches!(take(&mut chain, 2, 1, 2), Plan::Whole));
        complete(&chain, 1, 1000);
        match take(&mut chain, 3, 1, 3) {
            Plan::Delta { since, before, .. } => {
                assert_eq!((since, before), (1, vec![CheckpointId::new(1)]));
            }
            Plan::Whole => panic!("checkpoint 1 is complete"),
        }
        // 2 is whole and complete: the delta of 4 builds on it alone.
        complete(&chain, 2, 1000);
        complete(&chain, 3, 10);
        match take(&mut chain, 4, 3, 4) {
            Plan::Delta { since, before, .. } => {
                assert_eq!(
                    (since, before),
                    (3, vec![CheckpointId::new(1), CheckpointId::new(3)])
                );
            }
            Plan::Whole => panic!("3 is complete"),
        }
        // Deltas as large as the whole record: whole again.
        complete(&chain, 4, 990);
        assert!(matches!(take(&mut chain, 5, 4, 5), Plan::Whole));
    }

    #[test]
    fn a_chain_never_passes_its_bound() {
        let mut chain = Chain::default();
        take(&mut chain, 1, 0, 1);
        complete(&chain, 1, 1_000_000);
        let mut longest = 0;
        for checkpoint in 2..40u64 {
            let plan = take(&mut chain, checkpoint, checkpoint - 1, checkpoint as u32);
            if let Plan::Delta { before, .. } = &plan {
                longest = longest.max(before.len() + 1);
            }
            complete(&chain, checkpoint, 1);
        }
        assert_eq!(longest, MAX_CHAIN);
    }
}
