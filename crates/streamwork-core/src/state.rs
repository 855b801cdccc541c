//! Keyed state: per-key values that only keyed operators can reach.
//!
//! [`KeyedState`] is read and written through a [`CurrentKey`], and only the
//! runtime creates a `CurrentKey`, handing it to operators whose input is a
//! keyed stream. Keyed state on an unkeyed stream therefore does not compile,
//! where Flink would throw at run time.

use std::hash::Hash;
use std::ops::Deref;

use hashbrown::hash_table::{Entry, HashTable};

use crate::hash::stable_hash;

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
/// Backed by a SwissTable (`hashbrown::HashTable`) probed with the hash the
/// current key carries: one hash computation per record, one probe per access.
///
/// ```
/// use streamwork::core::state::KeyedState;
/// let counts: KeyedState<String, u64> = KeyedState::new();
/// assert!(counts.is_empty());
/// ```
#[derive(Clone)]
pub struct KeyedState<K, V> {
    table: HashTable<(K, V)>,
}

impl<K: Key, V: std::fmt::Debug> std::fmt::Debug for KeyedState<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.table.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Key, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

fn rehash<K: Key, V>(entry: &(K, V)) -> u64 {
    stable_hash(&entry.0)
}

impl<K: Key, V> KeyedState<K, V> {
    /// Empty state.
    pub fn new() -> Self {
        KeyedState {
            table: HashTable::new(),
        }
    }

    /// The value of the current key.
    #[inline]
    pub fn get(&self, key: CurrentKey<'_, K>) -> Option<&V> {
        self.table
            .find(key.hash, |(k, _)| k == key.key)
            .map(|(_, v)| v)
    }

    /// The value of the current key, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V> {
        self.table
            .find_mut(key.hash, |(k, _)| k == key.key)
            .map(|(_, v)| v)
    }

    /// The value of the current key, inserting `V::default()` first if absent.
    /// The key is cloned only on insertion.
    #[inline]
    pub fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default,
    {
        match self.table.entry(key.hash, |(k, _)| k == key.key, rehash) {
            Entry::Occupied(entry) => &mut entry.into_mut().1,
            Entry::Vacant(entry) => &mut entry.insert((key.key.clone(), V::default())).into_mut().1,
        }
    }

    /// Sets the value of the current key, returning the previous one.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, value: V) -> Option<V> {
        match self.table.entry(key.hash, |(k, _)| k == key.key, rehash) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(&mut entry.get_mut().1, value)),
            Entry::Vacant(entry) => {
                entry.insert((key.key.clone(), value));
                None
            }
        }
    }

    /// Removes the value of the current key.
    pub fn remove(&mut self, key: CurrentKey<'_, K>) -> Option<V> {
        match self.table.find_entry(key.hash, |(k, _)| k == key.key) {
            Ok(entry) => Some(entry.remove().0.1),
            Err(_) => None,
        }
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
        self.table.iter().map(|(k, v)| (k, v))
    }

    /// Takes every key and value out, leaving the state empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.table.drain()
    }
}

/// Builds state from keys and values, as a restore from a checkpoint does
/// (a later value for the same key replaces an earlier one). Building state
/// does not reach any key's value: that still takes a [`CurrentKey`].
impl<K: Key, V> Extend<(K, V)> for KeyedState<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        for (k, v) in entries {
            let hash = stable_hash(&k);
            match self.table.entry(hash, |(key, _)| *key == k, rehash) {
                Entry::Occupied(mut entry) => entry.get_mut().1 = v,
                Entry::Vacant(entry) => {
                    entry.insert((k, v));
                }
            }
        }
    }
}

impl<K: Key, V> FromIterator<(K, V)> for KeyedState<K, V> {
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
}
