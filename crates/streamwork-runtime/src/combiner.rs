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

use streamwork_core::component::KeyKind;
use streamwork_core::hash::FastHashMap;
use streamwork_core::record::Record;
use streamwork_core::{
    AnyTime, Collector, Context, InstanceContext, NoKey, Operator, Statefulness, Timestamp,
};

/// The most keys a combiner holds before it sends them.
pub const MAX_KEYS: usize = 1 << 16;

/// The most records a combiner merges before it sends what it holds.
pub const MAX_RECORDS: u64 = 1 << 20;

/// The longest a combiner holds a record, in milliseconds of wall clock
/// (checked at each processing-time tick, every 50 ms at most).
pub const MAX_DELAY_MS: i64 = 100;

/// Merges the records of each key of a stream keyed into `O`, with `O`'s
/// [`combine`](Operator::combine); see the [module](self).
pub(crate) struct Combiner<O: Operator> {
    operator: O,
    extractor: <O::Key as KeyKind>::Extractor<O::In>,
    held: FastHashMap<<O::Key as KeyKind>::Value, Record<O::In>>,
    merged: u64,
    last_sent: Option<Timestamp>,
    pass_through: bool,
}

impl<O: Operator> Clone for Combiner<O> {
    fn clone(&self) -> Self {
        Combiner {
            operator: self.operator.clone(),
            extractor: self.extractor.clone(),
            held: FastHashMap::default(),
            merged: 0,
            last_sent: None,
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
            last_sent: None,
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
        let last = *self.last_sent.get_or_insert(now);
        if now.millis().saturating_sub(last.millis()) >= MAX_DELAY_MS {
            self.send(out, None);
            self.last_sent = Some(now);
        }
    }

    fn before_barrier(&mut self, out: &mut Collector<O::In>) {
        self.send(out, None);
    }

    fn on_end(&mut self, out: &mut Collector<O::In>) {
        self.send(out, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
