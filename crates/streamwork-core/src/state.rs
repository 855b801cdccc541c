//! Keyed state: per-key values that only keyed operators can reach.
//!
//! [`KeyedState`] is read and written through a [`CurrentKey`], and only the
//! runtime creates a `CurrentKey`, handing it to operators whose input is a
//! keyed stream. Keyed state on an unkeyed stream therefore does not compile,
//! where Flink would throw at run time.

use std::hash::Hash;
use std::ops::Deref;

use crate::hash::stable_hash;
use crate::table::{FrozenChanges, FrozenTable, KeyedTable, StableHash};

/// Bound on key types: hashable with the stable hash, comparable, clonable,
/// sendable, and printable for diagnostics.
pub trait Key: Hash + Eq + Clone + Send + Sync + std::fmt::Debug + 'static {}
impl<K: Hash + Eq + Clone + Send + Sync + std::fmt::Debug + 'static> Key for K {}

/// The key of the record being processed by a keyed operator, with its
/// stable hash (computed once per record, reused by every state access).
///
/// It cannot be constructed outside Streamwork: holding one proves that the
/// code runs inside a keyed operator, on a stream partitioned by this key.
#[derive(Debug)]
pub struct CurrentKey<'a, K> {
    key: &'a K,
    hash: u64,
}

impl<K> Clone for CurrentKey<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for CurrentKey<'_, K> {}

impl<'a, K> CurrentKey<'a, K> {
    pub(crate) fn new(key: &'a K, hash: u64) -> Self {
        CurrentKey { key, hash }
    }

    /// A current key made by hand, for unit tests and benchmarks of keyed
    /// operators and state. It proves nothing: code that calls this can reach
    /// keyed state outside a keyed operator, so production code never should.
    pub fn for_testing(key: &'a K) -> Self
    where
        K: std::hash::Hash,
    {
        CurrentKey::new(key, stable_hash(key))
    }

    /// The key itself.
    pub fn get(self) -> &'a K {
        self.key
    }

    /// The key's [stable hash](crate::hash).
    pub fn hash(self) -> u64 {
        self.hash
    }
}

impl<K> Deref for CurrentKey<'_, K> {
    type Target = K;
    fn deref(&self) -> &K {
        self.key
    }
}

/// A value per key, scoped by the current key of a keyed operator.
///
/// Kept in the framework's one keyed table ([`KeyedTable`]): SwissTables
/// (`hashbrown::HashTable`) probed with the hash the current key carries,
/// one hash computation per record, one probe per access. The keys are
/// spread over 128 tables by bits of that hash, so that a checkpoint can
/// [freeze](KeyedState::freeze) the state by sharing the tables, not
/// copying them: the first write to a table afterwards copies that table
/// alone (none if the checkpoint already let go of it), and of the values
/// that own memory (lists, maps, strings), which sit behind an `Arc`, only
/// the pointers: such a value is copied when it is next written. Values
/// are therefore `Clone` to be written.
///
/// Every entry carries the epoch (freezes so far) it was last written in,
/// and once frozen the state notes the keys it removes, so that a frozen
/// view tells what changed since an earlier one: what an incremental
/// checkpoint writes ([`FrozenTable::changed_since`]).
///
/// ```
/// use streamwork::core::state::KeyedState;
/// let counts: KeyedState<String, u64> = KeyedState::new();
/// assert!(counts.is_empty());
/// ```
#[derive(Clone)]
pub struct KeyedState<K, V> {
    /// Entries hashed again from their keys when a table grows: a current
    /// key always carries its key's stable hash.
    table: KeyedTable<K, V, StableHash>,
    /// The snapshots of this run an incremental one may build on.
    chain: crate::chain::SnapshotChain,
}

/// A state's tables as a checkpoint froze them: read while the state goes
/// on changing (see [`KeyedState::freeze`]).
pub type FrozenKeyed<K, V> = FrozenTable<K, V, StableHash>;

/// What changed in a state since an earlier freeze, copied or shared at a
/// freeze (see [`KeyedState::freeze_changes`]).
pub type FrozenKeyedChanges<K, V> = FrozenChanges<K, V, StableHash>;

impl<K: Key, V: std::fmt::Debug> std::fmt::Debug for KeyedState<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Key, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key, V> KeyedState<K, V> {
    /// Empty state.
    pub fn new() -> Self {
        KeyedState {
            table: KeyedTable::new(),
            chain: crate::chain::SnapshotChain::default(),
        }
    }

    /// The value of the current key.
    #[inline]
    pub fn get(&self, key: CurrentKey<'_, K>) -> Option<&V> {
        self.table.get(key.hash, key.key)
    }

    /// The value of the current key, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V>
    where
        V: Clone,
    {
        self.table.get_mut(key.hash, key.key)
    }

    /// The value of the current key, inserting `V::default()` first if absent.
    /// The key is cloned only on insertion.
    #[inline]
    pub fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default + Clone,
    {
        self.table.get_or_insert_with(key.hash, key.key, V::default)
    }

    /// Sets the value of the current key, returning the previous one.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, value: V) -> Option<V>
    where
        V: Clone,
    {
        self.table.set(key.hash, key.key, value)
    }

    /// Removes the value of the current key.
    pub fn remove(&mut self, key: CurrentKey<'_, K>) -> Option<V>
    where
        V: Clone,
    {
        self.table.remove(key.hash, key.key)
    }

    /// The value of `key`, a key this instance holds already (one a timer
    /// registered, or one met iterating): for event-time callbacks, which
    /// have no current key. Hashes `key` as the engine does.
    ///
    /// ```
    /// use streamwork::core::state::{CurrentKey, KeyedState};
    /// let mut bids: KeyedState<u64, u64> = KeyedState::new();
    /// bids.insert(CurrentKey::for_testing(&7), 3);
    /// *bids.get_mut_held(&7).unwrap() += 1;
    /// assert_eq!(bids.remove_held(&7), Some(4));
    /// ```
    pub fn get_mut_held(&mut self, key: &K) -> Option<&mut V>
    where
        V: Clone,
    {
        self.get_mut(CurrentKey::new(key, stable_hash(key)))
    }

    /// Removes the value of `key`, a key this instance holds already (see
    /// [`get_mut_held`](Self::get_mut_held)).
    pub fn remove_held(&mut self, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.remove(CurrentKey::new(key, stable_hash(key)))
    }

    /// Forgets the keys removed up to the freeze of `epoch`: no view will
    /// be asked what changed since an epoch before it.
    pub fn forget_removed_through(&mut self, epoch: u32) {
        self.table.forget_removed_through(epoch);
    }

    /// The snapshots of this run that an incremental snapshot of this
    /// state may build on (the state crate's checkpoint of a keyed field
    /// keeps them here, with the state they describe).
    pub fn snapshot_chain(&mut self) -> &mut crate::chain::SnapshotChain {
        &mut self.chain
    }

    /// Number of keys with a value.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Every key and value, in no particular order (for end-of-stream output).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.table.iter()
    }

    /// Takes every key and value out, leaving the state empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_
    where
        V: Clone,
    {
        self.table.drain()
    }

    /// Shares every table with a checkpoint, for it to read while the
    /// state goes on: a pause of 128 pointer copies, whatever the size of
    /// the state. The first write to a table afterwards copies that table
    /// (only the keys in it), unless the checkpoint has let go of it.
    ///
    /// ```
    /// use streamwork::core::state::{CurrentKey, KeyedState};
    /// let mut counts: KeyedState<String, u64> = KeyedState::new();
    /// let key = "a".to_string();
    /// *counts.get_or_default(CurrentKey::for_testing(&key)) += 1;
    /// let frozen = counts.freeze();
    /// *counts.get_or_default(CurrentKey::for_testing(&key)) += 1;
    /// assert_eq!(frozen.iter().next(), Some((&key, &1)));
    /// assert_eq!(counts.get(CurrentKey::for_testing(&key)), Some(&2));
    /// ```
    pub fn freeze(&mut self) -> FrozenKeyed<K, V>
    where
        V: Clone,
    {
        self.table.freeze()
    }

    /// Freezes the state for a checkpoint that writes what changed since
    /// the freeze of `since`: a copy of the entries written since (their
    /// `Arc` for values that own memory) from the tables where they are
    /// few, the other tables shared; the pause is bounded by
    /// [`COPIED_AT_MOST`](crate::table::COPIED_AT_MOST) copies. `None` when
    /// the state cannot tell them without walking every entry (then
    /// [`freeze`](Self::freeze)). See [`KeyedTable::freeze_changes`].
    ///
    /// ```
    /// use streamwork::core::state::{CurrentKey, KeyedState};
    /// let mut counts: KeyedState<String, u64> = KeyedState::new();
    /// let (a, b) = ("a".to_string(), "b".to_string());
    /// *counts.get_or_default(CurrentKey::for_testing(&a)) += 1;
    /// *counts.get_or_default(CurrentKey::for_testing(&b)) += 1;
    /// let first = counts.freeze().epochs().epoch();
    /// *counts.get_or_default(CurrentKey::for_testing(&b)) += 1;
    /// let changes = counts.freeze_changes(first).unwrap();
    /// assert_eq!(changes.changed().collect::<Vec<_>>(), [(&b, &2)]);
    /// ```
    pub fn freeze_changes(&mut self, since: u32) -> Option<FrozenKeyedChanges<K, V>>
    where
        V: Clone,
    {
        self.table.freeze_changes(since)
    }

    /// Whether a snapshot building on the freeze of `since` should be
    /// whole instead: the state was cleared since, or more keys went than
    /// are left.
    pub fn whole_since(&self, since: u32) -> bool {
        self.table.whole_since(since)
    }
}

/// Builds state from keys and values, as a restore from a checkpoint does
/// (a later value for the same key replaces an earlier one). Building state
/// does not reach any key's value: that still takes a [`CurrentKey`].
impl<K: Key, V: Clone> Extend<(K, V)> for KeyedState<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        self.table
            .extend(entries.into_iter().map(|(k, v)| (stable_hash(&k), k, v)));
    }
}

impl<K: Key, V: Clone> FromIterator<(K, V)> for KeyedState<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut state = KeyedState::new();
        state.extend(entries);
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &String) -> CurrentKey<'_, String> {
        CurrentKey::new(k, stable_hash(k))
    }

    #[test]
    fn values_are_scoped_by_key() {
        let mut state = KeyedState::<String, u64>::new();
        let (a, b) = ("a".to_string(), "b".to_string());
        *state.get_or_default(key(&a)) += 2;
        *state.get_or_default(key(&a)) += 3;
        assert_eq!(state.get(key(&a)), Some(&5));
        assert_eq!(state.get(key(&b)), None);
        assert_eq!(state.insert(key(&b), 7), None);
        assert_eq!(state.insert(key(&b), 8), Some(7));
        assert_eq!(state.len(), 2);
        assert_eq!(state.remove(key(&a)), Some(5));
        assert_eq!(state.remove(key(&a)), None);
        let mut rest: Vec<_> = state.drain().collect();
        rest.sort();
        assert_eq!(rest, vec![("b".to_string(), 8)]);
        assert!(state.is_empty());
    }

    #[test]
    fn a_frozen_state_reads_as_it_was_while_the_state_changes() {
        let mut state = KeyedState::<String, u64>::new();
        let keys: Vec<String> = (0..1_000).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            state.insert(key(k), i as u64);
        }
        let frozen = state.freeze();
        for k in &keys[..500] {
            *state.get_or_default(key(k)) += 1_000;
        }
        for k in &keys[500..600] {
            state.remove(key(k));
        }
        let mut seen: Vec<(String, u64)> = frozen.iter().map(|(k, v)| (k.clone(), *v)).collect();
        seen.sort();
        let mut expected: Vec<(String, u64)> = keys.iter().cloned().zip(0..).collect();
        expected.sort();
        assert_eq!(seen, expected);
        assert_eq!(state.len(), 900);
        assert_eq!(state.get(key(&keys[0])), Some(&1_000));
        assert_eq!(state.get(key(&keys[550])), None);
        // Once the checkpoint lets go, the next freeze shares the tables as
        // they are now.
        drop(frozen);
        let again = state.freeze();
        assert_eq!(again.len(), 900);
        *state.get_or_default(key(&keys[1])) += 1;
        assert_eq!(state.get(key(&keys[1])), Some(&1_002));
        assert_eq!(
            again.iter().find(|(k, _)| **k == keys[1]).map(|(_, v)| *v),
            Some(1_001)
        );
        assert_eq!(state.drain().count(), 900);
        assert!(state.is_empty());
    }
}
