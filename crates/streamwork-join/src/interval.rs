//! Interval join: a left row at `ta` joins every right row at `tb` with
//! `ta + lower <= tb <= ta + upper` (both bounds included), as soon as both
//! are known. A left row is dropped once event time passes `ta + upper` (no
//! right row can still match it), a right row once it passes `tb - lower`;
//! an outer join then emits the row if it never matched (a left row at
//! `ta + upper`, a right row at `tb - lower`), and a semi join emits each
//! left row once, at its first match. Rows behind the watermark when they
//! arrive are late: dropped and counted.

use std::marker::PhantomData;

use streamwork_core::SnapshotContext;
use streamwork_core::ports::Either;
use streamwork_core::timer::Timers;
use streamwork_core::{
    ByKey, Collector, Context, Data, EventTime, Key, Operator, Restore, StateBytes, TaskError,
    Timestamp,
};
use streamwork_state::KeyedCheckpoint;
use streamwork_window::LateCounter;

use crate::rows::{RowMap, Rows, restore_rows, snapshot_rows};
use crate::{JoinKind, JoinRow};

/// A buffered row and whether it has matched.
type Flagged<T> = (T, bool);

/// An interval join of `L` and `R` keyed by `K`; see the module docs.
#[derive(Clone)]
pub struct IntervalJoin<L, R, K> {
    kind: JoinKind,
    lower: i64,
    upper: i64,
    late: LateCounter,
    rows: RowMap<K, Flagged<L>, Flagged<R>>,
    /// When a key's buffers may shrink.
    cleanup: Timers<K>,
    watermark: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<i64, K, Rows<Flagged<L>, Flagged<R>>>,
    _types: PhantomData<fn(L, R)>,
}

impl<L: Data + Sync, R: Data + Sync, K: Key> IntervalJoin<L, R, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the buffered rows and the watermark (their cleanup timers are registered again
        /// on restore) in the job's checkpoints, by key group, so that a restored job (at any
        /// parallelism) joins as if it had not failed. Needed in a job that promises
        /// at-least-once or exactly-once delivery.
        // Layout 2: every buffered row carries whether it has matched (for
        // outer and semi joins).
        where [K, L, R], layout 2
    }

    pub(crate) fn new(kind: JoinKind, lower: i64, upper: i64) -> Self {
        IntervalJoin {
            kind,
            lower: lower.min(upper),
            upper: upper.max(lower),
            late: LateCounter::new(),
            rows: RowMap::new(),
            cleanup: Timers::new(),
            watermark: i64::MIN,
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    /// Counts late rows (dropped) into `counter`.
    pub fn count_late_in(mut self, counter: LateCounter) -> Self {
        self.late = counter;
        self
    }

    /// Rows currently buffered, both sides (for tests of state release).
    pub fn buffered(&self) -> usize {
        self.rows.values().map(|(l, r)| l.len() + r.len()).sum()
    }

    fn entry(&mut self, key: &K) -> &mut Rows<Flagged<L>, Flagged<R>> {
        self.rows.rows_of(key)
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Operator for IntervalJoin<L, R, K> {
    type In = Either<L, R>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, L, R>>;
    type Time = EventTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot_rows(ctx, &mut self.checkpoint, self.watermark, &mut self.rows)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let (lower, upper, cleanup) = (self.lower, self.upper, &mut self.cleanup);
        restore_rows(
            &mut self.checkpoint,
            restore,
            &mut self.watermark,
            &mut self.rows,
            |key, left, t| {
                // As when the row arrived: when no row of the other side can match it.
                let wake = if left {
                    t.saturating_add(upper)
                } else {
                    t.saturating_sub(lower)
                };
                cleanup.register_event(Timestamp::from_millis(wake.saturating_add(1)), key.clone());
            },
        )
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        if t < self.watermark {
            self.late.add(1);
            return;
        }
        let key = ctx.key().get().clone();
        let (kind, lower, upper) = (self.kind, self.lower, self.upper);
        match record {
            Either::Left(value) => {
                let ta = t;
                let (_, rights) = self.entry(&key);
                let mut matches: Vec<(i64, R)> = Vec::new();
                for (tb, (r, matched)) in rights.iter_mut() {
                    if ta.saturating_add(lower) <= *tb && *tb <= ta.saturating_add(upper) {
                        *matched = true;
                        matches.push((*tb, r.clone()));
                    }
                }
                let matched = !matches.is_empty();
                if kind == JoinKind::Semi {
                    if let Some(tb) = matches.iter().map(|(tb, _)| *tb).min() {
                        let row = JoinRow {
                            key: key.clone(),
                            left: Some(value.clone()),
                            right: None,
                        };
                        ctx.emit_at(row, Timestamp::from_millis(ta.max(tb)));
                    }
                } else {
                    for (tb, r) in matches {
                        let row = JoinRow {
                            key: key.clone(),
                            left: Some(value.clone()),
                            right: Some(r),
                        };
                        ctx.emit_at(row, Timestamp::from_millis(ta.max(tb)));
                    }
                }
                self.entry(&key).0.push((ta, (value, matched)));
                self.cleanup.register_event(
                    Timestamp::from_millis(ta.saturating_add(upper).saturating_add(1)),
                    key,
                );
            }
            Either::Right(value) => {
                let tb = t;
                let (lefts, _) = self.entry(&key);
                let mut matched = false;
                let mut rows = Vec::new();
                for (ta, (l, left_matched)) in lefts.iter_mut() {
                    if ta.saturating_add(lower) <= tb && tb <= ta.saturating_add(upper) {
                        matched = true;
                        // A semi join emits a left row once, at its first match.
                        let first = !*left_matched;
                        *left_matched = true;
                        let right = (kind != JoinKind::Semi).then(|| value.clone());
                        if kind != JoinKind::Semi || first {
                            rows.push((*ta, l.clone(), right));
                        }
                    }
                }
                for (ta, l, right) in rows {
                    let row = JoinRow {
                        key: key.clone(),
                        left: Some(l),
                        right,
                    };
                    ctx.emit_at(row, Timestamp::from_millis(ta.max(tb)));
                }
                self.entry(&key).1.push((tb, (value, matched)));
                self.cleanup.register_event(
                    Timestamp::from_millis(tb.saturating_sub(lower).saturating_add(1)),
                    key,
                );
            }
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.watermark = watermark.millis();
        let due: Vec<K> = self
            .cleanup
            .fire_event(watermark)
            .map(|(_, key)| key)
            .collect();
        let (kind, lower, upper, now) = (self.kind, self.lower, self.upper, self.watermark);
        for key in due {
            let Some((lefts, rights)) = self.rows.get_mut(&key) else {
                continue;
            };
            // Future rights have tb >= now; future lefts have ta >= now.
            // A row no future row can match goes; unmatched, an outer join
            // emits it, on time for the watermark it passed.
            for (ta, (l, matched)) in lefts.extract_if(.., |(ta, _)| ta.saturating_add(upper) < now)
            {
                if !matched && kind.keeps_left() {
                    let row = JoinRow {
                        key: key.clone(),
                        left: Some(l),
                        right: None,
                    };
                    out.emit_at(row, Timestamp::from_millis(ta.saturating_add(upper)));
                }
            }
            for (tb, (r, matched)) in
                rights.extract_if(.., |(tb, _)| tb.saturating_sub(lower) < now)
            {
                if !matched && kind.keeps_right() {
                    let row = JoinRow {
                        key: key.clone(),
                        left: None,
                        right: Some(r),
                    };
                    out.emit_at(row, Timestamp::from_millis(tb.saturating_sub(lower)));
                }
            }
            if lefts.is_empty() && rights.is_empty() {
                self.rows.remove(&key);
            }
        }
    }
}
