//! At-least-once by acking (chapter 5): every source record's tree of
//! derived events is tracked through fused and channel edges, key and
//! broadcast groupings, fan-out, filters and sinks; a record whose tree does
//! not complete (dropped by a full edge) is replayed until it does.

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::prelude::*;

#[operator]
fn split(value: u64, out: &mut Collector<u64>) {
    // Multiples of 3 leave their tree at once; even numbers fan out in two.
    if value.is_multiple_of(3) {
        return;
    }
    out.emit(value);
    if value.is_multiple_of(2) {
        out.emit(value + 1_000_000);
    }
}

#[operator]
fn pass(value: u64, out: &mut Collector<u64>) {
    out.emit(value);
}

fn expected(n: u64) -> Vec<u64> {
    let mut values: Vec<u64> = (0..n)
        .filter(|v| v % 3 != 0)
        .flat_map(|v| {
            let extra = (v % 2 == 0).then_some(v + 1_000_000);
            std::iter::once(v).chain(extra)
        })
        .collect();
    values.sort_unstable();
    values
}

#[test]
fn every_tree_completes_through_fused_and_channel_edges_without_replay() {
    for workers in [0, 2] {
        every_tree_completes(workers);
    }
}

/// On `workers` workers (0: a thread per task).
fn every_tree_completes(workers: u32) {
    let n = 30_000;
    let (keyed, broadcast) = (CollectSink::new(), CollectSink::new());
    let graph = job! {
        batch_size 128;
        workers workers;
        source numbers[2] = GeneratorSource::new(|i| i).take(n);
        operator split[2] = Split <- numbers;
        operator by_key[3] = Pass <- split.key(|v: &u64| *v);
        sink keyed[3] = keyed.clone() <- by_key;
        sink everywhere[2] = broadcast.clone() <- split.broadcast();
    }
    .unwrap();
    // A long timeout: any tree left incomplete would be replayed after it,
    // and show up twice.
    graph
        .run_with(RunOptions::acking(Duration::from_secs(30)))
        .unwrap();
    let mut got = keyed.values();
    got.sort_unstable();
    assert_eq!(
        got,
        expected(n),
        "each record exactly once: no tree replayed"
    );
    let mut copies: BTreeMap<u64, u32> = BTreeMap::new();
    for v in broadcast.values() {
        *copies.entry(v).or_default() += 1;
    }
    assert!(
        copies.values().all(|&c| c == 2),
        "a broadcast copy per instance"
    );
    assert_eq!(copies.len(), expected(n).len());
}

/// A sink that takes its time, so that a short queue in front of it overflows.
#[derive(Clone)]
struct SlowSink {
    seen: CollectSink<u64>,
}

impl Sink for SlowSink {
    type In = u64;
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        let until = std::time::Instant::now() + Duration::from_micros(5);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        self.seen.write(record)?;
        self.seen.flush()
    }
}

#[test]
fn records_dropped_by_a_full_edge_are_replayed_until_delivered() {
    for workers in [0, 2] {
        dropped_records_are_replayed(workers);
    }
}

/// On `workers` workers (0: a thread per task).
fn dropped_records_are_replayed(workers: u32) {
    let n = 20_000;
    let seen = CollectSink::new();
    let sink = SlowSink { seen: seen.clone() };
    let graph = job! {
        batch_size 64;
        workers workers;
        source numbers = GeneratorSource::new(|i| i).take(n);
        operator passed = Pass <- numbers;
        sink slow = sink <- passed.capacity(2).overflow(Overflow::DropNewest);
    }
    .unwrap();
    let report = graph
        .run_with(RunOptions::acking(Duration::from_millis(100)))
        .unwrap();
    let dropped = report.component("slow").unwrap().dropped_in;
    assert!(
        dropped > 0,
        "a 5 µs sink behind a 2-batch queue must overflow"
    );
    let mut delivered = seen.values();
    delivered.sort_unstable();
    delivered.dedup();
    assert_eq!(
        delivered,
        (0..n).collect::<Vec<_>>(),
        "every record delivered at least once despite {dropped} dropped"
    );
}

#[test]
fn without_acking_the_same_overflow_loses_records() {
    let n = 20_000;
    let seen = CollectSink::new();
    let sink = SlowSink { seen: seen.clone() };
    let graph = job! {
        batch_size 64;
        source numbers = GeneratorSource::new(|i| i).take(n);
        operator passed = Pass <- numbers;
        sink slow = sink <- passed.capacity(2).overflow(Overflow::DropNewest);
    }
    .unwrap();
    let report = graph.run().unwrap();
    let dropped = report.component("slow").unwrap().dropped_in;
    assert!(dropped > 0);
    assert_eq!(seen.values().len() as u64, n - dropped);
}

#[test]
fn records_absorbed_into_window_state_end_their_trees() {
    let n = 10_000;
    let results = CollectSink::new();
    let graph = job! {
        source numbers = GeneratorSource::new(|i| i)
            .take(n)
            .with_timestamps(|i: u64, _: &u64| Timestamp::from_millis(i as i64));
        operator timed = Watermarks::monotonic().timestamps(|i: &u64| Timestamp::from_millis(*i as i64)) <- numbers;
        operator counts { results, late } = Windows::tumbling(Duration::from_millis(1000))
            .count::<u64, u64>() <- timed.key(|i: &u64| i % 4);
        sink out = results.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph
        .run_with(RunOptions::acking(Duration::from_secs(30)))
        .unwrap();
    let total: u64 = results.values().iter().map(|r| r.value).sum();
    assert_eq!(total, n, "every record counted once");
}

/// Runs `graph` with acking on a thread of its own and fails unless it
/// ends within two minutes: a bound, not a timing (a run that never ends
/// fails here instead of hanging the suite).
fn run_acked_to_the_end(graph: JobGraph, what: &str) {
    let run = std::thread::spawn(move || {
        graph
            .run_with(RunOptions::acking(Duration::from_secs(30)))
            .map(|_| ())
    });
    let started = std::time::Instant::now();
    while !run.is_finished() && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(run.is_finished(), "{what}: the job never ended");
    run.join().unwrap().unwrap();
}

#[test]
fn a_source_whose_last_poll_ends_it_completes_its_trees_on_workers() {
    // A `VecSource` reports `Finished` in the poll that emits its last
    // records: the source task then waits for their trees, which tasks on
    // its own worker process. It waits a step at a time (before, it slept
    // in a loop on the worker, and the job never ended).
    for parallelism in [1u32, 2] {
        let out = CollectSink::new();
        let graph = job! {
            workers 2;
            source numbers[parallelism] = VecSource::new((0..1_000u64).collect());
            operator counts[parallelism] = reduce(|sum: &mut u64, next: u64| *sum += next)
                <- numbers.key(|n: &u64| n % 7);
            sink out = out.clone() <- counts;
        }
        .unwrap();
        run_acked_to_the_end(graph, &format!("p={parallelism}"));
        let mut finals = std::collections::BTreeMap::new();
        for (key, sum) in out.values() {
            let last: &mut u64 = finals.entry(key).or_default();
            *last = (*last).max(sum);
        }
        let mut expected = std::collections::BTreeMap::new();
        for n in 0..1_000u64 {
            *expected.entry(n % 7).or_insert(0u64) += n;
        }
        assert_eq!(finals, expected, "p={parallelism}");
    }
}

/// Sums what it reads and emits the sum at every watermark: what a fused
/// operator emits when event time moves, as a window fires.
#[derive(Clone, Default, State)]
struct SumOnWatermark {
    sum: InstanceState<u64>,
}

#[operator]
impl SumOnWatermark {
    fn on_record(&mut self, value: u64, _out: &mut Collector<u64>) {
        *self.sum += value;
    }

    fn on_watermark(&mut self, _watermark: Timestamp, out: &mut Collector<u64>) {
        if *self.sum > 0 {
            out.emit(std::mem::take(&mut *self.sum));
        }
    }
}

#[test]
fn what_a_fused_operator_emits_when_the_input_ends_completes_on_workers() {
    // An operator fused into the source task emits when event time moves,
    // and last when the input ends, from the source task itself; what it
    // emits crosses a keyed exchange to tasks of the same workers. The
    // source must not sleep on its worker waiting for their trees.
    for parallelism in [1u32, 2] {
        let n = 5_000u64;
        let out = CollectSink::new();
        let graph = job! {
            workers 2;
            source numbers[parallelism] = VecSource::new((0..n).collect());
            operator timed[parallelism] = Watermarks::monotonic()
                .timestamps(|i: &u64| Timestamp::from_millis(*i as i64)) <- numbers;
            operator sums[parallelism] = SumOnWatermark::default() <- timed;
            operator totals[parallelism] = reduce(|total: &mut u64, next: u64| *total += next)
                <- sums.key(|v: &u64| v % 3);
            sink out = out.clone() <- totals;
        }
        .unwrap();
        run_acked_to_the_end(graph, &format!("p={parallelism}"));
        let mut finals = BTreeMap::new();
        for (key, total) in out.values() {
            let last: &mut u64 = finals.entry(key).or_default();
            *last = (*last).max(total);
        }
        assert_eq!(
            finals.values().sum::<u64>(),
            n * (n - 1) / 2,
            "p={parallelism}: every record summed once"
        );
    }
}

/// A record of either port of the three-port operator below.
#[derive(Clone, Debug)]
enum Either3 {
    Small(u64),
    Text(String),
    Pair((u64, u64)),
}

/// Emits the number each record carries.
#[derive(Clone)]
struct Numbers3;

impl Operator for Numbers3 {
    type In = Either3;
    type Key = NoKey;
    type Out = Collector<u64>;
    type Time = AnyTime;
    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }
    fn on_record(&mut self, value: Either3, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
        ctx.emit(match value {
            Either3::Small(n) => n,
            Either3::Text(t) => t.parse().unwrap_or(u64::MAX),
            Either3::Pair((a, b)) => a + b,
        });
    }
}

/// Operators with several input ports (a join, and one with three typed
/// ports) read batches with their anchors: every tree ends, and each
/// result comes once.
#[test]
fn records_through_operators_with_several_ports_complete_their_trees() {
    let n = 3_000u64;
    let (pairs, numbers) = (CollectSink::new(), CollectSink::new());
    let graph = job! {
        batch_size 64;
        source lefts[2] = GeneratorSource::new(|i| i).take(n);
        source rights = GeneratorSource::new(|i| i * 10).take(n);
        source texts = GeneratorSource::new(move |i| format!("{}", i + n)).take(n);
        source duos = GeneratorSource::new(|i| (i, i)).take(n);
        operator joined[2] = Join::inner().unwindowed()
            <- left(lefts.key(|k: &u64| *k)), right(rights.key(|v: &u64| *v / 10));
        sink joined_out = pairs.clone() <- joined;
        operator merged[2] = Numbers3
            <- port(lefts.shuffle() => Either3::Small),
               port(texts.shuffle() => Either3::Text),
               port(duos => Either3::Pair);
        sink numbers_out = numbers.clone() <- merged;
    }
    .unwrap();
    run_acked_to_the_end(graph, "several ports");
    let mut joined: Vec<(u64, u64, u64)> = pairs
        .values()
        .into_iter()
        .map(|r: JoinRow<u64, u64, u64>| (r.key, r.left.unwrap(), r.right.unwrap()))
        .collect();
    joined.sort_unstable();
    assert_eq!(joined, (0..n).map(|k| (k, k, k * 10)).collect::<Vec<_>>());
    let mut got = numbers.values();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..2 * n).chain((0..n).map(|i| 2 * i)).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}
