//! Windows pre-aggregated before their keyed exchange: tumbling and sliding
//! windows in event time over an incremental aggregate get a combiner
//! (`NAME (combine)` in the plan) that merges each key's records per slice
//! in the sending task. They fire what windows fed record by record fire,
//! count the same late events, merge nothing while the `late` channel is
//! read, and commit an uninterrupted run's results exactly once across a
//! failure, at another parallelism, with combiners turned off or on, and
//! behind an operator that emits in another order every run; a damaged
//! newest checkpoint is refused.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::window::LateCounter;
use support::{Numbers, assert_same, dir, exactly_once};

/// A window result as a comparable row: `(key, window start, value)`.
type Row = (u64, i64, u64);

fn row<V: Into<u64>>(r: WindowResult<u64, V>) -> Row {
    (r.key, r.window.start.millis(), r.value.into())
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_unstable();
    rows
}

/// Event `i`: key `(i * 7919) % 13`, event time `i` ms (in order in each
/// source instance).
fn event(i: u64) -> (u64, u64) {
    ((i * 7919) % 13, i)
}

fn at(event: &(u64, u64)) -> Timestamp {
    Timestamp::from_millis(event.1 as i64)
}

/// What three windows of `n` events from two sources emit, at window
/// parallelism `p`, with combiners on or off: counts per 100 ms, sums over
/// 300 ms every 100 ms, and the largest event time per 250 ms; and the
/// records that reached each window operator.
fn three_windows(n: u64, p: u32, combiners: bool) -> ([Vec<Row>; 3], [u64; 3]) {
    let (counts, sums, maxima) = (CollectSink::new(), CollectSink::new(), CollectSink::new());
    let graph = job! {
        name "three-windows";
        combiners combiners;
        source events[2] = GeneratorSource::new(event).take(n);
        operator timed[2] = Watermarks::monotonic().timestamps(at) <- events;
        operator counted[p] { results, late } = Windows::tumbling(Duration::from_millis(100)).count()
            <- timed.key(|e: &(u64, u64)| e.0);
        operator summed[p] { results, late } = Windows::sliding(Duration::from_millis(300), Duration::from_millis(100))
            .sum(|e: &(u64, u64)| e.1)
            <- timed.key(|e: &(u64, u64)| e.0);
        operator latest[p] { results, late } = Windows::tumbling(Duration::from_millis(250))
            .max_by(|e: &(u64, u64)| e.1)
            <- timed.key(|e: &(u64, u64)| e.0);
        operator counted_rows = map(row) <- counted.results;
        operator summed_rows = map(row) <- summed.results;
        operator latest_rows = map(|r: WindowResult<u64, Option<(u64, u64)>>| {
            (r.key, r.window.start.millis(), r.value.map_or(u64::MAX, |e| e.1))
        }) <- latest.results;
        sink counts = counts.clone() <- counted_rows;
        sink sums = sums.clone() <- summed_rows;
        sink maxima = maxima.clone() <- latest_rows;
        drop counted.late;
        drop summed.late;
        drop latest.late;
    }
    .unwrap();
    let names = graph
        .plan()
        .components
        .iter()
        .map(|c| c.name.clone())
        .collect::<Vec<_>>();
    for window in ["counted", "summed", "latest"] {
        let combiner = format!("{window} (combine)");
        assert_eq!(
            names.contains(&combiner),
            combiners,
            "{combiner} in {names:?}"
        );
    }
    let report = graph.run().unwrap();
    let reached =
        ["counted", "summed", "latest"].map(|w| report.component(w).unwrap().records_in());
    (
        [counts.values(), sums.values(), maxima.values()].map(sorted),
        reached,
    )
}

#[test]
fn pre_aggregated_windows_fire_what_windows_fed_record_by_record_fire() {
    let n = 40_000;
    let (expected, reached) = three_windows(n, 2, false);
    assert_eq!(reached, [n; 3], "without combiners every record crosses");
    assert!(!expected[0].is_empty());
    let total: u64 = expected[0].iter().map(|r| r.2).sum();
    assert_eq!(total, n, "every event is counted once");
    for p in [2, 3] {
        let (got, reached) = three_windows(n, p, true);
        for (got, expected) in got.iter().zip(&expected) {
            assert_same(got, expected, &format!("window results at p={p}"));
        }
        for (window, reached) in ["counted", "summed", "latest"].iter().zip(reached) {
            // 13 keys, 50 events per source and 100 ms: about 4 per partial.
            assert!(reached * 3 < n, "{window} at p={p} read {reached} of {n}");
        }
    }
}

/// Counts per 100 ms of `n` events from one source whose every 40th event is
/// 700 ms late, behind watermarks 20 ms behind the latest event time: the
/// results, the late events if `read_late` (else dropped), the late count,
/// and the records that reached the window.
fn with_late_events(n: u64, combiners: bool, read_late: bool) -> (Vec<Row>, Vec<u64>, u64, u64) {
    let late_counter = LateCounter::new();
    let (results, late) = (CollectSink::new(), CollectSink::new());
    let late_time = |i: u64| match i % 40 {
        39 => i.saturating_sub(700),
        _ => i,
    };
    let mut job = JobBuilder::new("late-events");
    job.combiners(combiners);
    // A batch a record: each watermark reaches the window at once, after
    // the records before it, whether a batch of records is full or not;
    // which events are late then depends on the input alone.
    job.batch_size(1);
    let events = job.source(
        "events",
        1,
        GeneratorSource::new(move |i| ((i * 7919) % 13, late_time(i))).take(n),
    );
    let timed = job.operator(
        "timed",
        1,
        Watermarks::bounded(Duration::from_millis(20)).timestamps(at),
        events,
    );
    let windows = Windows::tumbling(Duration::from_millis(100))
        .count_late_in(late_counter.clone())
        .count();
    let counted = job.operator("counted", 2, windows, timed.key_by(|e: &(u64, u64)| e.0));
    let (late_events, counted) = counted.late();
    let (counted, _) = counted.results();
    let rows = job.operator("rows", 2, map(row), counted);
    job.sink("results", 1, results.clone(), rows);
    match read_late {
        true => {
            let times = job.operator("late times", 2, map(|e: (u64, u64)| e.1), late_events);
            job.sink("late", 1, late.clone(), times);
        }
        false => {
            job.discard(late_events);
        }
    }
    let graph = job.build().unwrap();
    let report = graph.run().unwrap();
    let reached = report.component("counted").unwrap().records_in();
    let mut late = late.values();
    late.sort_unstable();
    (sorted(results.values()), late, late_counter.get(), reached)
}

#[test]
fn pre_aggregated_windows_count_the_late_events_record_by_record_windows_count() {
    let n = 20_000;
    let (expected, _, late, reached) = with_late_events(n, false, false);
    assert_eq!(reached, n);
    assert!(late > 0, "some events are late");
    let (got, _, got_late, reached) = with_late_events(n, true, false);
    assert_same(&got, &expected, "window results");
    assert_eq!(got_late, late, "the same events are late");
    assert!(reached * 3 < n, "merged: {reached} of {n} records crossed");
}

#[test]
fn a_window_whose_late_channel_is_read_gets_every_late_event() {
    let n = 20_000;
    let (expected, expected_late, late, _) = with_late_events(n, false, true);
    assert_eq!(expected_late.len() as u64, late);
    let (got, got_late, got_count, reached) = with_late_events(n, true, true);
    assert_same(&got, &expected, "window results");
    assert_same(&got_late, &expected_late, "late events");
    assert_eq!(got_count, late);
    assert_eq!(reached, n, "nothing merged while `late` is read");
}

/// Counts per 10 ms of `Numbers` (`(i % 10, i - 500)` at event time `i`
/// ms) through `fault`, at window parallelism `p`, committed exactly once.
fn windowed_exactly_once(
    source: Numbers,
    p: u32,
    combiners: bool,
    fault: InjectFault<(u64, i64)>,
    out: &CollectSink<Row>,
) -> streamwork::runtime::JobGraph {
    let graph = job! {
        delivery exactly_once;
        combiners combiners;
        source numbers = source;
        operator faulty = fault <- numbers;
        operator timed = Watermarks::monotonic()
            .timestamps(|e: &(u64, i64)| Timestamp::from_millis(e.1 + 500)) <- faulty;
        operator counted[p] { results, late } = Windows::tumbling(Duration::from_millis(10)).count()
            <- timed.key(|e: &(u64, i64)| e.0);
        operator rows = map(row) <- counted.results;
        sink committed = out.transactional() <- rows;
        drop counted.late;
    }
    .unwrap();
    let names: Vec<String> = graph
        .plan()
        .components
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let combined = names.contains(&"counted (combine)".to_string());
    assert_eq!(combined, combiners, "{names:?}");
    graph
}

/// `(key, window start, count)` of an uninterrupted run over `n` numbers.
fn expected_counts(n: u64) -> Vec<Row> {
    let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for i in 0..n {
        *counts.entry((i % 10, (i as i64 / 10) * 10)).or_default() += 1;
    }
    counts.into_iter().map(|((k, w), c)| (k, w, c)).collect()
}

#[test]
fn pre_aggregated_windows_restored_after_a_failure_commit_exactly_once() {
    // The fault fires after a completed checkpoint, in the task the
    // combiner is fused into, with partials held and not yet sent.
    let n = 30_000u64;
    for p in [2, 3] {
        let checkpoints = dir(&format!("window-combiners-{p}"));
        let out = CollectSink::new();
        let fault = InjectFault::new(0, Fault::BeforeRecord(20_000));
        let graph = windowed_exactly_once(Numbers::new(n), p, true, fault, &out);
        let report = graph.run_with(exactly_once(&checkpoints, 1)).unwrap();
        assert_eq!(report.restarts, 1, "the fault fired");
        assert_same(
            &sorted(out.values()),
            &expected_counts(n),
            &format!("p={p}"),
        );
        let _ = std::fs::remove_dir_all(&checkpoints);
    }
}

/// A first run at parallelism 2, with combiners `first`, fails after a
/// completed checkpoint (the source holds halfway until one is) with no
/// restart; a second, at parallelism `p`, with combiners `then`, restores
/// from it. Both commit into one sink, as into one output directory: what
/// the first pre-committed for its last checkpoint, the second commits.
fn died_and_resumed(first: bool, p: u32, then: bool) {
    let n = 30_000u64;
    let checkpoints = dir(&format!("window-combiners-{first}-{p}-{then}"));
    let out = CollectSink::new();
    let run = |p: u32, combiners: bool, fault: Option<usize>| {
        let fault = InjectFault::new(
            0,
            fault.map_or(Fault::BeforeRecord(usize::MAX), Fault::BeforeRecord),
        );
        let graph = windowed_exactly_once(Numbers::new(n), p, combiners, fault, &out);
        graph.run_with(exactly_once(&checkpoints, 0))
    };
    let died = run(2, first, Some(20_000));
    assert!(died.is_err(), "the first run fails at the injected fault");
    let resumed = run(p, then, None);
    assert!(
        resumed.unwrap().recovery.restored_from.is_some(),
        "it restored"
    );
    let what = format!("combiners {first}, then {then} at parallelism {p}");
    assert_same(&sorted(out.values()), &expected_counts(n), &what);
    let _ = std::fs::remove_dir_all(&checkpoints);
}

#[test]
fn pre_aggregated_windows_that_died_resume_exactly_at_another_parallelism() {
    died_and_resumed(true, 3, true);
}

#[test]
fn windows_resume_exactly_with_combiners_turned_off_or_on() {
    // The combiner holds nothing in a checkpoint and the window keeps the
    // same state either way: the changed job resumes.
    died_and_resumed(true, 2, false);
    died_and_resumed(false, 3, true);
}

/// Each number twice, under keys `k` and `k + 10`, in the order of a
/// `HashSet` with a random seed: another order in every run.
fn twice_in_any_order(e: (u64, i64)) -> Vec<(u64, i64)> {
    let both: std::collections::HashSet<(u64, i64)> = [e, (e.0 + 10, e.1)].into_iter().collect();
    both.into_iter().collect()
}

/// Counts per 10 ms of [`twice_in_any_order`] of `Numbers`, pre-aggregated
/// at window parallelism `p`, committed exactly once.
fn nondeterministic_windows(
    source: Numbers,
    p: u32,
    fault: InjectFault<(u64, i64)>,
    out: &CollectSink<Row>,
) -> streamwork::runtime::JobGraph {
    job! {
        delivery exactly_once;
        source numbers = source;
        operator faulty = fault <- numbers;
        operator spread = flat_map(twice_in_any_order) <- faulty;
        operator timed = Watermarks::monotonic()
            .timestamps(|e: &(u64, i64)| Timestamp::from_millis(e.1 + 500)) <- spread;
        operator counted[p] { results, late } = Windows::tumbling(Duration::from_millis(10)).count()
            <- timed.key(|e: &(u64, i64)| e.0);
        operator rows = map(row) <- counted.results;
        sink committed = out.transactional() <- rows;
        drop counted.late;
    }
    .unwrap()
}

#[test]
fn pre_aggregated_windows_behind_a_nondeterministic_operator_resume_exactly() {
    // The operator before the combiner emits in another order after the
    // restore than before the failure: the combiner's partials differ, the
    // committed counts may not.
    let n = 30_000u64;
    let mut expected: Vec<Row> = expected_counts(n)
        .into_iter()
        .flat_map(|(k, w, c)| [(k, w, c), (k + 10, w, c)])
        .collect();
    expected.sort();
    let checkpoints = dir("window-combiners-nondeterministic");
    let out = CollectSink::new();
    let run = |p: u32, fault: Option<usize>| {
        let fault = InjectFault::new(
            0,
            fault.map_or(Fault::BeforeRecord(usize::MAX), Fault::BeforeRecord),
        );
        let graph = nondeterministic_windows(Numbers::new(n), p, fault, &out);
        let names: Vec<String> = graph
            .plan()
            .components
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert!(
            names.contains(&"counted (combine)".to_string()),
            "{names:?}"
        );
        graph.run_with(exactly_once(&checkpoints, 0))
    };
    assert!(
        run(2, Some(20_000)).is_err(),
        "the first run fails at the fault"
    );
    let resumed = run(3, None).unwrap();
    assert!(resumed.recovery.restored_from.is_some(), "it restored");
    assert_same(&sorted(out.values()), &expected, "resumed at parallelism 3");
    let _ = std::fs::remove_dir_all(&checkpoints);
}

#[test]
fn pre_aggregated_windows_refuse_a_damaged_newest_checkpoint() {
    // Cut into the newest checkpoint's commit record after a run that
    // died: the next run says what is damaged and how to recover, and
    // commits nothing more.
    let n = 30_000u64;
    let checkpoints = dir("window-combiners-damaged");
    let out = CollectSink::new();
    let run = |fault: Option<usize>| {
        let fault = InjectFault::new(
            0,
            fault.map_or(Fault::BeforeRecord(usize::MAX), Fault::BeforeRecord),
        );
        windowed_exactly_once(Numbers::new(n), 2, true, fault, &out)
            .run_with(exactly_once(&checkpoints, 0))
    };
    assert!(
        run(Some(20_000)).is_err(),
        "the first run fails at the fault"
    );
    let committed = sorted(out.values());
    support::cut_newest_segment(&checkpoints, 20);
    let error = run(None).expect_err("a damaged newest checkpoint is refused");
    support::assert_refused_as_torn(&error);
    assert_eq!(
        sorted(out.values()),
        committed,
        "nothing more was committed"
    );
    let _ = std::fs::remove_dir_all(&checkpoints);
}

#[test]
fn a_pre_aggregated_window_across_processes_is_refused_for_its_watermarked_exchange() {
    // As stages, the records' keyed exchange would cross processes, and
    // watermarks do not: refused as without combiners, naming the fix.
    for combiners in [true, false] {
        let out = CollectSink::new();
        let graph = windowed_exactly_once(
            Numbers::new(10),
            2,
            combiners,
            InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
            &out,
        );
        let refused = streamwork::scaleout::stages::StagePlan::of(&graph).unwrap_err();
        assert_eq!(refused.component, "counted", "combiners {combiners}");
        assert!(
            refused
                .problem
                .contains("watermarks do not cross processes"),
            "{refused}"
        );
    }
}
