//! [`KeyedValues`]: one value per key, whichever state keeps it, through the
//! same receivers, so that code written against it runs on a
//! [`KeyedState`] (in memory) or a [`StoredState`] (larger than memory)
//! unchanged.

use streamwork_core::state::{CurrentKey, Key, KeyedState};

use crate::state_data::StateData;
use crate::store::StoredState;

/// One value per key, read and written through the current key.
///
/// Every method takes `&mut self`: a [`StoredState`] caches what it reads
/// from its runs, so even a read changes it. Choose the type by the size of
/// the state, not by the code: [`KeyedState`] keeps everything in memory,
/// [`StoredState`] what changed since the last checkpoint and a cache, the
/// rest in the checkpoint log.
///
/// ```
/// use streamwork::core::state::{CurrentKey, KeyedState};
/// use streamwork::state::{KeyedValues, StoredState};
///
/// /// Counts a word, in whichever state holds the counts.
/// fn count(counts: &mut impl KeyedValues<String, u64>, word: &String) -> u64 {
///     let n = counts.get_or_default(CurrentKey::for_testing(word));
///     *n += 1;
///     *n
/// }
///
/// let word = "stream".to_string();
/// let mut small: KeyedState<String, u64> = KeyedState::new();
/// let mut large: StoredState<String, u64> = StoredState::default();
/// count(&mut small, &word);
/// count(&mut large, &word);
/// assert_eq!(count(&mut small, &word), count(&mut large, &word));
/// ```
pub trait KeyedValues<K, V> {
    /// The current key's value.
    fn get(&mut self, key: CurrentKey<'_, K>) -> Option<&V>;

    /// The current key's value, to change it.
    fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V>;

    /// The current key's value, `V::default()` first if it has none.
    fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default;

    /// Sets the current key's value.
    fn set(&mut self, key: CurrentKey<'_, K>, value: V);

    /// Removes the current key's value.
    fn delete(&mut self, key: CurrentKey<'_, K>);
}

/// Implements [`KeyedValues`] for `$state` by its own methods of the same
/// meaning (`set` is its `insert`, `delete` its `remove`).
macro_rules! keyed_values_by_inherent_methods {
    ($state:ident, impl<$($g:ident),*> where { $($bound:tt)* }) => {
        impl<$($g),*> KeyedValues<K, V> for $state<K, V>
        where
            $($bound)*
        {
            fn get(&mut self, key: CurrentKey<'_, K>) -> Option<&V> {
                $state::get(self, key)
            }

            fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V> {
                $state::get_mut(self, key)
            }

            fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
            where
                V: Default,
            {
                $state::get_or_default(self, key)
            }

            fn set(&mut self, key: CurrentKey<'_, K>, value: V) {
                $state::insert(self, key, value);
            }

            fn delete(&mut self, key: CurrentKey<'_, K>) {
                $state::remove(self, key);
            }
        }
    };
}

keyed_values_by_inherent_methods!(KeyedState, impl<K, V> where { K: Key, V: Clone });
keyed_values_by_inherent_methods!(
    StoredState,
    impl<K, V> where {
        K: Key + StateData,
        V: StateData + Clone + Send + Sync + 'static,
        Vec<(u64, K, Option<V>)>: StateData,
    }
);
