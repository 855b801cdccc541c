//! Workloads shared by the criterion benches and `cargo xtask bench`: each as a
//! Streamwork job and as the hand-written single-threaded loop it is compared to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;

/// Distinct keys of the keyed workloads.
pub const KEYS: u64 = 10_000;

/// The key of event `i`: `(i * 2654435761) % KEYS`.
#[inline]
pub fn key(i: u64) -> u64 {
    i.wrapping_mul(2_654_435_761) % KEYS
}

/// What a workload computed: a record count and a checksum, identical for the
/// job and the baseline.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Result records.
    pub records: u64,
    /// Wrapping sum of `(key + 1) * count` over the results.
    pub checksum: u64,
}

/// Maps event `i` to `(key(i), i)`.
#[operator]
fn with_key(value: u64, out: &mut Collector<(u64, u64)>) {
    out.emit((key(value), value));
}

/// Counts events per key; emits `(key, count)` per key at the end.
#[derive(Clone, Default)]
pub struct CountPerKey {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl CountPerKey {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _event: (u64, u64),
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        for (key, count) in self.counts.drain() {
            out.emit((key, count));
        }
    }
}

/// Sums results into shared totals once, at the end of its input.
#[derive(Clone)]
pub struct ChecksumSink {
    totals: Arc<(AtomicU64, AtomicU64)>,
    local: Outcome,
}

impl Sink for ChecksumSink {
    type In = (u64, u64);

    #[inline]
    fn write(&mut self, record: Record<(u64, u64)>) -> Result<(), ConnectorError> {
        let (key, count) = record.value;
        self.local.records += 1;
        self.local.checksum = self
            .local
            .checksum
            .wrapping_add((key + 1).wrapping_mul(count));
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.totals
            .0
            .fetch_add(self.local.records, Ordering::Relaxed);
        self.totals
            .1
            .fetch_add(self.local.checksum, Ordering::Relaxed);
        Ok(())
    }
}

/// source → map → keyed count → sink over `events` generated events, every
/// component with `parallelism` instances (source, map and the sink fuse with
/// their neighbours; the keyed exchange goes through channels).
pub fn keyed_count_job(events: u64, parallelism: u32) -> Outcome {
    let totals = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let sink = ChecksumSink {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = job! {
        name "keyed_count";
        source events[parallelism] = GeneratorSource::new(|i| i).take(events);
        operator keyed[parallelism] = WithKey <- events;
        operator counts[parallelism] = CountPerKey::default() <- keyed.key(|(key, _): &(u64, u64)| *key);
        sink checksum[parallelism] = sink <- counts;
    }
    .expect("the benchmark job is well formed");
    graph.run().expect("the benchmark job runs");
    Outcome {
        records: totals.0.load(Ordering::Relaxed),
        checksum: totals.1.load(Ordering::Relaxed),
    }
}

/// The same computation as a plain single-threaded loop, with the same hash map.
pub fn keyed_count_baseline(events: u64) -> Outcome {
    let mut counts: FastHashMap<u64, u64> = FastHashMap::default();
    for i in 0..events {
        let (key, _value) = std::hint::black_box((key(i), i));
        *counts.entry(key).or_insert(0) += 1;
    }
    let mut outcome = Outcome::default();
    for (key, count) in counts {
        outcome.records += 1;
        outcome.checksum = outcome.checksum.wrapping_add((key + 1).wrapping_mul(count));
    }
    outcome
}
