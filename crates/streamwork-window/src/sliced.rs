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
//!
//! Pre-aggregated before their keyed exchange (see
//! [`streamwork_core::pre_aggregate`]): each sending task merges its records
//! into one partial per key and slice ([`SliceMerge`]), holding a slice's
//! partials until the watermark reaches the end of the first window the
//! slice is part of (or a checkpoint's barrier comes), and the window
//! operator merges each partial into its own slice
//! ([`PreAggregatedWindows`]), as it merges slices into windows. The engine
//! places both halves, by default, for windows in event time over an
//! incremental aggregate without early firing (whose firings count records
//! one by one, or show a window before it closes), when no component reads
//! the `late` channel. A window
//! then fires the same results; an update within the allowed lateness comes
//! once per partial instead of once per record.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use streamwork_state::CowCell;

use hashbrown::hash_table::{Entry, HashTable};
use streamwork_core::SnapshotContext;
use streamwork_core::chain::{Epochs, FrozenEpochs, stamp};
use streamwork_core::ports::Either;
use streamwork_core::pre_aggregate::LocalAggregate;
use streamwork_core::{
    Context, Data, InstanceContext, KeyKind, Operator, PreAggregating, Restore, StateBytes,
    Statefulness, TaskError, Timestamp,
};
use streamwork_state::{FrozenChanges, KeyedCheckpoint};

use crate::LateCounter;
use crate::aggregate::Aggregate;
use crate::domain::Domain;
use crate::ends::{
    ends, first_end_containing, last_end_containing, last_instant, next_end, slice_start,
};
use crate::outputs::{LATE_CHANNEL, WindowOutputs};
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

    fn entries(&self) -> Result<Vec<(K, SliceParts<Acc>)>, streamwork_state::StateError> {
        Ok(entries_of(&self.slices))
    }

    /// The keys with a partial changed since, or in a slice dropped since,
    /// each with every partial it has now (none: removed).
    fn changes_since(
        &self,
        epoch: u32,
    ) -> Result<streamwork_state::ChangesSince<K, SliceParts<Acc>>, streamwork_state::StateError>
    {
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
        Ok((written, removed))
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
    #[inline(always)]
    fn heat(&mut self, t: i64) -> HotBounds {
        let bounds = self.hot_bounds;
        if self.hot.is_some() && bounds.start <= t && t < bounds.end {
            return bounds;
        }
        self.reheat(t)
    }

    /// [`heat`](Self::heat) for a `t` outside the hot slice.
    #[inline(never)]
    fn reheat(&mut self, t: i64) -> HotBounds {
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

    /// Adds `records` records of the key with `hash` and value `key_value`
    /// at time `t` (one event, or a partial merged before the exchange) to
    /// its partial through `add`, and fires what that changes: the windows
    /// an event late within the allowed lateness updates, and early firings
    /// by count.
    #[inline(always)]
    fn absorb(
        &mut self,
        t: i64,
        hash: u64,
        key_value: &KK::Value,
        records: u64,
        add: impl FnOnce(&A, &mut A::Acc),
        out: &mut WindowOutputs<WindowResult<KK::Value, A::Out>, T>,
    ) where
        T: Data,
        D: Domain,
    {
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
        add(aggregate, &mut partial.acc);
        partial.count += records;
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
                    self.emit_window(end, Firing::Update, Some((hash, &key_value)), out);
                } else if end > self.now && early_now {
                    self.emit_window(end, Firing::Early, Some((hash, &key_value)), out);
                }
            }
        }
    }

    /// Merges `partial`, records merged before the exchange, the latest at
    /// `time`, as its records would have been one by one: late (counted;
    /// no component reads the `late` channel of pre-aggregated windows) if
    /// its slice's windows are past their lateness, else into its slice.
    pub(crate) fn add_partial(
        &mut self,
        partial: SlicePartial<KK::Value, A::Acc>,
        time: Option<Timestamp>,
        out: &mut WindowOutputs<WindowResult<KK::Value, A::Out>, T>,
    ) where
        T: Data,
        D: Domain,
    {
        let start = slice_start(partial.slice, self.slice);
        let t = match D::record_time(time, &mut self.now) {
            t if t.div_euclid(self.slice) == partial.slice => t,
            _ => start,
        };
        let last_end = last_end_containing(self.size, self.slide, start);
        if D::EVENT_TIME && last_end.saturating_add(self.lateness) <= self.now {
            self.late.add(partial.records);
            return;
        }
        let hash = KK::hash_value(&partial.key);
        let SlicePartial {
            key, acc, records, ..
        } = partial;
        self.absorb(t, hash, &key, records, |a, into| a.merge(into, &acc), out);
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

    #[inline]
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
        self.absorb(
            t,
            hash,
            key_value,
            1,
            |a, acc| a.add(acc, &value),
            ctx.out(),
        );
    }

    crate::window_time_hooks!();

    /// In event time, over an incremental aggregate, without early firing:
    /// merged per key and slice before the exchange (see the
    /// [module](self)). Early firing counts records one by one, or shows a
    /// window before it closes, which a partial held until then would not.
    fn pre_aggregation<E: PreAggregating<Self>>(&self, engine: E) -> Result<E::Output, E> {
        if !D::EVENT_TIME || A::BY_PARTS || self.early != Early::default() {
            return Err(engine);
        }
        let local = SliceMerge::new(self.aggregate.clone(), self.size, self.slide, self.slice);
        let global = PreAggregatedWindows(self.clone());
        Ok(engine.pre_aggregate(local, global, Some(LATE_CHANNEL)))
    }

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

/// One key's records of one slice, merged in the task that sent them.
#[derive(Clone, Debug, PartialEq)]
pub struct SlicePartial<K, Acc> {
    /// The key.
    pub key: K,
    /// The slice (slice `i` covers `[i * g, (i + 1) * g)`, `g` the slice
    /// length).
    pub slice: i64,
    /// The records' accumulator.
    pub acc: Acc,
    /// How many records it holds.
    pub records: u64,
}

/// Merges records into [`SlicePartial`]s with the window's aggregate.
pub struct SliceMerge<T, K, A> {
    aggregate: A,
    size: i64,
    slide: i64,
    slice: i64,
    _types: PhantomData<fn(T, K)>,
}

impl<T, K, A: Clone> Clone for SliceMerge<T, K, A> {
    fn clone(&self) -> Self {
        SliceMerge {
            aggregate: self.aggregate.clone(),
            size: self.size,
            slide: self.slide,
            slice: self.slice,
            _types: PhantomData,
        }
    }
}

impl<T, K, A> SliceMerge<T, K, A> {
    /// Merges by `aggregate` into the slices (of `slice` milliseconds) of
    /// windows of `size` every `slide`.
    pub(crate) fn new(aggregate: A, size: i64, slide: i64, slice: i64) -> Self {
        SliceMerge {
            aggregate,
            size,
            slide,
            slice,
            _types: PhantomData,
        }
    }
}

impl<T, K, A> LocalAggregate for SliceMerge<T, K, A>
where
    T: Data,
    K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    A: Aggregate<T>,
{
    type In = T;
    type Key = K;
    type Partial = SlicePartial<K, A::Acc>;

    /// The slice of `time`; no time is the beginning of time, as the window
    /// counts it.
    #[inline]
    fn group(&self, time: Option<Timestamp>) -> Option<i64> {
        let t = time.map_or(i64::MIN, Timestamp::millis);
        Some(t.div_euclid(self.slice))
    }

    /// The end of the first window the slice is part of: that window
    /// fires at a watermark there.
    fn due(&self, slice: i64) -> Timestamp {
        let start = slice_start(slice, self.slice);
        Timestamp::from_millis(first_end_containing(self.size, self.slide, start))
    }

    #[inline]
    fn first(&self, key: K, slice: i64, value: &T) -> Self::Partial {
        let mut acc = self.aggregate.create();
        self.aggregate.add(&mut acc, value);
        SlicePartial {
            key,
            slice,
            acc,
            records: 1,
        }
    }

    #[inline]
    fn add(&self, partial: &mut Self::Partial, value: &T) {
        self.aggregate.add(&mut partial.acc, value);
        partial.records += 1;
    }

    fn key_of(partial: &Self::Partial) -> &K {
        &partial.key
    }
}

/// Tumbling or sliding windows reading records and the partials merged
/// before the exchange: the same windows, state and checkpoints as
/// [`SlicedWindows`], which it runs.
pub struct PreAggregatedWindows<T, KK: KeyKind, D, A: Aggregate<T>>(
    pub(crate) SlicedWindows<T, KK, D, A>,
);

impl<T, KK: KeyKind, D, A: Aggregate<T>> Clone for PreAggregatedWindows<T, KK, D, A> {
    fn clone(&self) -> Self {
        PreAggregatedWindows(self.0.clone())
    }
}

/// What a window's partials are.
type PartialOf<T, KK, A> = SlicePartial<<KK as KeyKind>::Value, <A as Aggregate<T>>::Acc>;

impl<T: Data, KK: KeyKind, D: Domain, A: Aggregate<T>> Operator
    for PreAggregatedWindows<T, KK, D, A>
{
    type In = Either<T, PartialOf<T, KK, A>>;
    type Key = KK;
    type Out = WindowOutputs<WindowResult<KK::Value, A::Out>, T>;
    type Time = D::Time;

    fn open(&mut self, ctx: &InstanceContext) {
        self.0.open(ctx);
    }

    fn statefulness(&self) -> Statefulness {
        self.0.statefulness()
    }

    #[inline(always)]
    fn on_record(&mut self, value: Self::In, ctx: &mut Context<'_, KK, Self::Out>) {
        match value {
            Either::Left(record) => self.0.on_record(record, ctx),
            Either::Right(partial) => {
                let time = ctx.timestamp();
                self.0.add_partial(partial, time, ctx.out());
            }
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.0.on_watermark(watermark, out);
    }

    fn on_batch_end(&mut self, out: &mut Self::Out) {
        self.0.on_batch_end(out);
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        self.0.on_processing_time(now, out);
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.0.snapshot(ctx)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        self.0.restore(restore)
    }

    fn before_barrier(&mut self, out: &mut Self::Out) {
        self.0.before_barrier(out);
    }

    fn on_end(&mut self, out: &mut Self::Out) {
        self.0.on_end(out);
    }
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::time::Duration;

    use proptest::prelude::*;
    use streamwork_core::testkit::Harness;
    use streamwork_core::{ByKey, PreAggregating};

    use super::*;
    use crate::{Count, EventDomain, LateCounter, Windows};

    type Event = (u32, i64);
    type Counts = SlicedWindows<Event, ByKey<u32>, EventDomain, Count>;
    type Local = SliceMerge<Event, u32, Count>;

    /// An engine that keeps the two halves it is handed.
    struct Keep;

    impl PreAggregating<Counts> for Keep {
        type Output = Box<dyn Any>;

        fn pre_aggregate<L, G>(self, local: L, global: G, late: Option<u32>) -> Box<dyn Any>
        where
            L: LocalAggregate<In = Event, Key = u32>,
            G: Operator<In = Either<Event, L::Partial>, Key = ByKey<u32>>,
        {
            assert_eq!(late, Some(crate::outputs::LATE_CHANNEL));
            Box::new((local, global))
        }
    }

    fn windows(size: u64, slide: u64, late: &LateCounter) -> Counts {
        let (size, slide) = (Duration::from_millis(size), Duration::from_millis(slide));
        Windows::sliding(size, slide)
            .count_late_in(late.clone())
            .count()
    }

    /// What `windows` fire over `batches` (each followed by a watermark 5 ms
    /// behind the latest event time so far), as `(key, start, count)`, and
    /// the events counted late.
    fn fired<O>(
        mut h: Harness<O>,
        feed: impl Fn(&mut Harness<O>, &[Event]),
        batches: &[Vec<Event>],
        late: &LateCounter,
    ) -> (Vec<(u32, i64, u64)>, u64)
    where
        O: Operator<Out = crate::WindowOutputs<crate::WindowResult<u32, u64>, Event>>,
    {
        let mut latest = i64::MIN;
        for batch in batches {
            feed(&mut h, batch);
            latest = batch.iter().map(|e| e.1).fold(latest, i64::max);
            h.watermark(latest.saturating_sub(5));
        }
        h.end();
        let mut rows: Vec<_> = h.take(|out| {
            out.results
                .take_buffered()
                .into_iter()
                .map(|r| (r.value.key, r.value.window.start.millis(), r.value.value))
                .collect()
        });
        rows.sort_unstable();
        (rows, late.get())
    }

    proptest! {
        /// Windows fed partials merged per key and slice between watermarks
        /// fire what they fire fed the records one by one, and count the
        /// same records late.
        #[test]
        fn partials_fire_what_records_fire(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u32..4, 0i64..400), 0..20), 1..12),
            (size, slide) in prop_oneof![Just((30u64, 30u64)), Just((50, 20)), Just((40, 10))],
        ) {
            let by_record = LateCounter::new();
            let expected = fired(
                Harness::new(windows(size, slide, &by_record)),
                |h, batch| for &(k, t) in batch { h.record(k, (k, t), Some(t)) },
                &batches,
                &by_record,
            );
            let by_partial = LateCounter::new();
            let halves = windows(size, slide, &by_partial).pre_aggregation(Keep);
            let Ok(halves) = halves else { panic!("event-time counts pre-aggregate") };
            let Ok(halves) = halves.downcast::<(Local, PreAggregatedWindows<Event, ByKey<u32>, EventDomain, Count>)>() else {
                panic!("the halves of sliced windows")
            };
            let (local, global) = *halves;
            let got = fired(
                Harness::new(global),
                |h, batch| {
                    // Merged in order, per key and slice, as a combiner
                    // merges between two watermarks.
                    let mut partials: Vec<(SlicePartial<u32, u64>, i64)> = Vec::new();
                    for event in batch {
                        let slice = local.group(Some(Timestamp::from_millis(event.1))).unwrap();
                        match partials.iter_mut().find(|(p, _)| p.key == event.0 && p.slice == slice) {
                            Some((p, latest)) => {
                                local.add(p, event);
                                *latest = (*latest).max(event.1);
                            }
                            None => partials.push((local.first(event.0, slice, event), event.1)),
                        }
                    }
                    for (partial, latest) in partials {
                        h.record(partial.key, Either::Right(partial), Some(latest));
                    }
                },
                &batches,
                &by_partial,
            );
            prop_assert_eq!(got, expected);
        }
    }
}
