//! Workloads shared by the criterion benches and `cargo xtask bench`: each as a
//! Streamwork job and as the hand-written single-threaded loop it is compared to.
//!
//! The events are those of the benchmark contract: event `i` in `0..N` has
//! `key(i) = (i * 2654435761) % K`, `value(i) = i`, `time(i) = i` ms; with P
//! source instances, instance `w` generates the `i` with `i % P == w`.
//!
//! * **W1** map and filter: `y = value * 3`, keep even `y`, count at the sink;
//!   result: kept records and the wrapping sum of kept `y`;
//! * **W2** keyed count: exchange by key, count per key; result: distinct keys
//!   and the wrapping sum of `(key + 1) * count`;
//! * **W2 latency**: W2 fed by a source pacing itself, stamping each record with
//!   its emission time; the sink reads the age of sampled records;
//! * **W3** keyed tumbling event-time window: 1000 ms windows, count per key per
//!   window, watermark = time (monotonic); result: (window, key) results and
//!   the wrapping sum of `(window_start / 1000 + 1) * (key + 1) * count`
//!   (`W3-K100`: the same with 100 keys; `W3-HAND`: W3 written by hand on
//!   threads with a keyed exchange between them, see [`w3_exchange_job`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;

mod exchange;
mod state;
mod state_file;
pub use exchange::w3_exchange_job;
pub use state::{StateKind, state_baseline, state_job, state_key, state_reference};
pub use state_file::{distinct_keys_reference, state_file_job, write_distinct_keys};

/// Distinct keys of the keyed workloads, unless a workload says otherwise.
pub const KEYS: u64 = 10_000;

/// The key of event `i` among `keys` keys: `(i * 2654435761) % keys`.
#[inline]
pub fn key(i: u64, keys: u64) -> u64 {
    i.wrapping_mul(2_654_435_761) % keys
}

/// What a workload computed: identical for the job and its baseline.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Result records.
    pub records: u64,
    /// The workload's checksum.
    pub checksum: u64,
}

/// Adds sink-side partial outcomes together, once per sink instance.
#[derive(Clone, Default)]
struct Totals(Arc<(AtomicU64, AtomicU64)>);

impl Totals {
    fn add(&self, outcome: Outcome) {
        self.0.0.fetch_add(outcome.records, Ordering::Relaxed);
        self.0.1.fetch_add(outcome.checksum, Ordering::Relaxed);
    }

    fn outcome(&self) -> Outcome {
        Outcome {
            records: self.0.0.load(Ordering::Relaxed),
            checksum: self.0.1.load(Ordering::Relaxed),
        }
    }
}

// ---------------------------------------------------------------- W1

/// `y = value * 3`, kept when even.
#[operator]
fn triple_keep_even(value: u64, out: &mut Collector<u64>) {
    let y = value.wrapping_mul(3);
    if y.is_multiple_of(2) {
        out.emit(y);
    }
}

/// Counts and sums what it receives.
#[derive(Clone)]
struct CountSum {
    totals: Totals,
    local: Outcome,
}

impl Sink for CountSum {
    type In = u64;

    #[inline]
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        self.local.records += 1;
        self.local.checksum = self.local.checksum.wrapping_add(record.value);
        Ok(())
    }

    /// Memory only: it shares a worker (see [`workers_for`]).
    fn may_block(&self) -> bool {
        false
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.totals.add(self.local);
        Ok(())
    }
}

/// A W1 sink and the totals it adds to when it closes.
fn count_sum() -> (Totals, CountSum) {
    let totals = Totals::default();
    let sink = CountSum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    (totals, sink)
}

/// Runs a W1 variant and returns what its sinks counted.
fn run_w1(graph: Result<JobGraph, GraphError>, totals: &Totals) -> Outcome {
    graph
        .expect("the W1 variant is well formed")
        .run()
        .expect("the W1 variant runs");
    totals.outcome()
}

/// W1's step: triple, keep the even results.
#[inline]
fn triple_if_even(value: u64) -> Option<u64> {
    let y = value.wrapping_mul(3);
    y.is_multiple_of(2).then_some(y)
}

/// W1 as a Streamwork job.
pub fn w1_job(events: u64, parallelism: u32) -> Outcome {
    let (totals, sink) = count_sum();
    let graph = job! {
        name "W1";
        source events[parallelism] = GeneratorSource::new(|i| i).take(events);
        operator kept[parallelism] = TripleKeepEven <- events;
        sink count[parallelism] = sink <- kept;
    };
    run_w1(graph, &totals)
}

/// W1 with a closure in `job!` instead of the `#[operator]` function: the
/// same work, to show that a closure costs what an operator costs.
pub fn w1_closure_job(events: u64, parallelism: u32) -> Outcome {
    let (totals, sink) = count_sum();
    let graph = job! {
        name "W1-CLOSURE";
        source events[parallelism] = GeneratorSource::new(|i| i).take(events);
        operator kept[parallelism] = filter_map(triple_if_even) <- events;
        sink count[parallelism] = sink <- kept;
    };
    run_w1(graph, &totals)
}

/// W1 chained on the builder: one `filter_map` step, fused into the
/// source's task (as W1's operator is). Written as `map` then `filter`, two
/// fused steps, it measured 0.64-0.69x of W1: each step is an operator
/// instance in the chain.
pub fn w1_flow_job(events: u64, parallelism: u32) -> Outcome {
    let (totals, sink) = count_sum();
    let mut job = JobBuilder::new("W1-FLOW");
    let numbers = job.source(
        "events",
        parallelism,
        GeneratorSource::new(|i| i).take(events),
    );
    job.flow(numbers)
        .filter_map(triple_if_even)
        .sink("count", sink);
    run_w1(job.build(), &totals)
}

/// W1 as a hand-written loop.
pub fn w1_baseline(events: u64) -> Outcome {
    let mut outcome = Outcome::default();
    for i in 0..events {
        let y = std::hint::black_box(i).wrapping_mul(3);
        if y.is_multiple_of(2) {
            outcome.records += 1;
            outcome.checksum = outcome.checksum.wrapping_add(y);
        }
    }
    outcome
}

// ---------------------------------------------------------------- W2

/// Maps event `i` to `(key(i), 1)`: its key and a count of one.
#[derive(Clone)]
struct WithKey {
    keys: u64,
}

#[operator(stateless)]
impl WithKey {
    fn on_record(&self, value: u64, out: &mut Collector<(u64, u64)>) {
        out.emit((key(value, self.keys), 1));
    }
}

/// Counts events per key from `(key, count)` records; emits `(key, count)`
/// per key at the end. Two records of a key merge into one carrying both
/// counts, so a combiner adds them up before the keyed exchange.
#[derive(Clone, Default, State)]
pub struct CountPerKey {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl CountPerKey {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        (_, count): (u64, u64),
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += count;
    }

    fn combine(&self, earlier: &mut (u64, u64), later: (u64, u64)) {
        earlier.1 += later.1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        for (key, count) in self.counts.drain() {
            out.emit((key, count));
        }
    }
}

/// Sums `(key + 1) * count` over the results.
#[derive(Clone)]
struct KeyChecksum {
    totals: Totals,
    local: Outcome,
}

impl Sink for KeyChecksum {
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

    /// Memory only: it shares a worker (see [`workers_for`]).
    fn may_block(&self) -> bool {
        false
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.totals.add(self.local);
        Ok(())
    }
}

/// W2 as a Streamwork job: source → map → keyed count → sink, every component
/// with `parallelism` instances; the keyed exchange goes through channels, the
/// rest is fused.
pub fn w2_job(events: u64, parallelism: u32) -> Outcome {
    w2_job_with_batch(
        events,
        parallelism,
        streamwork::core::collector::DEFAULT_BATCH_SIZE,
    )
}

/// How the standard workloads run their tasks: one worker per instance
/// (`workers N;`), each running one instance of every component, so that
/// the exchange is the only thing that crosses threads, nothing waits for a
/// core, and parallelism 1 runs on one core (not as a pipeline over two
/// threads, which would make the figure per core look like the figure of
/// one core). Their checksum sinks say they never block: a sink that may
/// runs on a thread of its own, and parallelism 1 would use two.
pub fn workers_for(parallelism: u32) -> u32 {
    parallelism.max(1)
}

/// W2 with `batch_size` records per batch between tasks.
pub fn w2_job_with_batch(events: u64, parallelism: u32, batch_size: usize) -> Outcome {
    w2_job_with(events, parallelism, batch_size, RunOptions::default())
}

/// W2 run with `options` (acking, say).
pub fn w2_job_with(
    events: u64,
    parallelism: u32,
    batch_size: usize,
    options: RunOptions,
) -> Outcome {
    let totals = Totals::default();
    let sink = KeyChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = job! {
        name "W2";
        batch_size batch_size;
        workers workers_for(parallelism);
        source events[parallelism] = GeneratorSource::new(|i| i).take(events);
        operator keyed[parallelism] = WithKey { keys: KEYS } <- events;
        operator counts[parallelism] = CountPerKey::default()
            <- keyed.key(|(key, _): &(u64, u64)| *key);
        sink checksum[parallelism] = sink <- counts;
    }
    .expect("W2 is well formed");
    graph.run_with(options).expect("W2 runs");
    totals.outcome()
}

/// W2 as a hand-written loop with the same hash map as keyed state.
pub fn w2_baseline(events: u64) -> Outcome {
    let mut counts: FastHashMap<u64, u64> = FastHashMap::default();
    for i in 0..events {
        let (key, _value) = std::hint::black_box((key(i, KEYS), i));
        *counts.entry(key).or_insert(0) += 1;
    }
    let mut outcome = Outcome::default();
    for (key, count) in counts {
        outcome.records += 1;
        outcome.checksum = outcome.checksum.wrapping_add((key + 1).wrapping_mul(count));
    }
    outcome
}

// ---------------------------------------------------------------- W3

/// Sums `(window_start / 1000 + 1) * (key + 1) * count` over window results.
#[derive(Clone)]
struct WindowChecksum {
    totals: Totals,
    local: Outcome,
}

impl Sink for WindowChecksum {
    type In = WindowResult<u64, u64>;

    #[inline]
    fn write(&mut self, record: Record<WindowResult<u64, u64>>) -> Result<(), ConnectorError> {
        let r = record.value;
        let window = (r.window.start.millis() / 1000 + 1) as u64;
        self.local.records += 1;
        self.local.checksum = self
            .local
            .checksum
            .wrapping_add(window.wrapping_mul(r.key + 1).wrapping_mul(r.value));
        Ok(())
    }

    /// Memory only: it shares a worker (see [`workers_for`]).
    fn may_block(&self) -> bool {
        false
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.totals.add(self.local);
        Ok(())
    }
}

fn event_time(event: &(u64, u64)) -> Timestamp {
    Timestamp::from_millis(event.1 as i64)
}

/// W3 as a Streamwork job, with `keys` distinct keys.
pub fn w3_job(events: u64, parallelism: u32, keys: u64) -> Outcome {
    let totals = Totals::default();
    let sink = WindowChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = job! {
        name "W3";
        workers workers_for(parallelism);
        source events[parallelism] = GeneratorSource::new(move |i| (key(i, keys), i)).take(events);
        // Sources within 5 s of event time of each other: on workers a
        // source ahead is merely not polled, and the windows hold fewer slices.
        operator timed[parallelism] = Watermarks::monotonic()
            .align(std::time::Duration::from_secs(5))
            .timestamps(event_time) <- events;
        operator counts[parallelism] { results, late } =
            Windows::tumbling(std::time::Duration::from_millis(1000)).count()
            <- timed.key(|(key, _): &(u64, u64)| *key);
        sink checksum[parallelism] = sink <- counts.results;
        drop counts.late;
    }
    .expect("W3 is well formed");
    graph.run().expect("W3 runs");
    totals.outcome()
}

/// W3 as a hand-written loop: a count per key for the current window,
/// emitted when the window changes (time is `i`, in order).
pub fn w3_baseline(events: u64, keys: u64) -> Outcome {
    let mut outcome = Outcome::default();
    let mut counts: FastHashMap<u64, u64> = FastHashMap::default();
    let mut window = 0u64;
    let mut close = |window: u64, counts: &mut FastHashMap<u64, u64>| {
        for (key, count) in counts.drain() {
            outcome.records += 1;
            outcome.checksum = outcome
                .checksum
                .wrapping_add((window + 1).wrapping_mul(key + 1).wrapping_mul(count));
        }
    };
    for i in 0..events {
        let (key, time) = std::hint::black_box((key(i, keys), i));
        if time / 1000 != window {
            close(window, &mut counts);
            window = time / 1000;
        }
        *counts.entry(key).or_insert(0) += 1;
    }
    close(window, &mut counts);
    outcome
}

/// Counts per key in windows of `size_ms` every `slide_ms` over `events`
/// events (`time(i) = i / per_ms` ms, `keys` keys, one instance): the input of
/// the sliding-versus-tumbling benchmark. Returns the number of window results.
pub fn keyed_window_job(events: u64, per_ms: u64, keys: u64, size_ms: u64, slide_ms: u64) -> u64 {
    let totals = Totals::default();
    let sink = WindowChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let (size, slide) = (
        std::time::Duration::from_millis(size_ms),
        std::time::Duration::from_millis(slide_ms),
    );
    let graph = job! {
        name "keyed-windows";
        source events = GeneratorSource::new(move |i| (key(i, keys), i / per_ms)).take(events);
        operator timed = Watermarks::monotonic().timestamps(event_time) <- events;
        operator counts { results, late } = Windows::sliding(size, slide).count()
            <- timed.key(|(key, _): &(u64, u64)| *key);
        sink checksum = sink <- counts.results;
        drop counts.late;
    }
    .expect("the window job is well formed");
    graph.run().expect("the window job runs");
    totals.outcome().records
}

// ---------------------------------------------------------------- JOIN

/// Counts join rows and sums `key + 1` over them.
#[derive(Clone)]
struct JoinChecksum {
    totals: Totals,
    local: Outcome,
}

impl Sink for JoinChecksum {
    type In = JoinRow<u64, (u64, u64), (u64, u64)>;

    #[inline]
    fn write(&mut self, record: Record<Self::In>) -> Result<(), ConnectorError> {
        self.local.records += 1;
        self.local.checksum = self.local.checksum.wrapping_add(record.value.key + 1);
        Ok(())
    }

    /// Memory only: it shares a worker (see [`workers_for`]).
    fn may_block(&self) -> bool {
        false
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.totals.add(self.local);
        Ok(())
    }
}

/// Event `i` of the join workload: `i` even on the left, odd on the right,
/// key `key(i / 2, 1000)`, time `i` ms.
fn join_event(i: u64) -> (u64, u64) {
    (key(i / 2, 1_000), i)
}

/// JOIN: an inner join of two streams per key in tumbling 1 s windows, over
/// `events` events (half on each side). Its state is the open windows only,
/// so its peak memory does not grow with the length of the run.
pub fn join_job(events: u64, parallelism: u32) -> Outcome {
    let totals = Totals::default();
    let sink = JoinChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let half = events / 2;
    let aligned = streamwork::window::AlignmentGroup::new(std::time::Duration::from_secs(30));
    let graph = job! {
        name "JOIN";
        workers workers_for(parallelism);
        source lefts[parallelism] = GeneratorSource::new(|i| join_event(2 * i)).take(half);
        source rights[parallelism] = GeneratorSource::new(|i| join_event(2 * i + 1)).take(half);
        operator timed_lefts[parallelism] = Watermarks::monotonic().align_in(&aligned).timestamps(event_time) <- lefts;
        operator timed_rights[parallelism] = Watermarks::monotonic().align_in(&aligned).timestamps(event_time) <- rights;
        operator joined[parallelism] = Join::inner().tumbling(std::time::Duration::from_secs(1))
            <- left(timed_lefts.key(|e: &(u64, u64)| e.0)), right(timed_rights.key(|e: &(u64, u64)| e.0));
        sink checksum[parallelism] = sink <- joined;
    }
    .expect("the join job is well formed");
    graph.run().expect("the join job runs");
    totals.outcome()
}

/// JOIN as a hand-written loop: per window, the left and right counts of each
/// key; a window's rows are the products.
pub fn join_baseline(events: u64) -> Outcome {
    let mut outcome = Outcome::default();
    let mut counts: FastHashMap<u64, (u64, u64)> = FastHashMap::default();
    let mut window = 0u64;
    let mut close = |counts: &mut FastHashMap<u64, (u64, u64)>| {
        for (key, (l, r)) in counts.drain() {
            outcome.records += l * r;
            outcome.checksum = outcome.checksum.wrapping_add((key + 1).wrapping_mul(l * r));
        }
    };
    for i in 0..(events / 2 * 2) {
        let (key, time) = std::hint::black_box(join_event(i));
        if time / 1000 != window {
            close(&mut counts);
            window = time / 1000;
        }
        let entry = counts.entry(key).or_insert((0, 0));
        if i.is_multiple_of(2) {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    close(&mut counts);
    outcome
}

// ---------------------------------------------------------------- W2 latency

/// Emits events `i` at `rate` events per second (per instance share), each
/// stamped with its emission time in nanoseconds since `epoch`. One clock read
/// per poll: records due in the same poll share it.
#[derive(Clone)]
struct PacedSource {
    events: u64,
    rate_per_instance: f64,
    epoch: Instant,
    next: u64,
    step: u64,
    emitted: u64,
    started: Option<Instant>,
}

impl Source for PacedSource {
    type Out = Collector<(u64, u64)>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.next = u64::from(ctx.instance().0);
        self.step = u64::from(ctx.parallelism());
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<(u64, u64)>) -> Result<SourcePoll, ConnectorError> {
        if self.next >= self.events {
            return Ok(SourcePoll::Finished);
        }
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let due = (now.duration_since(started).as_secs_f64() * self.rate_per_instance) as u64;
        if due <= self.emitted {
            // Sleep until the next record is due, at most 1 ms: a pacing
            // source must not spin a core the pipeline needs.
            let wait = (self.emitted + 1) as f64 / self.rate_per_instance
                - now.duration_since(started).as_secs_f64();
            if wait > 50e-6 {
                std::thread::sleep(Duration::from_secs_f64(wait.min(1e-3)));
            }
            return Ok(SourcePoll::Idle);
        }
        let stamp = now.duration_since(self.epoch).as_nanos() as u64;
        for _ in 0..(due - self.emitted).min(4096) {
            if self.next >= self.events {
                break;
            }
            out.emit((key(self.next, KEYS), stamp));
            self.next += self.step;
            self.emitted += 1;
        }
        Ok(SourcePoll::Idle)
    }
}

/// Counts per key as records arrive and passes each record on.
#[derive(Clone, Default, State)]
struct RunningCount {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl RunningCount {
    fn on_record(&mut self, key: CurrentKey<'_, u64>, event: (u64, u64), out: &mut Collector<u64>) {
        *self.counts.get_or_default(key) += 1;
        out.emit(event.1);
    }
}

/// Records the age of every 16th record it receives.
#[derive(Clone)]
struct LatencySink {
    epoch: Instant,
    seen: u64,
    samples: Vec<u64>,
    shared: Arc<Mutex<Vec<u64>>>,
}

impl Sink for LatencySink {
    type In = u64;

    #[inline]
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        self.seen += 1;
        if self.seen.is_multiple_of(16) {
            let now = self.epoch.elapsed().as_nanos() as u64;
            self.samples.push(now.saturating_sub(record.value));
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        shared.append(&mut self.samples);
        Ok(())
    }
}

/// End-to-end latency of W2 at `rate` events per second in total.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Latency {
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Samples taken.
    pub samples: usize,
}

/// Runs W2 paced at `rate` events per second for `events` events and measures
/// the latency from emission to the sink.
pub fn w2_latency(events: u64, parallelism: u32, rate: f64) -> Latency {
    let epoch = Instant::now();
    let shared = Arc::new(Mutex::new(Vec::new()));
    let source = PacedSource {
        events,
        rate_per_instance: rate / f64::from(parallelism),
        epoch,
        next: 0,
        step: 1,
        emitted: 0,
        started: None,
    };
    let sink = LatencySink {
        epoch,
        seen: 0,
        samples: Vec::new(),
        shared: shared.clone(),
    };
    let graph = job! {
        name "W2-latency";
        source events[parallelism] = source;
        operator counts[parallelism] = RunningCount::default() <- events.key(|(key, _): &(u64, u64)| *key);
        sink ages[parallelism] = sink <- counts;
    }
    .expect("the latency job is well formed");
    graph.run().expect("the latency job runs");
    let mut samples = std::mem::take(&mut *shared.lock().unwrap_or_else(|p| p.into_inner()));
    samples.sort_unstable();
    let percentile = |p: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[idx] as f64 / 1000.0
    };
    Latency {
        p50_us: percentile(0.50),
        p99_us: percentile(0.99),
        samples: samples.len(),
    }
}

/// Peak resident memory of this process so far (VmHWM), in bytes, where the
/// platform reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs `run` `runs` times: what the last run returned, and the shortest
/// wall time of them, in seconds.
pub fn best_of<T>(runs: u32, run: impl Fn() -> T) -> (T, f64) {
    let (outcome, elapsed_s, _) = best_of_with_cpu(runs, run);
    (outcome, elapsed_s)
}

/// [`best_of`], with the CPU seconds (user and system, every thread) the
/// fastest run used.
pub fn best_of_with_cpu<T>(runs: u32, run: impl Fn() -> T) -> (T, f64, f64) {
    let mut best = (f64::INFINITY, 0.0);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let (started, cpu) = (std::time::Instant::now(), cpu_seconds());
        last = Some(run());
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed < best.0 {
            best = (elapsed, cpu_seconds() - cpu);
        }
    }
    (last.expect("at least one run"), best.0, best.1)
}

/// CPU seconds (user and system) the process has used so far.
pub fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |usage| {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        seconds(usage.user_time()) + seconds(usage.system_time())
    })
}

// ---------------------------------------------------------------- CKPT

/// W2's keyed count with its state checkpointed: counts in `KeyedState`,
/// snapshotted by key group.
#[derive(Clone, Default)]
struct CheckpointedCount {
    counts: KeyedState<u64, u64>,
}

impl Operator for CheckpointedCount {
    type In = (u64, u64);
    type Key = ByKey<u64>;
    type Out = Collector<(u64, u64)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    #[inline]
    fn on_record(&mut self, _event: (u64, u64), ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        *self.counts.get_or_default(ctx.key()) += 1;
    }

    fn on_end(&mut self, out: &mut Self::Out) {
        for (key, count) in self.counts.drain() {
            out.emit((key, count));
        }
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let bytes = streamwork::state::snapshot_keyed(&self.counts, ctx.key_groups)
            .map_err(|e| TaskError::Snapshot(e.to_string()))?;
        Ok(Some(StateBytes::new(1, bytes.to_vec())))
    }
}

/// What a checkpointed run measured.
#[derive(Clone, Debug, Default)]
pub struct CheckpointedRun {
    /// The workload's result.
    pub outcome: Outcome,
    /// Checkpoints completed (the final one included).
    pub checkpoints: usize,
    /// Bytes of state in the largest one.
    pub largest_bytes: u64,
    /// The longest, trigger to durable commit.
    pub longest: Duration,
    /// The longest a task thread paused for a checkpoint (its snapshot).
    pub longest_pause: Duration,
}

/// The keyed count over `keys` keys, checkpointed every `interval` into
/// `dir`, or not at all.
pub fn checkpointed_count(
    events: u64,
    parallelism: u32,
    keys: u64,
    interval: Option<Duration>,
    dir: &std::path::Path,
) -> CheckpointedRun {
    let totals = Totals::default();
    let sink = KeyChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = job! {
        name "CKPT";
        source events[parallelism] = GeneratorSource::new(|i| i).take(events);
        operator keyed[parallelism] = WithKey { keys } <- events;
        operator counts[parallelism] = CheckpointedCount::default()
            <- keyed.key(|(key, _): &(u64, u64)| *key);
        sink checksum[parallelism] = sink <- counts;
    }
    .expect("CKPT is well formed");
    run_checkpointed(graph, interval, dir, &totals)
}

/// Runs `graph` checkpointed every `interval` into `dir` (or not at all)
/// and gathers what its checkpoints measured.
fn run_checkpointed(
    graph: streamwork::runtime::JobGraph,
    interval: Option<Duration>,
    dir: &std::path::Path,
    totals: &Totals,
) -> CheckpointedRun {
    let _ = std::fs::remove_dir_all(dir);
    let options = RunOptions {
        checkpoints: interval.map(|interval| {
            // At least once: the checksum sinks are not transactional. The
            // snapshots, what this measures, are the same.
            let mut config = CheckpointConfig::new(dir, interval)
                .delivery(streamwork::prelude::Delivery::AtLeastOnce);
            config.restore = false;
            config.retain = 1;
            config
        }),
        ..RunOptions::default()
    };
    let report = graph.run_with(options).expect("the checkpointed job runs");
    let _ = std::fs::remove_dir_all(dir);
    let longest = |f: fn(&streamwork::runtime::CheckpointStats) -> Duration| {
        report.checkpoints.iter().map(f).max().unwrap_or_default()
    };
    CheckpointedRun {
        outcome: totals.outcome(),
        checkpoints: report.checkpoints.len(),
        largest_bytes: report
            .checkpoints
            .iter()
            .map(|c| c.bytes)
            .max()
            .unwrap_or(0),
        longest: longest(|c| c.duration),
        longest_pause: longest(|c| c.longest_pause),
    }
}

/// A tumbling count over 10 s of event time, `keys` keys, a million events
/// per second of event time (so that a window's slice holds every key),
/// checkpointed every `interval` into `dir`, or not at all.
pub fn checkpointed_windows(
    events: u64,
    parallelism: u32,
    keys: u64,
    interval: Option<Duration>,
    dir: &std::path::Path,
) -> CheckpointedRun {
    let totals = Totals::default();
    let sink = WindowChecksum {
        totals: totals.clone(),
        local: Outcome::default(),
    };
    let graph = job! {
        name "CKPT-WINDOWS";
        source events[parallelism] = GeneratorSource::new(move |i| (key(i, keys), i / 1000)).take(events);
        operator timed[parallelism] = Watermarks::monotonic().timestamps(event_time) <- events;
        operator counts[parallelism] { results, late } =
            Windows::tumbling(Duration::from_secs(10)).count()
            <- timed.key(|(key, _): &(u64, u64)| *key);
        sink checksum[parallelism] = sink <- counts.results;
        drop counts.late;
    }
    .expect("CKPT-WINDOWS is well formed");
    run_checkpointed(graph, interval, dir, &totals)
}
