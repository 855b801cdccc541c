//! The one keyed table under the framework's state: [`KeyedTable`].
//!
//! `KeyedState` (and the keyed kinds over it), windows and joins keep their
//! per-key state in it. The table is cut into [`SHARDS`] hash tables by a
//! few bits of each key's hash. [`freeze`](KeyedTable::freeze) shares every
//! shard with a checkpoint (a pointer copy per shard: the task thread's
//! whole pause) and the checkpoint archives them off the task thread. The
//! first write to a shard after a freeze copies that shard alone (or takes
//! it back without a copy once the checkpoint let go of it), so copying is
//! spread over the records that follow, one shard at a time, and a shard
//! nobody writes is never copied. This is the copy-on-write of Flink's heap
//! state backend (`CopyOnWriteStateMap`), at the granularity of a shard
//! instead of an entry, so that a record's path needs no version check per
//! entry and no lock: a branch on whether its shard is owned. A value that
//! owns memory elsewhere (a `Vec`, a `String`, a map: its type needs
//! dropping) sits behind an `Arc`, so that copying its shard copies a
//! pointer, and the value itself is copied when it is next written
//! ([`Arc::make_mut`], the one atomic operation of such a write), per entry
//! as Flink does; a plain value (a count, a sum) sits in its slot and is
//! copied with it.
//!
//! A frozen view also tells what changed since an earlier freeze
//! ([`FrozenTable::changed_since`], [`FrozenTable::epochs`]): each entry
//! carries the epoch (the number of freezes before it) in which it was last
//! written, and once a table has been frozen it notes the keys it removes.
//! That is what an incremental checkpoint writes instead of the whole table.
//! Once frozen, the table also lists the hashes of the entries it writes,
//! epoch by epoch, so that a checkpoint that writes only what changed can
//! copy those entries at the freeze ([`KeyedTable::freeze_changes`]) from
//! the shards where they are few, up to a bound on the pause: such a shard
//! is not shared, so it is not copied afterwards, and nothing walks its
//! entries that did not change.
//!
//! Entries are found by a hash the caller gives (the stable hash the runtime
//! computed for the record, so that nothing is hashed twice). How the table
//! finds it again when it grows is its [`EntryHash`]: kept in the entry
//! (`u64`, any hash), or computed again from the key ([`StableHash`], 8
//! bytes an entry less, for callers that always give the key's stable hash).
//!
//! ```
//! use streamwork::core::hash::stable_hash;
//! use streamwork::core::table::KeyedTable;
//!
//! let mut counts: KeyedTable<String, u64> = KeyedTable::new();
//! let key = "a".to_string();
//! *counts.get_or_insert_with(stable_hash(&key), &key, || 0) += 1;
//! let frozen = counts.freeze();
//! *counts.get_or_insert_with(stable_hash(&key), &key, || 0) += 1;
//! // The checkpoint still reads the table as it was when frozen.
//! assert_eq!(frozen.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![1]);
//! assert_eq!(counts.get(stable_hash(&key), &key), Some(&2));
//! ```

use std::borrow::Cow;
use std::fmt;
use std::hash::Hash;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};

use crate::chain::{Epochs, FrozenEpochs};
use crate::hash::stable_hash;

/// How many shards a table has: the first write after a freeze copies one
/// of them, about `1 / SHARDS` of the state.
pub const SHARDS: usize = 128;

/// Which shard a hash falls in: bits that hashbrown uses neither for the
/// bucket (the low bits) nor for the control byte (the top seven), so that
/// the keys of one shard spread over its table as well as over a whole one.
#[inline]
fn shard_of(hash: u64) -> usize {
    ((hash >> 40) as usize) & (SHARDS - 1)
}

/// How a table finds an entry's hash again when it grows.
pub trait EntryHash<K>: Copy + Send + Sync + 'static {
    /// What an entry keeps of the hash it was given.
    fn keep(hash: u64) -> Self;
    /// The entry's hash again (named apart from `Hash::hash`, which `u64`
    /// has too).
    fn entry_hash(&self, key: &K) -> u64;
}

/// Any hash the caller gives, kept in the entry.
impl<K> EntryHash<K> for u64 {
    #[inline]
    fn keep(hash: u64) -> Self {
        hash
    }

    #[inline]
    fn entry_hash(&self, _: &K) -> u64 {
        *self
    }
}

/// The key's [stable hash](crate::hash::stable_hash), computed again: for a
/// table whose callers always give it (`KeyedState`, through `CurrentKey`).
#[derive(Copy, Clone, Debug, Default)]
pub struct StableHash;

impl<K: Hash> EntryHash<K> for StableHash {
    #[inline]
    fn keep(_: u64) -> Self {
        StableHash
    }

    #[inline]
    fn entry_hash(&self, key: &K) -> u64 {
        stable_hash(key)
    }
}

#[derive(Clone)]
struct Slot<K, V, H> {
    hash: H,
    key: K,
    value: Stored<V>,
    /// The epoch in which the entry was last written (or handed out to be).
    version: u32,
}

type Table<K, V, H> = HashTable<Slot<K, V, H>>;

/// A value in its slot: in place, or, for a value that owns memory
/// elsewhere (its type needs dropping: a `Vec`, a `String`, a map), behind
/// an [`Arc`], so that copying a shard a checkpoint still reads copies a
/// pointer per value, and a value is copied when it is next written
/// ([`Arc::make_mut`]), if ever. Which of the two is fixed by the type
/// ([`Stored::SHARED`]), so a plain value (a count, a sum) takes no more
/// room than itself: no tag says which, as an enum's would.
struct Stored<V>(Repr<V>);

/// The value or its `Arc`: which one [`Stored::SHARED`] says.
union Repr<V> {
    inline: ManuallyDrop<V>,
    shared: ManuallyDrop<Arc<V>>,
}

// SAFETY of every `unsafe` block below: the field of `Repr` in use is
// `shared` if `Stored::<V>::SHARED` and `inline` otherwise, a constant of
// the type. `Stored::new` and `Stored::clone` are the only places a
// `Repr` is made, and each writes that field; no code writes the other, so
// each read below reads the field that was written, and `drop` and
// `into_inner` each take the value out once.
#[allow(unsafe_code)]
impl<V> Stored<V> {
    /// Whether values of this type sit behind an `Arc`.
    const SHARED: bool = std::mem::needs_drop::<V>();

    #[inline]
    fn new(value: V) -> Self {
        if Self::SHARED {
            Stored(Repr {
                shared: ManuallyDrop::new(Arc::new(value)),
            })
        } else {
            Stored(Repr {
                inline: ManuallyDrop::new(value),
            })
        }
    }

    #[inline]
    fn get(&self) -> &V {
        // SAFETY: see above.
        unsafe {
            if Self::SHARED {
                &self.0.shared
            } else {
                &self.0.inline
            }
        }
    }

    /// The value to change: copied first if a frozen view shares it.
    #[inline]
    fn get_mut(&mut self) -> &mut V
    where
        V: Clone,
    {
        // SAFETY: see above.
        unsafe {
            if Self::SHARED {
                Arc::make_mut(&mut self.0.shared)
            } else {
                &mut self.0.inline
            }
        }
    }

    /// Puts `value` in place of the value, which it returns (copied if a
    /// frozen view shares it); a value of its own is overwritten where it
    /// is, with no allocation.
    #[inline]
    fn replace(&mut self, value: V) -> V
    where
        V: Clone,
    {
        if Self::SHARED {
            // SAFETY: see above.
            let shared = unsafe { &mut self.0.shared };
            match Arc::get_mut(shared) {
                Some(own) => std::mem::replace(own, value),
                None => Arc::unwrap_or_clone(std::mem::replace(&mut **shared, Arc::new(value))),
            }
        } else {
            // SAFETY: see above.
            std::mem::replace(unsafe { &mut self.0.inline }, value)
        }
    }

    /// The value, copied if a frozen view shares it.
    #[inline]
    fn into_inner(self) -> V
    where
        V: Clone,
    {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: see above; `this` is never dropped, so the field is
        // taken out once.
        unsafe {
            if Self::SHARED {
                Arc::unwrap_or_clone(ManuallyDrop::take(&mut this.0.shared))
            } else {
                ManuallyDrop::take(&mut this.0.inline)
            }
        }
    }
}

#[allow(unsafe_code)]
impl<V> Drop for Stored<V> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: see above; dropped once, here.
        unsafe {
            if Self::SHARED {
                ManuallyDrop::drop(&mut self.0.shared);
            } else {
                ManuallyDrop::drop(&mut self.0.inline);
            }
        }
    }
}

impl<V: Clone> Clone for Stored<V> {
    /// A shared value's `Arc` is cloned (a pointer), a plain one copied.
    #[inline]
    fn clone(&self) -> Self {
        #[allow(unsafe_code)]
        // SAFETY: see above.
        let repr = unsafe {
            if Self::SHARED {
                Repr {
                    shared: self.0.shared.clone(),
                }
            } else {
                Repr {
                    inline: self.0.inline.clone(),
                }
            }
        };
        Stored(repr)
    }
}

/// Copies a table (a monomorphised `Clone`, kept where keys and values are
/// not known to be clonable).
type CopyTable<K, V, H> = fn(&Table<K, V, H>) -> Table<K, V, H>;

/// The hashes of the entries written, epoch by epoch, once the table has
/// been frozen: an entry's hash is listed in the epoch it is first written
/// in (its version changes to it), so that the entries written since an
/// earlier freeze are found by their hashes, without walking the table.
///
/// A list can name an entry twice (a key removed and written again in one
/// epoch, two keys of one hash): [`KeyedTable::freeze_changes`] then copies
/// it twice, with the same value, which a restore writes twice.
#[derive(Clone, Debug, Default)]
struct Written {
    /// Whether the current epoch's writes are listed: once the table has
    /// been frozen, unless the list outgrew [`limit`](Self::limit).
    listing: bool,
    /// The current epoch's hashes.
    now: Vec<u64>,
    /// Earlier epochs' hashes, oldest first.
    closed: Vec<(u32, Vec<u64>)>,
    /// The first epoch whose writes are all listed (`u32::MAX`: none).
    from: u32,
    /// How many hashes the current epoch may list: past it, walking the
    /// table is cheaper than finding the entries one by one.
    limit: usize,
}

/// Hashes listed at most, beyond twice the entries of the table.
const WRITTEN_SLACK: usize = 1 << 16;

/// The most entries [`KeyedTable::freeze_changes`] copies: each is a probe
/// and a copy (an `Arc`'s count, for a value that owns memory) at a random
/// place in memory, 100-450 ns on this project's machine, so the pause stays
/// within about 17 ms; past it, the shards are shared (a pause of pointer
/// copies) and copied as they are next written.
pub const COPIED_AT_MOST: usize = 1 << 15;

impl Written {
    /// Lists `hash`, an entry first written in the current epoch.
    #[inline(always)]
    fn note(&mut self, hash: u64) {
        if self.listing {
            self.now.push(hash);
            if self.now.len() > self.limit {
                self.overflow();
            }
        }
    }

    /// Stamps an entry written in `epoch`, listing it on its first write of
    /// the epoch: a key written again and again costs a compare.
    #[inline(always)]
    fn stamp(&mut self, version: &mut u32, epoch: u32, hash: u64) {
        if *version != epoch {
            *version = epoch;
            self.note(hash);
        }
    }

    /// The current epoch wrote more than is worth listing: nothing since
    /// an epoch before the next is listed.
    #[cold]
    fn overflow(&mut self) {
        self.listing = false;
        self.now = Vec::new();
        self.closed = Vec::new();
        self.from = u32::MAX;
    }

    /// Closes the list of `epoch` at a freeze of a table of `len` entries,
    /// and lists the next epoch's writes (dropping the earlier lists if
    /// they hold more hashes than finding them would save).
    fn freeze(&mut self, epoch: u32, len: usize) {
        let limit = len.saturating_mul(2).saturating_add(WRITTEN_SLACK);
        if self.listing {
            // The next epoch likely writes about as many.
            let next = Vec::with_capacity(self.now.len());
            let now = std::mem::replace(&mut self.now, next);
            self.closed.push((epoch, now));
        }
        let held: usize = self.closed.iter().map(|(_, hashes)| hashes.len()).sum();
        if held > limit {
            self.closed = Vec::new();
        }
        if !self.listing || self.closed.is_empty() {
            self.from = epoch.saturating_add(1);
        }
        self.listing = true;
        self.limit = limit;
    }

    /// Forgets the lists up to `epoch`'s.
    fn forget_through(&mut self, epoch: u32) {
        self.closed.retain(|(at, _)| *at > epoch);
        if self.from != u32::MAX {
            self.from = self.from.max(epoch.saturating_add(1));
        }
    }

    /// Whether every entry written after the freeze of `since` is listed.
    fn covers(&self, since: u32) -> bool {
        self.listing && self.from != u32::MAX && since.saturating_add(1) >= self.from
    }

    /// Everything was removed: no list names a live entry.
    fn cleared(&mut self) {
        self.now.clear();
        self.closed.clear();
    }
}

/// One shard: its own table, or one shared with a checkpoint (then `owned`
/// is empty).
#[derive(Clone)]
struct Shard<K, V, H> {
    owned: Table<K, V, H>,
    frozen: Option<Arc<Table<K, V, H>>>,
}

impl<K, V, H> Shard<K, V, H> {
    #[inline]
    fn table(&self) -> &Table<K, V, H> {
        self.frozen.as_deref().unwrap_or(&self.owned)
    }

    /// Shares the shard with a checkpoint (a pointer copy; `owned` is
    /// empty until the next write takes it back).
    fn share(&mut self) -> Arc<Table<K, V, H>> {
        let owned = std::mem::take(&mut self.owned);
        self.frozen.get_or_insert_with(|| Arc::new(owned)).clone()
    }
}

/// A map from keys to values, cut into shards that a checkpoint freezes
/// and shares instead of copying. `H`: how an entry's hash is found again
/// ([`EntryHash`]).
pub struct KeyedTable<K, V, H = u64> {
    /// No tables until the first write; then [`SHARDS`] of them.
    shards: Vec<Shard<K, V, H>>,
    len: usize,
    /// How a table a checkpoint still reads is copied (set by `freeze`,
    /// which alone requires clonable keys and values).
    copy: Option<CopyTable<K, V, H>>,
    /// The epoch entries are stamped with, and the keys removed.
    epochs: Epochs<K>,
    /// The hashes of the entries written in each epoch.
    written: Written,
}

impl<K, V, H> Default for KeyedTable<K, V, H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone, V: Clone, H: Clone> Clone for KeyedTable<K, V, H> {
    fn clone(&self) -> Self {
        KeyedTable {
            shards: self.shards.clone(),
            len: self.len,
            copy: self.copy,
            epochs: self.epochs.clone(),
            written: self.written.clone(),
        }
    }
}

impl<K, V, H> fmt::Debug for KeyedTable<K, V, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.shards.iter().filter(|s| s.frozen.is_some()).count();
        f.debug_struct("KeyedTable")
            .field("len", &self.len)
            .field("epoch", &self.epochs.now())
            .field("shared_shards", &shared)
            .finish()
    }
}

impl<K, V, H> KeyedTable<K, V, H> {
    /// An empty table (it allocates nothing until a key is inserted).
    pub fn new() -> Self {
        KeyedTable {
            shards: Vec::new(),
            len: 0,
            copy: None,
            epochs: Epochs::default(),
            written: Written::default(),
        }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The shard holding `hash`, for reading.
    #[inline]
    fn table(&self, hash: u64) -> Option<&Table<K, V, H>> {
        self.shards.get(shard_of(hash)).map(Shard::table)
    }

    /// The value of `key`, whose hash is `hash`.
    #[inline]
    pub fn get(&self, hash: u64, key: &K) -> Option<&V>
    where
        K: Eq,
    {
        self.table(hash)?
            .find(hash, |s| s.key == *key)
            .map(|s| s.value.get())
    }

    /// Every key and value, shard by shard.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.table().iter().map(|s| (&s.key, s.value.get())))
    }

    /// Freezes the table for a checkpoint: every shard is shared with the
    /// returned view, which reads the table as it is now for as long as it
    /// lives, from any thread, and can tell what changed since an earlier
    /// freeze whose removals are not forgotten. Costs a reference per
    /// shard; writes after it are of the next epoch.
    pub fn freeze(&mut self) -> FrozenTable<K, V, H>
    where
        K: Clone,
        V: Clone,
        H: Clone,
    {
        self.copy = Some(HashTable::clone);
        self.written.freeze(self.epochs.now(), self.len);
        let shards = self.shards.iter_mut().map(Shard::share).collect();
        FrozenTable {
            shards,
            len: self.len,
            epochs: self.epochs.freeze(),
        }
    }

    /// Forgets the keys removed up to the freeze of `epoch`: no view will
    /// be asked what changed since an epoch before it.
    pub fn forget_removed_through(&mut self, epoch: u32) {
        self.epochs.forget_through(epoch);
        self.written.forget_through(epoch);
    }

    /// Whether a snapshot building on the freeze of `since` should be whole
    /// instead (see [`FrozenEpochs::whole_since`]), asked before freezing.
    pub fn whole_since(&self, since: u32) -> bool {
        self.epochs.whole_since(since, self.len)
    }

    /// Freezes the table for a checkpoint that writes what changed since
    /// the freeze of `since`. A shard whose entries written since are
    /// fewer than half of its own has them copied (a value that owns
    /// memory, its `Arc`), found by the hashes the table listed, and is
    /// not shared: nothing copies it afterwards, and nothing walks its
    /// unchanged entries. The others are shared, as [`freeze`](Self::freeze)
    /// shares them, and so are those past [`COPIED_AT_MOST`] copies, which
    /// bounds the pause. `None` when the writes since are not all listed
    /// (the table was first frozen later, or an epoch wrote more than
    /// twice its entries): then [`freeze`](Self::freeze).
    pub fn freeze_changes(&mut self, since: u32) -> Option<FrozenChanges<K, V, H>>
    where
        K: Clone,
        V: Clone,
        H: EntryHash<K>,
    {
        if !self.written.covers(since) {
            return None;
        }
        let epoch = self.epochs.now();
        let lists = || {
            (self.written.closed.iter())
                .filter(move |(at, _)| *at > since)
                .map(|(at, hashes)| (*at, hashes.as_slice()))
                .chain([(epoch, self.written.now.as_slice())])
        };
        // Which shards copy their changes: those that changed in fewer
        // than half their entries (copying the rest of a shard costs about
        // what copying the shard does), while the pause allows.
        let mut listed = [0usize; SHARDS];
        for (_, hashes) in lists() {
            for &hash in hashes {
                listed[shard_of(hash)] += 1;
            }
        }
        let mut copied = [false; SHARDS];
        let mut left = COPIED_AT_MOST;
        for (i, shard) in self.shards.iter().enumerate() {
            let changed = listed[i];
            if changed <= left && changed.saturating_mul(2) <= shard.table().len() {
                copied[i] = true;
                left -= changed;
            }
        }
        let mut entries = Vec::with_capacity(COPIED_AT_MOST - left);
        for (at, hashes) in lists() {
            for &hash in hashes.iter().filter(|&&hash| copied[shard_of(hash)]) {
                let Some(table) = self.table(hash) else {
                    continue;
                };
                // An entry is listed in every epoch it was written in, and
                // taken from the list of the last.
                entries.extend(
                    table
                        .iter_hash(hash)
                        .filter(|s| s.version == at && s.hash.entry_hash(&s.key) == hash)
                        .map(|s| (s.key.clone(), s.value.clone())),
                );
            }
        }
        // The other shards are shared, as a whole freeze shares them.
        self.copy = Some(HashTable::clone);
        let shared = (self.shards.iter_mut().enumerate())
            .filter(|(i, _)| !copied[*i])
            .map(|(_, shard)| shard.share())
            .collect();
        self.written.freeze(epoch, self.len);
        Some(FrozenChanges {
            entries,
            shared,
            since,
            len: self.len,
            epochs: self.epochs.freeze(),
        })
    }
}

impl<K: Clone + Eq, V: Clone, H: EntryHash<K>> KeyedTable<K, V, H> {
    /// The shard of `hash`, for writing: made on the first write, taken
    /// back from a checkpoint that froze it (copied if it still reads it).
    #[inline]
    fn table_mut(&mut self, hash: u64) -> &mut Table<K, V, H> {
        self.parts(hash).0
    }

    /// [`table_mut`](Self::table_mut), with the count of keys and the
    /// lists of written hashes beside it.
    #[inline]
    fn parts(&mut self, hash: u64) -> (&mut Table<K, V, H>, &mut usize, &mut Written) {
        if self.shards.is_empty() {
            self.make_tables();
        }
        let copy = self.copy;
        let shard = &mut self.shards[shard_of(hash)];
        if let Some(frozen) = shard.frozen.take() {
            shard.owned = thaw(frozen, copy);
        }
        (&mut shard.owned, &mut self.len, &mut self.written)
    }

    #[cold]
    fn make_tables(&mut self) {
        self.shards = (0..SHARDS)
            .map(|_| Shard {
                owned: HashTable::new(),
                frozen: None,
            })
            .collect();
    }

    /// The value of `key`, to change it (which stamps it written).
    #[inline]
    pub fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut V> {
        // Only a shard that holds the key is taken back from a checkpoint.
        self.get(hash, key)?;
        let epoch = self.epochs.now();
        let (table, _, written) = self.parts(hash);
        table.find_mut(hash, |s| s.key == *key).map(|s| {
            written.stamp(&mut s.version, epoch, hash);
            s.value.get_mut()
        })
    }

    /// The value of `key`, inserting `make()` first if it has none. The key
    /// is cloned only on insertion.
    #[inline]
    pub fn get_or_insert_with(&mut self, hash: u64, key: &K, make: impl FnOnce() -> V) -> &mut V {
        let epoch = self.epochs.now();
        let (table, len, written) = self.parts(hash);
        match table.entry(hash, |s| s.key == *key, |s| s.hash.entry_hash(&s.key)) {
            Entry::Occupied(e) => {
                let slot = e.into_mut();
                written.stamp(&mut slot.version, epoch, hash);
                slot.value.get_mut()
            }
            Entry::Vacant(e) => {
                *len += 1;
                written.note(hash);
                let slot = Slot {
                    hash: H::keep(hash),
                    key: key.clone(),
                    value: Stored::new(make()),
                    version: epoch,
                };
                e.insert(slot).into_mut().value.get_mut()
            }
        }
    }

    /// Sets the value of `key`, returning the one it replaces.
    pub fn insert(&mut self, hash: u64, key: K, value: V) -> Option<V> {
        self.put(hash, Cow::Owned(key), value)
    }

    /// Sets the value of `key`, returning the one it replaces; the key is
    /// cloned only if it is new (a write to a key already there costs one
    /// probe and no copy).
    pub fn set(&mut self, hash: u64, key: &K, value: V) -> Option<V> {
        self.put(hash, Cow::Borrowed(key), value)
    }

    /// [`insert`](Self::insert) and [`set`](Self::set): one probe, the key
    /// owned only when it is stored.
    #[inline]
    fn put(&mut self, hash: u64, key: Cow<'_, K>, value: V) -> Option<V> {
        let version = self.epochs.now();
        let (table, len, written) = self.parts(hash);
        match table.entry(hash, |s| s.key == *key, |s| s.hash.entry_hash(&s.key)) {
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                written.stamp(&mut slot.version, version, hash);
                Some(slot.value.replace(value))
            }
            Entry::Vacant(e) => {
                *len += 1;
                written.note(hash);
                e.insert(Slot {
                    hash: H::keep(hash),
                    key: key.into_owned(),
                    value: Stored::new(value),
                    version,
                });
                None
            }
        }
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
        Some(slot.value.into_inner())
    }

    /// Keeps the entries for which `keep` is true; a shard is copied only
    /// if something is removed from it.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        for i in 0..self.shards.len() {
            let shard = &mut self.shards[i];
            match &shard.frozen {
                None => {
                    let table = &mut shard.owned;
                    let before = table.len();
                    let epochs = &mut self.epochs;
                    table.retain(|s| {
                        let kept = keep(&s.key, s.value.get());
                        if !kept && epochs.tracks() {
                            epochs.removed(s.key.clone());
                        }
                        kept
                    });
                    self.len -= before - table.len();
                }
                Some(table) => {
                    let gone: Vec<(u64, K)> = table
                        .iter()
                        .filter(|s| !keep(&s.key, s.value.get()))
                        .map(|s| (s.hash.entry_hash(&s.key), s.key.clone()))
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
        for i in 0..self.shards.len() {
            let picked: Vec<(u64, K)> = self.shards[i]
                .table()
                .iter()
                .filter(|s| select(&s.key, s.value.get()))
                .map(|s| (s.hash.entry_hash(&s.key), s.key.clone()))
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
            shard.frozen = None;
            shard.owned.clear();
        }
        self.len = 0;
        self.epochs.cleared();
        self.written.cleared();
    }

    /// Takes every entry out, leaving the table empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + use<K, V, H> {
        let copy = self.copy;
        let shards = std::mem::take(&mut self.shards);
        self.len = 0;
        self.epochs.cleared();
        self.written.cleared();
        shards.into_iter().flat_map(move |shard| {
            let table = match shard.frozen {
                Some(frozen) => thaw(frozen, copy),
                None => shard.owned,
            };
            table.into_iter().map(|s| (s.key, s.value.into_inner()))
        })
    }
}

/// A table back from a checkpoint: itself if the checkpoint let go of it,
/// else a copy.
#[cold]
fn thaw<K, V, H>(frozen: Arc<Table<K, V, H>>, copy: Option<CopyTable<K, V, H>>) -> Table<K, V, H> {
    match Arc::try_unwrap(frozen) {
        Ok(table) => table,
        // Only `freeze` shares a table, and it sets `copy` first.
        Err(shared) => copy.map_or_else(HashTable::new, |copy| copy(&shared)),
    }
}

impl<K: Clone + Eq, V: Clone, H: EntryHash<K>> Extend<(u64, K, V)> for KeyedTable<K, V, H> {
    fn extend<I: IntoIterator<Item = (u64, K, V)>>(&mut self, entries: I) {
        for (hash, key, value) in entries {
            self.insert(hash, key, value);
        }
    }
}

/// A [`KeyedTable`] as it was when frozen: what a checkpoint reads, from
/// any thread, while the table goes on.
pub struct FrozenTable<K, V, H = u64> {
    shards: Vec<Arc<Table<K, V, H>>>,
    len: usize,
    epochs: FrozenEpochs<K>,
}

impl<K, V, H> FrozenTable<K, V, H> {
    /// Keys in it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|t| t.iter().map(|s| (&s.key, s.value.get())))
    }

    /// Its epoch and the removals since earlier ones.
    pub fn epochs(&self) -> &FrozenEpochs<K> {
        &self.epochs
    }

    /// The entries written after the freeze of `epoch` (a value handed out
    /// to be changed counts as written).
    pub fn changed_since(&self, epoch: u32) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(move |t| {
            t.iter()
                .filter(move |s| s.version > epoch)
                .map(|s| (&s.key, s.value.get()))
        })
    }
}

/// The entries of a [`KeyedTable`] written since an earlier freeze, copied
/// at a freeze ([`KeyedTable::freeze_changes`]): what an incremental
/// checkpoint reads, from any thread, while the table goes on.
pub struct FrozenChanges<K, V, H = u64> {
    /// The changes of the shards that copied theirs.
    entries: Vec<(K, Stored<V>)>,
    /// The other shards, shared: their entries written since are found by
    /// their epoch.
    shared: Vec<Arc<Table<K, V, H>>>,
    since: u32,
    len: usize,
    epochs: FrozenEpochs<K>,
}

impl<K, V, H> FrozenChanges<K, V, H> {
    /// Keys the table held when frozen.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table was empty when frozen.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The epoch of the freeze the changes are since.
    pub fn since(&self) -> u32 {
        self.since
    }

    /// Its epoch and the removals since earlier ones.
    pub fn epochs(&self) -> &FrozenEpochs<K> {
        &self.epochs
    }

    /// The entries written since the freeze of [`since`](Self::since), in
    /// no particular order (an entry may come twice, with the same value).
    pub fn changed(&self) -> impl Iterator<Item = (&K, &V)> {
        let since = self.since;
        let copied = self.entries.iter().map(|(k, v)| (k, v.get()));
        let shared = self.shared.iter().flat_map(move |t| {
            t.iter()
                .filter(move |s| s.version > since)
                .map(|s| (&s.key, s.value.get()))
        });
        copied.chain(shared)
    }

    /// How many entries were copied, and how many shards shared.
    pub fn copied_and_shared(&self) -> (usize, usize) {
        (self.entries.len(), self.shared.len())
    }
}

impl<K, V, H> fmt::Debug for FrozenChanges<K, V, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenChanges")
            .field("since", &self.since)
            .field("copied", &self.entries.len())
            .field("shared_shards", &self.shared.len())
            .finish()
    }
}

impl<K, V, H> fmt::Debug for FrozenTable<K, V, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenTable")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

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
        let mut table: KeyedTable<u64, u64> = KeyedTable::new();
        for k in 0..10_000u64 {
            table.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k, k);
        }
        let frozen = table.freeze();
        let hash = 7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        *table.get_mut(hash, &7).unwrap() += 1;
        let owned = table.shards.iter().filter(|s| s.frozen.is_none()).count();
        assert_eq!(owned, 1, "only the written shard is copied");
        assert_eq!(frozen.iter().find(|(k, _)| **k == 7).unwrap().1, &7);
        assert_eq!(table.get(hash, &7), Some(&8));
    }

    /// A key that counts its clones (compared and hashed by its number).
    #[derive(Debug)]
    struct Counted(u64, std::rc::Rc<std::cell::Cell<u32>>);

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    impl Eq for Counted {}

    impl Hash for Counted {
        fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
            self.0.hash(state);
        }
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.1.set(self.1.get() + 1);
            Counted(self.0, self.1.clone())
        }
    }

    #[test]
    fn setting_a_key_already_there_does_not_clone_it() {
        let clones = std::rc::Rc::new(std::cell::Cell::new(0));
        let key = Counted(7, clones.clone());
        let mut table: KeyedTable<Counted, u32, StableHash> = KeyedTable::new();
        assert_eq!(table.set(stable_hash(&key), &key, 1), None);
        assert_eq!(clones.get(), 1, "a new key is stored");
        assert_eq!(table.set(stable_hash(&key), &key, 2), Some(1));
        assert_eq!(clones.get(), 1, "an existing key is not cloned again");
        assert_eq!(table.len(), 1);
    }

    /// Values that own memory are shared, not copied, when a shard a
    /// checkpoint still reads is copied: the first write after a freeze
    /// copies the shard's pointers and the one value written.
    #[test]
    fn a_write_after_a_freeze_copies_the_value_written_alone() {
        let clones = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut table: KeyedTable<u64, Counted, StableHash> = KeyedTable::new();
        for k in 0..1_000u64 {
            table.insert(stable_hash(&k), k, Counted(k, clones.clone()));
        }
        let frozen = table.freeze();
        let hash = stable_hash(&7u64);
        table.get_mut(hash, &7).unwrap().0 = 70;
        assert_eq!(
            clones.get(),
            1,
            "one value copied, however many its shard holds"
        );
        table.get_mut(hash, &7).unwrap().0 = 71;
        assert_eq!(clones.get(), 1, "a value copied once is the table's own");
        assert_eq!(frozen.iter().find(|(k, _)| **k == 7).unwrap().1.0, 7);
        assert_eq!(table.get(hash, &7).map(|v| v.0), Some(71));
        // Taken out while the checkpoint reads it: a copy; after: itself.
        assert_eq!(table.remove(stable_hash(&8u64), &8).map(|v| v.0), Some(8));
        assert_eq!(clones.get(), 2);
        drop(frozen);
        assert_eq!(table.remove(stable_hash(&9u64), &9).map(|v| v.0), Some(9));
        assert_eq!(clones.get(), 2);
        // Set while its own: overwritten in place, no copy.
        let ten = stable_hash(&10u64);
        let before: *const Counted = table.get(ten, &10).unwrap();
        table.set(ten, &10, Counted(100, clones.clone()));
        assert!(std::ptr::eq(before, table.get(ten, &10).unwrap()));
        assert_eq!(clones.get(), 2);
        assert_eq!(table.drain().count(), 998);
    }

    #[test]
    fn a_plain_value_takes_no_more_room_than_itself() {
        assert_eq!(std::mem::size_of::<Stored<u64>>(), 8);
        assert_eq!(std::mem::size_of::<Stored<(u32, u32)>>(), 8);
        assert_eq!(std::mem::size_of::<Stored<Vec<u64>>>(), 24);
        assert!(matches!(
            (
                Stored::new(1u64).get(),
                Stored::new(vec![2u64]).get().as_slice()
            ),
            (1, [2])
        ));
        const { assert!(!Stored::<u64>::SHARED && Stored::<Vec<u64>>::SHARED) };
    }

    /// What a table holds, as a model.
    fn contents(table: &KeyedTable<u64, Vec<u8>, StableHash>) -> BTreeMap<u64, Vec<u8>> {
        table.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8),
        Append(u8),
        Remove(u8),
        Clear,
        /// Freezes whole.
        Freeze,
        /// Freezes what changed since the freeze this many back, if it
        /// was not forgotten.
        Changes(usize),
        /// Forgets the removals through the freeze this many back.
        Forget(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..48, any::<u8>()).prop_map(|(k, v)| Op::Set(k, v)),
            6 => (0u8..48).prop_map(Op::Append),
            3 => (0u8..48).prop_map(Op::Remove),
            1 => Just(Op::Clear),
            1 => Just(Op::Freeze),
            3 => (0usize..3).prop_map(Op::Changes),
            1 => (0usize..3).prop_map(Op::Forget),
        ]
    }

    proptest! {
        /// The state at a freeze, with the removals and the entries
        /// `freeze_changes` copied since, is the state now: whatever was
        /// written, removed, cleared or forgotten in between.
        #[test]
        fn the_changes_copied_since_a_freeze_make_the_state_from_it(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            let mut table: KeyedTable<u64, Vec<u8>, StableHash> = KeyedTable::new();
            // Keys the operations do not touch, so that what they change
            // is mostly worth copying.
            for k in 1_000..1_400u64 {
                table.set(stable_hash(&k), &k, vec![0]);
            }
            // Each freeze's epoch and the table then.
            let mut freezes: Vec<(u32, BTreeMap<u64, Vec<u8>>)> = Vec::new();
            let mut forgotten = 0;
            for op in ops {
                match op {
                    Op::Set(k, v) => {
                        let k = u64::from(k);
                        table.set(stable_hash(&k), &k, vec![v]);
                    }
                    Op::Append(k) => {
                        let k = u64::from(k);
                        table.get_or_insert_with(stable_hash(&k), &k, Vec::new).push(1);
                    }
                    Op::Remove(k) => {
                        let k = u64::from(k);
                        table.remove(stable_hash(&k), &k);
                    }
                    Op::Clear => table.clear(),
                    Op::Freeze => {
                        let frozen = table.freeze();
                        freezes.push((frozen.epochs().epoch(), contents(&table)));
                    }
                    Op::Changes(back) => {
                        let Some(at) = freezes.len().checked_sub(back + 1) else { continue };
                        let (since, then) = freezes[at].clone();
                        if since < forgotten || table.whole_since(since) {
                            continue;
                        }
                        let now = contents(&table);
                        let mut rebuilt = then;
                        // Copied from the shards that changed little,
                        // found in the others, shared.
                        let Some(changes) = table.freeze_changes(since) else {
                            return Err(TestCaseError::fail(format!("the writes since {since} are listed")));
                        };
                        for key in changes.epochs().removed_since(since) {
                            rebuilt.remove(key);
                        }
                        for (key, value) in changes.changed() {
                            rebuilt.insert(*key, value.clone());
                        }
                        prop_assert_eq!(&rebuilt, &now);
                        freezes.push((changes.epochs().epoch(), now));
                    }
                    Op::Forget(back) => {
                        let Some(at) = freezes.len().checked_sub(back + 1) else { continue };
                        let epoch = freezes[at].0;
                        table.forget_removed_through(epoch);
                        forgotten = forgotten.max(epoch);
                    }
                }
            }
        }
    }

    fn set(table: &mut KeyedTable<u64, u64, StableHash>, k: u64) {
        table.set(stable_hash(&k), &k, k);
    }

    #[test]
    fn changes_are_copied_only_once_the_table_was_frozen_and_while_listing_is_worth_it() {
        let mut table: KeyedTable<u64, u64, StableHash> = KeyedTable::new();
        for k in 0..1_000 {
            set(&mut table, k);
        }
        assert!(
            table.freeze_changes(0).is_none(),
            "never frozen: nothing listed"
        );
        let first = table.freeze().epochs().epoch();
        set(&mut table, 2);
        let shared = |table: &KeyedTable<u64, u64, StableHash>| {
            table.shards.iter().filter(|s| s.frozen.is_some()).count()
        };
        let before = shared(&table);
        let changes = table.freeze_changes(first).unwrap();
        assert_eq!(changes.changed().collect::<Vec<_>>(), [(&2, &2)]);
        assert_eq!(changes.copied_and_shared(), (1, 0));
        assert_eq!(changes.len(), 1_000);
        assert_eq!(shared(&table), before, "no shard is shared for the changes");
        let second = changes.epochs().epoch();
        // An epoch that writes more than twice the table, and more than the
        // slack, is not listed: its changes are found by walking the table.
        let past = 2 * 1_000 + WRITTEN_SLACK + 1;
        for k in 10_000..10_000 + past as u64 {
            set(&mut table, k);
        }
        assert!(table.freeze_changes(second).is_none());
        let third = table.freeze();
        assert_eq!(third.changed_since(second).count(), past);
        // Listed again from the next epoch on.
        set(&mut table, 3);
        let changes = table.freeze_changes(third.epochs().epoch()).unwrap();
        assert_eq!(changes.changed().collect::<Vec<_>>(), [(&3, &3)]);
    }

    #[test]
    fn shards_that_changed_much_or_past_the_bound_are_shared() {
        let mut table: KeyedTable<u64, u64, StableHash> = KeyedTable::new();
        for k in 0..100_000 {
            set(&mut table, k);
        }
        let first = table.freeze().epochs().epoch();
        // Every key written: every shard is shared.
        for k in 0..100_000 {
            set(&mut table, k);
        }
        let changes = table.freeze_changes(first).unwrap();
        assert_eq!(changes.copied_and_shared(), (0, SHARDS));
        assert_eq!(changes.changed().count(), 100_000);
        let second = changes.epochs().epoch();
        drop(changes);
        // 40% of the keys: each shard is worth copying, until the bound.
        for k in (0..100_000).filter(|k| k % 5 < 2) {
            set(&mut table, k);
        }
        let changes = table.freeze_changes(second).unwrap();
        let (copied, shared) = changes.copied_and_shared();
        assert!(
            copied <= COPIED_AT_MOST && copied > COPIED_AT_MOST / 2,
            "{copied}"
        );
        assert!(shared > 0 && shared < SHARDS, "{shared}");
        let mut keys: Vec<u64> = changes.changed().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        assert_eq!(keys, (0..100_000).filter(|k| k % 5 < 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_table_that_hashes_its_keys_again_grows_and_finds_them() {
        let mut table: KeyedTable<String, usize, StableHash> = KeyedTable::new();
        let keys: Vec<String> = (0..5_000).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            table.insert(stable_hash(k), k.clone(), i);
        }
        let frozen = table.freeze();
        table.retain(|_, v| v % 2 == 0);
        assert_eq!(table.len(), 2_500);
        assert_eq!(frozen.len(), 5_000);
        assert_eq!(table.get(stable_hash(&keys[10]), &keys[10]), Some(&10));
        assert_eq!(table.get(stable_hash(&keys[11]), &keys[11]), None);
        // The next freeze tells what the first did not see: the removals.
        let again = table.freeze();
        let since = frozen.epochs().epoch();
        assert_eq!(again.epochs().removed_since(since).count(), 2_500);
        assert_eq!(again.changed_since(since).count(), 0);
    }
}
