//! Keyed state: per-key values that only keyed operators can reach.
//!
//! [`KeyedState`] is read and written through a [`CurrentKey`], and only the
//! runtime creates a `CurrentKey`, handing it to operators whose input is a
//! keyed stream. Keyed state on an unkeyed stream therefore does not compile,
//! where Flink would throw at run time.

use std::hash::Hash;
use std::ops::Deref;

use crate::hash::FastHashMap;

/// Bound on key types: hashable with the stable hash, comparable, clonable,
/// sendable.
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {}
impl<K: Hash + Eq + Clone + Send + Sync + 'static> Key for K {}

/// The key of the record being processed by a keyed operator.
///
/// It cannot be constructed outside Streamwork: holding one proves that the
/// code runs inside a keyed operator, on a stream partitioned by this key.
#[derive(Debug)]
pub struct CurrentKey<'a, K>(&'a K);

impl<K> Clone for CurrentKey<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for CurrentKey<'_, K> {}

impl<'a, K> CurrentKey<'a, K> {
    pub(crate) fn new(key: &'a K) -> Self {
        CurrentKey(key)
    }

    /// The key itself.
    pub fn get(self) -> &'a K {
        self.0
    }
}

impl<K> Deref for CurrentKey<'_, K> {
    type Target = K;
    fn deref(&self) -> &K {
        self.0
    }
}

/// A value per key, scoped by the current key of a keyed operator.
///
/// ```
/// use streamwork_core::state::KeyedState;
/// let counts: KeyedState<String, u64> = KeyedState::new();
/// assert!(counts.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct KeyedState<K, V> {
    values: FastHashMap<K, V>,
}

impl<K: super::state::Key, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key, V> KeyedState<K, V> {
    /// Empty state.
    pub fn new() -> Self {
        KeyedState {
            values: FastHashMap::default(),
        }
    }

    /// The value of the current key.
    pub fn get(&self, key: CurrentKey<'_, K>) -> Option<&V> {
        self.values.get(key.get())
    }

    /// The value of the current key, mutably.
    pub fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V> {
        self.values.get_mut(key.get())
    }

    /// The value of the current key, inserting `V::default()` first if absent.
    /// The key is cloned only on insertion.
    pub fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default,
    {
        if !self.values.contains_key(key.get()) {
            self.values.insert(key.get().clone(), V::default());
        }
        self.values
            .get_mut(key.get())
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Sets the value of the current key, returning the previous one.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, value: V) -> Option<V> {
        self.values.insert(key.get().clone(), value)
    }

    /// Removes the value of the current key.
    pub fn remove(&mut self, key: CurrentKey<'_, K>) -> Option<V> {
        self.values.remove(key.get())
    }

    /// Number of keys with a value.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every key and value, in no particular order (for end-of-stream output).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.values.iter()
    }

    /// Takes every key and value out, leaving the state empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.values.drain()
    }
}
