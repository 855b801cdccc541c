//! Jobs on workers (`workers N;`): several tasks share a thread and take
//! turns. They end, stop, fail and apply backpressure as jobs on a thread per
//! task do; aligned sources are held back by their worker instead of waiting
//! in place; and an event-time job gives the same windows either way.
//!
//! (Random DAGs, windows and checkpoints on workers are also covered by
//! `runtime_property`, `window_property` and `checkpoint_barriers`.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use streamwork::prelude::*;

#[derive(Clone)]
struct ExplodeAt(u64);

#[operator]
impl ExplodeAt {
    fn on_record(&mut self, value: u64, out: &mut Collector<u64>) {
        if value == self.0 {
            panic!("boom at {value}");
        }
        out.emit(value);
    }
}

/// A sink that takes `micros` per record.
#[derive(Clone)]
struct SlowSink {
    micros: u64,
    seen: CollectSink<u64>,
}

impl Sink for SlowSink {
    type In = u64;
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        let until = Instant::now() + Duration::from_micros(self.micros);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let mut seen = self.seen.clone();
        seen.write(record)?;
        seen.flush()
    }
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_keyed_job_on_fewer_workers_than_tasks_counts_every_record() {
    for workers in [1, 2, 3] {
        let sink = CollectSink::new();
        let graph = job! {
            workers workers;
            batch_size 100;
            source numbers[3] = GeneratorSource::new(|i| i).take(30_000);
            operator pass[2] = ExplodeAt(u64::MAX) <- numbers.key(|v| *v % 7);
            sink out[2] = sink.clone() <- pass.shuffle();
        }
        .unwrap();
        let report = graph.run().unwrap();
        assert_eq!(report.component("pass").unwrap().records_in(), 30_000);
        let mut values = sink.values();
        values.sort_unstable();
        assert_eq!(values, (0..30_000).collect::<Vec<_>>(), "{workers} workers");
    }
}

#[test]
fn stop_drains_an_unbounded_job_on_workers() {
    let sink = CollectSink::new();
    let graph = job! {
        workers 2;
        source numbers[2] = GeneratorSource::new(|i| i);
        operator pass[2] = ExplodeAt(u64::MAX) <- numbers.key(|v| *v);
        sink out = sink.clone() <- pass;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    wait_until("records to flow", || {
        handle.snapshot().component("out").unwrap().records_in() > 0
    });
    handle.stop_handle().stop();
    let report = handle.join().unwrap();
    assert!(report.stopped);
    let emitted = report.component("numbers").unwrap().records_out();
    assert_eq!(report.component("out").unwrap().records_in(), emitted);
    assert_eq!(sink.values().len() as u64, emitted);
}

#[test]
fn a_panic_on_a_worker_names_its_component_and_ends_the_other_workers() {
    // The source runs unbounded on the other worker, held back by a full
    // channel into the operator that panics: the abort must end it.
    let mut job = JobBuilder::new("explodes");
    job.batch_size(1).channel_capacity(1).workers(2);
    let numbers = job.source("numbers", 2, GeneratorSource::new(|i| i));
    let exploded = job.operator("explode", 1, ExplodeAt(3), numbers.shuffle());
    job.sink("out", 1, CollectSink::new(), exploded.shuffle());
    let error = job.build().unwrap().run().unwrap_err();
    assert!(
        matches!(error, JobError::Panicked { ref component, ref message, .. }
            if component == "explode" && message.contains("boom at 3")),
        "{error}"
    );
}

#[test]
fn dropping_policies_on_workers_account_for_every_record() {
    for policy in [
        Overflow::DropNewest,
        Overflow::DropOldest,
        Overflow::Sample(4),
    ] {
        let events = 50_000;
        let seen = CollectSink::new();
        let sink = SlowSink {
            micros: 5,
            seen: seen.clone(),
        };
        let graph = job! {
            workers 2;
            batch_size 64;
            source numbers = GeneratorSource::new(|i| i).take(events);
            operator passed[2] = ExplodeAt(u64::MAX) <- numbers.shuffle();
            sink slow = sink <- passed.capacity(2).overflow(policy);
        }
        .unwrap();
        let report = graph.run().unwrap();
        let delivered = seen.values();
        let passed = report.component("passed").unwrap().records_out();
        let dropped = report.component("slow").unwrap().dropped_in;
        assert_eq!(passed, events);
        assert_eq!(passed, dropped + delivered.len() as u64, "{policy:?}");
        let mut sorted = delivered.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), delivered.len(), "{policy:?} delivered twice");
    }
}

#[test]
fn blocking_on_workers_loses_nothing() {
    let seen = CollectSink::new();
    let sink = SlowSink {
        micros: 20,
        seen: seen.clone(),
    };
    let graph = job! {
        workers 2;
        batch_size 64;
        source numbers = GeneratorSource::new(|i| i).take(20_000);
        operator passed = ExplodeAt(u64::MAX) <- numbers;
        sink slow[2] = sink <- passed.shuffle().capacity(2);
    }
    .unwrap();
    // The source's task is held back by the slow sinks' full channels
    // (one of them on its own worker) and resumes as they drain.
    let report = graph.run().unwrap();
    let mut values = seen.values();
    values.sort_unstable();
    assert_eq!(values, (0..20_000).collect::<Vec<_>>());
    assert_eq!(report.component("slow").unwrap().dropped_in, 0);
}

type Event = (u64, i64);

/// Counts per key and 100 ms window of `events` from `sources` aligned
/// sources, on `workers` workers (0: a thread per task).
fn aligned_windows(workers: u32, sources: u32, events: u64) -> BTreeMap<(u64, i64), u64> {
    let sink = CollectSink::new();
    let graph = job! {
        workers workers;
        batch_size 50;
        source numbers[sources] = GeneratorSource::new(|i| (i % 13, i as i64)).take(events);
        operator timed[sources] = Watermarks::monotonic()
            .align(Duration::from_millis(200))
            .timestamps(|e: &Event| Timestamp::from_millis(e.1)) <- numbers;
        operator counts[sources] { results, late } =
            Windows::tumbling(Duration::from_millis(100)).count()
            <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    let report = graph.run().unwrap();
    assert_eq!(report.component("counts").unwrap().records_in(), events);
    let mut windows = BTreeMap::new();
    for result in sink.values() {
        let previous = windows.insert((result.key, result.window.start.millis()), result.value);
        assert!(previous.is_none(), "a window fired twice");
    }
    windows
}

#[test]
fn aligned_sources_on_workers_give_the_windows_of_a_thread_per_task() {
    let events = 40_000;
    let expected = aligned_windows(0, 3, events);
    let total: u64 = expected.values().sum();
    assert_eq!(total, events);
    // More sources than workers: the worker holds a source that runs ahead
    // back between polls instead of letting it wait inside one.
    assert_eq!(aligned_windows(2, 3, events), expected);
    assert_eq!(aligned_windows(1, 3, events), expected);
}
