//! Combiners: a keyed operator that can merge two records of a key
//! (`reduce(f).associative()`, or an `#[operator]` with `fn combine`) gets a combiner before
//! its keyed exchange, fused into the sending task and shown in the plan
//! (unless one instance sends to one, where nothing is scattered).
//! It ends with the state every record would give, at any parallelism,
//! across a failure restored exactly once, and passes every record on
//! unmerged in a run with acking.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::core::grouping::GroupingKind;
use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use support::{Numbers, dir, exactly_once};

/// Record `i`: `(key, 1)`, over 37 keys.
fn one(i: u64) -> (u64, u64) {
    ((i * 7919) % 37, 1)
}

/// Records `0..n`.
fn ones(n: u64) -> Vec<(u64, u64)> {
    (0..n).map(one).collect()
}

fn expected_counts(n: u64) -> BTreeMap<u64, u64> {
    let mut counts = BTreeMap::new();
    for (key, one) in ones(n) {
        *counts.entry(key).or_default() += one;
    }
    counts
}

/// The last value emitted for each key, in the order the rows came.
fn last_per_key<V: Clone>(rows: &[(u64, V)]) -> BTreeMap<u64, V> {
    rows.iter().cloned().collect()
}

/// Whether the plan of `graph` has a component named `name`.
fn has_component(graph: &streamwork::runtime::JobGraph, name: &str) -> bool {
    graph.plan().components.iter().any(|c| c.name == name)
}

/// Counts of `(key, count)` rows through `reduce`, at `parallelism`, with
/// combiners on or off: the rows emitted.
fn reduced(n: u64, parallelism: u32, combiners: bool, options: RunOptions) -> Vec<(u64, u64)> {
    let out = CollectSink::new();
    let graph = job! {
        name "reduced";
        combiners combiners;
        source numbers[parallelism] = GeneratorSource::new(one).take(n);
        operator counts[parallelism] = reduce(|count: &mut (u64, u64), next: (u64, u64)| count.1 += next.1).associative()
            <- numbers.key(|(key, _): &(u64, u64)| *key);
        operator rows = map(|(_, row): (u64, (u64, u64))| row) <- counts;
        sink out = out.clone() <- rows;
    }
    .unwrap();
    graph.run_with(options).unwrap();
    out.values()
}

#[test]
fn a_combined_reduce_ends_with_every_records_count_at_any_parallelism() {
    let n = 20_000;
    for parallelism in [1, 2, 3] {
        let combined = reduced(n, parallelism, true, RunOptions::default());
        assert_eq!(
            last_per_key(&combined),
            expected_counts(n),
            "p={parallelism}"
        );
        assert!(combined.len() as u64 <= n, "p={parallelism}");
        let plain = reduced(n, parallelism, false, RunOptions::default());
        assert_eq!(last_per_key(&plain), expected_counts(n), "p={parallelism}");
        assert_eq!(plain.len() as u64, n, "one update per record without");
    }
}

#[test]
fn with_acking_a_combiner_passes_every_record_on() {
    let n = 5_000;
    let rows = reduced(n, 2, true, RunOptions::acking(Duration::from_secs(30)));
    assert_eq!(rows.len() as u64, n, "one update per record, none merged");
    assert_eq!(last_per_key(&rows), expected_counts(n));
}

#[test]
fn the_plan_shows_a_combiner_fused_before_the_keyed_exchange() {
    let plan = |combiners: bool| {
        let out = CollectSink::new();
        job! {
            name "planned";
            combiners combiners;
            source numbers[3] = VecSource::new(ones(10));
            operator counts[2] = reduce(|count: &mut (u64, u64), next: (u64, u64)| count.1 += next.1).associative()
                <- numbers.key(|(key, _): &(u64, u64)| *key);
            sink out = out.clone() <- counts;
        }
        .unwrap()
        .plan()
    };
    let on = plan(true);
    let combiner = on
        .components
        .iter()
        .find(|c| c.name == "counts (combine)")
        .expect("a combiner in the plan");
    assert_eq!(
        combiner.parallelism, 3,
        "the sending component's parallelism"
    );
    let edges: Vec<(&str, &str, GroupingKind)> = on
        .edges
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str(), e.grouping))
        .collect();
    assert!(edges.contains(&("numbers", "counts (combine)", GroupingKind::Forward)));
    assert!(edges.contains(&("counts (combine)", "counts", GroupingKind::Key)));
    let off = plan(false);
    assert!(off.components.iter().all(|c| !c.name.contains("combine")));
    // A reduce whose function is not declared associative gets none: it
    // is folded in record order only.
    let out = CollectSink::new();
    let plain = job! {
        name "planned";
        source numbers[3] = VecSource::new(ones(10));
        operator counts[2] = reduce(|count: &mut (u64, u64), next: (u64, u64)| count.1 += next.1)
            <- numbers.key(|(key, _): &(u64, u64)| *key);
        sink out = out.clone() <- counts;
    }
    .unwrap();
    assert!(!has_component(&plain, "counts (combine)"));
    assert!(
        off.edges
            .iter()
            .any(|e| e.from == "numbers" && e.to == "counts" && e.grouping == GroupingKind::Key)
    );
}

/// Counts per key from `(key, count)` records, emitted at the end; merges
/// two records of a key by adding their counts.
#[derive(Clone, Default, State)]
struct CountAtEnd {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl CountAtEnd {
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

/// `CountAtEnd`'s `combine` is a true merge: the combiner oracle reads the
/// same counts, and the same final output, as record by record.
#[test]
fn count_at_end_combines_truly_and_a_sum_is_associative() {
    use streamwork::core::testkit::{Step, assert_associative, assert_combines};
    let record = |key: u64, count: u64| Step::Record {
        key,
        value: (key, count),
        time: None,
    };
    let script = vec![
        record(1, 1),
        record(2, 4),
        record(1, 2),
        Step::Checkpoint,
        record(1, 3),
        record(1, 3),
        record(3, 1),
        Step::Watermark(5),
        record(2, 1),
    ];
    assert_combines(CountAtEnd::default(), &script, |h| {
        let mut counts: Vec<(u64, u64)> =
            h.operator().counts.iter().map(|(k, v)| (*k, *v)).collect();
        counts.sort_unstable();
        let mut emitted: Vec<(u64, u64)> = h
            .take(|out| out.take_buffered())
            .into_iter()
            .map(|r| r.value)
            .collect();
        emitted.sort_unstable();
        (counts, emitted)
    });
    // The function of the word counts' `reduce(..).associative()`.
    assert_associative(
        |c: &mut (u64, u64), n: (u64, u64)| c.1 += n.1,
        &[(7, 0), (7, 1), (7, 5), (7, u64::MAX / 3)],
    );
}

#[test]
fn an_operator_with_fn_combine_gets_a_combiner_and_counts_every_record() {
    let n = 20_000;
    for parallelism in [1, 2] {
        let out = CollectSink::new();
        let graph = job! {
            name "counted";
            source numbers[parallelism] = VecSource::new(ones(n));
            operator counts[parallelism] = CountAtEnd::default()
                <- numbers.key(|(key, _): &(u64, u64)| *key);
            sink out = out.clone() <- counts;
        }
        .unwrap();
        // Between one instance and one, the exchange scatters nothing.
        assert_eq!(
            has_component(&graph, "counts (combine)"),
            parallelism > 1,
            "p={parallelism}"
        );
        graph.run().unwrap();
        let rows = out.values();
        assert_eq!(rows.len(), expected_counts(n).len(), "one row per key");
        assert_eq!(last_per_key(&rows), expected_counts(n), "p={parallelism}");
    }
}

/// Numbers (`(i % 10, i - 500)`, held halfway until a checkpoint is
/// complete) through `fault`, summed per key at parallelism `p` by an
/// associative reduce, committed exactly once into `out`; the plan has the
/// combiner.
fn summed_exactly_once(
    n: u64,
    p: u32,
    fault: InjectFault<(u64, i64)>,
    out: &CollectSink<(u64, i64)>,
) -> streamwork::runtime::JobGraph {
    let graph = job! {
        delivery exactly_once;
        source numbers = Numbers::new(n);
        operator faulty = fault <- numbers;
        operator sums[p] = reduce(|sum: &mut (u64, i64), (_, v): (u64, i64)| sum.1 += v).associative()
            <- faulty.key(|(k, _): &(u64, i64)| *k);
        operator rows = map(|(_, row): (u64, (u64, i64))| row) <- sums;
        sink committed = out.transactional() <- rows;
    }
    .unwrap();
    assert!(has_component(&graph, "sums (combine)"));
    graph
}

#[test]
fn a_combined_reduce_restored_after_a_failure_commits_exactly_once() {
    // Numbers: (i % 10, i - 500), held halfway until a checkpoint is
    // complete; the fault fires after it, in the task the combiner is
    // fused into, with records merged and not yet sent.
    let n = 30_000u64;
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % 10).or_insert(0i64) += i as i64 - 500;
    }
    for p in [2, 3] {
        let checkpoints = dir(&format!("combiners-reduce-{p}"));
        let out = CollectSink::new();
        let fault = InjectFault::new(0, Fault::BeforeRecord(20_000));
        let graph = summed_exactly_once(n, p, fault, &out);
        let report = graph.run_with(exactly_once(&checkpoints, 1)).unwrap();
        assert_eq!(report.restarts, 1, "the fault fired");
        let rows = out.values();
        assert!(rows.len() as u64 <= n, "p={p}");
        assert_eq!(last_per_key(&rows), expected, "p={p}");
        let _ = std::fs::remove_dir_all(&checkpoints);
    }
}

#[test]
fn each_stream_keyed_into_a_combining_operator_gets_its_own_combiner() {
    let n = 6_000;
    let out = CollectSink::new();
    let graph = job! {
        name "fan-in";
        source evens[2] = GeneratorSource::new(|i| one(2 * i)).take(n / 2);
        source odds = GeneratorSource::new(|i| one(2 * i + 1)).take(n / 2);
        operator counts[2] = reduce(|count: &mut (u64, u64), next: (u64, u64)| count.1 += next.1).associative()
            <- evens.key(|(key, _): &(u64, u64)| *key), odds.key(|(key, _): &(u64, u64)| *key);
        operator rows = map(|(_, row): (u64, (u64, u64))| row) <- counts;
        sink out = out.clone() <- rows;
    }
    .unwrap();
    let plan = graph.plan();
    let combiners: Vec<(&str, u32)> = plan
        .components
        .iter()
        .filter(|c| c.name.contains("(combine"))
        .map(|c| (c.name.as_str(), c.parallelism))
        .collect();
    assert_eq!(
        combiners,
        vec![("counts (combine 0)", 2), ("counts (combine 1)", 1)]
    );
    graph.run().unwrap();
    assert_eq!(last_per_key(&out.values()), expected_counts(n));
}

#[test]
fn a_count_on_the_builder_counts_each_key_with_a_combiner() {
    let n = 20_000;
    for (parallelism, combiners) in [(1, true), (2, true), (3, true), (2, false)] {
        let out = CollectSink::new();
        let mut job = JobBuilder::new("counted on the builder");
        job.combiners(combiners);
        let numbers = job.source("numbers", parallelism, GeneratorSource::new(one).take(n));
        job.flow(numbers)
            .key_by(|(key, _): &(u64, u64)| *key)
            .count()
            .sink("out", out.clone());
        let graph = job.build().unwrap();
        let combiner = graph
            .plan()
            .components
            .iter()
            .any(|c| c.name.ends_with("(combine)"));
        assert_eq!(combiner, combiners && parallelism > 1, "p={parallelism}");
        graph.run().unwrap();
        let rows = out.values();
        assert_eq!(last_per_key(&rows), expected_counts(n), "p={parallelism}");
        if !combiners {
            assert_eq!(rows.len() as u64, n, "one update per record without");
        }
    }
}

#[test]
fn a_combined_reduce_that_died_resumes_exactly_at_another_parallelism() {
    // The first run, at parallelism 2, fails after a completed checkpoint
    // (the source holds halfway until one is) with no restart; the second
    // run, at parallelism 3, restores from that checkpoint: the combiner
    // held nothing in it, the sums move with their key groups.
    let n = 30_000u64;
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % 10).or_insert(0i64) += i as i64 - 500;
    }
    let checkpoints = dir("combiners-rescaled");
    let run = |p: u32, fault: Option<usize>| {
        let out = CollectSink::new();
        let fault = InjectFault::new(
            0,
            fault.map_or(Fault::BeforeRecord(usize::MAX), Fault::BeforeRecord),
        );
        let graph = summed_exactly_once(n, p, fault, &out);
        (graph.run_with(exactly_once(&checkpoints, 0)), out.values())
    };
    let (died, before) = run(2, Some(20_000));
    assert!(died.is_err(), "the first run fails at the injected fault");
    let (resumed, after) = run(3, None);
    let report = resumed.unwrap();
    assert!(report.recovery.restored_from.is_some(), "it restored");
    let rows: Vec<(u64, i64)> = before.into_iter().chain(after).collect();
    assert_eq!(last_per_key(&rows), expected);
    let _ = std::fs::remove_dir_all(&checkpoints);
}
