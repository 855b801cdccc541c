//! Windowed stream-stream join: both sides buffered per window; when event
//! time passes a window's end, its matches are emitted, and for outer joins
//! the rows that found no match, with the other side empty.
//!
//! A window keeps its rows as they come, `(key, row)` appended to one
//! vector per side: a record costs a push, with no lookup by key and no
//! allocation per key. When the window fires, it is joined as a batch (a
//! hash join: the left rows chained by key in one table, the right rows
//! probing it), and its vectors are kept, emptied, for the next window.
//!
//! A checkpoint seals what each side holds into a chunk it shares (an
//! `Arc`), and the side goes on in a new chunk: nothing is copied, on the
//! task thread or elsewhere, however large a window is. A window that fires
//! takes its chunks back (copied only if a checkpoint still reads them).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use streamwork_core::SnapshotContext;
use streamwork_core::chain::{Epochs, FrozenEpochs};
use streamwork_core::hash::FastHashMap;
use streamwork_core::ports::Either;
use streamwork_core::{
    ByKey, Collector, Context, Data, EventTime, Key, Operator, Restore, StateBytes, TaskError,
    Timestamp,
};
use streamwork_state::{FrozenChanges, KeyedCheckpoint};
use streamwork_window::LateCounter;
use streamwork_window::ends::{ends, first_end_containing, last_end_containing, last_instant};

use crate::{JoinKind, JoinRow};

/// Rows in arrival order: chunks sealed by checkpoints, which share them,
/// and the chunk being written.
#[derive(Clone)]
struct Chunks<T> {
    sealed: Vec<Arc<Vec<T>>>,
    open: Vec<T>,
}

impl<T> Chunks<T> {
    /// No rows; the chunk being written starts in `open`'s space.
    fn in_space(mut open: Vec<T>) -> Self {
        open.clear();
        Chunks {
            sealed: Vec::new(),
            open,
        }
    }

    #[inline]
    fn push(&mut self, row: T) {
        self.open.push(row);
    }

    fn len(&self) -> usize {
        self.sealed.iter().map(|c| c.len()).sum::<usize>() + self.open.len()
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.sealed.iter().flat_map(|c| c.iter()).chain(&self.open)
    }

    /// Seals what it holds for a checkpoint, which reads the chunks
    /// returned however the rows go on.
    fn seal(&mut self) -> FrozenChunks<T> {
        if !self.open.is_empty() {
            self.sealed.push(Arc::new(std::mem::take(&mut self.open)));
        }
        FrozenChunks(self.sealed.clone())
    }

    /// Every row, in order, in one vector: a chunk no checkpoint reads any
    /// more is moved, not copied.
    fn into_vec(self) -> Vec<T>
    where
        T: Clone,
    {
        if self.sealed.is_empty() {
            return self.open;
        }
        let mut all = Vec::with_capacity(self.len());
        for chunk in self.sealed {
            match Arc::try_unwrap(chunk) {
                Ok(rows) => all.extend(rows),
                Err(shared) => all.extend(shared.iter().cloned()),
            }
        }
        all.extend(self.open);
        all
    }
}

/// A side's rows as a checkpoint sealed them.
struct FrozenChunks<T>(Vec<Arc<Vec<T>>>);

impl<T> FrozenChunks<T> {
    fn len(&self) -> usize {
        self.0.iter().map(|c| c.len()).sum()
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flat_map(|c| c.iter())
    }

    /// The rows after the first `skip` (whole chunks skipped at once).
    fn after(&self, mut skip: usize) -> impl Iterator<Item = &T> {
        let mut first = 0;
        while first < self.0.len() && self.0[first].len() <= skip {
            skip -= self.0[first].len();
            first += 1;
        }
        self.0[first..]
            .iter()
            .enumerate()
            .flat_map(move |(i, c)| c[if i == 0 { skip } else { 0 }..].iter())
    }
}

/// The rows of one window, each side in arrival order.
#[derive(Clone)]
struct WindowRows<K, L, R> {
    lefts: Chunks<(K, L)>,
    rights: Chunks<(K, R)>,
}

/// Which side of a window's rows a record goes to.
type Side<K, L, R, V> = fn(&mut WindowRows<K, L, R>) -> &mut Chunks<(K, V)>;

/// The emptied vectors of a fired window's sides.
type Spare<K, L, R> = (Vec<(K, L)>, Vec<(K, R)>);

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
    windows: BTreeMap<i64, WindowRows<K, L, R>>,
    /// The vectors of the last window fired, emptied: the next window's,
    /// so that a window does not grow its vectors from nothing.
    spare: Option<Spare<K, L, R>>,
    watermark: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<i64, K, KeyWindows<L, R>>,
    /// The epochs of its freezes, and the keys of the windows fired in
    /// each: a key whose window fired changed, for an incremental snapshot.
    epochs: Epochs<K>,
    /// The length of each side of each open window at the freeze of an
    /// epoch: the rows after it were written since.
    marks: Marks,
    _types: PhantomData<fn(L, R)>,
}

/// Per epoch frozen in, each open window's end and the lengths of its
/// sides then.
type Marks = BTreeMap<u32, Arc<[(i64, usize, usize)]>>;

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
            epochs: self.epochs.clone(),
            marks: self.marks.clone(),
            _types: PhantomData,
        }
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> WindowJoin<L, R, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the rows buffered in open windows and the watermark in the job's checkpoints,
        /// by key group, so that a restored job (at any parallelism) joins as if it had not
        /// failed. Needed in a job that promises at-least-once or exactly-once delivery.
        where [K, L, R]
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
            epochs: Epochs::default(),
            marks: Marks::new(),
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
        self.windows.entry(end).or_insert_with(|| {
            let (lefts, rights) = spare.take().unwrap_or_default();
            WindowRows {
                lefts: Chunks::in_space(lefts),
                rights: Chunks::in_space(rights),
            }
        })
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
        rows: WindowRows<K, L, R>,
        time: Timestamp,
        out: &mut Collector<JoinRow<K, L, R>>,
    ) {
        let kind = self.kind;
        let (mut lefts, mut rights) = (rows.lefts.into_vec(), rows.rights.into_vec());
        let (lefts, rights) = (&mut lefts, &mut rights);
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
        lefts.clear();
        rights.clear();
        self.spare = Some((std::mem::take(lefts), std::mem::take(rights)));
    }
}

/// An open window's end and its sides' rows, sealed.
type FrozenWindow<K, L, R> = (i64, FrozenChunks<(K, L)>, FrozenChunks<(K, R)>);

/// The open windows as a checkpoint froze them, with the lengths of their
/// sides at earlier freezes and the keys of the windows fired since: what
/// an incremental snapshot reads.
struct FrozenWindows<K, L, R> {
    /// Each open window's end and its rows.
    windows: Vec<FrozenWindow<K, L, R>>,
    epochs: FrozenEpochs<K>,
    marks: Marks,
}

impl<K: Key, L: Data + Sync, R: Data + Sync> FrozenWindows<K, L, R> {
    /// Each key's windows (those of the keys `only` admits), for a
    /// snapshot.
    fn per_key(&self, only: impl Fn(&K) -> bool) -> FastHashMap<K, KeyWindows<L, R>> {
        let mut per_key: FastHashMap<K, KeyWindows<L, R>> = FastHashMap::default();
        for (end, lefts, rights) in &self.windows {
            let mut keys: FastHashMap<&K, (Vec<L>, Vec<R>)> = FastHashMap::default();
            for (key, left) in lefts.iter().filter(|(k, _)| only(k)) {
                keys.entry(key).or_default().0.push(left.clone());
            }
            for (key, right) in rights.iter().filter(|(k, _)| only(k)) {
                keys.entry(key).or_default().1.push(right.clone());
            }
            for (key, (lefts, rights)) in keys {
                per_key
                    .entry(key.clone())
                    .or_default()
                    .push((*end, lefts, rights));
            }
        }
        per_key
    }
}

impl<K: Key, L: Data + Sync, R: Data + Sync> FrozenChanges<K, KeyWindows<L, R>>
    for FrozenWindows<K, L, R>
{
    fn epoch(&self) -> u32 {
        self.epochs.epoch()
    }

    fn whole_since(&self, epoch: u32) -> bool {
        let rows = self
            .windows
            .iter()
            .map(|(_, lefts, rights)| lefts.len() + rights.len())
            .sum();
        self.epochs.whole_since(epoch, rows)
    }

    fn entries(&self) -> Result<Vec<(K, KeyWindows<L, R>)>, streamwork_state::StateError> {
        Ok(self.per_key(|_| true).into_iter().collect())
    }

    /// The keys with a row written since the freeze of `epoch`, or in a
    /// window fired since, each with every window it has now (none:
    /// removed). A window open then has its sides' lengths of then; one
    /// without (opened since, or its lengths forgotten) counts whole.
    fn changes_since(
        &self,
        epoch: u32,
    ) -> Result<streamwork_state::ChangesSince<K, KeyWindows<L, R>>, streamwork_state::StateError>
    {
        let then = self.marks.get(&epoch);
        let mut changed: FastHashMap<&K, ()> = FastHashMap::default();
        for (end, lefts, rights) in &self.windows {
            let (left_then, right_then) = then
                .and_then(|m| m.iter().find(|(e, _, _)| e == end))
                .map_or((0, 0), |&(_, l, r)| (l, r));
            // A side shorter than it was (which an open window never is)
            // counts whole.
            let left_then = if left_then > lefts.len() {
                0
            } else {
                left_then
            };
            let right_then = if right_then > rights.len() {
                0
            } else {
                right_then
            };
            for (key, _) in lefts.after(left_then) {
                changed.insert(key, ());
            }
            for (key, _) in rights.after(right_then) {
                changed.insert(key, ());
            }
        }
        for key in self.epochs.removed_since(epoch) {
            changed.insert(key, ());
        }
        let per_key = self.per_key(|k| changed.contains_key(k));
        Ok(crate::checkpointing::written_and_removed(changed, per_key))
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Operator for WindowJoin<L, R, K> {
    type In = Either<L, R>;
    type Key = ByKey<K>;
    type Out = Collector<JoinRow<K, L, R>>;
    type Time = EventTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let rows = self
            .windows
            .values()
            .map(|w| w.lefts.len() + w.rights.len())
            .sum();
        let Some(planned) = self.checkpoint.plan_snapshot(ctx, rows) else {
            return Ok(None);
        };
        if let Some(epoch) = planned.forget_through() {
            self.epochs.forget_through(epoch);
            self.marks.retain(|at, _| *at >= epoch);
        }
        // The pause: each side of each open window is sealed, and the
        // lengths noted; their rows (or those of the keys that changed
        // since a complete checkpoint of this run) are gathered and
        // archived off this thread, when the checkpoint is written.
        let windows: Vec<FrozenWindow<K, L, R>> = self
            .windows
            .iter_mut()
            .map(|(&end, w)| (end, w.lefts.seal(), w.rights.seal()))
            .collect();
        let epochs = self.epochs.freeze();
        self.marks.insert(
            epochs.epoch(),
            windows
                .iter()
                .map(|(end, lefts, rights)| (*end, lefts.len(), rights.len()))
                .collect(),
        );
        let frozen = FrozenWindows {
            windows,
            epochs,
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
        for (key, windows) in entries {
            for (end, lefts, rights) in windows {
                let rows = self.window(end);
                for left in lefts {
                    rows.lefts.push((key.clone(), left));
                }
                for right in rights {
                    rows.rights.push((key.clone(), right));
                }
            }
        }
        Ok(())
    }

    #[inline]
    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        match record {
            Either::Left(value) => {
                let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
                self.insert(ctx.key().get(), t, value, |rows| &mut rows.lefts);
            }
            Either::Right(value) => {
                let t = ctx.timestamp().map(Timestamp::millis).unwrap_or(i64::MIN);
                self.insert(ctx.key().get(), t, value, |rows| &mut rows.rights);
            }
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.watermark = watermark.millis();
        while let Some(entry) = self.windows.first_entry() {
            let end = *entry.key();
            if end > self.watermark {
                break;
            }
            let time = Timestamp::from_millis(last_instant(end));
            let rows = entry.remove();
            if self.epochs.tracks() {
                // Its keys changed: an incremental snapshot writes them
                // with the windows they have left.
                let mut seen: FastHashMap<&K, ()> = FastHashMap::default();
                let keys = rows.lefts.iter().map(|(k, _)| k);
                for key in keys.chain(rows.rights.iter().map(|(k, _)| k)) {
                    if seen.insert(key, ()).is_none() {
                        self.epochs.removed(key.clone());
                    }
                }
            }
            self.fire(rows, time, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks of 0..n sealed at `cuts` (some empty, some repeated).
    fn chunks(n: u32, cuts: &[u32]) -> (Chunks<u32>, Vec<FrozenChunks<u32>>) {
        let mut chunks = Chunks::in_space(Vec::new());
        let mut frozen = Vec::new();
        for i in 0..n {
            if cuts.contains(&i) {
                frozen.push(chunks.seal());
            }
            chunks.push(i);
        }
        (chunks, frozen)
    }

    #[test]
    fn the_rows_after_any_count_are_read_across_sealed_chunks() {
        let (mut rows, _) = chunks(10, &[0, 3, 3, 4, 8]);
        let sealed = rows.seal();
        assert_eq!(sealed.len(), 10);
        for skip in 0..=11 {
            let after: Vec<u32> = sealed.after(skip).copied().collect();
            let want: Vec<u32> = (skip.min(10) as u32..10).collect();
            assert_eq!(after, want, "after {skip}");
        }
        assert_eq!(
            rows.iter().copied().collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_fired_window_takes_its_rows_back_whether_a_checkpoint_reads_them_or_not() {
        let (rows, frozen) = chunks(10, &[2, 6]);
        // A checkpoint still reads the first two chunks: they are copied.
        assert_eq!(rows.clone().into_vec(), (0..10).collect::<Vec<_>>());
        drop(frozen);
        // None does: they are moved.
        assert_eq!(rows.into_vec(), (0..10).collect::<Vec<_>>());
    }
}
