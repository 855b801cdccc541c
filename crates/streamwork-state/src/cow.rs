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
//! ```
//! use streamwork_core::hash::stable_hash;
//! use streamwork_state::CowMap;
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
}

type Table<K, V> = HashTable<Slot<K, V>>;

/// One shard: owned by the map (written in place), or shared with a
/// checkpoint that still reads it (copied before it is written).
enum Shard<K, V> {
    Own(Table<K, V>),
    Shared(Arc<Table<K, V>>),
}

impl<K: Clone, V: Clone> Clone for Shard<K, V> {
    fn clone(&self) -> Self {
        match self {
            Shard::Own(table) => Shard::Own(table.clone()),
            Shard::Shared(table) => Shard::Shared(table.clone()),
        }
    }
}

impl<K, V> Shard<K, V> {
    #[inline]
    fn table(&self) -> &Table<K, V> {
        match self {
            Shard::Own(table) => table,
            Shard::Shared(table) => table,
        }
    }
}

/// A map from keys to values, cut into shards that a checkpoint freezes
/// and shares instead of copying; see the [module docs](self).
pub struct CowMap<K, V> {
    shards: Box<[Shard<K, V>]>,
    len: usize,
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
        }
    }
}

impl<K, V> fmt::Debug for CowMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self
            .shards
            .iter()
            .filter(|s| matches!(s, Shard::Shared(_)))
            .count();
        f.debug_struct("CowMap")
            .field("len", &self.len)
            .field("shared_shards", &shared)
            .finish()
    }
}

impl<K, V> CowMap<K, V> {
    /// An empty map (it allocates nothing until a key is inserted).
    pub fn new() -> Self {
        CowMap {
            shards: (0..SHARDS).map(|_| Shard::Own(HashTable::new())).collect(),
            len: 0,
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
            .table()
            .find(hash, |s| s.key == *key)
            .map(|s| &s.value)
    }

    /// Every key and value, shard by shard.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.table().iter().map(|s| (&s.key, &s.value)))
    }

    /// Freezes the map for a checkpoint: every shard is shared with the
    /// returned view, which reads the map as it is now for as long as it
    /// lives, from any thread. Costs a reference per shard.
    pub fn freeze(&mut self) -> FrozenMap<K, V> {
        let shards = self
            .shards
            .iter_mut()
            .map(|shard| {
                if let Shard::Own(table) = shard {
                    *shard = Shard::Shared(Arc::new(std::mem::take(table)));
                }
                match shard {
                    Shard::Shared(table) => table.clone(),
                    Shard::Own(_) => unreachable!("every shard was just shared"),
                }
            })
            .collect();
        FrozenMap {
            shards,
            len: self.len,
        }
    }
}

impl<K: Clone + Eq, V: Clone> CowMap<K, V> {
    /// Copies the shard of `hash` out of the checkpoint that shares it
    /// (taking it back without a copy if the checkpoint is done with it).
    #[cold]
    #[inline(never)]
    fn own(&mut self, hash: u64) {
        let shard = &mut self.shards[shard_of(hash)];
        if let Shard::Shared(table) = shard {
            let table = Arc::unwrap_or_clone(std::mem::take(table));
            *shard = Shard::Own(table);
        }
    }

    /// The shard of `hash`, owned: copied first if a checkpoint shares it.
    #[inline]
    fn table_mut(&mut self, hash: u64) -> &mut Table<K, V> {
        if matches!(self.shards[shard_of(hash)], Shard::Shared(_)) {
            self.own(hash);
        }
        match &mut self.shards[shard_of(hash)] {
            Shard::Own(table) => table,
            Shard::Shared(_) => unreachable!("`own` made the shard owned"),
        }
    }

    /// The value of `key`, to change it.
    #[inline]
    pub fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut V> {
        // Only a shard that holds the key is made owned.
        self.get(hash, key)?;
        self.table_mut(hash)
            .find_mut(hash, |s| s.key == *key)
            .map(|s| &mut s.value)
    }

    /// The value of `key`, inserting `make()` first if it has none.
    #[inline]
    pub fn get_or_insert_with(&mut self, hash: u64, key: &K, make: impl FnOnce() -> V) -> &mut V {
        if matches!(self.shards[shard_of(hash)], Shard::Shared(_)) {
            self.own(hash);
        }
        let Shard::Own(table) = &mut self.shards[shard_of(hash)] else {
            unreachable!("`own` made the shard owned")
        };
        match table.entry(hash, |s| s.key == *key, |s| s.hash) {
            Entry::Occupied(e) => &mut e.into_mut().value,
            Entry::Vacant(e) => {
                self.len += 1;
                let slot = Slot {
                    hash,
                    key: key.clone(),
                    value: make(),
                };
                &mut e.insert(slot).into_mut().value
            }
        }
    }

    /// Sets the value of `key`, returning the one it replaces.
    pub fn insert(&mut self, hash: u64, key: K, value: V) -> Option<V> {
        let table = self.table_mut(hash);
        let replaced = match table.entry(hash, |s| s.key == key, |s| s.hash) {
            Entry::Occupied(mut e) => Some(std::mem::replace(&mut e.get_mut().value, value)),
            Entry::Vacant(e) => {
                e.insert(Slot { hash, key, value });
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
        let value = entry.remove().0.value;
        self.len -= 1;
        Some(value)
    }

    /// Keeps the entries for which `keep` is true; a shard is copied only
    /// if something is removed from it.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        for i in 0..SHARDS {
            match &mut self.shards[i] {
                Shard::Own(table) => {
                    let before = table.len();
                    table.retain(|s| keep(&s.key, &s.value));
                    self.len -= before - table.len();
                }
                Shard::Shared(table) => {
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

    /// Removes every entry.
    pub fn clear(&mut self) {
        for shard in self.shards.iter_mut() {
            match shard {
                Shard::Own(table) => table.clear(),
                Shard::Shared(_) => *shard = Shard::Own(HashTable::new()),
            }
        }
        self.len = 0;
    }

    /// Takes every entry out, leaving the map empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + use<K, V> {
        let shards = std::mem::replace(self, CowMap::new()).shards;
        shards.into_iter().flat_map(|shard| {
            let table = match shard {
                Shard::Own(table) => table,
                Shard::Shared(table) => Arc::unwrap_or_clone(table),
            };
            table.into_iter().map(|s| (s.key, s.value))
        })
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
            .filter(|s| matches!(s, Shard::Own(_)))
            .count();
        assert_eq!(owned, 1, "only the written shard is copied");
        assert_eq!(frozen.iter().find(|(k, _)| **k == 7).unwrap().1, &7);
        assert_eq!(map.get(hash, &7), Some(&8));
    }
}
