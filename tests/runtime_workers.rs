//! Jobs on workers (`workers N;`): several tasks share a thread and take
//! turns. A keyed job on fewer workers than tasks counts every record, and
//! aligned sources held back by their worker give the windows of a thread
//! per task.
//!
//! (Stopping, failing and backpressure on workers are tested beside their
//! thread-per-task versions in `runtime_lifecycle` and `backpressure_flow`;
//! random DAGs, windows and checkpoints in `runtime_property`,
//! `window_property` and `checkpoint_barriers`.)

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::prelude::*;

#[operator]
fn pass(value: u64, out: &mut Collector<u64>) {
    out.emit(value);
}

#[test]
fn a_keyed_job_on_fewer_workers_than_tasks_counts_every_record() {
    for workers in [1, 2, 3] {
        let sink = CollectSink::new();
        let graph = job! {
            workers workers;
            batch_size 100;
            source numbers[3] = GeneratorSource::new(|i| i).take(30_000);
            operator pass[2] = Pass <- numbers.key(|v| *v % 7);
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
    // Every event reached the windows (merged per key and slice before the
    // exchange, so fewer records than events crossed it).
    assert_eq!(report.component("timed").unwrap().records_in(), events);
    let mut windows = BTreeMap::new();
    for result in sink.values() {
        let previous = windows.insert((result.key, result.window.start.millis()), result.value);
        assert!(previous.is_none(), "a window fired twice");
    }
    assert_eq!(
        windows.values().sum::<u64>(),
        events,
        "every event counted once"
    );
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

/// Alignment is a bound that holds: two aligned sources whose event time
/// runs at different speeds (one ten times the other) never lead each
/// other by more than the drift plus the event time of one batch, on a
/// thread per task or on workers.
#[test]
fn alignment_bounds_the_lead_by_the_drift_plus_one_batch() {
    let drift = Duration::from_millis(500);
    // Instance 1 of 2 generates the odd numbers, at 10 ms each: a batch of
    // 50 spans at most 50 * 20 ms of its event time.
    let batch = Duration::from_millis(50 * 20);
    for workers in [0, 1, 2] {
        let group = streamwork::window::AlignmentGroup::new(drift);
        let graph = job! {
            workers workers;
            batch_size 50;
            source numbers[2] = GeneratorSource::new(|i| i).take(200_000);
            operator timed[2] = Watermarks::monotonic()
                .align_in(&group)
                .timestamps(|i: &u64| Timestamp::from_millis((*i * (1 + 9 * (*i % 2))) as i64)) <- numbers;
            sink out = CollectSink::new() <- timed;
        }
        .unwrap();
        graph.run().unwrap();
        let lead = group.largest_lead();
        assert!(
            lead <= drift + batch,
            "{workers} workers: a lead of {lead:?}, beyond {drift:?} + one batch ({batch:?})"
        );
    }
}

/// Instance 0 sparse, one record per poll, 100 ms of event time apart (a
/// batch of it spans 10 s); instance 1 dense, a hundred records per poll,
/// 1 ms apart. Both emit the event time in milliseconds.
#[derive(Clone)]
struct SparseAndDense {
    sparse: bool,
    next: u64,
}

impl Source for SparseAndDense {
    type Out = Collector<u64>;
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.sparse = ctx.instance().0 == 0;
        Ok(())
    }
    fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
        const END: u64 = 400_000;
        if self.next >= END {
            return Ok(SourcePoll::Finished);
        }
        if self.sparse {
            out.emit(self.next);
            self.next += 100;
        } else {
            for _ in 0..100 {
                out.emit(self.next);
                self.next += 1;
            }
        }
        Ok(SourcePoll::Emitted)
    }
}

/// Two aligned instances, one dense in event time (a poll spans 100 ms)
/// and one sparse, a record per poll (a batch of it spans 10 s): a gated
/// source hands on what each poll emitted, so its progress is published
/// before the gate is asked again, and neither leads by more than the
/// drift and one poll of the dense one, on a thread per task and on
/// workers. (The sparse one led by a batch, 10 s, when its progress was
/// published only once its batch was full.)
#[test]
fn alignment_holds_a_sparse_source_to_the_drift() {
    let drift = Duration::from_secs(1);
    let dense_poll = Duration::from_millis(100);
    for workers in [0, 1, 2] {
        let group = streamwork::window::AlignmentGroup::new(drift);
        let graph = job! {
            workers workers;
            batch_size 100;
            source times[2] = SparseAndDense { sparse: false, next: 0 };
            operator timed[2] = Watermarks::monotonic()
                .align_in(&group)
                .timestamps(|t: &u64| Timestamp::from_millis(*t as i64)) <- times;
            sink out = CollectSink::new() <- timed;
        }
        .unwrap();
        graph.run().unwrap();
        let lead = group.largest_lead();
        assert!(
            lead <= drift + dense_poll,
            "{workers} workers: a lead of {lead:?}, beyond the drift ({drift:?}) and one poll of the dense source"
        );
    }
}

/// How far the early source of `alignment_waits_for_a_member_that_starts_late`
/// has read, and how long the late one's `open` waits for it to read ahead.
static EARLY_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A source of `u64` event times in ms up to 400 s, `step` apart, 100 a
/// poll; one whose `open` waits for the early one to read 50 s ahead
/// (at most two seconds) if `late`.
#[derive(Clone)]
struct Stepping {
    step: u64,
    late: bool,
    next: u64,
}

impl Source for Stepping {
    type Out = Collector<u64>;
    fn open(&mut self, _ctx: &InstanceContext) -> Result<(), ConnectorError> {
        use std::sync::atomic::Ordering;
        if self.late {
            for _ in 0..2_000 {
                if EARLY_READ.load(Ordering::Relaxed) >= 50_000 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
    fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
        if self.next >= 400_000 {
            return Ok(SourcePoll::Finished);
        }
        for _ in 0..100 {
            out.emit(self.next);
            self.next += self.step;
        }
        if !self.late {
            EARLY_READ.store(self.next, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(SourcePoll::Emitted)
    }
}

/// Two sources in one alignment group, the second slow to start (its
/// `open` waits for the first to read 50 s of event time ahead): the first
/// is held back until every source task has started, since a member that
/// has not started has not joined the group and holds nothing back. On
/// workers the first read 50 s ahead before (a task starts at its first
/// turn), on a thread per task too here.
#[test]
fn alignment_waits_for_a_member_that_starts_late() {
    let drift = Duration::from_secs(1);
    for workers in [0, 2] {
        EARLY_READ.store(0, std::sync::atomic::Ordering::Relaxed);
        let group = streamwork::window::AlignmentGroup::new(drift);
        let stamp = |t: &u64| Timestamp::from_millis(*t as i64);
        let graph = job! {
            workers workers;
            batch_size 100;
            source early = Stepping { step: 1, late: false, next: 0 };
            source late = Stepping { step: 10, late: true, next: 0 };
            operator early_timed = Watermarks::monotonic().align_in(&group).timestamps(stamp) <- early;
            operator late_timed = Watermarks::monotonic().align_in(&group).timestamps(stamp) <- late;
            sink early_out = CollectSink::new() <- early_timed;
            sink late_out = CollectSink::new() <- late_timed;
        }
        .unwrap();
        graph.run().unwrap();
        let lead = group.largest_lead();
        // A poll of the late source spans a second of event time.
        assert!(
            lead <= drift + Duration::from_secs(1),
            "{workers} workers: a lead of {lead:?}, beyond the drift ({drift:?}) and one poll"
        );
    }
}

/// The thread each task ran on, by component.
static THREADS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

fn note_thread(component: &str) {
    let thread = std::thread::current().name().unwrap_or("").to_string();
    THREADS
        .lock()
        .unwrap()
        .push((component.to_string(), thread));
}

/// Notes the thread it runs on and passes its records on.
#[derive(Clone)]
struct Noting;

#[operator(stateless)]
impl Noting {
    fn open(&self, ctx: &InstanceContext) {
        note_thread(ctx.component());
    }

    fn on_record(&self, value: u64, out: &mut Collector<u64>) {
        out.emit(value);
    }
}

/// A source of its own (it says nothing of blocking) that notes its thread.
#[derive(Clone)]
struct Counting {
    next: u64,
}

impl Source for Counting {
    type Out = Collector<u64>;
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        note_thread(ctx.component());
        Ok(())
    }
    fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
        if self.next == 1_000 {
            return Ok(SourcePoll::Finished);
        }
        out.emit(self.next);
        self.next += 1;
        Ok(SourcePoll::Emitted)
    }
}

/// Without `workers N;` a job runs on workers, one per core: the keyed
/// operators behind a generator (which never waits) run on workers, and
/// a source that does not say it never waits runs on a thread of its own.
#[test]
fn jobs_run_on_workers_by_default_with_a_blocking_source_on_its_own() {
    let cores = Some(streamwork::runtime::cores());
    assert_eq!(streamwork::runtime::JobConfig::default().workers, cores);
    // The builder's default is the same, and `workers(0)` a thread per task.
    let built = |workers: Option<u32>| {
        let mut job = streamwork::runtime::JobBuilder::new("built");
        if let Some(workers) = workers {
            job.workers(workers);
        }
        let numbers = job.source("numbers", 1, GeneratorSource::new(|i| i).take(10));
        job.sink("out", 1, CollectSink::<u64>::new(), numbers);
        job.build().unwrap().config().workers
    };
    assert_eq!(built(None), cores);
    assert_eq!(built(Some(0)), None);
    let sink = CollectSink::new();
    let graph = job! {
        source generated[2] = GeneratorSource::new(|i| i).take(1_000);
        source counted = Counting { next: 0 };
        operator from_generated[2] = Noting <- generated.key(|v: &u64| *v);
        operator from_counted = Noting <- counted;
        sink out = sink.clone() <- from_generated, from_counted;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(sink.values().len(), 2_000);
    let threads = THREADS.lock().unwrap().clone();
    let on = |component: &str| -> Vec<String> {
        threads
            .iter()
            .filter(|(c, _)| c == component)
            .map(|(_, t)| t.clone())
            .collect()
    };
    for thread in on("from_generated") {
        assert!(thread.starts_with("worker#"), "{threads:?}");
    }
    // Fused into the source it follows, on that source's own thread.
    assert_eq!(on("counted"), ["counted#0"], "{threads:?}");
    assert_eq!(on("from_counted"), ["counted#0"], "{threads:?}");
}
