//! Checkpoints written by earlier versions, kept in the repository
//! (`tests/fixtures/checkpoint-v1`, `checkpoint-v2`, `checkpoint-v3`), that every later
//! version must load: a savepoint taken in the middle of a job with user
//! keyed state (`#[derive(State)]`), a window, an interval join and a file
//! source. Version 2's savepoint is incremental: it builds on earlier
//! checkpoints (chains of a whole record and deltas). Resumed from either,
//! the job commits exactly what an uninterrupted run commits after what had
//! been committed before the savepoint (kept with it). Write a new version
//! when the format changes, keeping the old ones: `cargo test --test
//! checkpoint_fixture -- --ignored` writes the newest.

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use streamwork::connectors::file::Lines;
use streamwork::join::JoinRow;
use streamwork::prelude::*;
use streamwork::runtime::StopHandle;
use support::{assert_same, exactly_once};

/// One input line: `(index, bytes)`.
type Line = (u64, Vec<u8>);
/// `(index, account, amount)`.
type Entry = (u64, u64, i64);

/// The newest version, the one `write_the_fixture` writes.
const NEWEST: u32 = 3;

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/checkpoint-v{version}"))
}

/// The input, the same bytes every time: `ACCOUNT,AMOUNT` lines.
fn write_input(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("ledger.csv");
    let mut state = 0x9e37_79b9_u64;
    let mut text = String::new();
    for _ in 0..6_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        text.push_str(&format!(
            "{},{}\n",
            (state >> 33) % 13,
            (state >> 40) as i64 % 1_000 - 500
        ));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// `inner`, reading nothing more after `polls` polls and, once a
/// checkpoint has been taken there, asking the job to stop: a savepoint at
/// the same input position every time.
#[derive(Clone)]
struct StopAfter<S> {
    inner: S,
    polls: Option<u64>,
    done: u64,
    /// A checkpoint was taken after the last poll.
    taken: bool,
    stop: Arc<Mutex<Option<StopHandle>>>,
    /// The job's checkpoints: each poll after the first waits until a
    /// checkpoint taken after the one before is complete, so that the
    /// savepoint builds on checkpoints between them (a chain of deltas).
    view: Option<streamwork::core::checkpoint::CheckpointView>,
    /// The checkpoint complete at the last poll.
    polled_at: CheckpointId,
}

impl<S: Source> Source for StopAfter<S> {
    type Out = S::Out;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.view = ctx.checkpoints().cloned();
        self.inner.open(ctx)
    }

    fn poll(&mut self, out: &mut S::Out) -> Result<SourcePoll, ConnectorError> {
        if Some(self.done) == self.polls {
            let completed = self
                .view
                .as_ref()
                .is_some_and(|v| v.completed() != CheckpointId::NONE);
            if self.taken
                && completed
                && let Some(stop) = self.stop.lock().unwrap().as_ref()
            {
                stop.stop();
            }
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        let completed = self
            .view
            .as_ref()
            .map_or(CheckpointId::NONE, |v| v.completed());
        if self.polls.is_some() && self.done > 0 && completed == self.polled_at {
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        self.polled_at = completed;
        self.done += 1;
        self.inner.poll(out)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        self.taken = Some(self.done) == self.polls;
        self.inner.snapshot()
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.inner.restore(restore)
    }
}

impl<S: Source> streamwork::core::checkpoint::Replayable for StopAfter<S> {}

#[operator]
fn parse(line: Line, out: &mut Collector<Entry>) {
    let text = String::from_utf8_lossy(&line.1);
    if let Some((account, amount)) = text.split_once(',')
        && let (Ok(account), Ok(amount)) = (account.parse(), amount.parse())
    {
        out.emit((line.0, account, amount));
    }
}

/// Each account's running balance: user keyed state.
#[derive(Clone, Default, State)]
struct Balances {
    balances: KeyedState<u64, i64>,
}

#[operator]
impl Balances {
    fn on_record(
        &mut self,
        account: CurrentKey<'_, u64>,
        entry: Entry,
        out: &mut Collector<Entry>,
    ) {
        let balance = self.balances.get_or_default(account);
        *balance += entry.2;
        out.emit((entry.0, entry.1, *balance));
    }
}

#[operator]
fn flatten(count: WindowResult<u64, u64>, out: &mut Collector<(u64, i64, u64)>) {
    out.emit((count.key, count.window.start.millis(), count.value));
}

/// What the job commits: balances, window counts and joined rows, as text.
#[derive(Clone, Default)]
struct Outputs {
    balances: CollectSink<Entry>,
    counts: CollectSink<(u64, i64, u64)>,
    joined: CollectSink<JoinRow<u64, Entry, (u64, i64, u64)>>,
}

impl Outputs {
    fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        lines.extend(self.balances.values().iter().map(|b| format!("b {b:?}")));
        lines.extend(self.counts.values().iter().map(|c| format!("c {c:?}")));
        lines.extend(
            self.joined
                .values()
                .iter()
                .map(|j| format!("j {:?} {:?}", j.left, j.right)),
        );
        lines.sort();
        lines
    }
}

fn job(
    input: &Path,
    stop_after: Option<u64>,
    stop: Arc<Mutex<Option<StopHandle>>>,
    out: &Outputs,
) -> JobGraph {
    let source = StopAfter {
        inner: FileSource::with_lines(input, Lines::indexed_raw()).split_bytes(10_000),
        polls: stop_after,
        done: 0,
        taken: false,
        stop,
        view: None,
        polled_at: CheckpointId::NONE,
    };
    job! {
        name "fixture";
        delivery exactly_once;
        source lines = source;
        operator entries = Parse <- lines;
        operator timed = Watermarks::monotonic()
            .timestamps(|e: &Entry| Timestamp::from_millis(e.0 as i64)) <- entries;
        operator balances[2] = Balances::default() <- timed.key(|e: &Entry| e.1);
        operator counts[2] { results, late } = Windows::tumbling(Duration::from_millis(500))
            .count() <- timed.key(|e: &Entry| e.1);
        operator flat[2] = Flatten <- counts.results;
        operator joined[2] = Join::left().interval(-100, 100)
            <- left(balances.key(|e: &Entry| e.1)), right(flat.key(|c: &(u64, i64, u64)| c.0));
        sink balances_out = out.balances.transactional() <- balances;
        sink counts_out = out.counts.transactional() <- flat;
        sink joined_out = out.joined.transactional() <- joined;
        drop counts.late;
    }
    .unwrap()
}

/// Writes the newest fixture. Run it only when the format changes on
/// purpose.
#[test]
#[ignore = "writes the fixture kept in the repository"]
fn write_the_fixture() {
    let dir = fixture(NEWEST);
    let _ = std::fs::remove_dir_all(&dir);
    let scratch = support::dir("fixture-input");
    let input = write_input(&scratch);
    let out = Outputs::default();
    let stop = Arc::new(Mutex::new(None));
    let handle = job(&input, Some(2), stop.clone(), &out)
        .start_with(exactly_once(&dir.join("ckpt"), 0))
        .unwrap();
    *stop.lock().unwrap() = Some(handle.stop_handle());
    let report = handle.join().unwrap();
    assert!(report.savepoint.is_some());
    assert_eq!(
        out.balances.values().len(),
        2_048,
        "the savepoint covers two polls"
    );
    std::fs::write(dir.join("before.txt"), out.lines().join("\n")).unwrap();
    // The savepoint builds on earlier checkpoints: some of its keyed parts
    // are deltas (container 3, or 5 written as frames), and the log keeps
    // what they read.
    let savepoint = streamwork::state::load_latest(dir.join("ckpt")).unwrap();
    assert!(
        savepoint
            .snapshots()
            .any(|s| [3, 5].contains(&(s.schema() % 256))),
        "the savepoint holds incremental parts"
    );
}

#[test]
fn the_checkpoint_of_version_1_still_resumes_exactly() {
    resumes_exactly(1);
}

#[test]
fn the_incremental_checkpoint_of_version_2_still_resumes_exactly() {
    resumes_exactly(2);
}

#[test]
fn the_checkpoint_of_version_3_with_layout_fingerprints_still_resumes_exactly() {
    resumes_exactly(3);
}

fn resumes_exactly(version: u32) {
    let scratch = support::dir(&format!("fixture-resume-v{version}"));
    let input = write_input(&scratch.join("input"));
    // An uninterrupted run: what must be committed in the end.
    let all = Outputs::default();
    job(&input, None, Arc::default(), &all)
        .run_with(exactly_once(&scratch.join("fresh"), 0))
        .unwrap();
    // The kept savepoint, resumed (a copy: a run writes to its directory).
    let checkpoints = scratch.join("ckpt");
    std::fs::create_dir_all(&checkpoints).unwrap();
    for entry in std::fs::read_dir(fixture(version).join("ckpt")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), checkpoints.join(entry.file_name())).unwrap();
    }
    let rest = Outputs::default();
    let report = job(&input, None, Arc::default(), &rest)
        .run_with(exactly_once(&checkpoints, 0))
        .unwrap();
    assert!(
        report.recovery.restored_from.is_some(),
        "resumed from the fixture"
    );
    let before = std::fs::read_to_string(fixture(version).join("before.txt")).unwrap();
    let mut got: Vec<String> = before.lines().map(String::from).collect();
    got.extend(rest.lines());
    assert_same(&got, &all.lines(), "before the savepoint and after it");
}
