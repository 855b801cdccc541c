//! Backpressure (chapter 9): overflow policies account for every record (on
//! a thread per task and on workers) and queue no more than the edge's
//! capacity, backpressure watermarks pause and
//! resume the sources, a permanently slow consumer is reported as thrashing,
//! and the bottleneck is named.
//!
//! These jobs run a slow sink on purpose; their assertions hold whatever the
//! machine's speed (exact counts, or conditions a slow sink always causes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use streamwork::prelude::*;

/// A sink that takes `micros` per record and counts what it receives.
#[derive(Clone)]
struct SlowSink {
    micros: u64,
    seen: CollectSink<u64>,
}

impl Sink for SlowSink {
    type In = u64;
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        spin(self.micros);
        let mut seen = self.seen.clone();
        seen.write(record)?;
        seen.flush()
    }
}

/// Busy for `micros` µs: a slow stage that does not sleep.
fn spin(micros: u64) {
    let until = std::time::Instant::now() + Duration::from_micros(micros);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[operator]
fn pass(value: u64, out: &mut Collector<u64>) {
    out.emit(value);
}

/// `events` numbers into a sink taking `micros` per record behind a queue of
/// two batches with `policy`, on `workers` workers (0: a thread per task).
fn run(policy: Overflow, events: u64, micros: u64, workers: u32) -> (JobReport, Vec<u64>) {
    let seen = CollectSink::new();
    let sink = SlowSink {
        micros,
        seen: seen.clone(),
    };
    let graph = job! {
        batch_size 64;
        workers workers;
        source numbers = GeneratorSource::new(|i| i).take(events);
        operator passed = Pass <- numbers;
        sink slow = sink <- passed.capacity(2).overflow(policy);
    }
    .unwrap();
    let report = graph.run().unwrap();
    (report, seen.values())
}

#[test]
fn dropping_policies_account_for_every_record() {
    for (policy, workers) in [
        Overflow::DropNewest,
        Overflow::DropOldest,
        Overflow::Sample(4),
    ]
    .into_iter()
    .flat_map(|policy| [(policy, 0), (policy, 2)])
    {
        let events = 50_000;
        let (report, delivered) = run(policy, events, 5, workers);
        let emitted = report.component("numbers").unwrap().records_out();
        let dropped = report.component("slow").unwrap().dropped_in;
        assert_eq!(emitted, events);
        assert_eq!(
            emitted,
            dropped + delivered.len() as u64,
            "{policy:?}, {workers} workers"
        );
        assert!(
            dropped > 0,
            "{policy:?}, {workers} workers: a 5 µs sink behind a 2-batch queue must overflow"
        );
        let mut sorted = delivered.clone();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            delivered.len(),
            "{policy:?}, {workers} workers: delivered a record twice"
        );
    }
}

/// A sink taking `micros` per record that counts the records it receives
/// once the source has generated its last one.
#[derive(Clone)]
struct AfterTheEndSink {
    micros: u64,
    ended: Arc<AtomicBool>,
    after: Arc<AtomicU64>,
}

impl Sink for AfterTheEndSink {
    type In = u64;
    fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> {
        spin(self.micros);
        if self.ended.load(Ordering::SeqCst) {
            self.after.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Whatever the policy, a full edge holds what its queue holds and no more:
/// once the source has generated its last record, the sink receives at most
/// a few batches (the queue's two, the sampled one a sampling edge holds
/// past them, the one the sink is writing, the one being sent). A sampling
/// edge keeps one record in four of a batch that meets a full queue and then
/// waits like a blocking one, on workers too; built with `job!` or with
/// `JobBuilder`.
#[test]
fn a_full_edge_queues_no_more_than_its_capacity_under_every_policy() {
    const EVENTS: u64 = 30_000;
    const BATCH: u64 = 64;
    for (policy, workers, builder) in [
        Overflow::Block,
        Overflow::DropNewest,
        Overflow::DropOldest,
        Overflow::Sample(4),
    ]
    .into_iter()
    .flat_map(|policy| [(policy, 0), (policy, 2)])
    .flat_map(|(policy, workers)| [(policy, workers, false), (policy, workers, true)])
    {
        let ended = Arc::new(AtomicBool::new(false));
        let after = Arc::new(AtomicU64::new(0));
        let sink = AfterTheEndSink {
            micros: 20,
            ended: ended.clone(),
            after: after.clone(),
        };
        let last = ended.clone();
        let numbers = GeneratorSource::new(move |i| {
            if i + 1 == EVENTS {
                last.store(true, Ordering::SeqCst);
            }
            i
        })
        .take(EVENTS);
        // The builder keeps the promise `job!` keeps: the same edge flow.
        let graph = if builder {
            let mut job = JobBuilder::new("job");
            job.batch_size(BATCH as usize).workers(workers);
            let numbers = job.source("numbers", 1, numbers);
            let passed = job.operator("passed", 1, Pass, numbers);
            job.sink("slow", 1, sink, passed.capacity(2).overflow(policy));
            job.build().unwrap()
        } else {
            job! {
                batch_size 64;
                workers workers;
                source numbers = numbers;
                operator passed = Pass <- numbers;
                sink slow = sink <- passed.capacity(2).overflow(policy);
            }
            .unwrap()
        };
        let report = graph.run().unwrap();
        assert_eq!(report.component("numbers").unwrap().records_out(), EVENTS);
        let after = after.load(Ordering::SeqCst);
        let built = if builder { "JobBuilder" } else { "job!" };
        assert!(
            after <= 6 * BATCH,
            "{policy:?}, {workers} workers, {built}: the sink received {after} records after the source's last; \
             a queue of 2 batches of {BATCH} holds fewer"
        );
    }
}

#[test]
fn blocking_loses_nothing_and_names_the_bottleneck() {
    let (report, delivered) = run(Overflow::Block, 40_000, 25, 0);
    assert_eq!(delivered.len(), 40_000);
    assert_eq!(report.component("slow").unwrap().dropped_in, 0);
    assert_eq!(report.bottleneck.as_deref(), Some("slow"), "{report}");
}

#[test]
fn blocking_on_workers_loses_nothing() {
    // The source's worker holds it back while the sink's queue is full.
    let (report, delivered) = run(Overflow::Block, 20_000, 20, 2);
    assert_eq!(delivered, (0..20_000).collect::<Vec<_>>());
    assert_eq!(report.component("slow").unwrap().dropped_in, 0);
}

#[test]
fn backpressure_watermarks_pause_and_resume_the_sources() {
    let seen = CollectSink::new();
    let sink = SlowSink {
        micros: 20,
        seen: seen.clone(),
    };
    let graph = job! {
        batch_size 16;
        source numbers = GeneratorSource::new(|i| i).take(20_000);
        operator passed = Pass <- numbers;
        sink slow = sink <- passed.capacity(8).pause_sources_above(0.75, 0.25);
    }
    .unwrap();
    let report = graph.run().unwrap();
    // The sources paused, and resumed: every record arrived.
    assert!(report.source_pauses > 0, "{report}");
    assert_eq!(seen.values().len(), 20_000);
}

#[test]
fn a_permanently_slow_consumer_is_reported_as_thrashing() {
    let seen = CollectSink::new();
    let sink = SlowSink {
        micros: 50,
        seen: seen.clone(),
    };
    let graph = job! {
        batch_size 8;
        source numbers = GeneratorSource::new(|i| i).take(30_000);
        operator passed = Pass <- numbers;
        sink slow = sink <- passed.capacity(4).pause_sources_above(0.5, 0.25);
    }
    .unwrap();
    let report = graph.run().unwrap();
    let thrashing = report.thrashing.expect("pauses kept recurring");
    assert!(
        thrashing.contains("`slow`") && thrashing.contains("permanent shortfall"),
        "{thrashing}"
    );
    assert_eq!(seen.values().len(), 30_000);
}

/// Event time an hour behind the wall clock shows as an hour of watermark lag
/// at the component downstream of the watermarks, in the live metrics (the
/// series `/metrics` serves are checked in tests/metrics_endpoint.rs).
#[test]
fn the_watermark_lag_is_measured_and_published() {
    let an_hour_ago = streamwork::core::timer::wall_clock().millis() - 3_600_000;
    let graph = job! {
        batch_size 64;
        source numbers = GeneratorSource::new(|i| i).rate(100_000.0);
        operator timed = Watermarks::monotonic().timestamps(move |i: &u64| Timestamp::from_millis(an_hour_ago + (*i as i64 % 1000))) <- numbers;
        operator passed[2] = Pass <- timed.shuffle();
        sink out = CollectSink::<u64>::new() <- passed.global();
    }
    .unwrap();
    let job = graph.start().unwrap();
    let metrics = job.live_metrics();
    // Bounded: each wait is at most 2 s; the monitor looks every 250 ms.
    let mut lag = None;
    let mut look = 0;
    for _ in 0..100 {
        look = metrics.wait_for_look(look, Duration::from_secs(2));
        lag = metrics
            .snapshot()
            .component("passed")
            .and_then(|c| c.capacity.watermark_lag_ms);
        if lag.is_some() {
            break;
        }
    }
    job.stop();
    job.join().unwrap();
    let lag = lag.expect("a watermark reached `passed`");
    assert!(
        (3_599_000..3_600_000 + 600_000).contains(&lag),
        "an hour behind, give or take: {lag} ms"
    );
}
