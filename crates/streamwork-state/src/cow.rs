//! A keyed map whose snapshots are frozen, not copied: [`CowMap`].
//!
//! The map is cut into [`SHARDS`] hash tables by a few bits of each key's
//! hash. [`freeze`](CowMap::freeze) turns every shard into a shared,
//! read-only table and hands the checkpoint a reference to each (a pointer
//! copy per shard: the task thread's whole pause); the checkpoint archives
//! them off the task thread. The first write to a shard after a freeze
//! copies that shard alone, so the copying is spread over the records that
//! follow, one shard at a time, and a shard nobody writes is never copied.
//! This is the copy-on-write of Flink's heap state backend
//! (`CopyOnWriteStateMap`), at the granularity of a shard instead of an
//! entry, so that the path of a record needs no version check per entry,
//! no atomic operation and no lock: a branch on whether its shard is owned.
//!
//! Window and join operators keep their per-key state in it; entries carry
//! the key's hash (the stable hash the runtime computed for the record), so
//! that nothing is hashed twice.
//!
//! A frozen view also tells what changed since an earlier freeze
//! ([`FrozenMap::changed_since`], [`FrozenMap::epochs`]): each entry
//! carries the epoch (the number of freezes before it) in which it was last
//! written, and once a map has been frozen it notes the keys it removes.
//! That is what an incremental checkpoint writes instead of the whole map
//! (`KeyedCheckpoint::snapshot_map`).
//!
//! ```
//! use streamwork::core::hash::stable_hash;
//! use streamwork::state::CowMap;
//!
//! let mut counts: CowMap<String, u64> = CowMap::new();
//! let key = "a".to_string();
//! *counts.get_or_insert_with(stable_hash(&key), &key, || 0) += 1;
//! let frozen = counts.freeze();
//! *counts.get_or_insert_with(stable_hash(&key), &key, || 0) += 1;
//! // The checkpoint still reads the map as it was when frozen.
//! assert_eq!(frozen.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![1]);
//! assert_eq!(counts.get(stable_hash(&key), &key), Some(&2));
//! ```

use std::fmt;
use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};
use streamwork_core::chain::{Epochs, FrozenEpochs, stamp};

/// How many shards a [`CowMap`] has: the first write after a freeze copies
/// one of them, about `1 / SHARDS` of the state.
pub const SHARDS: usize = 128;

/// Which shard a hash falls in: bits that hashbrown uses neither for the
/// bucket (the low bits) nor for the control byte (the top seven), so that
/// the keys of one shard spread over its table as well as over a whole one.
#[inline]
fn shard_of(hash: u64) -> usize {
    ((hash >> 40) as usize) & (SHARDS - 1)
}

#[derive(Clone)]
struct Slot<K, V> {
    hash: u64,
    key: K,
    value: V,
    /// The epoch in which the entry was last written (or handed out to be).
    version: u32,
}

type Table<K, V> = HashTable<Slot<K, V>>;

/// A value owned in place, or shared with a checkpoint that still reads it
/// (and copied before it is written): one shard of a [`CowMap`], one
/// window of a join.
///
/// ```
/// use streamwork::state::CowCell;
/// let mut rows = CowCell::new(vec![1, 2]);
/// let frozen = rows.freeze();
/// rows.get_mut().push(3);
/// assert_eq!(*frozen, vec![1, 2]);
/// assert_eq!(*rows.get(), vec![1, 2, 3]);
/// ```
pub enum CowCell<T> {
    /// Owned: written in place.
    Own(T),
    /// Shared with a checkpoint: copied before it is written.
    Shared(Arc<T>),
}

impl<T: Default> Default for CowCell<T> {
    fn default() -> Self {
        CowCell::Own(T::default())
    }
}

impl<T: Clone> Clone for CowCell<T> {
    fn clone(&self) -> Self {
        match self {
            CowCell::Own(value) => CowCell::Own(value.clone()),
            CowCell::Shared(value) => CowCell::Shared(value.clone()),
        }
    }
}

impl<T> CowCell<T> {
    /// `value`, owned.
    pub fn new(value: T) -> Self {
        CowCell::Own(value)
    }

    /// The value.
    #[inline]
    pub fn get(&self) -> &T {
        match self {
            CowCell::Own(value) => value,
            CowCell::Shared(value) => value,
        }
    }

    /// Shares the value with a checkpoint: what it reads for as long as it
    /// keeps the returned reference, however the cell changes.
    pub fn freeze(&mut self) -> Arc<T>
    where
        T: Default,
    {
        if let CowCell::Own(value) = self {
            *self = CowCell::Shared(Arc::new(std::mem::take(value)));
        }
        match self {
            CowCell::Shared(value) => value.clone(),
            CowCell::Own(_) => unreachable!("the value was just shared"),
        }
    }

    /// The value, owned again (taken back without a copy if no checkpoint
    /// still reads it).
    pub fn into_inner(self) -> T
    where
        T: Clone,
    {
        match self {
            CowCell::Own(value) => value,
            CowCell::Shared(value) => Arc::unwrap_or_clone(value),
        }
    }
}

impl<T: Clone + Default> CowCell<T> {
    /// The value, to change it: copied first if a checkpoint shares it
    /// (taken back without a copy if the checkpoint is done with it).
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        if let CowCell::Shared(_) = self {
            self.own();
        }
        match self {
            CowCell::Own(value) => value,
            CowCell::Shared(_) => unreachable!("`own` made the value owned"),
        }
    }

    #[cold]
    #[inline(never)]
    fn own(&mut self) {
        if let CowCell::Shared(value) = self {
            *self = CowCell::Own(Arc::unwrap_or_clone(std::mem::take(value)));
        }
    }
}

type Shard<K, V> = CowCell<Table<K, V>>;

/// A map from keys to values, cut into shards that a checkpoint freezes
/// and shares instead of copying.
pub struct CowMap<K, V> {
    shards: Box<[Shard<K, V>]>,
    len: usize,
    /// The epoch entries are stamped with, and the keys removed.
    epochs: Epochs<K>,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone, V: Clone> Clone for CowMap<K, V> {
    fn clone(&self) -> Self {
        CowMap {
            shards: self.shards.clone(),
            len: self.len,
            epochs: self.epochs.clone(),
        }
    }
}

impl<K, V> fmt::Debug for CowMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self
            .shards
            .iter()
            .filter(|s| matches!(s, CowCell::Shared(_)))
            .count();
        f.debug_struct("CowMap")
            .field("len", &self.len)
            .field("epoch", &self.epochs.now())
            .field("shared_shards", &shared)
            .finish()
    }
}

impl<K, V> CowMap<K, V> {
    /// An empty map (it allocates nothing until a key is inserted).
    pub fn new() -> Self {
        CowMap {
            shards: (0..SHARDS)
                .map(|_| CowCell::new(HashTable::new()))
                .collect(),
            len: 0,
            epochs: Epochs::default(),
        }
    }

    /// Keys in the map.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value of `key`, whose hash is `hash`.
    #[inline]
    pub fn get(&self, hash: u64, key: &K) -> Option<&V>
    where
        K: Eq,
    {
        self.shards[shard_of(hash)]
            .get()
            .find(hash, |s| s.key == *key)
            .map(|s| &s.value)
    }

    /// Every key and value, shard by shard.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.get().iter().map(|s| (&s.key, &s.value)))
    }

    /// Freezes the map for a checkpoint: every shard is shared with the
    /// returned view, which reads the map as it is now for as long as it
    /// lives, from any thread, and can tell what changed since an earlier
    /// freeze whose removals are not forgotten. Costs a reference per
    /// shard; writes after it are of the next epoch.
    pub fn freeze(&mut self) -> FrozenMap<K, V> {
        let shards = self.shards.iter_mut().map(CowCell::freeze).collect();
        FrozenMap {
            shards,
            len: self.len,
            epochs: self.epochs.freeze(),
        }
    }

    /// Forgets the keys removed up to the freeze of `epoch`: no view will
    /// be asked what changed since an epoch before it.
    pub fn forget_removed_through(&mut self, epoch: u32) {
        self.epochs.forget_through(epoch);
    }
}

impl<K: Clone + Eq, V: Clone> CowMap<K, V> {
    /// The shard of `hash`, owned: copied first if a checkpoint shares it.
    #[inline]
    fn table_mut(&mut self, hash: u64) -> &mut Table<K, V> {
        self.shards[shard_of(hash)].get_mut()
    }

    /// The value of `key`, to change it.
    #[inline]
    pub fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut V> {
        // Only a shard that holds the key is made owned.
        self.get(hash, key)?;
        let epoch = self.epochs.now();
        self.table_mut(hash)
            .find_mut(hash, |s| s.key == *key)
            .map(|s| {
                stamp(&mut s.version, epoch);
                &mut s.value
            })
    }

    /// The value of `key`, inserting `make()` first if it has none.
    #[inline]
    pub fn get_or_insert_with(&mut self, hash: u64, key: &K, make: impl FnOnce() -> V) -> &mut V {
        let epoch = self.epochs.now();
        let table = self.shards[shard_of(hash)].get_mut();
        match table.entry(hash, |s| s.key == *key, |s| s.hash) {
            Entry::Occupied(e) => {
                let slot = e.into_mut();
                stamp(&mut slot.version, epoch);
                &mut slot.value
            }
            Entry::Vacant(e) => {
                self.len += 1;
                let slot = Slot {
                    hash,
                    key: key.clone(),
                    value: make(),
                    version: epoch,
                };
                &mut e.insert(slot).into_mut().value
            }
        }
    }

    /// Sets the value of `key`, returning the one it replaces.
    pub fn insert(&mut self, hash: u64, key: K, value: V) -> Option<V> {
        let version = self.epochs.now();
        let table = self.table_mut(hash);
        let replaced = match table.entry(hash, |s| s.key == key, |s| s.hash) {
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                stamp(&mut slot.version, version);
                Some(std::mem::replace(&mut slot.value, value))
            }
            Entry::Vacant(e) => {
                e.insert(Slot {
                    hash,
                    key,
                    value,
                    version,
                });
                None
            }
        };
        self.len += usize::from(replaced.is_none());
        replaced
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, hash: u64, key: &K) -> Option<V> {
        self.get(hash, key)?;
        let table = self.table_mut(hash);
        let Ok(entry) = table.find_entry(hash, |s| s.key == *key) else {
            return None;
        };
        let slot = entry.remove().0;
        self.len -= 1;
        self.epochs.removed(slot.key);
        Some(slot.value)
    }

    /// Keeps the entries for which `keep` is true; a shard is copied only
    /// if something is removed from it.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        for i in 0..SHARDS {
            match &mut self.shards[i] {
                CowCell::Own(table) => {
                    let before = table.len();
                    let epochs = &mut self.epochs;
                    table.retain(|s| {
                        let kept = keep(&s.key, &s.value);
                        if !kept && epochs.tracks() {
                            epochs.removed(s.key.clone());
                        }
                        kept
                    });
                    self.len -= before - table.len();
                }
                CowCell::Shared(table) => {
                    let gone: Vec<(u64, K)> = table
                        .iter()
                        .filter(|s| !keep(&s.key, &s.value))
                        .map(|s| (s.hash, s.key.clone()))
                        .collect();
                    for (hash, key) in gone {
                        self.remove(hash, &key);
                    }
                }
            }
        }
    }

    /// Changes the entries `select` picks (read-only, so that a shard
    /// nothing is picked from is not copied): `update` changes each, and
    /// the entry is removed if it returns false.
    pub fn update_where(
        &mut self,
        mut select: impl FnMut(&K, &V) -> bool,
        mut update: impl FnMut(&K, &mut V) -> bool,
    ) {
        for i in 0..SHARDS {
            let picked: Vec<(u64, K)> = self.shards[i]
                .get()
                .iter()
                .filter(|s| select(&s.key, &s.value))
                .map(|s| (s.hash, s.key.clone()))
                .collect();
            for (hash, key) in picked {
                let keep = self.get_mut(hash, &key).is_some_and(|v| update(&key, v));
                if !keep {
                    self.remove(hash, &key);
                }
            }
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        for shard in self.shards.iter_mut() {
            match shard {
                CowCell::Own(table) => table.clear(),
                CowCell::Shared(_) => *shard = CowCell::new(HashTable::new()),
            }
        }
        self.len = 0;
        self.epochs.cleared();
    }

    /// Takes every entry out, leaving the map empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + use<K, V> {
        let empty = (0..SHARDS)
            .map(|_| CowCell::new(HashTable::new()))
            .collect();
        let shards = std::mem::replace(&mut self.shards, empty);
        self.len = 0;
        self.epochs.cleared();
        shards
            .into_iter()
            .flat_map(|shard| shard.into_inner().into_iter().map(|s| (s.key, s.value)))
    }
}

impl<K: Clone + Eq, V: Clone> Extend<(u64, K, V)> for CowMap<K, V> {
    fn extend<I: IntoIterator<Item = (u64, K, V)>>(&mut self, entries: I) {
        for (hash, key, value) in entries {
            self.insert(hash, key, value);
        }
    }
}

/// A [`CowMap`] as it was when frozen: what a checkpoint reads, from any
/// thread, while the map goes on.
pub struct FrozenMap<K, V> {
    shards: Vec<Arc<Table<K, V>>>,
    len: usize,
    epochs: FrozenEpochs<K>,
}

impl<K, V> FrozenMap<K, V> {
    /// Keys in it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key and value.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|t| t.iter().map(|s| (&s.key, &s.value)))
    }

    /// Its epoch and the removals since earlier ones.
    pub fn epochs(&self) -> &FrozenEpochs<K> {
        &self.epochs
    }

    /// The entries written after the freeze of `epoch` (with some written
    /// to the same value: a change is noted when a value is handed out to
    /// be changed).
    pub fn changed_since(&self, epoch: u32) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(move |t| {
            t.iter()
                .filter(move |s| s.version > epoch)
                .map(|s| (&s.key, &s.value))
        })
    }
}

impl<K, V> fmt::Debug for FrozenMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenMap").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_bits_of_a_shard_are_not_the_bucket_or_control_bits() {
        for shard in 0..SHARDS as u64 {
            assert_eq!(shard_of(shard << 40), shard as usize);
        }
        // Low bits pick the bucket, the top seven the control byte.
        assert_eq!(shard_of(0xFE00_0000_0000_0000 | 0xFF_FFFF_FFFF), 0);
    }

    #[test]
    fn a_shard_nobody_writes_is_never_copied() {
        let mut map: CowMap<u64, u64> = CowMap::new();
        for k in 0..10_000u64 {
            map.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k, k);
        }
        let frozen = map.freeze();
        let hash = 7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        *map.get_mut(hash, &7).unwrap() += 1;
        let owned = map
            .shards
            .iter()
            .filter(|s| matches!(s, CowCell::Own(_)))
            .count();
        assert_eq!(owned, 1, "only the written shard is copied");
        assert_eq!(frozen.iter().find(|(k, _)| **k == 7).unwrap().1, &7);
        assert_eq!(map.get(hash, &7), Some(&8));
    }
}
