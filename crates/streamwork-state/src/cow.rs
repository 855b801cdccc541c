//! Copy-on-write for checkpoints: [`CowCell`], a value shared with a
//! checkpoint that reads it and copied only if written meanwhile; and
//! [`CowMap`], the framework's keyed table (core's
//! [`KeyedTable`](streamwork_core::table::KeyedTable)), whose shards a
//! checkpoint freezes and shares instead of copying.
//!
//! Window and join operators keep their per-key state in a [`CowMap`];
//! entries carry the key's hash (the stable hash the runtime computed for
//! the record), so that nothing is hashed twice.
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

use std::sync::Arc;

use streamwork_core::table::{FrozenTable, KeyedTable};

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

/// The framework's keyed table, whose hash is any the caller gives (kept
/// in each entry): what windows and joins keep their per-key state in.
pub type CowMap<K, V> = KeyedTable<K, V>;

/// A [`CowMap`] as it was when frozen: what a checkpoint reads.
pub type FrozenMap<K, V> = FrozenTable<K, V>;
