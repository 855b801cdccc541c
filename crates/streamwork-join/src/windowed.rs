//! Windowed stream-stream join: both sides buffered per window; when event
//! time passes a window's end, its matches are emitted, and for outer joins
//! the rows that found no match, with the other side empty.
//!
//! A window keeps its rows as they come, `(key, row)` appended to one
//! vector per side: a record costs a push, with no lookup by key and no
//! allocation per key. When the window fires, it is joined as a batch (a
//! hash join: the left rows chained by key in one table, the right rows
//! probing it), and its vectors are kept, emptied, for the next window.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use streamwork_core::SnapshotContext;
use streamwork_core::hash::FastHashMap;
use streamwork_core::{
    ByKey, CoOperator, Collector, Context, Data, EventTime, Key, Restore, StateBytes, TaskError,
    Timestamp,
};
use streamwork_state::{CowCell, KeyedCheckpoint, StateData};
use streamwork_window::LateCounter;
use streamwork_window::ends::{ends, first_end_containing, last_end_containing, last_instant};

use crate::{JoinKind, JoinRow};

/// The rows of one window, each side in arrival order.
#[derive(Clone)]
struct WindowRows<K, L, R> {
    lefts: Vec<(K, L)>,
    rights: Vec<(K, R)>,
}

impl<K, L, R> Default for WindowRows<K, L, R> {
    fn default() -> Self {
        WindowRows {
            lefts: Vec::new(),
            rights: Vec::new(),
        }
    }
}

/// Which side of a window's rows a record goes to.
type Side<K, L, R, V> = fn(&mut WindowRows<K, L, R>) -> &mut Vec<(K, V)>;

/// No row in a chain of left rows.
const END: u32 = u32::MAX;

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
    /// The vectors of the last window fired, emptied: the next window's,
    /// so that a window does not grow its vectors from nothing.
    spare: Option<WindowRows<K, L, R>>,
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
            spare: None,
            watermark: self.watermark,
            checkpoint: self.checkpoint.clone(),
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
            spare: None,
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

    /// The rows of the open window ending at `end`.
    #[inline]
    fn window(&mut self, end: i64) -> &mut WindowRows<K, L, R> {
        let spare = &mut self.spare;
        self.windows
            .entry(end)
            .or_insert_with(|| CowCell::new(spare.take().unwrap_or_default()))
            .get_mut()
    }

    /// Appends a row of one side at time `t` to every open window containing
    /// it (one for tumbling windows), or counts it late.
    #[inline]
    fn insert<V: Clone>(&mut self, key: &K, t: i64, value: V, side: Side<K, L, R, V>) {
        let (first, last) = (
            first_end_containing(self.size, self.slide, t),
            last_end_containing(self.size, self.slide, t),
        );
        let watermark = self.watermark;
        let mut open = ends(first, last, self.slide).filter(|end| *end > watermark);
        let Some(mut end) = open.next() else {
            self.late.add(1);
            return;
        };
        // Cloned for every window but the last, which takes the value.
        let mut value = Some(value);
        loop {
            let next = open.next();
            let row = match next {
                Some(_) => value.clone(),
                None => value.take(),
            };
            if let Some(row) = row {
                side(self.window(end)).push((key.clone(), row));
            }
            match next {
                Some(following) => end = following,
                None => break,
            }
        }
    }

    /// Emits the rows of a fired window (see the module docs) at `time`, and
    /// keeps its emptied vectors.
    fn fire(
        &mut self,
        mut rows: WindowRows<K, L, R>,
        time: Timestamp,
        out: &mut Collector<JoinRow<K, L, R>>,
    ) {
        let kind = self.kind;
        let WindowRows { lefts, rights } = &mut rows;
        if kind == JoinKind::Semi {
            // Each left row once if its key has a right row.
            let keys: std::collections::HashSet<&K, streamwork_core::hash::BuildStableHasher> =
                rights.iter().map(|(key, _)| key).collect();
            for (key, left) in lefts.drain(..) {
                if keys.contains(&key) {
                    out.emit_at(
                        JoinRow {
                            key,
                            left: Some(left),
                            right: None,
                        },
                        time,
                    );
                }
            }
        } else {
            // The left rows chained by key: `heads` holds the last of each
            // key, `next` the one before each row.
            let mut heads: FastHashMap<&K, u32> = FastHashMap::default();
            heads.reserve(lefts.len());
            let mut next = vec![END; lefts.len()];
            for (i, (key, _)) in lefts.iter().enumerate() {
                if let Some(previous) = heads.insert(key, i as u32) {
                    next[i] = previous;
                }
            }
            let mut matched = vec![false; if kind.keeps_left() { lefts.len() } else { 0 }];
            for (key, right) in rights.iter() {
                let mut at = heads.get(key).copied().unwrap_or(END);
                if at == END {
                    if kind.keeps_right() {
                        let row = JoinRow {
                            key: key.clone(),
                            left: None,
                            right: Some(right.clone()),
                        };
                        out.emit_at(row, time);
                    }
                    continue;
                }
                while at != END {
                    let i = at as usize;
                    if let Some(seen) = matched.get_mut(i) {
                        *seen = true;
                    }
                    let row = JoinRow {
                        key: key.clone(),
                        left: Some(lefts[i].1.clone()),
                        right: Some(right.clone()),
                    };
                    out.emit_at(row, time);
                    at = next[i];
                }
            }
            if kind.keeps_left() {
                for (i, (key, left)) in lefts.iter().enumerate() {
                    if !matched[i] {
                        let row = JoinRow {
                            key: key.clone(),
                            left: Some(left.clone()),
                            right: None,
                        };
                        out.emit_at(row, time);
                    }
                }
            }
        }
        rows.lefts.clear();
        rows.rights.clear();
        self.spare = Some(rows);
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> CoOperator for WindowJoin<L, R, K> {
    type Left = L;
    type Right = R;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, L, R>>;
    type Time = EventTime;

    crate::checkpointing::checkpointed_join!();

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
                for (end, rows) in &frozen {
                    let mut keys: FastHashMap<&K, (Vec<L>, Vec<R>)> = FastHashMap::default();
                    for (key, left) in &rows.lefts {
                        keys.entry(key).or_default().0.push(left.clone());
                    }
                    for (key, right) in &rows.rights {
                        keys.entry(key).or_default().1.push(right.clone());
                    }
                    for (key, (lefts, rights)) in keys {
                        per_key
                            .entry(key.clone())
                            .or_default()
                            .push((*end, lefts, rights));
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
                let rows = self.windows.entry(end).or_default().get_mut();
                rows.lefts
                    .extend(lefts.into_iter().map(|left| (key.clone(), left)));
                rows.rights
                    .extend(rights.into_iter().map(|right| (key.clone(), right)));
            }
        }
        Ok(())
    }

    #[inline]
    fn on_left(&mut self, value: L, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        self.insert(ctx.key().get(), t, value, |rows| &mut rows.lefts);
    }

    #[inline]
    fn on_right(&mut self, value: R, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
        self.insert(ctx.key().get(), t, value, |rows| &mut rows.rights);
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.watermark = watermark.millis();
        while let Some(entry) = self.windows.first_entry() {
            let end = *entry.key();
            if end > self.watermark {
                break;
            }
            let time = Timestamp::from_millis(last_instant(end));
            let rows = entry.remove().into_inner();
            self.fire(rows, time, out);
        }
    }
}
