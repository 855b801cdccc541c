//! A join's, count and sliding windows', a `KeyedState`'s (a `fold`) and
//! windowed joins' checkpoints write what changed since the last complete
//! one, not their whole state, and a run restored from a chain of such
//! checkpoints, in the same run or in another at another parallelism,
//! commits exactly what an uninterrupted run commits.
//!
//! The source emits its input in steps and asks for a checkpoint after each
//! one, waiting until it is complete: so every run takes the same
//! checkpoints over the same records, whatever the machine's speed, and
//! each snapshot after the first has a complete one to build on.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use streamwork::core::checkpoint::CheckpointView;
use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::runtime::{CheckpointConfig, RestartStrategy, RunOptions};

/// Keys of the first step, steps after it, and keys each of them adds.
const BASE: u64 = 20_000;
const STEPS: u64 = 16;
const PER_STEP: u64 = 500;

/// The keys of step `s`: the first has `BASE` keys, each after it
/// `PER_STEP` new ones.
fn keys_of(s: u64) -> std::ops::Range<u64> {
    if s == 0 {
        0..BASE
    } else {
        BASE + (s - 1) * PER_STEP..BASE + s * PER_STEP
    }
}

/// Step `s` sends a left and a right row for every key of its range: the
/// join's and the window's state grow by `PER_STEP` keys at each step after
/// the first, and only those keys change.
#[derive(Clone)]
struct Steps {
    step: u64,
    view: Option<CheckpointView>,
    /// The checkpoint complete when this step's was asked for.
    waiting_past: Option<CheckpointId>,
    since: Option<Instant>,
}

impl Steps {
    fn new() -> Self {
        Steps {
            step: 0,
            view: None,
            waiting_past: None,
            since: None,
        }
    }
}

impl Source for Steps {
    type Out = Collector<(u64, bool)>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.view = ctx.checkpoints().cloned();
        Ok(())
    }

    fn poll(&mut self, out: &mut Self::Out) -> Result<SourcePoll, ConnectorError> {
        let Some(view) = self.view.clone() else {
            return Err(ConnectorError::user("the test runs with checkpoints"));
        };
        if let Some(past) = self.waiting_past {
            if view.completed() == past {
                let since = *self.since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(60) {
                    return Err(ConnectorError::user("no checkpoint completed in a minute"));
                }
                std::thread::sleep(Duration::from_millis(1));
                return Ok(SourcePoll::Idle);
            }
            self.waiting_past = None;
            self.since = None;
        }
        if self.step > STEPS {
            return Ok(SourcePoll::Finished);
        }
        for key in keys_of(self.step) {
            out.emit((key, true));
            out.emit((key, false));
        }
        self.step += 1;
        self.waiting_past = Some(view.completed());
        view.request_checkpoint();
        Ok(SourcePoll::Emitted)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        Some(StateBytes::new(1, self.step.to_le_bytes().to_vec()))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if let Some(own) = restore.own() {
            let bytes: [u8; 8] = own
                .bytes
                .try_into()
                .map_err(|_| ConnectorError::user("a step is 8 bytes"))?;
            self.step = u64::from_le_bytes(bytes);
        }
        Ok(())
    }
}

impl streamwork::core::checkpoint::Replayable for Steps {}

fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("streamwork-incr-{name}-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn graph(out: &Path, parallelism: u32, fault: InjectFault<(u64, bool)>) -> JobGraph {
    job! {
        name "incremental";
        batch_size 64;
        delivery exactly_once;
        source steps = Steps::new();
        operator faulty[parallelism] = fault <- steps.shuffle();
        operator lefts[parallelism] = filter_map(|(k, left): (u64, bool)| left.then_some(k)) <- faulty;
        operator rights[parallelism] = filter_map(|(k, left): (u64, bool)| (!left).then_some(k * 10)) <- faulty;
        operator joined[parallelism] = Join::inner().unwindowed()
            <- left(lefts.key(|k: &u64| *k)), right(rights.key(|v: &u64| *v / 10));
        operator seen[parallelism] { results, late } = Windows::count(2).count::<(u64, bool), u64>() <- faulty.key(|r: &(u64, bool)| r.0);
        operator totals[parallelism] = fold(0u64, |n: &mut u64, r: (u64, bool)| *n += r.0)
            <- faulty.key(|r: &(u64, bool)| r.0);
        operator timed[parallelism] = Watermarks::monotonic()
            .timestamps(|r: &(u64, bool)| Timestamp::from_millis(r.0 as i64)) <- faulty;
        operator slid[parallelism] { results, late } = Windows::sliding(Duration::from_secs(10), Duration::from_secs(1))
            .count::<(u64, bool), u64>() <- timed.key(|r: &(u64, bool)| r.0 % 97);
        sink pairs = FileSink::new(out.join("pairs"), |r: &JoinRow<u64, u64, u64>, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{:?},{:?}", r.key, r.left, r.right).as_bytes())
        })
        .transactional() <- joined;
        sink counts = FileSink::new(out.join("counts"), |r: &WindowResult<u64, u64, streamwork::window::CountWindow>, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{}", r.key, r.value).as_bytes())
        })
        .transactional() <- seen.results;
        sink summed = FileSink::new(out.join("totals"), |r: &(u64, u64), line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{}", r.0, r.1).as_bytes())
        })
        .transactional() <- totals;
        sink slides = FileSink::new(out.join("slides"), |r: &WindowResult<u64, u64>, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{},{}", r.key, r.window.start.millis(), r.value).as_bytes())
        })
        .transactional() <- slid.results;
        drop slid.late;
        drop seen.late;
    }
    .unwrap()
}

fn options(checkpoints: &Path, restarts: u32) -> RunOptions {
    RunOptions {
        // Only the source's requests take checkpoints.
        checkpoints: Some(
            CheckpointConfig::new(checkpoints, Duration::from_secs(3600))
                .delivery(Delivery::ExactlyOnce),
        ),
        restart: RestartStrategy::FixedDelay {
            attempts: restarts,
            delay: Duration::ZERO,
        },
        ..RunOptions::default()
    }
}

/// The outputs the job commits, each file's lines sorted.
const OUTPUTS: [&str; 4] = ["pairs", "counts", "totals", "slides"];

fn outputs(out: &Path) -> Vec<Vec<String>> {
    committed(out, &OUTPUTS)
}

/// The lines each of the sinks `names` committed into `out`, sorted.
fn committed(out: &Path, names: &[&str]) -> Vec<Vec<String>> {
    names
        .iter()
        .map(|name| support::committed_lines(&out.join(name)))
        .collect()
}

/// Every key has its pair, its count of two, and its running totals (in a
/// `KeyedState`) `k` and `2k`.
fn expected() -> [Vec<String>; 3] {
    let keys = 0..BASE + STEPS * PER_STEP;
    let mut pairs: Vec<String> = keys
        .clone()
        .map(|k| format!("{k},Some({k}),Some({})", k * 10))
        .collect();
    pairs.sort();
    let mut counts: Vec<String> = keys.clone().map(|k| format!("{k},2")).collect();
    counts.sort();
    let mut totals: Vec<String> = keys
        .flat_map(|k| [format!("{k},{k}"), format!("{k},{}", 2 * k)])
        .collect();
    totals.sort();
    [pairs, counts, totals]
}

/// What a run committed into `out` against what the clean run did.
fn assert_outputs(out: &Path, names: &[&str], clean: &[Vec<String>], when: &str) {
    for ((name, got), want) in names.iter().zip(committed(out, names)).zip(clean) {
        support::assert_same(&got, want, &format!("{name} {when}"));
    }
}

/// Whole snapshots would write at least the first checkpoint's state at
/// every checkpoint after it (the state only grows). Incremental ones write
/// the keys that changed, and a whole snapshot now and then (when the
/// deltas add up to one, or a chain reaches its bound).
fn assert_incremental(report: &JobReport) {
    let taken: Vec<u64> = report
        .checkpoints
        .iter()
        .filter(|c| !c.is_final)
        .map(|c| c.bytes)
        .collect();
    assert!(taken.len() as u64 > STEPS, "{taken:?}");
    let first = taken[0];
    let after: u64 = taken[1..].iter().sum();
    let whole_at_least = first * (taken.len() as u64 - 1);
    eprintln!(
        "checkpoints after the first wrote {after} bytes; whole ones at least {whole_at_least}: {taken:?}"
    );
    assert!(
        after * 3 < whole_at_least,
        "checkpoints after the first wrote {after} bytes; whole ones would write at least {whole_at_least}: {taken:?}"
    );
}

/// A job of the steps (`graph` at a parallelism, with a fault), restored
/// from chains of incremental checkpoints commits into its sinks `names`
/// what the clean run did: within a run, instance 1 failing in the middle
/// after several checkpoints and restarting; across runs, a run at
/// parallelism 2 failing for good in the middle and the next, at
/// parallelism 3, restoring the chains' key groups.
fn assert_restores_exactly(
    name: &str,
    graph: fn(&Path, u32, InjectFault<(u64, bool)>) -> JobGraph,
    names: &[&str],
    clean: &[Vec<String>],
) {
    let root = dir(&format!("{name}-restart"));
    let fault = InjectFault::new(1, Fault::BeforeRecord(24_000));
    let report = graph(&root.join("out"), 2, fault.clone())
        .run_with(options(&root.join("ckpt"), 2))
        .unwrap();
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    assert_outputs(&root.join("out"), names, clean, "after a restart");
    std::fs::remove_dir_all(&root).unwrap();

    let root = dir(&format!("{name}-rescale"));
    let fault = InjectFault::new(0, Fault::BeforeRecord(26_000));
    let error = graph(&root.join("out"), 2, fault.clone())
        .run_with(options(&root.join("ckpt"), 0))
        .expect_err("the injected fault");
    assert!(error.to_string().contains("injected fault"), "{error}");
    let report = graph(
        &root.join("out"),
        3,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    )
    .run_with(options(&root.join("ckpt"), 0))
    .unwrap();
    assert!(
        report.recovery.restored_from.is_some(),
        "{:?}",
        report.recovery
    );
    assert_outputs(&root.join("out"), names, clean, "after rescaling");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn checkpoints_after_the_first_write_what_changed_and_restore_exactly() {
    let root = dir("clean");
    let report = graph(
        &root.join("out"),
        2,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    )
    .run_with(options(&root.join("ckpt"), 0))
    .unwrap();
    let clean = outputs(&root.join("out"));
    for ((name, got), want) in OUTPUTS.iter().zip(&clean).zip(expected()) {
        support::assert_same(got, &want, name);
    }
    // Sliding windows (10 s every second, time = key): every record is in
    // ten windows.
    let in_windows: u64 = clean[3]
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(in_windows, 10 * 2 * (BASE + STEPS * PER_STEP));

    assert_incremental(&report);
    std::fs::remove_dir_all(&root).unwrap();
    assert_restores_exactly("join-windows-fold", graph, &OUTPUTS, &clean);
}

/// Windowed joins of the steps: a tumbling hour (every row in one window,
/// which fires when the input ends), and tumbling seconds behind a
/// watermark that lags three seconds (time is the key, so a few windows are
/// open at a time and one fires every other step: the keys of a fired
/// window are what changed, and a restore must not bring them back); and a
/// left temporal join of the lefts with a table of the even keys' rights as
/// of each left's time, behind the lagging watermark (the table grows by
/// the step's even keys; a left waits for the watermark, an odd key's with
/// no row to change but its own, and its key changes again when it is
/// released).
fn windowed_graph(out: &Path, parallelism: u32, fault: InjectFault<(u64, bool)>) -> JobGraph {
    let line = |r: &JoinRow<u64, u64, u64>, line: &mut Vec<u8>| {
        line.extend_from_slice(format!("{},{:?},{:?}", r.key, r.left, r.right).as_bytes())
    };
    let at_key = |r: &(u64, bool)| Timestamp::from_millis(r.0 as i64);
    job! {
        name "incremental-windowed";
        batch_size 64;
        delivery exactly_once;
        source steps = Steps::new();
        operator faulty[parallelism] = fault <- steps.shuffle();
        operator timed[parallelism] = Watermarks::monotonic().timestamps(at_key) <- faulty;
        operator lefts[parallelism] = filter_map(|(k, left): (u64, bool)| left.then_some(k)) <- timed;
        operator rights[parallelism] = filter_map(|(k, left): (u64, bool)| (!left).then_some(k * 10)) <- timed;
        operator hour[parallelism] = Join::inner().tumbling(Duration::from_secs(3600))
            <- left(lefts.key(|k: &u64| *k)), right(rights.key(|v: &u64| *v / 10));
        operator lagging[parallelism] = Watermarks::bounded(Duration::from_secs(3)).timestamps(at_key) <- faulty;
        operator lefts_lag[parallelism] = filter_map(|(k, left): (u64, bool)| left.then_some(k)) <- lagging;
        operator rights_lag[parallelism] = filter_map(|(k, left): (u64, bool)| (!left).then_some(k * 10)) <- lagging;
        operator seconds[parallelism] = Join::inner().tumbling(Duration::from_secs(1))
            <- left(lefts_lag.key(|k: &u64| *k)), right(rights_lag.key(|v: &u64| *v / 10));
        operator changes[parallelism] = filter_map(|v: u64| (v / 10).is_multiple_of(2).then_some(Change::Upsert { key: v / 10, value: v }))
            <- rights_lag;
        operator as_of[parallelism] = Join::left().stream_table().temporal()
            <- left(lefts_lag.key(|k: &u64| *k)), right(changes.key(|c: &Change<u64, u64>| *c.key()));
        sink by_hour = FileSink::new(out.join("hour"), line).transactional() <- hour;
        sink by_seconds = FileSink::new(out.join("seconds"), line).transactional() <- seconds;
        sink by_time = FileSink::new(out.join("as_of"), line).transactional() <- as_of;
    }
    .unwrap()
}

const WINDOWED: [&str; 3] = ["hour", "seconds", "as_of"];

#[test]
fn windowed_and_temporal_joins_checkpoint_what_changed_and_restore_exactly() {
    let root = dir("windowed-clean");
    let report = windowed_graph(
        &root.join("out"),
        2,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    )
    .run_with(options(&root.join("ckpt"), 0))
    .unwrap();
    let clean = committed(&root.join("out"), &WINDOWED);
    let [pairs, _, _] = expected();
    support::assert_same(&clean[0], &pairs, "hour");
    support::assert_same(&clean[1], &pairs, "seconds");
    let mut as_of: Vec<String> = (0..BASE + STEPS * PER_STEP)
        .map(|k| match k % 2 {
            0 => format!("{k},Some({k}),Some({})", k * 10),
            _ => format!("{k},Some({k}),None"),
        })
        .collect();
    as_of.sort();
    support::assert_same(&clean[2], &as_of, "as_of");
    assert_incremental(&report);
    std::fs::remove_dir_all(&root).unwrap();
    assert_restores_exactly("windowed", windowed_graph, &WINDOWED, &clean);
}

/// One framed record of a segment: (kind, checkpoint, operator or the
/// checkpoint built on, payload offset, payload length).
type Framed = (u8, u64, u64, usize, usize);

/// The records of a segment, from the log's framing (a 48-byte header,
/// records 16-byte aligned).
fn records_of(segment: &Path) -> Vec<Framed> {
    let bytes = std::fs::read(segment).unwrap();
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
    let mut records = Vec::new();
    let mut at = 0;
    while at + 48 <= bytes.len() && bytes[at..at + 4] == bytes[..4] {
        let len = u64_at(at + 32) as usize;
        records.push((bytes[at + 5], u64_at(at + 8), u64_at(at + 16), at + 48, len));
        at += (48 + len).next_multiple_of(16);
    }
    records
}

/// A checkpoint whose keyed state is a chain of deltas reads the records of
/// earlier checkpoints. One of those damaged, the run refuses to start,
/// naming the record and the fix: it neither restores the chain without it
/// nor falls back past a checkpoint that completed (its output is
/// published).
#[test]
fn a_damaged_record_that_a_chain_builds_on_is_refused() {
    let root = dir("damaged-base");
    let (out, checkpoints) = (root.join("out"), root.join("ckpt"));
    let fault = InjectFault::new(0, Fault::BeforeRecord(26_000));
    graph(&out, 2, fault)
        .run_with(options(&checkpoints, 0))
        .expect_err("the injected fault");
    let published = outputs(&out);
    let segments = support::log_segments(&checkpoints);
    let records: Vec<(PathBuf, Framed)> = segments
        .iter()
        .flat_map(|s| records_of(s).into_iter().map(move |r| (s.clone(), r)))
        .collect();
    const SNAPSHOT: u8 = 1;
    const COMMIT: u8 = 2;
    const DEPENDS: u8 = 3;
    let newest = records
        .iter()
        .filter(|(_, r)| r.0 == COMMIT)
        .map(|(_, r)| r.1)
        .max()
        .expect("a checkpoint completed");
    let base = records
        .iter()
        .filter(|(_, r)| r.0 == DEPENDS && r.1 == newest)
        .map(|(_, r)| r.2)
        .min()
        .unwrap_or_else(|| panic!("the precondition: checkpoint {newest} builds on another"));
    assert!(base < newest);
    // The base's largest snapshot: a whole keyed table.
    let (segment, (_, _, _, offset, len)) = records
        .iter()
        .filter(|(_, r)| r.0 == SNAPSHOT && r.1 == base)
        .max_by_key(|(_, r)| r.4)
        .unwrap()
        .clone();
    assert!(len > 1_000, "a keyed table of 20 000 keys: {len} bytes");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[offset + len / 2] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();

    let error = graph(
        &out,
        3,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    )
    .run_with(options(&checkpoints, 0))
    .expect_err("a chain with a damaged base is refused");
    let text = error.to_string();
    assert!(text.contains("cannot be used"), "{text}");
    assert!(
        text.contains("builds on") && text.contains(&format!("checkpoint {base}")),
        "the damaged record is named: {text}"
    );
    assert!(text.contains("from a backup"), "the fix is said: {text}");
    assert!(!error.is_retryable());
    assert_eq!(outputs(&out), published, "nothing was published");
    std::fs::remove_dir_all(&root).unwrap();
}
