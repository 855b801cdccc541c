//! The state workloads: W2's keyed count over many keys, its counts in
//! `KeyedState` (on the heap, frozen copy-on-write and archived whole off the task thread), in `StoredState` (the
//! state store: increments written off the task thread, restored in
//! place) or in one event-time window open for the whole run (a window's
//! per-key aggregates, frozen copy-on-write by shard), with a checkpoint
//! every interval.
//!
//! Events `0..keys` write every key once (the load); events from `keys` on
//! write only the hot keys, the first `keys / 100` (1% of the keys), so
//! that every checkpoint after the load finds at most 1% changed.

use std::path::Path;
use std::time::Duration;

use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;

use crate::{KeyChecksum, Outcome, Totals, key, workers_for};

/// Where a state workload keeps its counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StateKind {
    /// `KeyedState`: in memory, every key archived (off the task thread) at every checkpoint.
    Keyed,
    /// `StoredState`: the state store.
    Stored,
    /// A tumbling window's counts: every event at time 0, so one window
    /// holds every key until the end of input fires it.
    Window,
}

/// The key of event `i`: every key once, then the hot 1%.
#[inline]
pub fn state_key(i: u64, keys: u64) -> u64 {
    if i < keys {
        key(i, keys)
    } else {
        key(i, (keys / 100).max(1))
    }
}

/// Maps event `i` to `(state_key(i), i)`.
#[derive(Clone)]
struct StateEvents {
    keys: u64,
}

#[operator(stateless)]
impl StateEvents {
    fn on_record(&self, value: u64, out: &mut Collector<(u64, u64)>) {
        out.emit((state_key(value, self.keys), value));
    }
}

/// Counts per key in memory.
#[derive(Clone, Default, State)]
struct KeyedCount {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl KeyedCount {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _event: (u64, u64),
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        // Kept, not drained: the final checkpoint holds them, as it holds
        // the stored counts, for the restore to measure.
        for (key, count) in self.counts.iter() {
            out.emit((*key, *count));
        }
    }
}

/// Counts per key in the state store.
#[derive(Clone, Default, State)]
struct StoredCount {
    counts: StoredState<u64, u64>,
}

#[operator]
impl StoredCount {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _event: (u64, u64),
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        // A run that cannot be read fails the job (the runtime turns the
        // panic into its error): the result must not silently lack keys.
        self.counts
            .for_each(|key, count| out.emit((key, count)))
            .expect("the stored counts read back");
    }
}

/// The workload as a job, checkpointed every `interval` into `dir` (or
/// not at all); restores from `dir` if it holds a checkpoint.
pub fn state_job(
    events: u64,
    parallelism: u32,
    keys: u64,
    kind: StateKind,
    checkpoints: Option<(&Path, Duration)>,
) -> (Outcome, JobReport) {
    let totals = Totals::default();
    let sink = KeyChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = match kind {
        StateKind::Keyed => job! {
            name "STATE";
            workers workers_for(parallelism);
            source events[parallelism] = GeneratorSource::new(|i| i).take(events);
            operator keyed[parallelism] = StateEvents { keys } <- events;
            operator counts[parallelism] = KeyedCount::default()
                <- keyed.key(|(key, _): &(u64, u64)| *key);
            sink checksum[parallelism] = sink <- counts;
        },
        StateKind::Stored => job! {
            name "STATE";
            workers workers_for(parallelism);
            source events[parallelism] = GeneratorSource::new(|i| i).take(events);
            operator keyed[parallelism] = StateEvents { keys } <- events;
            operator counts[parallelism] = StoredCount::default()
                <- keyed.key(|(key, _): &(u64, u64)| *key);
            sink checksum[parallelism] = sink <- counts;
        },
        StateKind::Window => job! {
            name "STATE";
            workers workers_for(parallelism);
            source events[parallelism] = GeneratorSource::new(|i| i).take(events);
            operator keyed[parallelism] = StateEvents { keys } <- events;
            operator timed[parallelism] = Watermarks::monotonic()
                .timestamps(|_: &(u64, u64)| Timestamp::from_millis(0)) <- keyed;
            operator counts[parallelism] { results, late } =
                Windows::tumbling(Duration::from_secs(3_600)).count()
                <- timed.key(|(key, _): &(u64, u64)| *key);
            operator pairs[parallelism] = map(|r: WindowResult<u64, u64>| (r.key, r.value))
                <- counts.results;
            sink checksum[parallelism] = sink <- pairs;
            drop counts.late;
        },
    }
    .expect("STATE is well formed");
    let options = RunOptions {
        checkpoints: checkpoints.map(|(dir, interval)| {
            let mut config = CheckpointConfig::new(dir, interval);
            config.delivery = Delivery::AtLeastOnce;
            config.retain = 2;
            config
        }),
        ..RunOptions::default()
    };
    let report = graph.run_with(options).expect("STATE runs");
    (totals.outcome(), report)
}

/// The workload as a hand-written loop with a hash map.
pub fn state_baseline(events: u64, keys: u64) -> Outcome {
    let mut counts: FastHashMap<u64, u64> = FastHashMap::default();
    for i in 0..events {
        let key = std::hint::black_box(state_key(i, keys));
        *counts.entry(key).or_insert(0) += 1;
    }
    let mut outcome = Outcome::default();
    for (key, count) in counts {
        outcome.records += 1;
        outcome.checksum = outcome.checksum.wrapping_add((key + 1).wrapping_mul(count));
    }
    outcome
}

/// The workload's result computed with a dense array of counts (a
/// quarter of the hash map's memory): the reference for runs whose state
/// is larger than the memory they may use.
pub fn state_reference(events: u64, keys: u64) -> Outcome {
    let mut counts = vec![0u32; keys as usize];
    for i in 0..events {
        counts[state_key(i, keys) as usize] += 1;
    }
    let mut outcome = Outcome::default();
    for (key, &count) in counts.iter().enumerate() {
        if count > 0 {
            outcome.records += 1;
            outcome.checksum = outcome
                .checksum
                .wrapping_add((key as u64 + 1).wrapping_mul(u64::from(count)));
        }
    }
    outcome
}
