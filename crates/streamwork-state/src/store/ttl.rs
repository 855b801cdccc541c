//! State time-to-live: a stored value expires a fixed time after it was
//! last written, by the wall clock or by event time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::InstanceContext;
use streamwork_core::checkpoint::SnapshotContext;
use streamwork_core::state::{CurrentKey, Key};
use streamwork_core::time::Timestamp;

use super::run::RunEntry;
use super::stored::{StoreOptions, StoredState};
use crate::error::StateError;
use crate::managed::{FieldRestore, FieldSnapshot, StateField};
use crate::state_data::StateData;

/// The clock a time-to-live is measured by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TtlTime {
    /// The wall clock of the instance.
    Processing,
    /// Event time, as the operator advances it ([`ExpiringState::advance`]).
    Event,
}

/// How long a value lives after its last write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ttl {
    /// The time to live.
    pub after: Duration,
    /// The clock it is measured by.
    pub time: TtlTime,
}

impl Ttl {
    /// `after` by the wall clock.
    pub fn processing(after: Duration) -> Self {
        Ttl {
            after,
            time: TtlTime::Processing,
        }
    }

    /// `after` in event time.
    pub fn event(after: Duration) -> Self {
        Ttl {
            after,
            time: TtlTime::Event,
        }
    }
}

/// A value and the time (milliseconds) it was last written.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Expiring<V> {
    /// When it was last written.
    pub written: i64,
    /// The value.
    pub value: V,
}

impl<V: crate::StateLayout> crate::StateLayout for Expiring<V> {
    const LAYOUT: u64 = crate::layout_mix(
        crate::layout_mix(crate::layout_of("struct{written,value,}"), i64::LAYOUT),
        V::LAYOUT,
    );
}

/// A [`StoredState`] whose values expire [`Ttl::after`] their last write:
/// an expired value reads as absent, and is left out of every checkpoint
/// written after it expired (and so out of memory once that checkpoint
/// completes).
///
/// ```
/// use std::time::Duration;
/// use streamwork::core::state::CurrentKey;
/// use streamwork::core::time::Timestamp;
/// use streamwork::state::{ExpiringState, Ttl};
/// let mut sessions: ExpiringState<u64, u32> = ExpiringState::new(Ttl::event(Duration::from_secs(60)));
/// let user = 7u64;
/// sessions.advance(Timestamp::from_millis(1_000));
/// *sessions.get_or_default(CurrentKey::for_testing(&user)) += 1;
/// sessions.advance(Timestamp::from_millis(30_000));
/// assert_eq!(sessions.get(CurrentKey::for_testing(&user)), Some(&1));
/// sessions.advance(Timestamp::from_millis(61_001));
/// assert_eq!(sessions.get(CurrentKey::for_testing(&user)), None);
/// ```
#[derive(Clone, Debug)]
pub struct ExpiringState<K, V> {
    inner: StoredState<K, Expiring<V>>,
    ttl: Ttl,
    /// Event time as the operator advanced it, in milliseconds.
    now: i64,
}

fn expired<V>(value: &Expiring<V>, cutoff: i64) -> bool {
    value.written < cutoff
}

impl<K: Key, V> ExpiringState<K, V> {
    /// Empty state whose values live `ttl`.
    pub fn new(ttl: Ttl) -> Self {
        ExpiringState::with_options(ttl, StoreOptions::default())
    }

    /// The same, with `options`.
    pub fn with_options(ttl: Ttl, options: StoreOptions) -> Self {
        ExpiringState {
            inner: StoredState::with_options(options),
            ttl,
            now: i64::MIN,
        }
    }

    /// Event time reaches `now` (ignored unless it moves forward, and by a
    /// processing-time TTL).
    pub fn advance(&mut self, now: Timestamp) {
        self.now = self.now.max(now.millis());
    }

    /// The time now, by the TTL's clock, in milliseconds.
    fn now(&self) -> i64 {
        match self.ttl.time {
            TtlTime::Event => self.now,
            TtlTime::Processing => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// Values written before this have expired.
    fn cutoff(&self) -> i64 {
        let after = i64::try_from(self.ttl.after.as_millis()).unwrap_or(i64::MAX);
        self.now().saturating_sub(after)
    }
}

impl<K, V> ExpiringState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Expiring<V>: StateData,
    Vec<RunEntry<K, Expiring<V>>>: StateData,
{
    /// The current key's value, unless absent or expired (an expired value
    /// is removed).
    pub fn get(&mut self, key: CurrentKey<'_, K>) -> Option<&V> {
        let cutoff = self.cutoff();
        if expired(self.inner.get(key)?, cutoff) {
            self.inner.remove(key);
            return None;
        }
        self.inner.get(key).map(|e| &e.value)
    }

    /// The current key's value, `V::default()` if it has none or it
    /// expired; written now (its time to live starts again).
    pub fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default,
    {
        let (now, cutoff) = (self.now(), self.cutoff());
        let entry = self.inner.get_or_default(key);
        if expired(entry, cutoff) {
            entry.value = V::default();
        }
        entry.written = now;
        &mut entry.value
    }

    /// Sets the current key's value, written now.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, value: V) {
        let written = self.now();
        self.inner.insert(key, Expiring { written, value });
    }

    /// Removes the current key's value.
    pub fn remove(&mut self, key: CurrentKey<'_, K>) {
        self.inner.remove(key);
    }

    /// Every unexpired key and value this instance owns, in no order.
    pub fn entries(&mut self) -> Result<Vec<(K, V)>, StateError> {
        let mut all = Vec::new();
        self.for_each(|k, v| all.push((k, v)))?;
        Ok(all)
    }

    /// Calls `f` with every unexpired key and value this instance owns,
    /// one key group at a time (see [`StoredState::for_each`]).
    pub fn for_each(&mut self, mut f: impl FnMut(K, V)) -> Result<(), StateError> {
        let cutoff = self.cutoff();
        self.inner.for_each(|k, e| {
            if !expired(&e, cutoff) {
                f(k, e.value);
            }
        })
    }
}

impl<K, V> StateField for ExpiringState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Expiring<V>: StateData,
    Vec<RunEntry<K, Expiring<V>>>: StateData,
{
    const LAYOUT: u64 = crate::layout_mix(
        crate::layout_mix(crate::layout_of("ExpiringState"), K::LAYOUT),
        V::LAYOUT,
    );

    fn open_field(&mut self, ctx: &InstanceContext) {
        self.inner.open_field(ctx);
    }

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        // What expired by now is left out of the run this checkpoint writes.
        let cutoff = self.cutoff();
        self.inner
            .retain_when(|e, cutoff| !expired(e, cutoff), cutoff);
        self.inner.snapshot_field(ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        self.inner.restore_field(field)
    }
}
