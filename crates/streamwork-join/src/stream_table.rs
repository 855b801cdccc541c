//! Stream-table joins: a table is the materialized view of a changelog
//! ([`Change`]s), one row per key, partitioned with the stream by key.
//!
//! * [`StreamTableJoin`]: each stream event is enriched with the table's row
//!   for its key *when the event arrives* (inner: no row, no output; left
//!   outer: no row, output with the table side empty);
//! * [`TemporalTableJoin`]: each event is joined with the table's row *as of
//!   the event's time*, for tables whose updates carry event time: events wait
//!   until event time reaches them, and table versions older than the one in
//!   force at the watermark are dropped.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use streamwork_core::SnapshotContext;
use streamwork_core::chain::{Epochs, FrozenEpochs, whole_is_smaller};
use streamwork_core::hash::{FastHashMap, stable_hash};
use streamwork_core::ports::Either;
use streamwork_core::{
    AnyTime, ByKey, Collector, Context, Data, EventTime, Key, Operator, Restore, StateBytes,
    TaskError, Timestamp,
};
use streamwork_state::{CowCell, CowMap, FrozenChanges, FrozenMap, KeyedCheckpoint, StateData};

use crate::checkpointing::{restore_table, snapshot_table};
use crate::{Change, JoinKind, JoinRow};

/// A stream of `S` enriched with a table of `V`, both keyed by `K`.
pub struct StreamTableJoin<S, V, K> {
    kind: JoinKind,
    /// The table, frozen (copy-on-write) for a checkpoint.
    table: CowMap<K, V>,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<(), K, V>,
    _types: PhantomData<fn(S)>,
}

impl<S, V: Clone, K: Clone> Clone for StreamTableJoin<S, V, K> {
    fn clone(&self) -> Self {
        StreamTableJoin {
            kind: self.kind,
            table: self.table.clone(),
            checkpoint: self.checkpoint.clone(),
            _types: PhantomData,
        }
    }
}

impl<S: Data + Sync, V: Data + Sync, K: Key> StreamTableJoin<S, V, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the table in the job's checkpoints, by key group, so that a restored job (at
        /// any parallelism) joins as if it had not failed. Needed in a job that promises
        /// at-least-once or exactly-once delivery.
        where [K, V]
    }

    pub(crate) fn new(kind: JoinKind) -> Self {
        StreamTableJoin {
            kind,
            table: CowMap::new(),
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    /// The same join against the table as of each event's time, its state
    /// checkpointed as this join's is (it also keeps stream rows waiting
    /// for their time, so their type must be archivable too; for one that
    /// is not, build the join `transient()`).
    pub fn temporal(self) -> TemporalTableJoin<S, V, K>
    where
        S: StateData,
        V: StateData,
        K: StateData,
    {
        let checkpointed = self.checkpoint.is_enabled();
        let temporal = self.temporal_transient();
        if checkpointed {
            temporal.checkpointed()
        } else {
            temporal
        }
    }

    /// The same join against the table as of each event's time, its state
    /// left out of checkpoints.
    pub fn temporal_transient(self) -> TemporalTableJoin<S, V, K> {
        TemporalTableJoin {
            kind: self.kind,
            versions: CowMap::new(),
            waiting: BTreeMap::new(),
            watermark: i64::MIN,
            checkpoint: KeyedCheckpoint::default(),
            released: Epochs::default(),
            marks: BTreeMap::new(),
            _types: PhantomData,
        }
    }

    /// Rows in the table (one per key).
    pub fn rows(&self) -> usize {
        self.table.len()
    }
}

fn apply<K: Key, V: Clone>(table: &mut CowMap<K, V>, change: Change<K, V>) {
    match change {
        Change::Upsert { key, value } => {
            table.insert(stable_hash(&key), key, value);
        }
        Change::Delete { key } => {
            table.remove(stable_hash(&key), &key);
        }
    }
}

impl<S: Data + Sync, V: Data + Sync, K: Key> Operator for StreamTableJoin<S, V, K> {
    type In = Either<S, Change<K, V>>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, S, V>>;
    type Time = AnyTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot_table(&mut self.checkpoint, ctx, &mut self.table)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        restore_table(&mut self.checkpoint, restore, &mut self.table)
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        match record {
            Either::Left(value) => {
                let key = ctx.key();
                let row = self.table.get(key.hash(), key.get()).cloned();
                if row.is_some() || self.kind.keeps_left() {
                    ctx.emit(JoinRow {
                        key: key.get().clone(),
                        left: Some(value),
                        right: row,
                    });
                }
            }
            Either::Right(change) => {
                apply(&mut self.table, change);
            }
        }
    }
}

/// One key's state in a temporal join's snapshot: its table versions and its
/// events waiting for event time, both with their times.
type TemporalKeyState<S, V> = (Vec<(i64, Option<V>)>, Vec<(i64, S)>);

/// Stream events waiting for event time to reach one time, with their keys.
type Waiting<K, S> = Vec<(K, S)>;

/// How a temporal join checkpoints: the watermark, and per key its state.
type TemporalCheckpoint<K, S, V> = KeyedCheckpoint<i64, K, TemporalKeyState<S, V>>;

/// A stream of `S` joined with a table of `V` as of each event's time.
#[derive(Clone)]
pub struct TemporalTableJoin<S, V, K> {
    kind: JoinKind,
    /// Per key, the table's row from each update time on (`None`: deleted);
    /// frozen (copy-on-write) for a checkpoint.
    versions: CowMap<K, BTreeMap<i64, Option<V>>>,
    /// Stream events waiting for event time to reach them, by time; each
    /// time's frozen (copy-on-write) for a checkpoint.
    waiting: BTreeMap<i64, CowCell<Waiting<K, S>>>,
    watermark: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: TemporalCheckpoint<K, S, V>,
    /// The keys of the waiting events released in each epoch (frozen with
    /// `versions`, so its epochs are the map's): they changed, for an
    /// incremental snapshot.
    released: Epochs<K>,
    /// How many events waited at each time at the freeze of an epoch: the
    /// events after them came since.
    marks: BTreeMap<u32, Arc<[(i64, usize)]>>,
    _types: PhantomData<fn(S)>,
}

impl<S: Data + Sync, V: Data + Sync, K: Key> TemporalTableJoin<S, V, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the table versions and the events waiting for event time in the job's
        /// checkpoints, by key group, so that a restored job (at any parallelism) joins as if
        /// it had not failed. Needed in a job that promises at-least-once or exactly-once
        /// delivery.
        where [K, S, V]
    }

    /// Table versions kept, all keys (for tests of state release).
    pub fn versions(&self) -> usize {
        self.versions.iter().map(|(_, v)| v.len()).sum()
    }

    fn row_at(&self, key: &K, t: i64) -> Option<V> {
        self.versions
            .get(stable_hash(key), key)?
            .range(..=t)
            .next_back()?
            .1
            .clone()
    }
}

/// A temporal join as a checkpoint froze it: the versions, the waiting
/// events with how many waited at each time at earlier freezes, and the
/// keys of the events released since: what an incremental snapshot reads.
struct FrozenTemporal<K, S, V> {
    versions: FrozenMap<K, BTreeMap<i64, Option<V>>>,
    waiting: Vec<(i64, Arc<Waiting<K, S>>)>,
    released: FrozenEpochs<K>,
    marks: BTreeMap<u32, Arc<[(i64, usize)]>>,
}

impl<K: Key, S: Data + Sync, V: Data + Sync> FrozenTemporal<K, S, V> {
    /// Each key's state (those of the keys `only` admits), for a snapshot.
    fn per_key(&self, only: impl Fn(&K) -> bool) -> FastHashMap<K, TemporalKeyState<S, V>> {
        let mut per_key: FastHashMap<K, TemporalKeyState<S, V>> = FastHashMap::default();
        for (key, versions) in self.versions.iter().filter(|(k, _)| only(k)) {
            per_key.entry(key.clone()).or_default().0 =
                versions.iter().map(|(t, v)| (*t, v.clone())).collect();
        }
        for (t, events) in &self.waiting {
            for (key, event) in events.iter().filter(|(k, _)| only(k)) {
                per_key
                    .entry(key.clone())
                    .or_default()
                    .1
                    .push((*t, event.clone()));
            }
        }
        per_key
    }
}

impl<K: Key, S: Data + Sync, V: Data + Sync> FrozenChanges<K, TemporalKeyState<S, V>>
    for FrozenTemporal<K, S, V>
{
    fn epoch(&self) -> u32 {
        self.versions.epochs().epoch()
    }

    /// Whole when the versions were cleared since, or more keys went or
    /// had events released since than the join holds entries now; and when
    /// the versions' epochs and the released events' are not the same
    /// clock (they are frozen together, so they are).
    fn whole_since(&self, epoch: u32) -> bool {
        let versions = self.versions.epochs();
        let waiting: usize = self.waiting.iter().map(|(_, w)| w.len()).sum();
        self.released.epoch() != versions.epoch()
            || versions.cleared_since(epoch)
            || whole_is_smaller(
                self.versions.len() + waiting,
                versions.removed_count_since(epoch) + self.released.removed_count_since(epoch),
            )
    }

    fn entries(&self) -> Result<Vec<(K, TemporalKeyState<S, V>)>, streamwork_state::StateError> {
        Ok(self.per_key(|_| true).into_iter().collect())
    }

    /// The keys whose versions changed, that have an event waiting since
    /// the freeze of `epoch`, or whose events were released since, each
    /// with all it holds now (nothing: removed). A time without a count of
    /// then (new since, or forgotten) counts whole.
    fn changes_since(
        &self,
        epoch: u32,
    ) -> Result<
        streamwork_state::ChangesSince<K, TemporalKeyState<S, V>>,
        streamwork_state::StateError,
    > {
        let then = self.marks.get(&epoch);
        let mut changed: FastHashMap<&K, ()> = FastHashMap::default();
        for (key, _) in self.versions.changed_since(epoch) {
            changed.insert(key, ());
        }
        for key in self.versions.epochs().removed_since(epoch) {
            changed.insert(key, ());
        }
        for key in self.released.removed_since(epoch) {
            changed.insert(key, ());
        }
        for (t, events) in &self.waiting {
            let waited = then
                .and_then(|m| m.iter().find(|(at, _)| at == t))
                .map_or(0, |&(_, n)| n);
            for (key, _) in events.get(waited..).unwrap_or(&events[..]) {
                changed.insert(key, ());
            }
        }
        let per_key = self.per_key(|k| changed.contains_key(k));
        Ok(crate::checkpointing::written_and_removed(changed, per_key))
    }
}

impl<S: Data + Sync, V: Data + Sync, K: Key> Operator for TemporalTableJoin<S, V, K> {
    type In = Either<S, Change<K, V>>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, S, V>>;
    type Time = EventTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let waiting: usize = self.waiting.values().map(|w| w.get().len()).sum();
        let Some(planned) = self
            .checkpoint
            .plan_snapshot(ctx, self.versions.len() + waiting)
        else {
            return Ok(None);
        };
        if let Some(epoch) = planned.forget_through() {
            self.versions.forget_removed_through(epoch);
            self.released.forget_through(epoch);
            self.marks.retain(|at, _| *at >= epoch);
        }
        // The pause: the versions and the waiting events are frozen, with
        // how many wait at each time; they (or those of the keys that
        // changed since a complete checkpoint of this run) are gathered and
        // archived off this thread.
        let versions = self.versions.freeze();
        let released = self.released.freeze();
        let waiting: Vec<(i64, Arc<Waiting<K, S>>)> = self
            .waiting
            .iter_mut()
            .map(|(&t, events)| (t, events.freeze()))
            .collect();
        self.marks.insert(
            released.epoch(),
            waiting
                .iter()
                .map(|(t, events)| (*t, events.len()))
                .collect(),
        );
        let frozen = FrozenTemporal {
            versions,
            waiting,
            released,
            marks: self.marks.clone(),
        };
        self.checkpoint
            .snapshot_frozen(ctx, planned, self.watermark, frozen)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let Some(entries) = self
            .checkpoint
            .restore_raising(restore, &mut self.watermark)?
        else {
            return Ok(());
        };
        for (key, (versions, waiting)) in entries {
            for (t, event) in waiting {
                self.waiting
                    .entry(t)
                    .or_default()
                    .get_mut()
                    .push((key.clone(), event));
            }
            if !versions.is_empty() {
                let versions = versions.into_iter().collect();
                self.versions.insert(stable_hash(&key), key, versions);
            }
        }
        Ok(())
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        match record {
            Either::Left(value) => {
                let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
                self.waiting
                    .entry(t)
                    .or_default()
                    .get_mut()
                    .push((ctx.key().get().clone(), value));
            }
            Either::Right(change) => {
                let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
                let (key, row) = change.into_parts();
                let hash = ctx.key().hash();
                self.versions
                    .get_or_insert_with(hash, &key, BTreeMap::new)
                    .insert(t, row);
            }
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        // A restored join may be told again of the watermark it had reached:
        // only an advance releases the events waiting for it.
        if watermark.millis() <= self.watermark && watermark < Timestamp::MAX {
            return;
        }
        self.watermark = watermark.millis();
        // Events up to the watermark: no table update before them can still arrive.
        while let Some(entry) = self.waiting.first_entry() {
            let t = *entry.key();
            if t >= self.watermark && watermark < Timestamp::MAX {
                break;
            }
            let events = entry.remove().into_inner();
            if self.released.tracks() {
                // Their keys changed: an incremental snapshot writes them
                // with what they hold now.
                let mut seen: FastHashMap<&K, ()> = FastHashMap::default();
                for (key, _) in &events {
                    if seen.insert(key, ()).is_none() {
                        self.released.removed(key.clone());
                    }
                }
            }
            for (key, value) in events {
                let row = self.row_at(&key, t);
                if row.is_some() || self.kind.keeps_left() {
                    out.emit_at(
                        JoinRow {
                            key,
                            left: Some(value),
                            right: row,
                        },
                        Timestamp::from_millis(t),
                    );
                }
            }
        }
        // Versions superseded before the watermark can no longer be read.
        let now = self.watermark;
        let superseded = |versions: &BTreeMap<i64, Option<V>>| {
            let mut times = versions.keys();
            times.next();
            times.next().is_some_and(|&second| second <= now)
        };
        let deleted = |versions: &BTreeMap<i64, Option<V>>| {
            versions.len() == 1 && versions.values().next().is_some_and(Option::is_none)
        };
        // Only the keys that change are touched (and their shards copied,
        // if a checkpoint still reads them).
        self.versions.update_where(
            |_, versions| superseded(versions) || deleted(versions),
            |_, versions| {
                while superseded(versions) {
                    versions.pop_first();
                }
                !deleted(versions)
            },
        );
    }
}
