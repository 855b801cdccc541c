//! Unwindowed stream-stream join: each row joins every row of the other side
//! with its key seen so far, at once. Without a retention, both sides are kept
//! for ever (state grows with the distinct rows: suitable for bounded inputs
//! or small key spaces); with [`retention`](StreamStreamJoin::retention), a row
//! is dropped once event time passes its own time plus the retention, and a
//! row older than that when it arrives is late: dropped and counted.

use std::marker::PhantomData;
use std::time::Duration;

use streamwork_core::SnapshotContext;
use streamwork_core::ports::Either;
use streamwork_core::timer::Timers;
use streamwork_core::{
    AnyTime, ByKey, Collector, Context, Data, Key, Operator, Restore, StateBytes, TaskError,
    Timestamp,
};
use streamwork_state::KeyedCheckpoint;
use streamwork_window::LateCounter;

use crate::JoinRow;
use crate::rows::{RowMap, Rows, restore_rows, snapshot_rows};

/// An unwindowed join of `L` and `R` keyed by `K`; see the module docs.
#[derive(Clone)]
pub struct StreamStreamJoin<L, R, K> {
    retention: Option<i64>,
    late: LateCounter,
    rows: RowMap<K, L, R>,
    expiry: Timers<K>,
    watermark: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<i64, K, Rows<L, R>>,
    _types: PhantomData<fn(L, R)>,
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Default for StreamStreamJoin<L, R, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> StreamStreamJoin<L, R, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the rows kept and the watermark (their expiry timers are registered again on
        /// restore) in the job's checkpoints, by key group, so that a restored job (at any
        /// parallelism) joins as if it had not failed. Needed in a job that promises
        /// at-least-once or exactly-once delivery.
        where [K, L, R]
    }

    /// Keeps every row (no retention).
    pub fn new() -> Self {
        StreamStreamJoin {
            retention: None,
            late: LateCounter::new(),
            rows: RowMap::new(),
            expiry: Timers::new(),
            watermark: i64::MIN,
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    /// Drops rows once event time passes their time plus `retention`.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// Counts rows dropped as late into `counter`.
    pub fn count_late_in(mut self, counter: LateCounter) -> Self {
        self.late = counter;
        self
    }

    fn expired(&self, t: i64) -> bool {
        self.retention
            .is_some_and(|r| t.saturating_add(r) < self.watermark)
    }

    fn keep(&mut self, key: K, t: i64) {
        if let Some(retention) = self.retention {
            self.expiry.register_event(
                Timestamp::from_millis(t.saturating_add(retention).saturating_add(1)),
                key,
            );
        }
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Operator for StreamStreamJoin<L, R, K> {
    type In = Either<L, R>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, L, R>>;
    type Time = AnyTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot_rows(ctx, &mut self.checkpoint, self.watermark, &mut self.rows)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let (retention, expiry) = (self.retention, &mut self.expiry);
        restore_rows(
            &mut self.checkpoint,
            restore,
            &mut self.watermark,
            &mut self.rows,
            |key, _, t| {
                // As when the row arrived: when its retention ends.
                if let Some(retention) = retention {
                    expiry.register_event(
                        Timestamp::from_millis(t.saturating_add(retention).saturating_add(1)),
                        key.clone(),
                    );
                }
            },
        )
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(0);
        if self.expired(t) {
            self.late.add(1);
            return;
        }
        let key = ctx.key().get().clone();
        match record {
            Either::Left(value) => {
                let (lefts, rights) = self.rows.rows_of(&key);
                for (_, r) in rights.iter() {
                    ctx.emit(JoinRow {
                        key: key.clone(),
                        left: Some(value.clone()),
                        right: Some(r.clone()),
                    });
                }
                lefts.push((t, value));
            }
            Either::Right(value) => {
                let (lefts, rights) = self.rows.rows_of(&key);
                for (_, l) in lefts.iter() {
                    ctx.emit(JoinRow {
                        key: key.clone(),
                        left: Some(l.clone()),
                        right: Some(value.clone()),
                    });
                }
                rights.push((t, value));
            }
        }
        self.keep(key, t);
    }

    fn on_watermark(&mut self, watermark: Timestamp, _out: &mut Self::Out) {
        self.watermark = watermark.millis();
        let Some(retention) = self.retention else {
            return;
        };
        let due: Vec<K> = self
            .expiry
            .fire_event(watermark)
            .map(|(_, key)| key)
            .collect();
        let now = self.watermark;
        for key in due {
            if let Some((lefts, rights)) = self.rows.get_mut(&key) {
                lefts.retain(|(t, _)| t.saturating_add(retention) >= now);
                rights.retain(|(t, _)| t.saturating_add(retention) >= now);
                if lefts.is_empty() && rights.is_empty() {
                    self.rows.remove(&key);
                }
            }
        }
    }
}
