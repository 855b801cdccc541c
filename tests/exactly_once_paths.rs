//! Exactly-once on the paths next to the one every test walks: a crash
//! after the sinks staged the first checkpoint but before it completed; a
//! newest checkpoint damaged after it completed; a checkpoint directory
//! lost under published output; a job aborted in the middle, one of them with a channel read
//! by two sinks, fused and not, resumed at another parallelism. Each ends with the output of an
//! uninterrupted run, or with a refusal that names the problem and leaves
//! the published output as it was.

mod support;

use std::path::PathBuf;

use streamwork::core::checkpoint::Transactional;
use streamwork::prelude::*;
use support::{
    Held, Numbers, RunningSum, assert_same, committed_sums, dir, exactly_once, expected_sums,
    sum_files,
};

/// A transactional sink that fails right after staging its first
/// checkpoint: the checkpoint never completes, and what it staged stays.
#[derive(Clone)]
struct FailsAfterStaging<S>(S);

impl<S: Sink> Sink for FailsAfterStaging<S> {
    type In = S::In;

    fn exactly_once(&self) -> bool {
        self.0.exactly_once()
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.0.open(ctx)
    }

    fn write(&mut self, record: Record<S::In>) -> Result<(), ConnectorError> {
        self.0.write(record)
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.0.pre_commit(checkpoint)?;
        Err(ConnectorError::user("injected failure after staging"))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.0.restore(restore)
    }
}

impl<S: Sink> Transactional for FailsAfterStaging<S> {}

/// The sums job into `sink`.
fn sums<S>(source: Numbers, p: u32, sink: S) -> JobGraph
where
    S: Sink<In = (u64, i64, i64)> + Transactional + Clone,
{
    job! {
        delivery exactly_once;
        source numbers = source;
        operator sums[p] = RunningSum::default() <- numbers.key(|(k, _): &(u64, i64)| *k);
        sink out[p] = sink <- sums;
    }
    .unwrap()
}

struct Paths {
    output: PathBuf,
    checkpoints: PathBuf,
}

fn paths(name: &str) -> Paths {
    let root = dir(name);
    Paths {
        output: root.join("out"),
        checkpoints: root.join("ckpt"),
    }
}

/// The first run stages checkpoint 1 (half the input) and dies before it
/// completes, leaving hidden files cut short beside its staged ones. The next run starts from no checkpoint, and its own first
/// checkpoint covers nothing (its source holds at 0 until one completes):
/// a sink that kept the orphan, or an id handed out again, would publish
/// the first half twice.
#[test]
fn a_crash_before_the_first_checkpoint_completes_publishes_nothing_twice() {
    let n = 2_000;
    for p in [1, 2] {
        let paths = paths(&format!("paths-first-{p}"));
        let error = sums(
            Numbers::new(n),
            p,
            FailsAfterStaging(sum_files(&paths.output)),
        )
        .run_with(exactly_once(&paths.checkpoints, 0))
        .expect_err("the sink fails after staging");
        assert!(error.to_string().contains("injected failure"), "{error}");
        let (rows, hidden) = committed_sums(&paths.output);
        assert!(rows.is_empty(), "nothing completed, nothing published");
        assert!(
            hidden.iter().any(|h| h.contains(".staged-")),
            "the precondition: staged output was left behind: {hidden:?}"
        );
        // What a crash in the middle of writing a hidden file whole leaves
        // (`.NAME.SUFFIX.partial`): the restored run removes it, and a torn
        // `published` is not read as the real one.
        for staged in hidden.iter().filter(|h| h.contains(".staged-")) {
            let name = staged.split(".staged-").next().unwrap();
            for suffix in ["published", "header", "commit-00000000000000000001"] {
                std::fs::write(paths.output.join(format!("{name}.{suffix}.partial")), "99")
                    .unwrap();
            }
        }
        let report = sums(Numbers::holding_at(n, Some(0)), p, sum_files(&paths.output))
            .run_with(exactly_once(&paths.checkpoints, 0))
            .unwrap();
        assert_eq!(report.recovery.restored_from, None);
        let (rows, hidden) = committed_sums(&paths.output);
        assert_same(&rows, &expected_sums(n), &format!("p={p}"));
        assert!(hidden.iter().all(|h| !h.contains(".staged-")), "{hidden:?}");
        assert!(
            hidden.iter().all(|h| !h.ends_with(".partial")),
            "{hidden:?}"
        );
    }
}

/// The last segment of the checkpoint log cut short, or every segment gone:
/// the newest complete checkpoint (the final one of a completed run) cannot
/// be read, and the run refuses rather than replay what was published.
#[test]
fn a_damaged_newest_checkpoint_is_refused_not_rewound() {
    let n = 2_000;
    let paths = paths("paths-damaged");
    let run = || {
        sums(Numbers::new(n), 2, sum_files(&paths.output))
            .run_with(exactly_once(&paths.checkpoints, 0))
    };
    run().unwrap();
    let published = committed_sums(&paths.output);
    assert_same(&published.0, &expected_sums(n), "the first run");
    // The final commit record is the last 48 bytes: cut into it.
    let segments = support::cut_newest_segment(&paths.checkpoints, 20);
    let error = run().expect_err("a damaged newest checkpoint is refused");
    support::assert_refused_as_torn(&error);
    assert_eq!(
        committed_sums(&paths.output),
        published,
        "nothing was published"
    );
    for segment in &segments {
        std::fs::remove_file(segment).unwrap();
    }
    let error = run().expect_err("no segment left: refused, not a fresh start");
    assert!(
        error.to_string().contains("restoring from nothing"),
        "{error}"
    );
    assert_eq!(
        committed_sums(&paths.output),
        published,
        "nothing was published"
    );
}

/// The whole checkpoint directory lost under published output: the sink
/// sees output newer than the checkpoint the run starts from (none) and
/// refuses, naming itself and the fix.
#[test]
fn a_lost_checkpoint_directory_under_published_output_is_refused() {
    let n = 1_000;
    let paths = paths("paths-lost");
    let run = || {
        sums(Numbers::new(n), 2, sum_files(&paths.output))
            .run_with(exactly_once(&paths.checkpoints, 0))
    };
    run().unwrap();
    let published = committed_sums(&paths.output);
    std::fs::remove_dir_all(&paths.checkpoints).unwrap();
    let error = run().expect_err("refused by the sink");
    let text = error.to_string();
    assert!(text.contains("transactional file sink `out`"), "{text}");
    assert!(text.contains("starts from no checkpoint"), "{text}");
    assert!(
        text.contains(&format!("remove {}", paths.output.display())),
        "{text}"
    );
    assert_eq!(
        committed_sums(&paths.output),
        published,
        "nothing was published"
    );
}

/// A bounded source that ends at once next to one that goes on: periodic
/// checkpoints go on after it ended (its final part stands for it), its
/// own sink publishes once one holds that part (the other source waits for
/// that before it reads anything), and a failure after that restores it as
/// ended: every row once.
#[test]
fn a_finished_source_keeps_taking_part_in_checkpoints() {
    let n = 2_000;
    let expected = {
        let mut rows: Vec<(u64, i64, i64)> = Vec::new();
        let mut sums = [0i64; 10];
        for i in (0..10).chain(0..n) {
            let (k, v) = (i % 10, i as i64 - 500);
            sums[k as usize] += v;
            rows.push((k, v, sums[k as usize]));
        }
        rows
    };
    for p in [1, 2] {
        let checkpoints = dir(&format!("paths-finished-{p}"));
        let (out, table_out) = (CollectSink::new(), CollectSink::new());
        let table_committed = table_out.clone();
        let fault = streamwork::core::testkit::InjectFault::new(
            0,
            streamwork::core::testkit::Fault::BeforeRecord(1_500),
        );
        let graph = job! {
            delivery exactly_once;
            source table = Numbers::holding_at(10, None);
            source stream = Numbers::holding_at(n, Some(0))
                .until(move |_| table_committed.values().len() == 10);
            operator sums[p] = RunningSum::default()
                <- table.key(|(k, _): &(u64, i64)| *k), stream.key(|(k, _): &(u64, i64)| *k);
            operator faulty = fault <- sums.global();
            sink rows = out.transactional() <- faulty;
            sink table_rows = table_out.transactional() <- table;
        }
        .unwrap();
        let report = graph.run_with(exactly_once(&checkpoints, 1)).unwrap();
        assert_eq!(report.restarts, 1, "the fault fired");
        assert!(report.recovery.restored_from.is_some());
        assert_eq!(
            table_out.values().len(),
            10,
            "the bounded branch published once"
        );
        assert_same(&out.values(), &expected, &format!("p={p}"));
    }
}

/// Fails once (in a run that did not restore) at its `at`-th record.
#[derive(Clone)]
struct FailOnce {
    at: u64,
    seen: u64,
    armed: bool,
}

impl Operator for FailOnce {
    type In = (u64, Vec<u8>);
    type Key = NoKey;
    type Out = Collector<(u64, Vec<u8>)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    fn open(&mut self, ctx: &InstanceContext) {
        self.armed = ctx
            .checkpoints()
            .is_some_and(|c| c.restored_from().is_none());
    }

    fn on_record(&mut self, value: (u64, Vec<u8>), ctx: &mut Context<'_, NoKey, Self::Out>) {
        self.seen += 1;
        if self.armed && self.seen == self.at {
            panic!("injected failure after a checkpoint");
        }
        ctx.emit(value);
    }
}

/// Six files read by two instances, failed after a checkpoint (each
/// instance holds after its first poll, at most 1,024 lines, until one is
/// complete; the failure comes after 3,000 lines), resumed by three, or by
/// one: every line once, with its index in the whole input.
#[test]
fn a_file_source_resumes_at_another_parallelism() {
    let root = dir("paths-file-rescale");
    let input = root.join("input");
    std::fs::create_dir_all(&input).unwrap();
    let mut expected: Vec<(u64, Vec<u8>)> = Vec::new();
    for f in 0..6 {
        let lines: Vec<String> = (0..700).map(|i| format!("file {f} line {i}")).collect();
        for line in &lines {
            expected.push((expected.len() as u64, line.clone().into_bytes()));
        }
        std::fs::write(input.join(format!("part-{f}")), lines.join("\n") + "\n").unwrap();
    }
    for after in [3, 1] {
        let checkpoints = root.join(format!("ckpt-{after}"));
        let sink = CollectSink::new();
        let run = |p: u32, fail_at: u64| {
            let source =
                FileSource::with_lines(&input, streamwork::connectors::file::Lines::indexed_raw())
                    .split_bytes(5_000);
            let fail = FailOnce {
                at: fail_at,
                seen: 0,
                armed: false,
            };
            job! {
                delivery exactly_once;
                source lines[p] = Held::new(source, 1);
                operator checked = fail <- lines.global();
                sink out = sink.transactional() <- checked;
            }
            .unwrap()
            .run_with(exactly_once(&checkpoints, 0))
        };
        let error = run(2, 3_000).expect_err("the injected failure");
        assert!(error.to_string().contains("injected failure"), "{error}");
        let report = run(after, u64::MAX).unwrap();
        assert!(
            report.recovery.restored_from.is_some(),
            "restored at {after}"
        );
        assert_same(&sink.values(), &expected, &format!("2 → {after}"));
    }
}

/// A job aborted in the middle of its input (as the scale-out runner aborts
/// a partition's job whose lease another process took): it ends with
/// `JobError::Aborted` and its reason, commits nothing it read after the
/// abort, and a run restored from the last complete checkpoint ends with
/// the output of an uninterrupted run.
#[test]
fn an_aborted_job_commits_nothing_more_and_a_restored_run_ends_exact() {
    let n = 4_000;
    for p in [1, 2] {
        let paths = paths(&format!("paths-aborted-{p}"));
        let error = aborted_after_a_checkpoint(
            n,
            |source| sums(source, p, sum_files(&paths.output)),
            &paths.checkpoints,
            "the partition's lease was lost",
        );
        assert!(
            matches!(&error, JobError::Aborted { reason, .. } if reason.contains("lease was lost")),
            "{error}"
        );
        let (rows, _) = committed_sums(&paths.output);
        assert!(
            rows.len() <= n as usize / 2,
            "p={p}: rows read after the abort were committed: {}",
            rows.len()
        );
        let report = sums(Numbers::new(n), p, sum_files(&paths.output))
            .run_with(exactly_once(&paths.checkpoints, 0))
            .unwrap();
        assert!(report.recovery.restored_from.is_some());
        let (rows, _) = committed_sums(&paths.output);
        assert_same(&rows, &expected_sums(n), &format!("aborted, p={p}"));
    }
}

/// Runs the graph `graph` makes of a source of `n` numbers that holds
/// halfway until a checkpoint is complete, and aborts it then, `reason`
/// given: what was read after the checkpoint is never committed. Returns
/// the run's error.
fn aborted_after_a_checkpoint(
    n: u64,
    graph: impl FnOnce(Numbers) -> JobGraph,
    checkpoints: &std::path::Path,
    reason: &str,
) -> JobError {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    // Holds halfway until a checkpoint completed and the job was aborted;
    // then reads on to its end.
    let (checkpointed, aborted) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let source = {
        let (checkpointed, aborted) = (checkpointed.clone(), aborted.clone());
        Numbers::holding_at(n, Some(n / 2)).until(move |c| {
            if c.completed() != CheckpointId::NONE {
                checkpointed.store(true, Ordering::Relaxed);
            }
            aborted.load(Ordering::Relaxed)
        })
    };
    let handle =
        streamwork::runtime::start_with(graph(source), exactly_once(checkpoints, 0)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(50);
    while !checkpointed.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline, "no checkpoint completed");
        std::thread::sleep(Duration::from_millis(5));
    }
    handle.stop_handle().abort(reason);
    aborted.store(true, Ordering::Relaxed);
    handle.join().expect_err("aborted")
}

/// A row of the CSV test below, its columns named by a header.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct Row {
    id: u64,
    name: String,
}

/// Plain, gzip and zstd CSV files with headers (columns in either order),
/// read by two instances, failed after a checkpoint, resumed by three;
/// written as zstd CSV with a header by a rolling transactional sink: the
/// output, read back by name, holds every row once.
#[test]
fn compressed_csv_with_headers_failed_and_resumed_at_another_parallelism_ends_exact() {
    use std::io::Write;
    use streamwork::connectors::Compression;

    let root = dir("paths-csv-compressed");
    let (input, output) = (root.join("input"), root.join("output"));
    std::fs::create_dir_all(&input).unwrap();
    let mut expected = Vec::new();
    for f in 0..6u64 {
        let mut text = String::from(if f % 2 == 0 { "id,name\n" } else { "name,id\n" });
        for i in 0..700 {
            let row = Row {
                id: f * 1_000 + i,
                name: format!("file {f}, \"row\" {i}"),
            };
            let name = format!("\"{}\"", row.name.replace('"', "\"\""));
            text += &if f % 2 == 0 {
                format!("{},{name}\n", row.id)
            } else {
                format!("{name},{}\n", row.id)
            };
            expected.push(row);
        }
        let (file, bytes) = match f % 3 {
            0 => (format!("part-{f}.csv"), text.into_bytes()),
            1 => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(text.as_bytes()).unwrap();
                (format!("part-{f}.csv.gz"), gz.finish().unwrap())
            }
            _ => (
                format!("part-{f}.csv.zst"),
                zstd::encode_all(text.as_bytes(), 3).unwrap(),
            ),
        };
        std::fs::write(input.join(file), bytes).unwrap();
    }
    let checkpoints = root.join("ckpt");
    let run = |p: u32, fail_at: u64| {
        let source = FileSource::<Row>::csv(&input)
            .has_headers()
            .split_bytes(5_000);
        let sink = FileSink::<Row>::csv(&output)
            .has_headers()
            .compression(Compression::Zstd)
            .rolling(1, std::time::Duration::from_secs(3600))
            .transactional();
        let fail = FailOnce {
            at: fail_at,
            seen: 0,
            armed: false,
        };
        job! {
            delivery exactly_once;
            source rows[p] = Held::new(source, 1);
            operator pairs = |r: Row| (r.id, r.name.into_bytes()) <- rows;
            operator checked = fail <- pairs.global();
            operator back = |(id, name): (u64, Vec<u8>)| Row { id, name: String::from_utf8(name).unwrap() } <- checked;
            sink out = sink <- back;
        }
        .unwrap()
        .run_with(exactly_once(&checkpoints, 0))
    };
    let error = run(2, 3_000).expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    let report = run(3, u64::MAX).unwrap();
    assert!(report.recovery.restored_from.is_some());

    let read = CollectSink::new();
    let files = std::fs::read_dir(&output)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".zst")
        })
        .count();
    assert!(files > 1, "rolled into several files: {files}");
    job! {
        source rows = FileSource::<Row>::csv(&output).has_headers().map_lines(|l| l.on_bad_input(BadInput::Fail));
        sink got = read.clone() <- rows;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut got = read.values();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}

/// The sums job with its channel read twice: by a sink fused into the
/// operator's task (forward, equal parallelism) and by one behind a channel
/// (shuffled to one instance more), written with `job!` or with the builder.
fn forked(source: Numbers, p: u32, output: &std::path::Path, builder: bool) -> JobGraph {
    let (fused, channel) = (
        sum_files(&output.join("fused")),
        sum_files(&output.join("channel")),
    );
    if builder {
        let mut job = JobBuilder::new("forked").exactly_once();
        let numbers = job.source("numbers", 1, source);
        let sums = job.operator(
            "sums",
            p,
            RunningSum::default(),
            numbers.key_by(|(k, _): &(u64, i64)| *k),
        );
        job.sink("fused_out", p, fused, sums);
        job.sink("channel_out", p + 1, channel, sums.shuffle());
        return job.build().unwrap();
    }
    job! {
        delivery exactly_once;
        source numbers = source;
        operator sums[p] = RunningSum::default() <- numbers.key(|(k, _): &(u64, i64)| *k);
        sink fused_out[p] = fused <- sums;
        sink channel_out[p + 1] = channel <- sums.shuffle();
    }
    .unwrap()
}

/// One channel read by two transactional sinks, one fused into its task
/// and one behind a channel: the fan-out hands every batch and every
/// barrier to both. Aborted after a checkpoint and resumed at another
/// parallelism, through `job!` and through the builder, each sink has
/// committed the rows of an uninterrupted run, once.
#[test]
fn a_channel_read_twice_aborted_and_resumed_at_another_parallelism_ends_exact_in_both() {
    let n = 4_000;
    for builder in [false, true] {
        let paths = paths(&format!("paths-forked-{builder}"));
        aborted_after_a_checkpoint(
            n,
            |source| forked(source, 2, &paths.output, builder),
            &paths.checkpoints,
            "stopped mid-run",
        );
        let report = forked(Numbers::new(n), 3, &paths.output, builder)
            .run_with(exactly_once(&paths.checkpoints, 0))
            .unwrap();
        assert!(report.recovery.restored_from.is_some());
        for sink in ["fused", "channel"] {
            let (rows, _) = committed_sums(&paths.output.join(sink));
            assert_same(
                &rows,
                &expected_sums(n),
                &format!("{sink} sink, builder={builder}"),
            );
        }
    }
}
