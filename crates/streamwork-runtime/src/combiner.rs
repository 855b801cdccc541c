//! Combiners: a keyed operator's records merged per key in the sending task,
//! before the keyed exchange (MapReduce's combiner, Flink's local
//! aggregation), so that one record per key and flush crosses it instead
//! of every one.
//!
//! The builder puts a combiner between a keyed operator that declares
//! [`Operator::COMBINES`] and each stream keyed into it, with the
//! stream's parallelism and a forward edge, so that it is fused into the
//! task that emits the stream (not between one instance and one: there the
//! exchange scatters nothing, and a combiner would do the operator's
//! per-key work twice). It merges with the operator's own
//! [`combine`](Operator::combine) and holds what it merged for a bounded
//! time and number of keys:
//!
//! * it sends everything when it holds [`MAX_KEYS`] keys or has merged
//!   [`MAX_RECORDS`] records since it last sent, when [`MAX_DELAY_MS`] have
//!   passed, before a watermark goes on (so no record is late for having
//!   been held) and before a checkpoint's barrier (so it holds nothing a
//!   checkpoint would have to keep: it is stateless);
//! * in a run with acking it merges nothing (a merged record would belong
//!   to several trees) and passes each record on as it comes.
//!
//! A sent record carries the latest event time of the records merged in it.
//!
//! A `LocalCombiner` does the same for an operator that
//! [pre-aggregates](streamwork_core::pre_aggregate) into partials of a type
//! of their own (a window's incremental aggregate): it merges each key's
//! records per group (a window's slice) with the operator's
//! [`LocalAggregate`], sends the partials on one channel and the records it
//! does not merge, as they are, on another. It merges only once the
//! builder has opened its gate (no component reads the operator's channel
//! of late records), and it stops merging for a while when merging does not
//! pay: when a sample of [`SAMPLE_RECORDS`] records makes more than
//! [`MAX_PARTIALS_PER_100`] partials per 100 records, the next
//! [`PASS_RECORDS`] records cross as they are, twice as many after each
//! further such sample in a row (the adaptive partial aggregation of Trino
//! and Spark). While it passes records on, it hands whole batches on as
//! they are.

use hashbrown::HashTable;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use streamwork_core::component::KeyKind;
use streamwork_core::hash::FastHashMap;
use streamwork_core::outputs::{Channel, ChannelInfo, OutputParts, Outputs};
use streamwork_core::pre_aggregate::LocalAggregate;
use streamwork_core::record::{Data, Record};
use streamwork_core::{
    AnyTime, Collector, Context, InstanceContext, JobId, NoKey, NodeId, Operator, Statefulness,
    Stream, StreamTime, Timestamp,
};

/// The most keys a combiner holds before it sends them.
pub const MAX_KEYS: usize = 1 << 16;

/// The most records a combiner merges before it sends what it holds.
pub const MAX_RECORDS: u64 = 1 << 20;

/// The longest a combiner holds a record, in milliseconds of wall clock
/// (checked at each processing-time tick, every 50 ms at most).
pub const MAX_DELAY_MS: i64 = 100;

/// How many records a `LocalCombiner` merges before it judges whether
/// merging pays.
pub const SAMPLE_RECORDS: u64 = 1 << 16;

/// The most partials per 100 records at which merging pays.
pub const MAX_PARTIALS_PER_100: u64 = 80;

/// How many records cross unmerged once merging did not pay, before the
/// next sample; doubled after each further sample in a row that did not pay,
/// at most [`MAX_UNPAID_DOUBLINGS`] times.
pub const PASS_RECORDS: u64 = 1 << 20;

/// At most how many times [`PASS_RECORDS`] doubles (to 2^26 records).
pub const MAX_UNPAID_DOUBLINGS: u32 = 7;

/// The most groups a `LocalCombiner` holds at once (it finds a record's
/// group by a scan from the last one used); one more sends what it holds.
pub const MAX_GROUPS: usize = 64;

/// When a combiner last sent what it holds, by the wall clock: it sends
/// again after [`MAX_DELAY_MS`].
#[derive(Clone, Copy, Default)]
struct Delay {
    last_sent: Option<Timestamp>,
}

impl Delay {
    /// The wall clock reads `now`: whether what is held has waited long
    /// enough.
    fn due(&mut self, now: Timestamp) -> bool {
        let last = *self.last_sent.get_or_insert(now);
        let due = now.millis().saturating_sub(last.millis()) >= MAX_DELAY_MS;
        if due {
            self.last_sent = Some(now);
        }
        due
    }
}

/// Merges the records of each key of a stream keyed into `O`, with `O`'s
/// [`combine`](Operator::combine); see the [module](self).
pub(crate) struct Combiner<O: Operator> {
    operator: O,
    extractor: <O::Key as KeyKind>::Extractor<O::In>,
    held: FastHashMap<<O::Key as KeyKind>::Value, Record<O::In>>,
    merged: u64,
    delay: Delay,
    pass_through: bool,
}

impl<O: Operator> Clone for Combiner<O> {
    fn clone(&self) -> Self {
        Combiner {
            operator: self.operator.clone(),
            extractor: self.extractor.clone(),
            held: FastHashMap::default(),
            merged: 0,
            delay: Delay::default(),
            pass_through: self.pass_through,
        }
    }
}

impl<O: Operator> Combiner<O> {
    /// A combiner for records keyed into `operator` by `extractor`.
    pub(crate) fn new(operator: O, extractor: <O::Key as KeyKind>::Extractor<O::In>) -> Self {
        Combiner {
            operator,
            extractor,
            held: FastHashMap::default(),
            merged: 0,
            delay: Delay::default(),
            pass_through: false,
        }
    }

    /// Sends every held record, each at its own event time, and restores
    /// the output's time to `current`.
    fn send(&mut self, out: &mut Collector<O::In>, current: Option<Timestamp>) {
        if !self.held.is_empty() {
            out.extend_records(self.held.drain().map(|(_, record)| record));
            out.set_time(current);
        }
        self.merged = 0;
    }
}

impl<O: Operator> Operator for Combiner<O> {
    type In = O::In;
    type Key = NoKey;
    type Out = Collector<O::In>;
    type Time = AnyTime;

    fn open(&mut self, ctx: &InstanceContext) {
        self.pass_through = ctx.acking();
    }

    fn statefulness(&self) -> Statefulness {
        // What it holds goes out before every barrier.
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: O::In, ctx: &mut Context<'_, NoKey, Collector<O::In>>) {
        if self.pass_through {
            ctx.emit(value);
            return;
        }
        let time = ctx.timestamp();
        let key = O::Key::value_of(&self.extractor, &value);
        match self.held.get_mut(&key) {
            Some(held) => {
                self.operator.combine(&mut held.value, value);
                held.time = match (held.time, time) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            None => {
                self.held.insert(key, Record { value, time });
            }
        }
        self.merged += 1;
        if self.held.len() >= MAX_KEYS || self.merged >= MAX_RECORDS {
            self.send(ctx.out(), time);
        }
    }

    fn on_watermark(&mut self, _: Timestamp, out: &mut Collector<O::In>) {
        self.send(out, None);
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Collector<O::In>) {
        if self.delay.due(now) {
            self.send(out, None);
        }
    }

    fn before_barrier(&mut self, out: &mut Collector<O::In>) {
        self.send(out, None);
    }

    fn on_end(&mut self, out: &mut Collector<O::In>) {
        self.send(out, None);
    }
}

/// A [`LocalCombiner`]'s two channels: the records it does not merge (`raw`,
/// channel 0) and its partials (`partials`, channel 1).
pub(crate) struct LocalOutputs<T, P> {
    raw: Collector<T>,
    partials: Collector<P>,
}

impl<T: Data, P: Data> Outputs for LocalOutputs<T, P> {
    type Streams<Tm: StreamTime> = (Stream<T, Tm>, Stream<P, Tm>);

    fn channels() -> Vec<ChannelInfo> {
        let (raw, partials) = (std::any::type_name::<T>(), std::any::type_name::<P>());
        [("raw", raw), ("partials", partials)]
            .map(|(name, type_name)| ChannelInfo { name, type_name })
            .to_vec()
    }

    fn streams<Tm: StreamTime>(job: JobId, node: NodeId) -> Self::Streams<Tm> {
        (Stream::__new(job, node, 0), Stream::__new(job, node, 1))
    }

    fn assemble(parts: &mut OutputParts) -> Self {
        let raw = parts.next_collector();
        LocalOutputs {
            raw,
            partials: parts.next_collector(),
        }
    }

    #[inline]
    fn set_time(&mut self, time: Option<Timestamp>) {
        self.raw.set_time(time);
        self.partials.set_time(time);
    }

    /// A batch passed on as it is goes on as records.
    fn in_place(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.raw)
    }

    fn for_each_channel(&mut self, visit: &mut dyn FnMut(&mut dyn Channel)) {
        visit(&mut self.raw);
        visit(&mut self.partials);
    }

    fn for_each_channel_ref(&self, visit: &mut dyn FnMut(&dyn Channel)) {
        visit(&self.raw);
        visit(&self.partials);
    }
}

/// Whether a [`LocalCombiner`] merges: closed (records cross as they are)
/// until the builder opens it, once it knows that no component reads the
/// operator's channel of late records.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<AtomicBool>);

impl Gate {
    pub(crate) fn open(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_open(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Partials by key hash.
type Partials<P> = HashTable<(u64, Record<P>)>;

/// The partials a [`LocalCombiner`] holds of one group.
struct Held<P> {
    group: i64,
    due: Timestamp,
    partials: Partials<P>,
}

/// Merges the records of a stream keyed into a pre-aggregating operator into
/// partials per key and group, with the operator's [`LocalAggregate`]; see
/// the [module](self).
pub(crate) struct LocalCombiner<L: LocalAggregate, KK: KeyKind<Value = L::Key>> {
    local: L,
    extractor: KK::Extractor<L::In>,
    gate: Gate,
    /// The groups held, few (records come about in time order), the one
    /// last merged into first.
    held: Vec<Held<L::Partial>>,
    /// Partials held in all groups.
    holding: usize,
    /// Emptied tables, reused.
    spare: Vec<Partials<L::Partial>>,
    /// Records merged since it last sent everything.
    merged: u64,
    delay: Delay,
    /// Merging this run (a gate open and no acking).
    merging: bool,
    /// Records merged and partials made in the current sample.
    sampled: (u64, u64),
    /// Records still to pass unmerged, merging having not paid.
    passing: u64,
    /// Samples in a row in which merging did not pay.
    unpaid: u32,
    /// Partials emitted up to the last flush.
    flushed: u64,
    _key: PhantomData<fn() -> KK>,
}

impl<L: LocalAggregate, KK: KeyKind<Value = L::Key>> Clone for LocalCombiner<L, KK> {
    fn clone(&self) -> Self {
        LocalCombiner::new(
            self.local.clone(),
            self.extractor.clone(),
            self.gate.clone(),
        )
    }
}

impl<L: LocalAggregate, KK: KeyKind<Value = L::Key>> LocalCombiner<L, KK> {
    /// A combiner for records keyed by `extractor`, merging with `local`
    /// once `gate` opens.
    pub(crate) fn new(local: L, extractor: KK::Extractor<L::In>, gate: Gate) -> Self {
        LocalCombiner {
            local,
            extractor,
            gate,
            held: Vec::new(),
            holding: 0,
            spare: Vec::new(),
            merged: 0,
            delay: Delay::default(),
            merging: false,
            sampled: (0, 0),
            passing: 0,
            unpaid: 0,
            flushed: 0,
            _key: PhantomData,
        }
    }

    /// Sends the held partials of the groups `due` picks, and restores the
    /// output's time to `current`.
    fn send_where(
        &mut self,
        out: &mut LocalOutputs<L::In, L::Partial>,
        current: Option<Timestamp>,
        due: impl Fn(&Held<L::Partial>) -> bool,
    ) {
        let mut i = 0;
        while i < self.held.len() {
            if !due(&self.held[i]) {
                i += 1;
                continue;
            }
            let mut held = self.held.swap_remove(i);
            self.holding -= held.partials.len();
            out.partials
                .extend_records(held.partials.drain().map(|(_, partial)| partial));
            self.spare.push(held.partials);
        }
        out.partials.set_time(current);
        if self.held.is_empty() {
            self.merged = 0;
        }
    }

    /// Sends every held partial, each at its latest record's event time.
    fn send(&mut self, out: &mut LocalOutputs<L::In, L::Partial>, current: Option<Timestamp>) {
        if !self.held.is_empty() {
            self.send_where(out, current, |_| true);
        }
        self.merged = 0;
    }

    /// Merges `value` into its key's partial in its group (or sends it as
    /// it is, if it has no group).
    #[inline(always)]
    fn merge(
        &mut self,
        value: L::In,
        ctx: &mut Context<'_, NoKey, LocalOutputs<L::In, L::Partial>>,
    ) {
        let time = ctx.timestamp();
        let Some(group) = self.local.group(time) else {
            // Whatever is held goes first, so that the operator sees each
            // key's records in the order they came.
            if !self.held.is_empty() {
                self.send(ctx.out(), time);
            }
            ctx.out().raw.emit(value);
            return;
        };
        if self.held.len() >= MAX_GROUPS && !self.held.iter().any(|h| h.group == group) {
            self.send(ctx.out(), time);
        }
        let owned = KK::extract(&self.extractor, &value);
        let (hash, key) = (KK::hash(KK::as_ref(&owned)), KK::value(KK::as_ref(&owned)));
        let local = &self.local;
        let held = group_in(&mut self.held, &mut self.spare, local, group);
        match held.partials.entry(
            hash,
            |(h, p)| *h == hash && L::key_of(&p.value) == key,
            |(h, _)| *h,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut entry) => {
                let (_, partial) = entry.get_mut();
                local.add(&mut partial.value, &value);
                partial.time = partial.time.max(time);
            }
            hashbrown::hash_table::Entry::Vacant(entry) => {
                let partial = local.first(key.clone(), group, &value);
                entry.insert((
                    hash,
                    Record {
                        value: partial,
                        time,
                    },
                ));
                self.holding += 1;
                self.sampled.1 += 1;
            }
        }
        self.sampled.0 += 1;
        if self.sampled.0 >= SAMPLE_RECORDS {
            self.judge();
        }
        self.merged += 1;
        if self.holding >= MAX_KEYS || self.merged >= MAX_RECORDS || self.passing > 0 {
            self.send(ctx.out(), time);
        }
    }

    /// Ends a sample: whether merging paid decides whether the next records
    /// pass unmerged.
    fn judge(&mut self) {
        let (records, partials) = std::mem::take(&mut self.sampled);
        if partials * 100 > records * MAX_PARTIALS_PER_100 {
            // Each sample in a row that does not pay doubles the records
            // passed before the next one.
            self.unpaid = (self.unpaid + 1).min(MAX_UNPAID_DOUBLINGS);
            self.passing = PASS_RECORDS << (self.unpaid - 1);
        } else {
            self.unpaid = 0;
        }
    }
}

/// Group `group` in `held`, first made (with a table from `spare`, due when
/// `local` says) if need be, and moved last: records come about in time
/// order, so the group last merged into is found first.
#[inline]
fn group_in<'h, L: LocalAggregate>(
    held: &'h mut Vec<Held<L::Partial>>,
    spare: &mut Vec<Partials<L::Partial>>,
    local: &L,
    group: i64,
) -> &'h mut Held<L::Partial> {
    match held.last() {
        Some(last) if last.group == group => {}
        _ => match held.iter().position(|h| h.group == group) {
            Some(i) => {
                let last = held.len() - 1;
                held.swap(i, last);
            }
            None => held.push(Held {
                group,
                due: local.due(group),
                partials: spare.pop().unwrap_or_default(),
            }),
        },
    }
    let last = held.len() - 1;
    &mut held[last]
}

impl<L: LocalAggregate, KK: KeyKind<Value = L::Key>> Operator for LocalCombiner<L, KK> {
    type In = L::In;
    type Key = NoKey;
    type Out = LocalOutputs<L::In, L::Partial>;
    type Time = AnyTime;

    fn open(&mut self, ctx: &InstanceContext) {
        // A partial would belong to several records' trees.
        self.merging = self.gate.is_open() && !ctx.acking();
    }

    fn statefulness(&self) -> Statefulness {
        // What it holds goes out before every barrier.
        Statefulness::Stateless
    }

    #[inline(always)]
    fn on_record(&mut self, value: L::In, ctx: &mut Context<'_, NoKey, Self::Out>) {
        if !self.merging || self.passing > 0 {
            self.passing = self.passing.saturating_sub(1);
            if !self.held.is_empty() {
                let time = ctx.timestamp();
                self.send(ctx.out(), time);
            }
            ctx.out().raw.emit(value);
            return;
        }
        self.merge(value, ctx);
    }

    /// Passes a whole batch on as it is while not merging (nothing held).
    fn on_batch_in_place(&mut self, records: &mut Vec<Record<L::In>>) -> bool {
        let n = records.len() as u64;
        let passes = !self.merging || self.passing >= n;
        if passes && self.held.is_empty() {
            self.passing = self.passing.saturating_sub(n);
            return true;
        }
        false
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        if self.held.iter().any(|h| h.due <= watermark) {
            self.send_where(out, None, |h| h.due <= watermark);
        }
        if out.partials.emitted() > self.flushed {
            // The partials go now, so that the watermark that follows them
            // is not held back until a batch of them fills: a window fires
            // as soon as it would have record by record. (A failed send is
            // recorded by the collector and reported by the runtime.)
            let _ = out.partials.flush();
            self.flushed = out.partials.emitted();
        }
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        if self.delay.due(now) {
            self.send(out, None);
        }
    }

    fn before_barrier(&mut self, out: &mut Self::Out) {
        self.send(out, None);
    }

    fn on_end(&mut self, out: &mut Self::Out) {
        self.send(out, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamwork_core::pre_aggregate::LocalAggregate;
    use streamwork_core::testkit::Harness;
    use streamwork_core::{ByKey, CurrentKey, KeyedState};

    /// Counts per key from records that carry counts.
    #[derive(Clone, Default)]
    struct Counts {
        counts: KeyedState<u32, u64>,
    }

    impl Operator for Counts {
        type In = (u32, u64);
        type Key = ByKey<u32>;
        type Out = Collector<(u32, u64)>;
        type Time = AnyTime;
        const COMBINES: bool = true;

        fn statefulness(&self) -> Statefulness {
            Statefulness::Stateless
        }

        fn on_record(&mut self, value: (u32, u64), ctx: &mut Context<'_, ByKey<u32>, Self::Out>) {
            let key: CurrentKey<'_, u32> = ctx.key();
            *self.counts.get_or_default(key) += value.1;
        }

        fn combine(&self, earlier: &mut (u32, u64), later: (u32, u64)) {
            earlier.1 += later.1;
        }
    }

    fn combiner() -> Combiner<Counts> {
        Combiner::new(Counts::default(), std::sync::Arc::new(|r: &(u32, u64)| r.0))
    }

    fn sorted(mut records: Vec<Record<(u32, u64)>>) -> Vec<((u32, u64), Option<Timestamp>)> {
        let mut out: Vec<_> = records.drain(..).map(|r| (r.value, r.time)).collect();
        out.sort();
        out
    }

    #[test]
    fn merges_a_keys_records_and_sends_them_at_a_watermark_with_the_latest_time() {
        let mut h = Harness::new(combiner());
        for (i, key) in [1u32, 2, 1, 1, 2].into_iter().enumerate() {
            h.record((), (key, 1), Some(i as i64));
        }
        assert!(h.take(|out| out.take_buffered()).is_empty(), "held");
        h.watermark(1);
        let sent = sorted(h.take(|out| out.take_buffered()));
        assert_eq!(
            sent,
            vec![
                ((1, 3), Some(Timestamp::from_millis(3))),
                ((2, 2), Some(Timestamp::from_millis(4)))
            ]
        );
    }

    #[test]
    fn sends_what_it_holds_before_a_barrier_and_at_the_end() {
        let mut h = Harness::new(combiner());
        h.record((), (7, 2), None);
        h.record((), (7, 5), None);
        assert!(h.barrier().is_none(), "nothing to keep");
        assert_eq!(
            sorted(h.take(|out| out.take_buffered())),
            vec![((7, 7), None)]
        );
        h.record((), (8, 1), None);
        h.end();
        assert_eq!(
            sorted(h.take(|out| out.take_buffered())),
            vec![((8, 1), None)]
        );
    }

    #[test]
    fn sends_when_it_holds_its_most_keys() {
        let mut h = Harness::new(combiner());
        for key in 0..MAX_KEYS as u32 {
            h.record((), (key, 1), None);
        }
        assert_eq!(h.take(|out| out.take_buffered()).len(), MAX_KEYS);
    }

    #[test]
    fn sends_after_its_longest_delay() {
        let mut h = Harness::new(combiner());
        h.processing_time(1_000);
        h.record((), (1, 1), None);
        h.processing_time(1_000 + MAX_DELAY_MS - 1);
        assert!(h.take(|out| out.take_buffered()).is_empty());
        h.processing_time(1_000 + MAX_DELAY_MS);
        assert_eq!(
            sorted(h.take(|out| out.take_buffered())),
            vec![((1, 1), None)]
        );
    }

    /// Sums of `(key, value)` records per key and 10 ms group, due at the
    /// group's end.
    #[derive(Clone)]
    struct TenMs;

    impl LocalAggregate for TenMs {
        type In = (u32, u64);
        type Key = u32;
        type Partial = (u32, i64, u64);

        fn group(&self, time: Option<Timestamp>) -> Option<i64> {
            time.map(|t| t.millis().div_euclid(10))
        }

        fn due(&self, group: i64) -> Timestamp {
            Timestamp::from_millis((group + 1) * 10)
        }

        fn first(&self, key: u32, group: i64, value: &(u32, u64)) -> (u32, i64, u64) {
            (key, group, value.1)
        }

        fn add(&self, partial: &mut (u32, i64, u64), value: &(u32, u64)) {
            partial.2 += value.1;
        }

        fn key_of(partial: &(u32, i64, u64)) -> &u32 {
            &partial.0
        }
    }

    fn local(open: bool) -> LocalCombiner<TenMs, ByKey<u32>> {
        let gate = Gate::default();
        if open {
            gate.open();
        }
        let key: streamwork_core::key::KeyFn<(u32, u64), u32> =
            std::sync::Arc::new(|r: &(u32, u64)| r.0);
        LocalCombiner::new(TenMs, key, gate)
    }

    type Sent = (Vec<(u32, u64)>, Vec<(u32, i64, u64)>);

    fn sent(h: &mut Harness<LocalCombiner<TenMs, ByKey<u32>>>) -> Sent {
        h.take(|out| {
            let raw = out
                .raw
                .take_buffered()
                .into_iter()
                .map(|r| r.value)
                .collect();
            let mut partials: Vec<_> = out
                .partials
                .take_buffered()
                .into_iter()
                .map(|r| r.value)
                .collect();
            partials.sort_unstable();
            (raw, partials)
        })
    }

    #[test]
    fn merges_per_key_and_group_and_holds_a_group_until_a_watermark_reaches_its_due_time() {
        let mut h = Harness::new(local(true));
        for (key, value, time) in [(1, 1, 0), (2, 10, 3), (1, 2, 9), (1, 4, 12), (2, 20, 15)] {
            h.record((), (key, value), Some(time));
        }
        h.watermark(9);
        assert_eq!(sent(&mut h), (vec![], vec![]), "nothing due before 10");
        h.watermark(10);
        assert_eq!(sent(&mut h), (vec![], vec![(1, 0, 3), (2, 0, 10)]));
        h.record((), (1, 8), Some(19));
        h.watermark(19);
        assert_eq!(sent(&mut h), (vec![], vec![]), "group 1 held across 19");
        h.watermark(20);
        assert_eq!(sent(&mut h), (vec![], vec![(1, 1, 12), (2, 1, 20)]));
    }

    #[test]
    fn sends_everything_it_holds_before_a_barrier_and_at_the_end() {
        let mut h = Harness::new(local(true));
        h.record((), (1, 1), Some(0));
        h.record((), (1, 1), Some(25));
        assert!(h.barrier().is_none(), "nothing to keep");
        assert_eq!(sent(&mut h), (vec![], vec![(1, 0, 1), (1, 2, 1)]));
        h.record((), (3, 5), Some(31));
        h.end();
        assert_eq!(sent(&mut h), (vec![], vec![(3, 3, 5)]));
    }

    #[test]
    fn sends_what_it_holds_before_it_would_hold_one_group_too_many() {
        let mut h = Harness::new(local(true));
        for group in 0..MAX_GROUPS as i64 {
            h.record((), (1, 1), Some(group * 10));
        }
        assert_eq!(sent(&mut h).1.len(), 0, "every group held");
        h.record((), (1, 1), Some(MAX_GROUPS as i64 * 10));
        assert_eq!(sent(&mut h).1.len(), MAX_GROUPS, "the held ones went first");
        h.end();
        assert_eq!(sent(&mut h).1, vec![(1, MAX_GROUPS as i64, 1)]);
    }

    #[test]
    fn with_its_gate_closed_it_passes_every_record_on_as_it_is() {
        let mut h = Harness::new(local(false));
        h.record((), (1, 1), Some(0));
        h.record((), (1, 2), Some(1));
        h.watermark(100);
        assert_eq!(sent(&mut h), (vec![(1, 1), (1, 2)], vec![]));
    }

    #[test]
    fn stops_merging_for_a_while_when_merging_does_not_pay() {
        let mut h = Harness::new(local(true));
        // A sample of distinct keys: a partial a record.
        for key in 0..SAMPLE_RECORDS as u32 {
            h.record((), (key, 1), Some(0));
        }
        let (raw, partials) = sent(&mut h);
        assert!(raw.is_empty());
        assert_eq!(partials.len() as u64, SAMPLE_RECORDS, "sent as it stopped");
        h.record((), (7, 1), Some(0));
        h.record((), (7, 1), Some(0));
        assert_eq!(sent(&mut h), (vec![(7, 1), (7, 1)], vec![]), "passed on");
        let mut batch = vec![Record::new((7, 1)); 8];
        assert!(
            h.operator_mut().on_batch_in_place(&mut batch),
            "whole batches"
        );
        assert_eq!(batch.len(), 8, "left as they are");
        let mut merging = Harness::new(local(true));
        assert!(!merging.operator_mut().on_batch_in_place(&mut batch));
    }
}
