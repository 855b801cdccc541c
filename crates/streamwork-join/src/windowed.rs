//! Windowed stream-stream join: both sides buffered per key per window; when
//! event time passes a window's end, its matches are emitted, and for outer
//! joins the rows that found no match, with the other side empty.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use streamwork_core::hash::FastHashMap;
use streamwork_core::{
    ByKey, CoOperator, Collector, Context, Data, EventTime, InstanceContext, Key, Restore,
    StateBytes, TaskError, Timestamp,
};
use streamwork_core::{SnapshotContext, Statefulness};
use streamwork_state::{CowCell, KeyedCheckpoint, StateData};
use streamwork_window::LateCounter;
use streamwork_window::ends::{ends, first_end_containing, last_end_containing, last_instant};

use crate::{JoinKind, JoinRow};

/// Both sides' rows of one key in one window.
type Buffers<L, R> = (Vec<L>, Vec<R>);

/// Every key's rows in one window.
type WindowRows<K, L, R> = FastHashMap<K, Buffers<L, R>>;

/// One key's open windows in a snapshot: `(window end, lefts, rights)`.
type KeyWindows<L, R> = Vec<(i64, Vec<L>, Vec<R>)>;

/// A windowed join of `L` and `R` keyed by `K`; see the module docs. Built with
/// [`Join`](crate::Join).
pub struct WindowJoin<L, R, K> {
    kind: JoinKind,
    size: i64,
    slide: i64,
    late: LateCounter,
    /// Open windows by end, then by key; each frozen (copy-on-write) for
    /// a checkpoint.
    windows: BTreeMap<i64, CowCell<WindowRows<K, L, R>>>,
    watermark: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<i64, K, KeyWindows<L, R>>,
    _types: PhantomData<fn(L, R)>,
}

impl<L: Clone, R: Clone, K: Clone> Clone for WindowJoin<L, R, K> {
    fn clone(&self) -> Self {
        WindowJoin {
            kind: self.kind,
            size: self.size,
            slide: self.slide,
            late: self.late.clone(),
            windows: self.windows.clone(),
            watermark: self.watermark,
            checkpoint: self.checkpoint,
            _types: PhantomData,
        }
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> WindowJoin<L, R, K> {
    /// Puts the rows buffered in open windows and the watermark in the job's checkpoints, by key group, so that a
    /// restored job (at any parallelism) joins as if it had not failed.
    /// Needed in a job that promises at-least-once or exactly-once delivery.
    pub fn checkpointed(mut self) -> Self
    where
        K: StateData,
        L: StateData,
        R: StateData,
    {
        self.checkpoint = KeyedCheckpoint::enabled();
        self
    }

    pub(crate) fn new(kind: JoinKind, size: i64, slide: i64) -> Self {
        WindowJoin {
            kind,
            size,
            slide,
            late: LateCounter::new(),
            windows: BTreeMap::new(),
            watermark: i64::MIN,
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    /// Counts events that arrive after every window they belong to has closed
    /// (they are dropped) into `counter`.
    pub fn count_late_in(mut self, counter: LateCounter) -> Self {
        self.late = counter;
        self
    }

    /// Ends of the open windows containing `t` (clipped at the edges of
    /// time, never wrapped).
    fn open_ends(&self, t: i64) -> impl Iterator<Item = i64> + '_ {
        let first = first_end_containing(self.size, self.slide, t);
        let last = last_end_containing(self.size, self.slide, t);
        ends(first, last, self.slide).filter(move |end| *end > self.watermark)
    }

    fn insert(&mut self, key: &K, t: i64, side: impl Fn(&mut Buffers<L, R>)) {
        let ends: Vec<i64> = self.open_ends(t).collect();
        if ends.is_empty() {
            self.late.add(1);
            return;
        }
        for end in ends {
            let buffers = self.windows.entry(end).or_default().get_mut();
            match buffers.get_mut(key) {
                Some(b) => side(b),
                None => {
                    let mut b = (Vec::new(), Vec::new());
                    side(&mut b);
                    buffers.insert(key.clone(), b);
                }
            }
        }
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> CoOperator for WindowJoin<L, R, K> {
    type Left = L;
    type Right = R;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, L, R>>;
    type Time = EventTime;

    fn open(&mut self, ctx: &InstanceContext) {
        self.checkpoint.open(ctx);
    }

    fn statefulness(&self) -> Statefulness {
        self.checkpoint.statefulness(
            "its state is left out of checkpoints: build it without `.transient()` (its key and row types must then be archivable with rkyv)",
        )
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        if !self.checkpoint.is_enabled() {
            return Ok(None);
        }
        // The pause: the open windows are frozen; their rows are gathered
        // and archived off this thread, when the checkpoint is written.
        let frozen: Vec<_> = self
            .windows
            .iter_mut()
            .map(|(&end, window)| (end, window.freeze()))
            .collect();
        Ok(self
            .checkpoint
            .snapshot_beside(ctx, self.watermark, move || {
                let mut per_key: FastHashMap<K, KeyWindows<L, R>> = FastHashMap::default();
                for (end, keys) in &frozen {
                    for (key, (lefts, rights)) in keys.iter() {
                        per_key.entry(key.clone()).or_default().push((
                            *end,
                            lefts.clone(),
                            rights.clone(),
                        ));
                    }
                }
                per_key.into_iter().collect()
            }))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let Some(restored) = self.checkpoint.restore(restore)? else {
            return Ok(());
        };
        if let Some(watermark) = restored.metas.iter().copied().max() {
            self.watermark = self.watermark.max(watermark);
        }
        for (key, windows) in restored.entries {
            for (end, lefts, rights) in windows {
                self.windows
                    .entry(end)
                    .or_default()
                    .get_mut()
                    .insert(key.clone(), (lefts, rights));
            }
        }
        Ok(())
    }

    fn on_left(&mut self, value: L, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        let key = ctx.key();
        self.insert(key.get(), t, |b| b.0.push(value.clone()));
    }

    fn on_right(&mut self, value: R, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        let key = ctx.key();
        self.insert(key.get(), t, |b| b.1.push(value.clone()));
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.watermark = watermark.millis();
        while let Some(entry) = self.windows.first_entry() {
            let end = *entry.key();
            if end > self.watermark {
                break;
            }
            let time = Timestamp::from_millis(last_instant(end));
            for (key, (lefts, rights)) in entry.remove().into_inner() {
                let row = |left: Option<L>, right: Option<R>| JoinRow {
                    key: key.clone(),
                    left,
                    right,
                };
                match self.kind {
                    JoinKind::Semi => {
                        if !rights.is_empty() {
                            for l in lefts {
                                out.emit_at(row(Some(l), None), time);
                            }
                        }
                        continue;
                    }
                    kind => {
                        for l in &lefts {
                            for r in &rights {
                                out.emit_at(row(Some(l.clone()), Some(r.clone())), time);
                            }
                        }
                        if rights.is_empty() && kind.keeps_left() {
                            for l in lefts.iter().cloned() {
                                out.emit_at(row(Some(l), None), time);
                            }
                        }
                        if lefts.is_empty() && kind.keeps_right() {
                            for r in rights.iter().cloned() {
                                out.emit_at(row(None, Some(r)), time);
                            }
                        }
                    }
                }
            }
        }
    }
}
