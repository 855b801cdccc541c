//! Partitioning in the type: an operator's input is keyed by `K`
//! ([`ByKey<K>`]) or not ([`NoKey`]); only a stream grouped by a key of that
//! type connects to a keyed operator, and only a keyed operator is handed a
//! [`CurrentKey`], the handle keyed state takes.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::state::{CurrentKey, Key};

/// How an operator's input is partitioned: [`NoKey`] for any stream, or
/// [`ByKey<K>`] for a stream keyed by `K` (only a keyed stream can connect).
pub trait KeyKind: Send + 'static {
    /// Whether the input is keyed (the operator has keyed state).
    const KEYED: bool;
    /// The key as a value (`()` when unkeyed): what keyed results carry.
    type Value: Clone + Eq + std::hash::Hash + Send + Sync + std::fmt::Debug + 'static;
    /// The current-key handle given to the operator (`()` when unkeyed).
    type Ref<'a>: Copy;
    /// The extracted key (`()` when unkeyed).
    type Owned;
    /// Extracts the key of an input record (`()` when unkeyed).
    type Extractor<T: 'static>: Clone + Send + Sync;
    /// The key of `value`, extracted by `extractor`.
    fn extract<T: 'static>(extractor: &Self::Extractor<T>, value: &T) -> Self::Owned;
    /// The extractor of records that carry their key, read by `key` (a
    /// pre-aggregated partial).
    fn carried<T: 'static>(key: fn(&T) -> &Self::Value) -> Self::Extractor<T>;
    /// The key of `value` as a value, without its hash (a combiner's table
    /// key).
    fn value_of<T: 'static>(extractor: &Self::Extractor<T>, value: &T) -> Self::Value;
    /// The handle on an extracted key.
    fn as_ref(key: &Self::Owned) -> Self::Ref<'_>;
    /// The key value behind a handle.
    fn value<'a>(key: Self::Ref<'a>) -> &'a Self::Value;
    /// The key's stable hash (0 when unkeyed).
    fn hash(key: Self::Ref<'_>) -> u64;
    /// The extracted form of a key value (for test harnesses).
    fn owned(value: Self::Value) -> Self::Owned;
    /// The stable hash of a key value, as [`hash`](Self::hash) gives it for
    /// the value's handle (for state restored from a checkpoint).
    fn hash_value(value: &Self::Value) -> u64 {
        let owned = Self::owned(value.clone());
        Self::hash(Self::as_ref(&owned))
    }
}

/// The input of an operator that accepts any stream.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoKey;

impl KeyKind for NoKey {
    const KEYED: bool = false;
    type Value = ();
    type Ref<'a> = ();
    type Owned = ();
    type Extractor<T: 'static> = ();
    #[inline]
    fn extract<T: 'static>(_: &(), _: &T) {}
    fn carried<T: 'static>(_: fn(&T) -> &()) {}
    #[inline]
    fn value_of<T: 'static>(_: &(), _: &T) {}
    #[inline]
    fn as_ref(_: &()) {}
    #[inline]
    fn value<'a>(_: ()) -> &'a () {
        &()
    }
    #[inline]
    fn hash(_: ()) -> u64 {
        0
    }
    fn owned(_: ()) {}
}

/// The input of an operator that needs a stream keyed by `K`.
pub struct ByKey<K>(PhantomData<fn() -> K>);

/// Extracts a key from a record; shared by the dispatcher and the receiver.
pub type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

impl<K: Key> KeyKind for ByKey<K> {
    const KEYED: bool = true;
    type Value = K;
    type Ref<'a> = CurrentKey<'a, K>;
    /// The key and its stable hash, computed once per record.
    type Owned = (K, u64);
    type Extractor<T: 'static> = KeyFn<T, K>;
    #[inline]
    fn extract<T: 'static>(extractor: &KeyFn<T, K>, value: &T) -> (K, u64) {
        let key = extractor(value);
        let hash = crate::hash::stable_hash(&key);
        (key, hash)
    }
    fn carried<T: 'static>(key: fn(&T) -> &K) -> KeyFn<T, K> {
        Arc::new(move |value: &T| key(value).clone())
    }
    #[inline]
    fn value_of<T: 'static>(extractor: &KeyFn<T, K>, value: &T) -> K {
        extractor(value)
    }
    #[inline]
    fn as_ref(key: &(K, u64)) -> CurrentKey<'_, K> {
        CurrentKey::new(&key.0, key.1)
    }
    #[inline]
    fn value<'a>(key: Self::Ref<'a>) -> &'a K {
        key.get()
    }
    #[inline]
    fn hash(key: CurrentKey<'_, K>) -> u64 {
        key.hash()
    }
    fn owned(value: K) -> (K, u64) {
        let hash = crate::hash::stable_hash(&value);
        (value, hash)
    }
}
