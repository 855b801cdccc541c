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

use streamwork_core::hash::FastHashMap;
use streamwork_core::{
    AnyTime, ByKey, CoOperator, Collector, Context, Data, EventTime, Key, Timestamp,
};

use crate::{Change, JoinKind, JoinRow};

/// A stream of `S` enriched with a table of `V`, both keyed by `K`.
pub struct StreamTableJoin<S, V, K> {
    kind: JoinKind,
    table: FastHashMap<K, V>,
    _types: PhantomData<fn(S)>,
}

impl<S, V: Clone, K: Clone> Clone for StreamTableJoin<S, V, K> {
    fn clone(&self) -> Self {
        StreamTableJoin {
            kind: self.kind,
            table: self.table.clone(),
            _types: PhantomData,
        }
    }
}

impl<S: Data, V: Data, K: Key> StreamTableJoin<S, V, K> {
    pub(crate) fn new(kind: JoinKind) -> Self {
        StreamTableJoin {
            kind,
            table: FastHashMap::default(),
            _types: PhantomData,
        }
    }

    /// The same join against the table as of each event's time.
    pub fn temporal(self) -> TemporalTableJoin<S, V, K> {
        TemporalTableJoin {
            kind: self.kind,
            versions: FastHashMap::default(),
            waiting: BTreeMap::new(),
            watermark: i64::MIN,
            _types: PhantomData,
        }
    }

    /// Rows in the table (one per key).
    pub fn rows(&self) -> usize {
        self.table.len()
    }
}

fn apply<K: Key, V>(table: &mut FastHashMap<K, V>, change: Change<K, V>) {
    match change {
        Change::Upsert { key, value } => {
            table.insert(key, value);
        }
        Change::Delete { key } => {
            table.remove(&key);
        }
    }
}

impl<S: Data, V: Data, K: Key> CoOperator for StreamTableJoin<S, V, K> {
    type Left = S;
    type Right = Change<K, V>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, S, V>>;
    type Time = AnyTime;

    fn on_left(&mut self, value: S, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let key = ctx.key();
        let row = self.table.get(key.get()).cloned();
        if row.is_some() || self.kind.keeps_left() {
            ctx.emit(JoinRow {
                key: key.get().clone(),
                left: Some(value),
                right: row,
            });
        }
    }

    fn on_right(&mut self, change: Change<K, V>, _ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        apply(&mut self.table, change);
    }
}

/// A stream of `S` joined with a table of `V` as of each event's time.
pub struct TemporalTableJoin<S, V, K> {
    kind: JoinKind,
    /// Per key, the table's row from each update time on (`None`: deleted).
    versions: FastHashMap<K, BTreeMap<i64, Option<V>>>,
    /// Stream events waiting for event time to reach them.
    waiting: BTreeMap<i64, Vec<(K, S)>>,
    watermark: i64,
    _types: PhantomData<fn(S)>,
}

impl<S: Clone, V: Clone, K: Clone> Clone for TemporalTableJoin<S, V, K> {
    fn clone(&self) -> Self {
        TemporalTableJoin {
            kind: self.kind,
            versions: self.versions.clone(),
            waiting: self.waiting.clone(),
            watermark: self.watermark,
            _types: PhantomData,
        }
    }
}

impl<S: Data, V: Data, K: Key> TemporalTableJoin<S, V, K> {
    /// Table versions kept, all keys (for tests of state release).
    pub fn versions(&self) -> usize {
        self.versions.values().map(BTreeMap::len).sum()
    }

    fn row_at(&self, key: &K, t: i64) -> Option<V> {
        self.versions.get(key)?.range(..=t).next_back()?.1.clone()
    }
}

impl<S: Data, V: Data, K: Key> CoOperator for TemporalTableJoin<S, V, K> {
    type Left = S;
    type Right = Change<K, V>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, S, V>>;
    type Time = EventTime;

    fn on_left(&mut self, value: S, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        self.waiting
            .entry(t)
            .or_default()
            .push((ctx.key().get().clone(), value));
    }

    fn on_right(&mut self, change: Change<K, V>, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        let (key, row) = match change {
            Change::Upsert { key, value } => (key, Some(value)),
            Change::Delete { key } => (key, None),
        };
        self.versions.entry(key).or_default().insert(t, row);
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.watermark = watermark.millis();
        // Events up to the watermark: no table update before them can still arrive.
        while let Some(entry) = self.waiting.first_entry() {
            let t = *entry.key();
            if t >= self.watermark && watermark < Timestamp::MAX {
                break;
            }
            for (key, value) in entry.remove() {
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
        self.versions.retain(|_, versions| {
            while versions.len() > 1 {
                let mut times = versions.keys();
                let (_, second) = (times.next(), times.next().copied());
                match second {
                    Some(second) if second <= now => {
                        versions.pop_first();
                    }
                    _ => break,
                }
            }
            !(versions.len() == 1 && versions.values().next().is_some_and(Option::is_none))
        });
    }
}
