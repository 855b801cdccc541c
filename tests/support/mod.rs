//! What the exactly-once tests share: a replayable source of numbered
//! records that holds at a chosen position until a checkpoint completes, so
//! that a test knows a checkpoint covers what came before it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use streamwork::connectors::TransactionalFileSink;
use streamwork::core::checkpoint::{CheckpointView, RestoredPart};
use streamwork::core::{InstanceIdx, KeyGroups};
use streamwork::prelude::*;

/// What a [`Numbers`] source waits for at its hold.
pub type Until = Arc<dyn Fn(&CheckpointView) -> bool + Send + Sync>;

/// How long a hold may last before the source fails the job (naming what
/// it waited for): a test that would wait forever fails instead.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// `(i % 10, i - 500)` for `i` in `0..n`, 50 a poll. In a run that did not
/// restore, it holds at `hold_at` until `until` holds (by default: a
/// checkpoint is complete).
#[derive(Clone)]
pub struct Numbers {
    n: u64,
    next: u64,
    hold_at: Option<u64>,
    until: Until,
    held_since: Option<Instant>,
    checkpoints: Option<CheckpointView>,
    restored: bool,
}

impl Numbers {
    /// Holds halfway.
    pub fn new(n: u64) -> Self {
        Numbers::holding_at(n, Some(n / 2))
    }

    /// Holds at `hold_at` (never if `None`).
    pub fn holding_at(n: u64, hold_at: Option<u64>) -> Self {
        Numbers {
            n,
            next: 0,
            hold_at,
            until: Arc::new(|c: &CheckpointView| c.completed() != CheckpointId::NONE),
            held_since: None,
            checkpoints: None,
            restored: false,
        }
    }

    /// Holds at `hold_at` until `until` holds.
    pub fn until(
        mut self,
        until: impl Fn(&CheckpointView) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.until = Arc::new(until);
        self
    }
}

impl Source for Numbers {
    type Out = Collector<(u64, i64)>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.checkpoints = ctx.checkpoints().cloned();
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<(u64, i64)>) -> Result<SourcePoll, ConnectorError> {
        if self.next == self.n {
            return Ok(SourcePoll::Finished);
        }
        let holding = Some(self.next) == self.hold_at
            && !self.restored
            && self.checkpoints.as_ref().is_some_and(|c| !(self.until)(c));
        if holding {
            let since = *self.held_since.get_or_insert_with(Instant::now);
            if since.elapsed() > HOLD_LIMIT {
                return Err(ConnectorError::user(format!(
                    "held at {} for {HOLD_LIMIT:?}: what the test waits for never happened",
                    self.next
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        let stop = match self.hold_at {
            Some(hold) if self.next < hold => hold,
            _ => self.n,
        };
        let end = (self.next + 50).min(stop);
        for i in self.next..end {
            out.emit((i % 10, i as i64 - 500));
        }
        self.next = end;
        Ok(SourcePoll::Emitted)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        Some(position(self.next))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if let Some(next) = restored_position(restore)? {
            self.next = next;
            self.restored = true;
        }
        Ok(())
    }
}

impl streamwork::core::checkpoint::Replayable for Numbers {}

/// A test source's position: the next record, 8 bytes.
pub fn position(next: u64) -> StateBytes {
    StateBytes::new(1, next.to_le_bytes().to_vec())
}

/// The position this instance checkpointed, if any.
pub fn restored_position(restore: &Restore<'_>) -> Result<Option<u64>, ConnectorError> {
    let Some(own) = restore.own() else {
        return Ok(None);
    };
    let bytes = own
        .bytes
        .try_into()
        .map_err(|_| ConnectorError::user("a position of 8 bytes"))?;
    Ok(Some(u64::from_le_bytes(bytes)))
}

/// The local S3 server's endpoint and bucket (`STREAMWORK_S3_ENDPOINT`,
/// `STREAMWORK_S3_BUCKET`, exported by `scripts/s3-test-server.sh`), or
/// `None` after saying the test is skipped. Under CI (`CI` set) a missing
/// server fails the test instead: CI starts it.
pub fn s3_server() -> Option<(String, String)> {
    match s3_server_if_running() {
        Some(server) => Some(server),
        None => {
            let missing = "no S3 server (see scripts/s3-test-server.sh)";
            assert!(
                std::env::var_os("CI").is_none(),
                "{missing}: under CI every S3 test runs"
            );
            println!("skipped: {missing}");
            None
        }
    }
}

/// The local S3 server's endpoint and bucket, if they are set: for a test
/// that runs against a directory store otherwise.
pub fn s3_server_if_running() -> Option<(String, String)> {
    match (
        std::env::var("STREAMWORK_S3_ENDPOINT"),
        std::env::var("STREAMWORK_S3_BUCKET"),
    ) {
        (Ok(endpoint), Ok(bucket)) => Some((endpoint, bucket)),
        _ => None,
    }
}

/// A fresh directory, never the same twice in a process (tests run in
/// parallel threads).
/// Instance `instance` of `parallelism` of component `out`: a sink
/// driven by hand.
#[allow(dead_code)]
pub fn sink_context(instance: u32, parallelism: u32) -> InstanceContext {
    InstanceContext::new(
        "out",
        InstanceIdx(instance),
        parallelism,
        KeyGroups::DEFAULT,
    )
}

/// What instance `instance` of `parallelism` of component `out` is told
/// when restored from `checkpoint` (`0`: none), whose parts are `parts`.
#[allow(dead_code)]
pub fn sink_restore<'a>(
    checkpoint: u64,
    instance: u32,
    parallelism: u32,
    parts: Vec<RestoredPart<'a>>,
) -> Restore<'a> {
    Restore {
        records: None,
        component: "out",
        checkpoint: CheckpointId::new(checkpoint),
        is_final: false,
        ended: Vec::new(),
        instance: InstanceIdx(instance),
        parallelism,
        key_groups: KeyGroups::DEFAULT,
        parts,
    }
}

/// A scratch directory of this test process (not created). The first call
/// of a process also removes what earlier test processes left in the
/// temporary directory ([`sweep_scratch_of_ended_processes`]).
pub fn dir(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(sweep_scratch_of_ended_processes);
    let dir = std::env::temp_dir().join(format!(
        "streamwork-{name}-pid{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Exactly-once checkpoints into `dir` every millisecond, with `restarts`
/// restarts after a failure.
pub fn exactly_once(dir: &Path, restarts: u32) -> RunOptions {
    RunOptions {
        checkpoints: Some(CheckpointConfig::new(dir, Duration::from_millis(1))),
        restart: RestartStrategy::FixedDelay {
            attempts: restarts,
            delay: Duration::ZERO,
        },
        ..RunOptions::default()
    }
}

/// [`exactly_once`] in working directory `dir` (this "machine"'s), every
/// checkpoint also kept in `store`: a run given an empty directory carries
/// on from the store.
pub fn exactly_once_stored(
    dir: &Path,
    store: Arc<dyn streamwork::state::CheckpointStore>,
    restarts: u32,
) -> RunOptions {
    let mut options = exactly_once(dir, restarts);
    options.checkpoints = options.checkpoints.map(|config| config.stored_in(store));
    options
}

/// Compares committed rows with the expected ones (as multisets), naming
/// the first rows missing and repeated rather than printing thousands.
pub fn assert_same<T: Ord + Clone + std::fmt::Debug>(actual: &[T], expected: &[T], what: &str) {
    let mut counts = std::collections::BTreeMap::<T, i64>::new();
    for row in expected {
        *counts.entry(row.clone()).or_default() += 1;
    }
    for row in actual {
        *counts.entry(row.clone()).or_default() -= 1;
    }
    let missing: Vec<_> = counts
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(r, _)| r)
        .collect();
    let extra: Vec<_> = counts
        .iter()
        .filter(|(_, c)| **c < 0)
        .map(|(r, _)| r)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} rows committed, {} expected; {} missing (first {:?}), {} extra (first {:?})",
        actual.len(),
        expected.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)],
    );
}

/// `inner`, holding after its first `polls` polls (in a run that did not
/// restore) until a checkpoint is complete: a test knows that a checkpoint
/// covers what came before.
#[derive(Clone)]
pub struct Held<S> {
    inner: S,
    polls: u64,
    done: u64,
    held_since: Option<Instant>,
    checkpoints: Option<CheckpointView>,
}

impl<S> Held<S> {
    /// Holds `inner` after `polls` polls.
    pub fn new(inner: S, polls: u64) -> Self {
        Held {
            inner,
            polls,
            done: 0,
            held_since: None,
            checkpoints: None,
        }
    }
}

impl<S: Source> Source for Held<S> {
    type Out = S::Out;

    fn replayable(&self) -> bool {
        self.inner.replayable()
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.checkpoints = ctx
            .checkpoints()
            .filter(|c| c.restored_from().is_none())
            .cloned();
        self.inner.open(ctx)
    }

    fn poll(&mut self, out: &mut S::Out) -> Result<SourcePoll, ConnectorError> {
        if self.done >= self.polls
            && let Some(view) = &self.checkpoints
            && view.completed() == CheckpointId::NONE
        {
            let since = *self.held_since.get_or_insert_with(Instant::now);
            if since.elapsed() > HOLD_LIMIT {
                return Err(ConnectorError::user("no checkpoint completed at the hold"));
            }
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        self.done += 1;
        self.inner.poll(out)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        self.inner.snapshot()
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.inner.restore(restore)
    }
}

impl<S: Source> streamwork::core::checkpoint::Replayable for Held<S> {}

/// The README's style: a running sum per key in `KeyedState`, and nothing
/// written by hand to checkpoint it. In: `(key, value)` (a [`Numbers`]
/// record); out: `(key, value, sum so far)`.
#[derive(Clone, Default, State)]
pub struct RunningSum {
    sums: KeyedState<u64, i64>,
}

#[operator]
impl RunningSum {
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

/// A transactional file sink of [`RunningSum`] rows, `key,value,sum` lines.
pub fn sum_files(output: &Path) -> TransactionalFileSink<(u64, i64, i64)> {
    FileSink::new(output, |(k, v, s): &(u64, i64, i64), line: &mut Vec<u8>| {
        line.extend_from_slice(format!("{k},{v},{s}").as_bytes());
    })
    .transactional()
}

/// The committed lines of every visible file under `dir`, sorted.
pub fn committed_lines(dir: &Path) -> Vec<String> {
    committed_sums(dir).0
}

/// Every row [`sum_files`] committed into `output` (visible files),
/// sorted; and the hidden files left.
pub fn committed_sums(output: &Path) -> (Vec<String>, Vec<String>) {
    let (mut rows, mut hidden) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(output).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            hidden.push(name);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            rows.extend(text.lines().map(String::from));
        }
    }
    rows.sort();
    hidden.sort();
    (rows, hidden)
}

/// The rows of an uninterrupted [`RunningSum`] run over `Numbers::new(n)`,
/// as [`committed_sums`] reads them.
pub fn expected_sums(n: u64) -> Vec<String> {
    let mut sums = [0i64; 10];
    let mut rows: Vec<String> = (0..n)
        .map(|i| {
            let (k, v) = (i % 10, i as i64 - 500);
            sums[k as usize] += v;
            format!("{k},{v},{}", sums[k as usize])
        })
        .collect();
    rows.sort();
    rows
}

/// Where `cargo build --example NAME` (with the features it needs) put
/// example `name`: next to this test's executable.
pub fn example(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{name} not built at {} ({build})",
        path.display()
    );
    path
}

/// Kills `child` with SIGKILL as soon as `visible` says its output shows
/// (polled every 10 ms, for at most a minute); whether it was killed
/// rather than ending first.
#[allow(dead_code)]
pub fn kill_once_visible(child: &mut std::process::Child, visible: impl Fn() -> bool) -> bool {
    let mut killed = false;
    for _ in 0..6_000 {
        if child.try_wait().expect("waiting for the child").is_some() {
            break;
        }
        if visible() {
            child.kill().expect("killing the child");
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.wait();
    killed
}

/// Waits for `child`, which must succeed and say it restored from a
/// checkpoint; what it printed.
#[allow(dead_code)]
pub fn resumed_from_a_checkpoint(child: std::process::Child) -> String {
    let done = child
        .wait_with_output()
        .expect("waiting for the resumed run");
    let said = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(said.contains("restored from Some"), "{said}");
    said
}

/// Removes the scratch files and directories (`streamwork-...-pidN...` in
/// the temporary directory, named with their process id) of test processes
/// that have ended: a test that fails, or is killed, leaves its scratch
/// for inspection until the next run, and runs do not pile up.
pub fn sweep_scratch_of_ended_processes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix("streamwork-") else {
            continue;
        };
        let pid = rest.split(['-', '.']).find_map(|part| {
            part.strip_prefix("pid")
                .filter(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        });
        if pid.is_none_or(|pid| Path::new("/proc").join(pid).exists()) {
            continue;
        }
        let path = entry.path();
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}

/// Cuts the last `bytes` off the newest segment of the checkpoint log in
/// `dir` (its newest checkpoint's commit record is its last 48 bytes), and
/// returns every segment, in order.
#[allow(dead_code)]
pub fn cut_newest_segment(dir: &Path, bytes: u64) -> Vec<PathBuf> {
    let segments = log_segments(dir);
    let newest = segments.last().expect("a checkpoint log segment");
    let length = std::fs::metadata(newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap()
        .set_len(length - bytes)
        .unwrap();
    segments
}

/// Asserts that `error` refuses a completed checkpoint that cannot be
/// read because a record of it is torn, names the fix, and is not retried.
#[allow(dead_code)]
pub fn assert_refused_as_torn(error: &streamwork::runtime::JobError) {
    let text = error.to_string();
    assert!(text.contains("completed"), "{text}");
    assert!(text.contains("cannot be used"), "{text}");
    assert!(
        text.contains("torn record"),
        "what is damaged is said: {text}"
    );
    assert!(text.contains("from a backup"), "the fix is said: {text}");
    assert!(!error.is_retryable());
}

/// The checkpoint log's segment files in `dir`, in order.
#[allow(dead_code)]
pub fn log_segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "swlog"))
        .collect();
    segments.sort();
    segments
}
