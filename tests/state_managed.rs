//! State the framework owns: an `#[operator]` struct with `#[derive(State)]`
//! is checkpointed and restored without user code, across a failure and at
//! another parallelism; state of one instance refuses to be rescaled; and a
//! run with checkpoints refuses, before it starts, any component that
//! cannot keep its delivery, whether the job declared one or not.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use support::{Numbers, RunningSum, assert_same, dir, exactly_once};

/// The running sums job at parallelism `p`, failing instance 0 once before
/// its `fail_at`-th record (never if `None`).
fn sums_job(
    n: u64,
    p: u32,
    fail_at: Option<usize>,
    sink: &CollectSink<(u64, i64, i64)>,
) -> JobGraph {
    let fault = InjectFault::new(0, Fault::BeforeRecord(fail_at.unwrap_or(usize::MAX)));
    job! {
        delivery exactly_once;
        source numbers = Numbers::new(n);
        operator sums[p] = RunningSum::default() <- numbers.key(|(k, _): &(u64, i64)| *k);
        operator faulty[p] = fault <- sums;
        sink out = sink.transactional() <- faulty.global();
    }
    .unwrap()
}

fn sorted(mut rows: Vec<(u64, i64, i64)>) -> Vec<(u64, i64, i64)> {
    rows.sort_unstable();
    rows
}

/// What an uninterrupted run commits.
fn uninterrupted(n: u64) -> Vec<(u64, i64, i64)> {
    let sink = CollectSink::new();
    sums_job(n, 2, None, &sink)
        .run_with(exactly_once(&dir("uninterrupted"), 0))
        .unwrap();
    sorted(sink.values())
}

#[test]
fn keyed_state_in_an_operator_survives_a_failure() {
    let n = 4_000;
    let expected = uninterrupted(n);
    assert_eq!(expected.len(), n as usize);
    let sink = CollectSink::new();
    let report = sums_job(n, 2, Some(1_500), &sink)
        .run_with(exactly_once(&dir("failure"), 1))
        .unwrap();
    assert_eq!(report.restarts, 1, "the fault fired");
    assert_eq!(sorted(sink.values()), expected);
}

#[test]
fn keyed_state_in_an_operator_is_restored_at_another_parallelism() {
    let n = 4_000;
    let expected = uninterrupted(n);
    for (before, after) in [(2u32, 3u32), (3, 1)] {
        let dir = dir(&format!("managed-rescale-{before}-{after}"));
        let sink = CollectSink::new();
        let error = sums_job(n, before, Some(1_000), &sink)
            .run_with(exactly_once(&dir, 0))
            .expect_err("the fault fails the first run");
        assert!(error.to_string().contains("injected fault"), "{error}");
        sums_job(n, after, None, &sink)
            .run_with(exactly_once(&dir, 0))
            .unwrap();
        assert_same(&sink.values(), &expected, &format!("{before} → {after}"));
    }
}

/// The same running sum, its state in the checkpoint log.
#[derive(Clone, Default, State)]
struct StoredSum {
    sums: StoredState<u64, i64>,
}

#[operator]
impl StoredSum {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        (_, value): (u64, i64),
        out: &mut Collector<(u64, i64, i64)>,
    ) {
        let sum = self.sums.get_or_default(key);
        *sum += value;
        out.emit((*key, value, *sum));
    }
}

fn stored_job(
    n: u64,
    p: u32,
    fail_at: Option<usize>,
    sink: &CollectSink<(u64, i64, i64)>,
) -> JobGraph {
    let fault = InjectFault::new(0, Fault::BeforeRecord(fail_at.unwrap_or(usize::MAX)));
    job! {
        delivery exactly_once;
        source numbers = Numbers::new(n);
        operator sums[p] = StoredSum::default() <- numbers.key(|(k, _): &(u64, i64)| *k);
        operator faulty[p] = fault <- sums;
        sink out = sink.transactional() <- faulty.global();
    }
    .unwrap()
}

#[test]
fn stored_state_survives_a_failure_and_a_rescale() {
    let n = 4_000;
    let expected = uninterrupted(n);
    let sink = CollectSink::new();
    let report = stored_job(n, 2, Some(1_500), &sink)
        .run_with(exactly_once(&dir("stored-failure"), 1))
        .unwrap();
    assert_eq!(report.restarts, 1, "the fault fired");
    assert_eq!(sorted(sink.values()), expected);
    for (before, after) in [(2u32, 3u32), (3, 1)] {
        let dir = dir(&format!("stored-rescale-{before}-{after}"));
        let sink = CollectSink::new();
        let error = stored_job(n, before, Some(1_000), &sink)
            .run_with(exactly_once(&dir, 0))
            .expect_err("the fault fails the first run");
        assert!(error.to_string().contains("injected fault"), "{error}");
        stored_job(n, after, None, &sink)
            .run_with(exactly_once(&dir, 0))
            .unwrap();
        assert_same(
            &sink.values(),
            &expected,
            &format!("stored {before} → {after}"),
        );
    }
}

/// Counts the records its instance saw: state of one instance.
#[derive(Clone, Default, State)]
struct Seen {
    seen: InstanceState<u64>,
}

#[operator]
impl Seen {
    fn on_record(&mut self, value: (u64, i64), out: &mut Collector<(u64, i64)>) {
        *self.seen += 1;
        out.emit(value);
    }
}

#[test]
fn state_of_one_instance_refuses_another_parallelism_and_names_the_field() {
    let dir = dir("instance-state");
    let run = |p: u32, fail_at: Option<usize>| {
        let fault = InjectFault::new(0, Fault::BeforeRecord(fail_at.unwrap_or(usize::MAX)));
        let sink = CollectSink::new();
        job! {
            delivery exactly_once;
            source numbers = Numbers::new(2_000);
            operator seen[p] = Seen::default() <- numbers.shuffle();
            operator faulty[p] = fault <- seen;
            sink out = sink.transactional() <- faulty.global();
        }
        .unwrap()
        .run_with(exactly_once(&dir, 0))
    };
    run(2, Some(700)).expect_err("the fault fails the first run");
    let error = run(3, None).expect_err("a rescale of instance state is refused");
    let text = error.to_string();
    assert!(text.contains("field `seen` of `seen`"), "{text}");
    assert!(text.contains("restore at parallelism 2"), "{text}");
    assert!(!error.is_retryable());
    // At its own parallelism it resumes.
    run(2, None).unwrap();
}

/// Counts how many times it was asked for its state.
#[derive(Clone)]
struct Forgetful {
    counts: std::collections::HashMap<u64, u64>,
    opens: &'static AtomicUsize,
}

impl Operator for Forgetful {
    type In = (u64, i64);
    type Key = NoKey;
    type Out = Collector<u64>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("keep the counts in a `KeyedState` with `#[derive(State)]`")
    }

    fn open(&mut self, _: &InstanceContext) {
        self.opens.fetch_add(1, Ordering::SeqCst);
    }

    fn on_record(&mut self, (key, _): (u64, i64), ctx: &mut Context<'_, NoKey, Collector<u64>>) {
        *self.counts.entry(key).or_default() += 1;
        ctx.emit(key);
    }
}

#[test]
fn a_run_with_checkpoints_refuses_what_cannot_keep_its_delivery_declared_or_not() {
    static OPENS: AtomicUsize = AtomicUsize::new(0);
    // No `delivery` line: the job compiles and builds; the run's
    // checkpoints promise exactly-once, and the run refuses to start.
    let job = || {
        job! {
            source numbers = Numbers::new(100);
            operator counts = Forgetful { counts: Default::default(), opens: &OPENS } <- numbers;
            sink out = CollectSink::new().transactional() <- counts;
        }
        .unwrap()
    };
    let error = job()
        .run_with(exactly_once(&dir("undeclared"), 3))
        .expect_err("refused before it starts");
    let text = error.to_string();
    assert!(
        text.starts_with("component `counts` cannot keep the exactly-once delivery"),
        "{text}"
    );
    assert!(text.contains("KeyedState"), "the fix is named: {text}");
    assert_eq!(OPENS.load(Ordering::SeqCst), 0, "nothing ran");
    // At most once, it runs.
    job().run().unwrap();
    // A sink that is neither transactional nor idempotent is refused for
    // exactly-once, and accepted for at-least-once.
    let plain = || {
        job! {
            source numbers = Numbers::new(100);
            sink out = CollectSink::new() <- numbers;
        }
        .unwrap()
    };
    let error = plain()
        .run_with(exactly_once(&dir("plain-sink"), 0))
        .expect_err("refused");
    assert!(error.to_string().contains("component `out`"), "{error}");
    let mut at_least_once = exactly_once(&dir("plain-sink-alo"), 0);
    if let Some(config) = at_least_once.checkpoints.take() {
        at_least_once.checkpoints = Some(config.delivery(Delivery::AtLeastOnce));
    }
    plain().run_with(at_least_once).unwrap();
}

/// The builder keeps the promise as `job!` does: what the types can rule
/// out does not compile (`tests/ui/builder_exactly_once_*.rs`); an operator
/// that keeps state its checkpoints leave out is refused when built.
#[test]
fn the_builder_refuses_what_job_refuses() {
    let mut job = JobBuilder::new("promised").exactly_once();
    let numbers = job.source("numbers", 1, Numbers::new(100));
    let counts = job.operator(
        "counts",
        1,
        Forgetful {
            counts: Default::default(),
            opens: Box::leak(Box::new(AtomicUsize::new(0))),
        },
        numbers,
    );
    job.sink("out", 1, CollectSink::new().transactional(), counts);
    match job.build() {
        Err(GraphError::CannotKeepDelivery { component, .. }) => assert_eq!(component, "counts"),
        Err(other) => panic!("expected a refusal of the operator, got {other}"),
        Ok(_) => panic!("an unchecked operator cannot keep exactly-once"),
    }
    // A channel nobody reads is refused too, unless discarded on purpose.
    let mut job = JobBuilder::new("unread");
    let numbers = job.source("numbers", 1, VecSource::new(vec![1u64, 2, 3]));
    let _unread = job.merge("copy", 1, numbers);
    let error = job.build().err().expect("refused");
    assert!(
        error
            .to_string()
            .contains("output channel `out` of `copy` is read by no component"),
        "{error}"
    );
    let mut job = JobBuilder::new("discarded");
    let numbers = job.source("numbers", 1, VecSource::new(vec![1u64, 2, 3]));
    let copy = job.merge("copy", 1, numbers);
    job.discard(copy);
    job.build().unwrap();
}
