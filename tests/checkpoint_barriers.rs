//! Checkpoints end to end: barriers from two sources aligned at a keyed
//! operator with two inputs give consistent cuts (every checkpoint's counts
//! are exactly the records before the sources' checkpointed positions), and
//! a job that fails restarts from its last complete checkpoint with neither
//! loss nor double counting; both on a thread per task and on workers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use streamwork::prelude::*;
use streamwork::state::{
    StoreOptions, StoredState, load_checkpoint, load_latest, operator_id, restore_keyed,
    restore_keyed_from, snapshot_keyed,
};

/// Emits `0..n`; once it is halfway, it waits until a checkpoint taken after
/// its start is complete (a minute at most), so every run has a complete
/// checkpoint in the middle.
#[derive(Clone)]
struct Numbers {
    n: u64,
    next: u64,
    hooks: Option<streamwork::core::checkpoint::CheckpointView>,
    completed_at_start: CheckpointId,
    /// Polls spent waiting (1 ms each).
    waited: u32,
}

impl Numbers {
    fn new(n: u64) -> Self {
        Numbers {
            n,
            next: 0,
            hooks: None,
            completed_at_start: CheckpointId::NONE,
            waited: 0,
        }
    }

    /// A fresh run waits halfway for a checkpoint, so that one falls in the
    /// middle of the input. A restored run does not: the other source may
    /// have been restored past its halfway point, run to its end, and so
    /// made further checkpoints impossible.
    fn waiting_for_a_checkpoint(&self) -> bool {
        self.next == self.n / 2
            && self.waited < 60_000
            && self.completed_at_start == CheckpointId::NONE
            && self
                .hooks
                .as_ref()
                .is_some_and(|h| h.completed() == self.completed_at_start)
    }
}

impl Source for Numbers {
    type Out = Collector<u64>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.hooks = ctx.checkpoints().cloned();
        self.completed_at_start = self
            .hooks
            .as_ref()
            .map_or(CheckpointId::NONE, |h| h.completed());
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
        if self.next == self.n {
            return Ok(SourcePoll::Finished);
        }
        if self.waiting_for_a_checkpoint() {
            self.waited += 1;
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        let end = (self.next + 64).min(self.n);
        let end = if self.next < self.n / 2 {
            end.min(self.n / 2)
        } else {
            end
        };
        for i in self.next..end {
            out.emit(i);
        }
        self.next = end;
        Ok(SourcePoll::Emitted)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        Some(StateBytes::new(1, self.next.to_le_bytes().to_vec()))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if let Some(own) = restore.own() {
            self.next = u64::from_le_bytes(own.bytes.try_into().expect("8 bytes"));
        }
        Ok(())
    }
}

/// Counts records per key (`value % 10`), emitting the totals at the end;
/// fails once at `fail_at` if armed.
#[derive(Clone)]
struct Counter {
    counts: KeyedState<u64, u64>,
    fail_at: Option<u64>,
    armed: &'static AtomicBool,
}

static ARMED: AtomicBool = AtomicBool::new(true);
static ARMED_ON_WORKERS: AtomicBool = AtomicBool::new(true);
static ARMED_FOR_RESTART: AtomicBool = AtomicBool::new(true);

impl Operator for Counter {
    type In = u64;
    type Key = ByKey<u64>;
    type Out = Collector<(u64, u64)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    fn on_record(&mut self, value: u64, ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        if self.fail_at == Some(value) && self.armed.swap(false, Ordering::SeqCst) {
            panic!("injected failure at {value}");
        }
        *self.counts.get_or_default(ctx.key()) += 1;
    }

    fn on_end(&mut self, out: &mut Self::Out) {
        for (&key, &count) in self.counts.iter() {
            out.emit((key, count));
        }
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let bytes = snapshot_keyed(&self.counts, ctx.key_groups)
            .map_err(|e| TaskError::Snapshot(e.to_string()))?;
        Ok(Some(StateBytes::new(1, bytes.to_vec())))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        // Keys may come from any old instance: it takes the ones routed here.
        self.counts = restore_keyed_from(restore).map_err(|e| TaskError::Restore(e.to_string()))?;
        Ok(())
    }
}

fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("streamwork-ckpt-{name}-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The job, on `workers` workers (0: a thread per task).
fn job_on(
    n: u64,
    fail_at: Option<u64>,
    armed: &'static AtomicBool,
    sink: &CollectSink<(u64, u64)>,
    workers: u32,
) -> JobGraph {
    let counter = Counter {
        counts: KeyedState::new(),
        fail_at,
        armed,
    };
    job! {
        name "checkpointed";
        batch_size 16;
        workers workers;
        source left = Numbers::new(n);
        source right = Numbers::new(n);
        operator counts[2] = counter <- left.key(|v: &u64| v % 10), right.key(|v: &u64| v % 10);
        sink out = sink.transactional() <- counts.global();
    }
    .unwrap()
}

fn options(dir: &PathBuf, delivery: Delivery) -> RunOptions {
    let mut config = CheckpointConfig::new(dir, Duration::from_millis(1)).delivery(delivery);
    config.retain = 1_000;
    RunOptions {
        checkpoints: Some(config),
        ..RunOptions::default()
    }
}

fn position(checkpoint: &streamwork::state::Checkpoint, source: &str) -> u64 {
    let snapshot = checkpoint
        .snapshot(operator_id(source), InstanceIdx(0))
        .expect("a position");
    u64::from_le_bytes(snapshot.bytes().try_into().unwrap())
}

#[test]
fn aligned_barriers_give_consistent_cuts() {
    consistent_cuts("aligned", 0);
}

#[test]
fn aligned_barriers_give_consistent_cuts_on_workers() {
    consistent_cuts("aligned-workers", 2);
}

fn consistent_cuts(name: &str, workers: u32) {
    let dir = dir(name);
    let n = 20_000;
    let sink = CollectSink::new();
    let report = job_on(n, None, &ARMED, &sink, workers)
        .run_with(options(&dir, Delivery::ExactlyOnce))
        .unwrap();
    let finals: Vec<_> = report.checkpoints.iter().filter(|c| c.is_final).collect();
    assert_eq!(finals.len(), 1, "{:?}", report.checkpoints);
    assert!(
        report.checkpoints.len() >= 2,
        "the sources wait for a checkpoint halfway: {:?}",
        report.checkpoints
    );
    for stats in &report.checkpoints {
        let checkpoint = load_checkpoint(&dir, stats.id).unwrap();
        let (left, right) = (
            position(&checkpoint, "left"),
            position(&checkpoint, "right"),
        );
        let counts: KeyedState<u64, u64> = restore_keyed(
            &checkpoint,
            operator_id("counts"),
            KeyGroups::DEFAULT,
            InstanceIdx(0),
            1,
        )
        .unwrap();
        let counted: u64 = counts.iter().map(|(_, count)| count).sum();
        assert_eq!(
            counted,
            left + right,
            "checkpoint {}: the counts hold exactly the records before the barriers",
            stats.id
        );
        if stats.is_final {
            assert_eq!((left, right), (n, n));
        }
    }
    let totals: u64 = sink.values().iter().map(|p| p.1).sum();
    assert_eq!(totals, 2 * n);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_job_restarts_from_its_last_checkpoint_without_loss_or_double_counting() {
    restart_without_loss("restart", &ARMED, 0);
}

#[test]
fn a_failed_job_on_workers_restarts_without_loss_or_double_counting() {
    restart_without_loss("restart-workers", &ARMED_ON_WORKERS, 2);
}

fn restart_without_loss(name: &str, armed: &'static AtomicBool, workers: u32) {
    let dir = dir(name);
    let n = 20_000;
    // First run: fails in the second half, after the halfway checkpoint.
    let first = CollectSink::new();
    let error = job_on(n, Some(n - 100), armed, &first, workers)
        .run_with(options(&dir, Delivery::ExactlyOnce))
        .expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    // Second run, same directory: restores and finishes.
    let second = CollectSink::new();
    job_on(n, Some(n - 100), armed, &second, workers)
        .run_with(options(&dir, Delivery::ExactlyOnce))
        .unwrap();
    let mut totals: BTreeMap<u64, u64> = BTreeMap::new();
    for (key, count) in second.values() {
        *totals.entry(key).or_default() += count;
    }
    let expected: BTreeMap<u64, u64> = (0..10).map(|k| (k, 2 * n / 10)).collect();
    assert_eq!(totals, expected, "every record counted exactly once");
    // A third run after completion resumes at the end: nothing is read
    // again, and the counters, restored as ended, do not emit their totals
    // a second time (the second run published them).
    let before = load_latest(&dir).unwrap().id();
    let third = CollectSink::new();
    job_on(n, None, armed, &third, workers)
        .run_with(options(&dir, Delivery::ExactlyOnce))
        .unwrap();
    assert_eq!(third.values(), [], "nothing published twice");
    assert!(load_latest(&dir).unwrap().id() > before);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_promised_delivery_is_kept_by_the_graph_and_the_run() {
    // A dropping edge contradicts at-least-once: refused when built.
    let error = job! {
        delivery at_least_once;
        source numbers = GeneratorSource::new(|i| i).take(10);
        sink out = CollectSink::<u64>::new() <- numbers.overflow(Overflow::DropNewest);
    }
    .err()
    .expect("a dropping edge is refused");
    assert!(
        error.to_string().contains("drops records when full"),
        "{error}"
    );
    // A job promising exactly-once does not run without aligned checkpoints.
    let dir = dir("promise");
    let graph = || {
        job! {
            delivery exactly_once;
            source numbers = GeneratorSource::new(|i| i).take(10);
            sink out = FileSink::new(&dir, |n: &u64, line: &mut Vec<u8>| {
                line.extend_from_slice(n.to_string().as_bytes())
            })
            .transactional() <- numbers;
        }
        .unwrap()
    };
    let error = graph().run().expect_err("no checkpoints");
    assert!(
        error.to_string().contains("promises ExactlyOnce"),
        "{error}"
    );
    let error = graph()
        .run_with(options(&dir.join("ckpt"), Delivery::AtLeastOnce))
        .expect_err("weaker checkpoints");
    assert!(
        error.to_string().contains("runs with AtLeastOnce"),
        "{error}"
    );
    graph()
        .run_with(options(&dir.join("ckpt"), Delivery::ExactlyOnce))
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_strategy_resumes_a_failed_job_within_one_run() {
    let dir = dir("strategy");
    let out = dir.join("out");
    let n = 20_000;
    let mut options = options(&dir.join("ckpt"), Delivery::ExactlyOnce);
    options.restart = RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::from_millis(1),
    };
    let counter = Counter {
        counts: KeyedState::new(),
        fail_at: Some(n - 100),
        armed: &ARMED_FOR_RESTART,
    };
    // Totals are emitted at the end. The instance that did not fail may reach
    // it in the failed attempt too: the transactional sink discards what that
    // attempt staged, so only the restarted run's totals are committed.
    let graph = job! {
        name "checkpointed";
        batch_size 16;
        source left = Numbers::new(n);
        source right = Numbers::new(n);
        operator counts[2] = counter <- left.key(|v: &u64| v % 10), right.key(|v: &u64| v % 10);
        sink totals = FileSink::new(&out, |(key, count): &(u64, u64), line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{key},{count}").as_bytes())
        })
        .transactional() <- counts.global();
    }
    .unwrap();
    let report = graph.run_with(options).unwrap();
    assert_eq!(report.restarts, 1);
    let mut totals: BTreeMap<u64, u64> = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let (key, count) = line.split_once(',').unwrap();
            *totals.entry(key.parse().unwrap()).or_default() += count.parse::<u64>().unwrap();
        }
    }
    let expected: BTreeMap<u64, u64> = (0..10).map(|k| (k, 2 * n / 10)).collect();
    assert_eq!(totals, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn restart_strategies_space_and_bound_their_attempts() {
    let fixed = RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::from_millis(5),
    };
    assert_eq!(fixed.delay(1), Some(Duration::from_millis(5)));
    assert_eq!(fixed.delay(2), Some(Duration::from_millis(5)));
    assert_eq!(fixed.delay(3), None);
    let backoff = RestartStrategy::ExponentialBackoff {
        attempts: 4,
        initial: Duration::from_millis(10),
        max: Duration::from_millis(50),
    };
    let waits: Vec<_> = (1..=5).map(|a| backoff.delay(a)).collect();
    let ms = |v| Some(Duration::from_millis(v));
    assert_eq!(waits, vec![ms(10), ms(20), ms(40), ms(50), None]);
    assert_eq!(RestartStrategy::Never.delay(1), None);
}

/// A sink that asks for the job's next checkpoint once it has had
/// `ask_at` records.
#[derive(Clone)]
struct Asking {
    ask_at: u64,
    seen: u64,
    checkpoints: Option<streamwork::core::checkpoint::CheckpointView>,
}

impl Sink for Asking {
    type In = u64;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.checkpoints = ctx.checkpoints().cloned();
        Ok(())
    }

    fn write(&mut self, _record: Record<u64>) -> Result<(), ConnectorError> {
        self.seen += 1;
        if self.seen == self.ask_at
            && let Some(checkpoints) = &self.checkpoints
        {
            checkpoints.request_checkpoint();
        }
        Ok(())
    }
}

/// Checkpoints into `dir` an hour apart: none comes at the interval in a
/// test.
fn an_hours_interval(dir: &PathBuf, delivery: Delivery) -> RunOptions {
    RunOptions {
        checkpoints: Some(
            CheckpointConfig::new(dir, Duration::from_secs(3_600)).delivery(delivery),
        ),
        ..RunOptions::default()
    }
}

/// Fails unless `report` has a checkpoint an instance asked for early.
fn assert_an_early_checkpoint(report: &JobReport, workers: u32) {
    assert!(
        report.checkpoints.iter().any(|c| c.early && !c.is_final),
        "{workers} workers: no early checkpoint before the final one: {:?}",
        report.checkpoints
    );
}

/// A stored state whose budget for what is not yet durable is 64 KiB
/// (the process's total always leaves less room than that: it asks at
/// the first write after each checkpoint).
fn budgeted() -> StoredState<u64, u64> {
    StoredState::with_options(StoreOptions {
        unsettled_bytes: 64 << 10,
        ..StoreOptions::default()
    })
}

/// An instance that asks for a checkpoint (a transactional sink whose
/// staged output passed its budget) gets one at once, though the interval
/// is an hour: the source, which waits halfway for a checkpoint, goes on.
#[test]
fn an_instance_that_asks_for_a_checkpoint_gets_one_before_the_interval() {
    for workers in [0, 2] {
        let dir = dir(&format!("asking-{workers}"));
        let asking = Asking {
            ask_at: 1_000,
            seen: 0,
            checkpoints: None,
        };
        let graph = job! {
            name "asking";
            batch_size 16;
            workers workers;
            source numbers = Numbers::new(4_000);
            sink asks = asking <- numbers;
        }
        .unwrap();
        let report = graph
            .run_with(an_hours_interval(&dir, Delivery::AtLeastOnce))
            .unwrap();
        assert_an_early_checkpoint(&report, workers);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A stored state whose writes since the last checkpoint pass its memory
/// budget asks for the next checkpoint at once, though the interval is an
/// hour: the source, which waits halfway (at 4,000 distinct keys) for a
/// checkpoint, goes on, and every key is counted once.
#[test]
fn a_stored_state_past_its_memory_budget_gets_a_checkpoint_before_the_interval() {
    for workers in [0, 2] {
        let dir = dir(&format!("stored-budget-{workers}"));
        let totals = StoredTotals { counts: budgeted() };
        let out = CollectSink::new();
        let graph = job! {
            name "stored-budget";
            batch_size 16;
            workers workers;
            source numbers = Numbers::new(8_000);
            operator totals = totals <- numbers.key(|v: &u64| *v);
            sink out = out.clone() <- totals;
        }
        .unwrap();
        let report = graph
            .run_with(an_hours_interval(&dir, Delivery::AtLeastOnce))
            .unwrap();
        assert_an_early_checkpoint(&report, workers);
        let mut counts = out.values();
        counts.sort_unstable();
        assert_eq!(counts, (0..8_000).map(|k| (k, 1)).collect::<Vec<_>>());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Counts per key in a stored state, emitting the totals at the end.
#[derive(Clone, State)]
struct StoredTotals {
    counts: StoredState<u64, u64>,
}

#[operator]
impl StoredTotals {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _value: u64,
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        self.counts
            .for_each(|key, count| out.emit((key, count)))
            .expect("the stored counts read back");
    }
}

/// Input faster than the checkpoints, held to a stored state's budget by
/// early checkpoints, and a failure among them: the job restarts from the
/// last (early) checkpoint and counts every record once, on a thread per
/// task and on workers.
#[test]
fn a_failure_among_early_checkpoints_restarts_without_loss_or_double_counting() {
    use streamwork::core::testkit::{Fault, InjectFault};
    for workers in [0, 2] {
        let dir = dir(&format!("early-restart-{workers}"));
        let n = 30_000u64;
        let totals = StoredTotals { counts: budgeted() };
        let fault = InjectFault::new(0, Fault::BeforeRecord(20_000));
        let out = CollectSink::new();
        let graph = job! {
            name "early-restart";
            batch_size 16;
            workers workers;
            source numbers = Numbers::new(n);
            operator checked = fault.clone() <- numbers;
            operator totals = totals <- checked.key(|v: &u64| v % 3_000);
            sink out = out.transactional() <- totals;
        }
        .unwrap();
        let report = graph
            .run_with(RunOptions {
                restart: RestartStrategy::FixedDelay {
                    attempts: 1,
                    delay: Duration::from_millis(10),
                },
                ..an_hours_interval(&dir, Delivery::ExactlyOnce)
            })
            .unwrap();
        assert!(fault.has_fired());
        assert_eq!(report.restarts, 1);
        assert!(
            report.recovery.restored_from.is_some(),
            "{workers} workers: restarted from nothing, with an hour's interval"
        );
        let mut got = out.values();
        got.sort_unstable();
        let expected: Vec<(u64, u64)> = (0..3_000).map(|k| (k, n / 3_000)).collect();
        assert_eq!(
            got, expected,
            "{workers} workers: every record counted once"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A record beside a snapshot whose bytes cannot be produced: writing it
/// panics (an operator's own archive code, say).
#[derive(Debug)]
struct Unproducible;

impl streamwork::core::checkpoint::DeferredBytes for Unproducible {
    fn produce(&self, _: &mut dyn std::io::Write) -> Result<(), TaskError> {
        panic!("this record cannot be written")
    }
}

/// Passes records on; its snapshot leaves a record for the coordinator to
/// produce, which panics.
#[derive(Clone)]
struct LeavesAnUnproducibleRecord;

impl Operator for LeavesAnUnproducibleRecord {
    type In = u64;
    type Key = ByKey<u64>;
    type Out = Collector<u64>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    fn on_record(&mut self, value: u64, ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        ctx.emit(value);
    }

    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        use streamwork::core::checkpoint::{SideCheck, SideRecord};
        Ok(Some(StateBytes {
            schema: 1,
            bytes: Vec::new(),
            side: vec![SideRecord {
                stream: 0,
                schema: 1,
                payload: std::sync::Arc::new(Unproducible),
                check: SideCheck::OnLoad,
                written: Default::default(),
            }],
            builds_on: Vec::new(),
        }))
    }

    fn restore(&mut self, _: &Restore<'_>) -> Result<(), TaskError> {
        Ok(())
    }
}

/// A panic while the coordinator writes a checkpoint fails the job with
/// its cause, on threads and on workers; it does not leave the job waiting
/// for checkpoints that never come.
#[test]
fn a_panic_writing_a_checkpoint_fails_the_job_by_name() {
    for workers in [0, 2] {
        let root = dir(&format!("unproducible-{workers}"));
        let sink = CollectSink::new();
        let graph = job! {
            name "unproducible";
            workers workers;
            source numbers = Numbers::new(10_000);
            operator passed = LeavesAnUnproducibleRecord <- numbers.key(|v: &u64| v % 10);
            sink out = sink.clone().transactional() <- passed;
        }
        .unwrap();
        let error = graph
            .run_with(options(&root, Delivery::ExactlyOnce))
            .expect_err("no checkpoint can be written");
        let text = error.to_string();
        assert!(
            text.contains("the checkpoint coordinator") && text.contains("cannot be written"),
            "{text}"
        );
        assert!(sink.values().is_empty(), "nothing is published");
        let _ = std::fs::remove_dir_all(&root);
    }
}
