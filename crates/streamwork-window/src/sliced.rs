//! Tumbling and sliding time windows, computed on slices.
//!
//! A sliding window of size `S` and slide `L` is cut into slices of
//! `g = gcd(S, L)` (a tumbling window is one slice per window). Each event
//! updates exactly one per-key partial aggregate, in its slice; a window's
//! result merges the partials of the `S / g` slices it spans (the slicing of
//! Scotty, Traub et al. 2018, and Cutty). So no event is stored or processed
//! `S / L` times: only partials are merged, once per window.
//!
//! Windows are aligned to the epoch: they start at multiples of `L`. A window
//! `[start, end)` fires when event time (the watermark) reaches `end`; with an
//! allowed lateness `A`, its slices are kept until event time reaches
//! `end + A`, and an event arriving late but within it updates the slices and
//! re-fires the window as an [`Firing::Update`]; an event later than that goes
//! to the `late` channel and is counted.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use streamwork_state::CowCell;

use hashbrown::hash_table::{Entry, HashTable};
use streamwork_core::SnapshotContext;
use streamwork_core::chain::{Epochs, FrozenEpochs, stamp};
use streamwork_core::{
    Context, Data, KeyKind, Operator, Restore, StateBytes, TaskError, Timestamp,
};
use streamwork_state::{FrozenChanges, KeyedCheckpoint};

use crate::LateCounter;
use crate::aggregate::Aggregate;
use crate::domain::Domain;
use crate::ends::{
    ends, first_end_containing, last_end_containing, last_instant, next_end, slice_start,
};
use crate::outputs::WindowOutputs;
use crate::window::{Firing, Window, WindowResult};

/// Early firing of sliced windows, before they close.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Early {
    /// Every this many events of a key in a window.
    pub every: Option<u64>,
    /// Every this many milliseconds of processing time, for windows that changed.
    pub interval: Option<i64>,
}

/// One key's partial aggregate in one slice.
#[derive(Clone)]
struct Partial<K, Acc> {
    key: K,
    hash: u64,
    acc: Acc,
    /// Events added, for early firing by count.
    count: u64,
    /// Changed since the last early firing by interval.
    dirty: bool,
    /// The epoch (checkpoints frozen so far) it was last changed in.
    version: u32,
}

/// The partials of one slice, by key.
struct Slice<K, Acc> {
    partials: HashTable<Partial<K, Acc>>,
}

impl<K: Clone, Acc: Clone> Clone for Slice<K, Acc> {
    fn clone(&self) -> Self {
        Slice {
            partials: self.partials.clone(),
        }
    }
}

impl<K, Acc> Default for Slice<K, Acc> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, Acc> Slice<K, Acc> {
    fn new() -> Self {
        Slice {
            partials: HashTable::new(),
        }
    }

    fn with_capacity(partials: usize) -> Self {
        Slice {
            partials: HashTable::with_capacity(partials),
        }
    }
}

/// The slice type of a window operator.
type SliceOf<T, KK, A> = Slice<<KK as KeyKind>::Value, <A as Aggregate<T>>::Acc>;

/// Every key's partials in `slices`, gathered into one value per key: a
/// key's first partial `start`s it, each later one is `add`ed to it.
fn gather<'a, K: PartialEq, Acc, V>(
    slices: &[(i64, &'a Slice<K, Acc>)],
    start: impl Fn(&'a Acc) -> V,
    add: impl Fn(&mut V, &'a Acc),
) -> HashTable<(u64, &'a K, V)> {
    let mut gathered: HashTable<(u64, &'a K, V)> =
        HashTable::with_capacity(slices.first().map_or(0, |(_, s)| s.partials.len()));
    for (_, slice) in slices {
        for partial in slice.partials.iter() {
            match gathered.entry(partial.hash, |(_, k, _)| **k == partial.key, |(h, _, _)| *h) {
                Entry::Occupied(mut e) => add(&mut e.get_mut().2, &partial.acc),
                Entry::Vacant(e) => {
                    e.insert((partial.hash, &partial.key, start(&partial.acc)));
                }
            }
        }
    }
    gathered
}

/// The time range and window ends of the hot slice.
#[derive(Copy, Clone, Debug)]
struct HotBounds {
    start: i64,
    end: i64,
    first_end: i64,
    last_end: i64,
}

impl HotBounds {
    const NONE: HotBounds = HotBounds {
        start: 0,
        end: 0,
        first_end: 0,
        last_end: 0,
    };
}

/// How sliced windows checkpoint: the time reached, and per key its partials
/// as `(slice index, accumulator, events)`.
pub type SlicedCheckpoint<K, Acc> = KeyedCheckpoint<i64, K, Vec<(i64, Acc, u64)>>;

/// One key's partials in a snapshot: `(slice index, accumulator, events)`
/// per slice.
type SliceParts<Acc> = Vec<(i64, Acc, u64)>;

/// One key's partials gathered for a snapshot: its hash, the key, and its
/// parts.
type KeyParts<K, Acc> = (u64, K, SliceParts<Acc>);

/// Every key's partials in `slices`, by key, for a snapshot.
fn entries_of<K: Clone + Eq, Acc: Clone>(
    slices: &[(i64, Arc<Slice<K, Acc>>)],
) -> Vec<(K, SliceParts<Acc>)> {
    let mut by_key: HashTable<KeyParts<K, Acc>> = HashTable::new();
    for (index, slice) in slices {
        for p in slice.partials.iter() {
            let part = (*index, p.acc.clone(), p.count);
            match by_key.entry(p.hash, |(_, k, _)| *k == p.key, |(h, _, _)| *h) {
                Entry::Occupied(mut e) => e.get_mut().2.push(part),
                Entry::Vacant(e) => {
                    e.insert((p.hash, p.key.clone(), vec![part]));
                }
            }
        }
    }
    by_key.into_iter().map(|(_, k, parts)| (k, parts)).collect()
}

/// The slices as a checkpoint froze them, and the keys of the slices
/// dropped since earlier freezes: what an incremental snapshot reads.
struct FrozenSlices<K, Acc> {
    slices: Vec<(i64, Arc<Slice<K, Acc>>)>,
    epochs: FrozenEpochs<K>,
    hash: fn(&K) -> u64,
}

impl<K, Acc> FrozenChanges<K, SliceParts<Acc>> for FrozenSlices<K, Acc>
where
    K: Clone + Eq + Send + Sync + 'static,
    Acc: Clone + Send + Sync + 'static,
{
    fn epoch(&self) -> u32 {
        self.epochs.epoch()
    }

    fn whole_since(&self, epoch: u32) -> bool {
        let partials = self.slices.iter().map(|(_, s)| s.partials.len()).sum();
        self.epochs.whole_since(epoch, partials)
    }

    fn entries(&self) -> Vec<(K, SliceParts<Acc>)> {
        entries_of(&self.slices)
    }

    /// The keys with a partial changed since, or in a slice dropped since,
    /// each with every partial it has now (none: removed).
    fn changes_since(&self, epoch: u32) -> (Vec<(K, SliceParts<Acc>)>, Vec<K>) {
        fn note<'k, K: Eq>(changed: &mut HashTable<(u64, &'k K)>, hash: u64, key: &'k K) {
            if let Entry::Vacant(e) = changed.entry(hash, |(_, k)| *k == key, |(h, _)| *h) {
                e.insert((hash, key));
            }
        }
        let mut changed: HashTable<(u64, &K)> = HashTable::new();
        for (_, slice) in &self.slices {
            for p in slice.partials.iter().filter(|p| p.version > epoch) {
                note(&mut changed, p.hash, &p.key);
            }
        }
        for key in self.epochs.removed_since(epoch) {
            note(&mut changed, (self.hash)(key), key);
        }
        let (mut written, mut removed) = (Vec::new(), Vec::new());
        for (hash, key) in changed {
            let parts: SliceParts<Acc> = self
                .slices
                .iter()
                .filter_map(|(index, slice)| {
                    let p = slice.partials.find(hash, |p| p.key == *key)?;
                    Some((*index, p.acc.clone(), p.count))
                })
                .collect();
            if parts.is_empty() {
                removed.push(key.clone());
            } else {
                written.push((key.clone(), parts));
            }
        }
        (written, removed)
    }
}

/// At most how many emptied slice tables to keep for reuse. Below it, as many
/// are kept as slices were ever live at once: when watermarks from several
/// upstream instances lag one another, that many slices are open together,
/// and each would otherwise grow its table again from nothing.
const MAX_SPARE_SLICES: usize = 64;

/// Tumbling or sliding windows over a stream partitioned as `KK`, in time
/// domain `D`, computing aggregate `A`. Built with [`Windows`](crate::Windows).
pub struct SlicedWindows<T, KK: KeyKind, D, A: Aggregate<T>> {
    size: i64,
    slide: i64,
    slice: i64,
    lateness: i64,
    early: Early,
    aggregate: A,
    late: LateCounter,
    /// Slices by index (slice `i` covers `[i * slice, (i + 1) * slice)`),
    /// each shared with the checkpoint being written, if any: a slice is
    /// copied before it changes while a checkpoint still reads it.
    slices: BTreeMap<i64, CowCell<SliceOf<T, KK, A>>>,
    /// The most recently used slice, kept out of the map with its bounds: an
    /// in-order record reaches it without walking the tree or dividing.
    hot: Option<(i64, SliceOf<T, KK, A>)>,
    hot_bounds: HotBounds,
    /// Emptied tables of purged slices, reused so that a new slice does not
    /// grow its table from nothing.
    spare: Vec<SliceOf<T, KK, A>>,
    /// The most slices live at once so far (the hot one included).
    live_peak: usize,
    /// Partials in the last purged slice: the capacity of a new table.
    typical_len: usize,
    /// Event time (or processing time) reached so far.
    now: i64,
    /// The next window end that has not fired.
    next_end: Option<i64>,
    /// Wall clock of the last early firing by interval.
    last_early: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: SlicedCheckpoint<KK::Value, A::Acc>,
    /// The epoch partials are stamped with, and the keys of the slices
    /// dropped (their partials changed, in an incremental snapshot's eyes).
    epochs: Epochs<KK::Value>,
    _types: PhantomData<fn(T, D)>,
}

impl<T, KK: KeyKind, D, A: Aggregate<T>> Clone for SlicedWindows<T, KK, D, A> {
    fn clone(&self) -> Self {
        SlicedWindows {
            size: self.size,
            slide: self.slide,
            slice: self.slice,
            lateness: self.lateness,
            early: self.early,
            aggregate: self.aggregate.clone(),
            late: self.late.clone(),
            slices: self.slices.clone(),
            hot: self.hot.clone(),
            hot_bounds: self.hot_bounds,
            spare: Vec::new(),
            live_peak: self.live_peak,
            typical_len: self.typical_len,
            now: self.now,
            next_end: self.next_end,
            last_early: self.last_early,
            checkpoint: self.checkpoint.clone(),
            epochs: self.epochs.clone(),
            _types: PhantomData,
        }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl<T, KK: KeyKind, D, A: Aggregate<T>> SlicedWindows<T, KK, D, A> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the windows' partial aggregates and the time they have reached
        /// in the job's checkpoints, by key group, so that a restored job (at
        /// any parallelism) fires the same windows with the same contents; the
        /// key and the accumulator must be archivable
        /// ([`StateData`](streamwork_state::StateData)). Windows built by
        /// [`Windows`](crate::Windows) are checkpointed already, unless built
        /// [`transient`](crate::WindowSpec::transient).
        ///
        /// ```
        /// use std::time::Duration;
        /// use streamwork::core::{Operator, Statefulness};
        /// use streamwork::window::Windows;
        /// let counts = Windows::tumbling(Duration::from_secs(1)).count::<u64, u32>();
        /// assert_eq!(counts.statefulness(), Statefulness::Checkpointed);
        /// let forgetful = Windows::tumbling(Duration::from_secs(1)).transient().count::<u64, u32>();
        /// assert!(matches!(forgetful.statefulness(), Statefulness::Unchecked(_)));
        /// ```
        where [KK::Value, A::Acc]
    }

    /// The earliest window end after `now` of a window holding data.
    fn recompute_next_end(&mut self) {
        let (size, slide, slice, now) = (self.size, self.slide, self.slice, self.now);
        self.next_end = self
            .slices
            .keys()
            .filter_map(|&index| {
                let t = slice_start(index, slice);
                let last = last_end_containing(size, slide, t);
                ends(first_end_containing(size, slide, t), last, slide).find(|&end| end > now)
            })
            .min();
    }

    pub(crate) fn new(
        size: i64,
        slide: i64,
        lateness: i64,
        early: Early,
        aggregate: A,
        late: LateCounter,
    ) -> Self {
        let (size, slide) = (size.max(1), slide.max(1));
        SlicedWindows {
            size,
            slide,
            slice: gcd(size, slide),
            lateness: lateness.max(0),
            early,
            aggregate,
            late,
            slices: BTreeMap::new(),
            hot: None,
            hot_bounds: HotBounds::NONE,
            spare: Vec::new(),
            live_peak: 0,
            typical_len: 0,
            now: i64::MIN,
            next_end: None,
            last_early: 0,
            checkpoint: KeyedCheckpoint::default(),
            epochs: Epochs::default(),
            _types: PhantomData,
        }
    }

    fn last_end_containing(&self, t: i64) -> i64 {
        last_end_containing(self.size, self.slide, t)
    }

    fn first_end_containing(&self, t: i64) -> i64 {
        first_end_containing(self.size, self.slide, t)
    }

    /// Makes the slice containing `t` the hot one and returns its bounds.
    #[inline]
    fn heat(&mut self, t: i64) -> HotBounds {
        let bounds = self.hot_bounds;
        if self.hot.is_some() && bounds.start <= t && t < bounds.end {
            return bounds;
        }
        let index = t.div_euclid(self.slice);
        if let Some((old, slice)) = self.hot.take() {
            self.slices.insert(old, CowCell::new(slice));
        }
        let slice = match self.slices.remove(&index) {
            // Copied if a checkpoint still reads it.
            Some(slice) => slice.into_inner(),
            None => {
                self.live_peak = self.live_peak.max(self.slices.len() + 1);
                self.spare
                    .pop()
                    .unwrap_or_else(|| Slice::with_capacity(self.typical_len))
            }
        };
        self.hot = Some((index, slice));
        let start = slice_start(index, self.slice);
        self.hot_bounds = HotBounds {
            start,
            // Not `start + slice`: a slice clipped at the start of time
            // ends where the unclipped one would.
            end: slice_start(index.saturating_add(1), self.slice),
            first_end: first_end_containing(self.size, self.slide, start),
            last_end: last_end_containing(self.size, self.slide, start),
        };
        self.hot_bounds
    }

    fn settle_hot(&mut self) {
        if let Some((index, slice)) = self.hot.take() {
            self.slices.insert(index, CowCell::new(slice));
        }
        self.hot_bounds = HotBounds::NONE;
    }

    /// Results of window `[end - size, end)` for every key (or one key).
    fn emit_window(
        &mut self,
        end: i64,
        firing: Firing,
        only: Option<(u64, &KK::Value)>,
        out: &mut WindowOutputs<WindowResult<KK::Value, A::Out>, T>,
    ) where
        T: Data,
    {
        let start = end.saturating_sub(self.size);
        let window = Window::from_millis(start, end);
        let (first, last) = (
            start.div_euclid(self.slice),
            last_instant(end).div_euclid(self.slice),
        );
        let hot = self
            .hot
            .as_ref()
            .filter(|(i, _)| (first..=last).contains(i));
        let in_map = self.slices.range(first..=last).map(|(i, s)| (*i, s.get()));
        let mut parts: Vec<(i64, &SliceOf<T, KK, A>)> =
            in_map.chain(hot.map(|(i, s)| (*i, s))).collect();
        parts.sort_by_key(|(i, _)| *i);
        let time = Timestamp::from_millis(last_instant(end));
        let results = &mut out.results;
        let mut emit = |key: &KK::Value, value| {
            let result = WindowResult {
                key: key.clone(),
                window,
                value,
                firing,
            };
            results.emit_at(result, time);
        };
        match (parts.as_slice(), only) {
            ([], _) => {}
            (_, Some((hash, key))) => {
                let accs: Vec<&A::Acc> = parts
                    .iter()
                    .filter_map(|(_, s)| s.partials.find(hash, |p| p.key == *key).map(|p| &p.acc))
                    .collect();
                if !accs.is_empty() {
                    let value = self.aggregate.result_of_parts(&accs);
                    emit(key, value);
                }
            }
            ([(_, one)], None) => {
                for partial in one.partials.iter() {
                    let value = self.aggregate.result(&partial.acc);
                    emit(&partial.key, value);
                }
            }
            (many, None) if A::BY_PARTS => {
                let by_key = gather(many, |acc| vec![acc], |accs, acc| accs.push(acc));
                for (_, key, accs) in by_key.iter() {
                    let value = self.aggregate.result_of_parts(accs);
                    emit(key, value);
                }
            }
            (many, None) => {
                // Incremental aggregates: merge the slices' partials per key.
                let aggregate = &self.aggregate;
                let merged = gather(many, A::Acc::clone, |into, acc| aggregate.merge(into, acc));
                for (_, key, acc) in merged.iter() {
                    let value = aggregate.result(acc);
                    emit(key, value);
                }
            }
        }
    }

    /// Fires every window ending at or before `now`, then drops the slices no
    /// window needs any more (with `None`, a domain in which this hook tells
    /// no time: nothing).
    fn advance(
        &mut self,
        now: Option<i64>,
        out: &mut WindowOutputs<WindowResult<KK::Value, A::Out>, T>,
    ) where
        T: Data,
    {
        let Some(now) = now else { return };
        self.settle_hot();
        self.now = self.now.max(now);
        while let Some(end) = self.next_end {
            if end > now {
                break;
            }
            self.emit_window(end, Firing::Final, None, out);
            // The next window end with data: skip gaps in the stream.
            let Some(next) = next_end(end, self.slide) else {
                // The window clipped at the end of time was the last.
                self.next_end = None;
                break;
            };
            let first_slice_after = self
                .slices
                .range(next.saturating_sub(self.size).div_euclid(self.slice)..)
                .next()
                .map(|(i, _)| *i);
            self.next_end = first_slice_after
                .map(|i| next.max(self.first_end_containing(slice_start(i, self.slice))));
        }
        // Drop slices whose last window has fired and passed the lateness.
        let horizon = now.saturating_sub(self.lateness);
        while let Some((&index, _)) = self.slices.first_key_value() {
            let last_end = self.last_end_containing(slice_start(index, self.slice));
            let fired = self.next_end.is_none_or(|next| last_end < next);
            if fired && last_end <= horizon {
                if let Some(slice) = self.slices.remove(&index) {
                    self.typical_len = slice.get().partials.len();
                    if self.epochs.tracks() {
                        for p in slice.get().partials.iter() {
                            self.epochs.removed(p.key.clone());
                        }
                    }
                    // Reused unless a checkpoint still reads it.
                    if self.spare.len() < self.live_peak.min(MAX_SPARE_SLICES)
                        && let CowCell::Own(mut slice) = slice
                    {
                        slice.partials.clear();
                        self.spare.push(slice);
                    }
                }
            } else {
                break;
            }
        }
    }

    fn early_by_interval(&mut self, out: &mut WindowOutputs<WindowResult<KK::Value, A::Out>, T>)
    where
        T: Data,
    {
        self.settle_hot();
        let mut fired: std::collections::HashSet<(i64, u64)> = std::collections::HashSet::new();
        let mut todo: Vec<(i64, u64, KK::Value)> = Vec::new();
        let (size, slide, slice_len, now) = (self.size, self.slide, self.slice, self.now);
        for (&index, slice) in self.slices.iter_mut() {
            if !slice.get().partials.iter().any(|p| p.dirty) {
                continue;
            }
            // Copied if a checkpoint still reads it.
            let slice = slice.get_mut();
            for partial in slice.partials.iter_mut().filter(|p| p.dirty) {
                partial.dirty = false;
                let t = slice_start(index, slice_len);
                let (first, last) = (
                    first_end_containing(size, slide, t),
                    last_end_containing(size, slide, t),
                );
                for end in ends(first, last, slide) {
                    if end > now && fired.insert((end, partial.hash)) {
                        todo.push((end, partial.hash, partial.key.clone()));
                    }
                }
            }
        }
        for (end, hash, key) in todo {
            self.emit_window(end, Firing::Early, Some((hash, &key)), out);
        }
    }
}

impl<T: Data, KK: KeyKind, D: Domain, A: Aggregate<T>> Operator for SlicedWindows<T, KK, D, A> {
    type In = T;
    type Key = KK;
    type Out = WindowOutputs<WindowResult<KK::Value, A::Out>, T>;
    type Time = D::Time;

    streamwork_state::keyed_checkpoint_hooks!(crate::TRANSIENT_FIX);

    fn on_record(&mut self, value: T, ctx: &mut Context<'_, KK, Self::Out>) {
        let t = D::record_time(ctx.timestamp(), &mut self.now);
        // Beyond the allowed lateness of every window containing it: late.
        let hot = self.hot_bounds;
        let last_end = if self.hot.is_some() && hot.start <= t && t < hot.end {
            hot.last_end
        } else {
            last_end_containing(self.size, self.slide, t)
        };
        if D::EVENT_TIME && last_end.saturating_add(self.lateness) <= self.now {
            self.late.add(1);
            ctx.out().late.emit(value);
            return;
        }
        let key = ctx.key_ref();
        let (hash, key_value) = (KK::hash(key), KK::value(key));
        let bounds = self.heat(t);
        let aggregate = &self.aggregate;
        let every = self.early.every;
        let Some((_, slice)) = self.hot.as_mut() else {
            unreachable!("heat sets the hot slice")
        };
        let partial = match slice
            .partials
            .entry(hash, |p| p.key == *key_value, |p| p.hash)
        {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e
                .insert(Partial {
                    key: key_value.clone(),
                    hash,
                    acc: aggregate.create(),
                    count: 0,
                    dirty: false,
                    version: 0,
                })
                .into_mut(),
        };
        aggregate.add(&mut partial.acc, &value);
        partial.count += 1;
        partial.dirty = true;
        stamp(&mut partial.version, self.epochs.now());
        let early_now = every.is_some_and(|n| partial.count.is_multiple_of(n));
        let (first_end, last_end) = (bounds.first_end, bounds.last_end);
        if self.next_end.is_none_or(|next| first_end < next) {
            // The first of the record's windows that has not fired yet, if any.
            let now = self.now;
            let unfired = ends(first_end, last_end, self.slide).find(|&end| end > now);
            if let Some(unfired) = unfired
                && self.next_end.is_none_or(|next| unfired < next)
            {
                self.next_end = Some(unfired);
            }
        }
        let late_within_lateness = D::EVENT_TIME && t < self.now;
        if late_within_lateness || early_now {
            let key_value = key_value.clone();
            for end in ends(first_end, last_end, self.slide) {
                let within_lateness = end.saturating_add(self.lateness) > self.now;
                if end <= self.now && late_within_lateness && within_lateness {
                    self.emit_window(end, Firing::Update, Some((hash, &key_value)), ctx.out());
                } else if end > self.now && early_now {
                    self.emit_window(end, Firing::Early, Some((hash, &key_value)), ctx.out());
                }
            }
        }
    }

    crate::window_time_hooks!();

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        self.advance(D::tick_time(now), out);
        if let Some(interval) = self.early.interval
            && now.millis().saturating_sub(self.last_early) >= interval
        {
            self.last_early = now.millis();
            self.early_by_interval(out);
        }
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        if !self.checkpoint.is_enabled() {
            return Ok(None);
        }
        // The pause: the hot slice joins the others, and the checkpoint
        // shares them all; they (or the keys that changed since a complete
        // checkpoint of this run) are gathered and archived off this thread.
        self.settle_hot();
        let partials = self.slices.values().map(|s| s.get().partials.len()).sum();
        let Some(planned) = self.checkpoint.plan_snapshot(ctx, partials) else {
            return Ok(None);
        };
        if let Some(epoch) = planned.forget_through() {
            self.epochs.forget_through(epoch);
        }
        let frozen = FrozenSlices {
            slices: self
                .slices
                .iter_mut()
                .map(|(&i, slice)| (i, slice.freeze()))
                .collect(),
            epochs: self.epochs.freeze(),
            hash: KK::hash_value,
        };
        self.checkpoint
            .snapshot_frozen(ctx, planned, self.now, frozen)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let Some(entries) = self.checkpoint.restore_raising(restore, &mut self.now)? else {
            return Ok(());
        };
        for (key, parts) in entries {
            let hash = KK::hash_value(&key);
            for (index, acc, count) in parts {
                let slice = self.slices.entry(index).or_default();
                slice.get_mut().partials.insert_unique(
                    hash,
                    Partial {
                        key: key.clone(),
                        hash,
                        acc,
                        count,
                        dirty: false,
                        version: 0,
                    },
                    |p| p.hash,
                );
            }
        }
        self.recompute_next_end();
        Ok(())
    }
}
