//! Line files written to object storage exactly once, with nothing shared
//! but the store: a job writing gzip CSV with a header under an S3 prefix
//! (checkpoints in the same store) fails after staging a checkpoint, and a
//! run on an empty directory of its own, at another parallelism, carries
//! on; the objects hold every row once. Against moto
//! (`scripts/s3-test-server.sh`).

#![cfg(feature = "s3")]

mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use streamwork::connectors::Compression;
use streamwork::connectors::file::{StoreFileSink, StorePrefix};
use streamwork::core::checkpoint::RestoredPart;
use streamwork::core::{CheckpointId, InstanceIdx, Record};
use streamwork::prelude::*;
use streamwork::state::{CheckpointStore, ObjectStoreCheckpoints};
use support::{Held, dir, exactly_once_stored, sink_context, sink_restore};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
struct Row {
    id: u64,
    name: String,
}

const ROWS: u64 = 20_000;

static ARMED: AtomicBool = AtomicBool::new(false);

/// Fails once, armed, at row 12,345.
fn checked(row: Row) -> Row {
    if row.id == 12_345 && ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    row
}

#[test]
fn objects_written_across_a_failure_and_another_machine_hold_every_row_once() {
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    for (first, second) in [(3u32, 1u32), (1, 2)] {
        let root = dir("store-files");
        let name = root.file_name().unwrap().to_str().unwrap().to_string();
        let (out, checkpoints) = (format!("{name}/out"), format!("{name}/checkpoints"));
        let store =
            Arc::new(ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &checkpoints).unwrap());
        let run = |p: u32, machine: &str| {
            let prefix = StorePrefix::s3(Some(&endpoint), &bucket, &out).unwrap();
            let sink = FileSink::<Row>::csv("")
                .has_headers()
                .compression(Compression::Gzip)
                .into_store(prefix);
            let rows = Held::new(
                GeneratorSource::new(|i: u64| Row {
                    id: i,
                    name: format!("row, \"{i}\""),
                })
                .take(ROWS),
                1,
            );
            let options = exactly_once_stored(&root.join(machine), store.clone(), 0);
            job! {
                delivery exactly_once;
                source rows[p] = rows;
                operator kept[p] = |r: Row| checked(r) <- rows;
                sink out[p] = sink <- kept;
            }
            .unwrap()
            .run_with(options)
        };
        ARMED.store(true, Ordering::SeqCst);
        let error = run(first, "one").expect_err("the injected failure");
        assert!(error.to_string().contains("injected failure"), "{error}");
        // Another machine: an empty directory, the same store.
        let report = run(second, "two").unwrap();
        assert!(
            report.recovery.restored_from.is_some(),
            "{first} → {second}"
        );

        // Every object, read back: a header, then rows, each once overall.
        let objects = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &out).unwrap();
        let listed = objects.list().unwrap();
        assert!(!listed.is_empty());
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for (name, _) in &listed {
            assert!(name.ends_with(".gz"), "{name}");
            let bytes = objects.download(name).unwrap();
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .read_to_string(&mut text)
                .unwrap();
            let mut lines = text.lines();
            assert_eq!(lines.next(), Some("id,name"), "{name}");
            for line in lines {
                *seen.entry(line.to_string()).or_default() += 1;
            }
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(3).collect();
        assert!(
            twice.is_empty(),
            "{first} → {second}: rows written twice: {twice:?}"
        );
        assert_eq!(seen.len() as u64, ROWS, "{first} → {second}: every row");
        assert!(seen.contains_key("7,\"row, \"\"7\"\"\""));
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
struct Line {
    id: u64,
    name: String,
}

static SOURCE_ARMED: AtomicBool = AtomicBool::new(false);

/// Fails once, armed, at line 7,000.
fn checked_line(line: Line) -> Line {
    if line.id == 7_000 && SOURCE_ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    line
}

/// The file source over objects: CSV with headers, plain and gzip, in a
/// sub-prefix too, in splits smaller than an object, failed after a
/// checkpoint and resumed at another parallelism: every line once.
#[test]
fn the_file_source_reads_objects_in_splits_replayably() {
    use std::io::Write;
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let root = dir("store-source");
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let input = format!("{name}/input");
    let objects = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &input).unwrap();
    let mut want = Vec::new();
    for (f, object) in ["a.csv", "b.csv.gz", "day=2/c.csv", "_SUCCESS"]
        .iter()
        .enumerate()
    {
        let mut text = String::from("name,id\n");
        if *object != "_SUCCESS" {
            for i in 0..4_000u64 {
                let id = f as u64 * 4_000 + i;
                text += &format!("\"line, {id}\",{id}\n");
                want.push(Line {
                    id,
                    name: format!("line, {id}"),
                });
            }
        }
        let bytes = if object.ends_with(".gz") {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(text.as_bytes()).unwrap();
            gz.finish().unwrap()
        } else {
            text.into_bytes()
        };
        match object.split_once('/') {
            // A sub-prefix, as partitioned output has.
            Some((folder, file)) => {
                ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &format!("{input}/{folder}"))
                    .unwrap()
                    .upload(file, bytes)
                    .unwrap()
            }
            None => objects.upload(object, bytes).unwrap(),
        }
    }
    let store = Arc::new(
        ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &format!("{name}/checkpoints"))
            .unwrap(),
    );
    let got = CollectSink::new();
    let run = |p: u32, machine: &str| {
        let prefix = StorePrefix::s3(Some(&endpoint), &bucket, &input).unwrap();
        let lines = FileSource::<Line>::csv("")
            .has_headers()
            .split_bytes(8_192)
            .from_store(prefix)
            .map_lines(|l| l.on_bad_input(BadInput::Fail));
        let options = exactly_once_stored(&root.join(machine), store.clone(), 0);
        job! {
            delivery exactly_once;
            source lines[p] = Held::new(lines, 1);
            operator kept[p] = |l: Line| checked_line(l) <- lines;
            sink out = got.clone().transactional() <- kept;
        }
        .unwrap()
        .run_with(options)
    };
    SOURCE_ARMED.store(true, Ordering::SeqCst);
    let error = run(2, "one").expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    let report = run(3, "two").unwrap();
    assert!(report.recovery.restored_from.is_some());
    let mut values = got.values();
    values.sort();
    want.sort();
    assert_eq!(values.len(), want.len(), "every line once");
    assert_eq!(values, want);
}

/// A line of about 150 bytes: 8 MiB parts take about 55,000.
fn wide_row(i: u64) -> Row {
    Row {
        id: i,
        name: format!("{i:0>140}"),
    }
}

/// The ids of the JSON lines in every visible object under `url`
/// (`s3://bucket/prefix`), read back through the file source, in order.
fn ids_under(url: &str) -> Vec<u64> {
    #[derive(Clone, Debug, serde::Deserialize)]
    struct Id {
        id: u64,
    }
    let got = CollectSink::new();
    job! {
        source lines = FileSource::<Id>::json(url);
        sink kept = got.clone() <- lines;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut ids: Vec<u64> = got.values().iter().map(|l| l.id).collect();
    ids.sort_unstable();
    ids
}

/// A sink driven by hand against moto: an object rolling by size spans a
/// checkpoint with a part sent before it; after the checkpoint the object
/// rolls and the next one sends a part; the process "dies". A restore at
/// another parallelism completes the first object with exactly what the
/// checkpoint covered, aborts the upload begun after it, and carries on;
/// a second restore from the same checkpoint is refused, since output
/// after it is visible.
#[test]
fn a_restore_completes_what_its_checkpoint_knows_and_aborts_uploads_begun_after_it() {
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let root = dir("store-by-hand");
    let out = format!("{}/out", root.file_name().unwrap().to_str().unwrap());
    let prefix = StorePrefix::s3(Some(&endpoint), &bucket, &out).unwrap();
    let url = format!("s3://{bucket}/{out}");
    let sink = || {
        FileSink::<Row>::json("")
            .rolling(12 << 20, std::time::Duration::from_secs(3_600))
            .into_store(prefix.clone())
    };
    let write = |sink: &mut StoreFileSink<Row>, ids: std::ops::Range<u64>| {
        for i in ids {
            Sink::write(sink, Record::new(wide_row(i))).unwrap();
        }
    };
    // First run: rows 0..60,000 (one 8 MiB part sent, the rest held).
    let mut first = sink();
    first.open(&sink_context(0, 1)).unwrap();
    first.restore(&sink_restore(0, 0, 1, Vec::new())).unwrap();
    write(&mut first, 0..60_000);
    first.pre_commit(CheckpointId::new(1)).unwrap();
    let part = first.snapshot(CheckpointId::new(1)).unwrap().unwrap();
    assert!(
        part.bytes.len() < 2 << 20,
        "the checkpoint holds less than a part: {}",
        part.bytes.len()
    );
    first.commit(CheckpointId::new(1)).unwrap();
    assert!(
        prefix.list().unwrap().is_empty(),
        "an open object is not visible"
    );
    // After the checkpoint: the object rolls at 12 MiB, the next sends a part.
    write(&mut first, 60_000..135_000);
    let in_progress = prefix.uploads_in_progress().unwrap();
    assert_eq!(in_progress.len(), 2, "{in_progress:?}");
    drop(first);

    // The restore, at parallelism 2: instance 0 answers for old instance 0.
    let mut second = sink();
    second.open(&sink_context(0, 2)).unwrap();
    let parts = vec![RestoredPart {
        part: InstanceIdx(0),
        schema: part.schema,
        bytes: &part.bytes,
    }];
    second
        .restore(&sink_restore(1, 0, 2, parts.clone()))
        .unwrap();
    assert!(prefix.uploads_in_progress().unwrap().is_empty());
    let listed = prefix.list().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].1 > 8 << 20, "two parts: {listed:?}");
    assert_eq!(ids_under(&url), (0..60_000).collect::<Vec<_>>());

    // It carries on from the checkpoint: rows 60,000..100,000, then ends.
    write(&mut second, 60_000..100_000);
    Sink::close(&mut second).unwrap();
    assert!(prefix.uploads_in_progress().unwrap().is_empty());
    assert_eq!(ids_under(&url), (0..100_000).collect::<Vec<_>>());

    // Restoring checkpoint 1 again would write 60,000.. twice.
    let mut third = sink();
    third.open(&sink_context(0, 2)).unwrap();
    let refused = third
        .restore(&sink_restore(1, 0, 2, parts))
        .expect_err("output after the checkpoint is visible");
    assert!(
        refused.to_string().contains("written after checkpoint 1"),
        "{refused}"
    );
}

static ROLL_ARMED: AtomicBool = AtomicBool::new(false);

/// Fails once, armed, at row 150,000.
fn checked_wide(row: Row) -> Row {
    if row.id == 150_000 && ROLL_ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    row
}

/// Rolling objects (by size, 10 MiB) that span checkpoints, uploaded in
/// 8 MiB parts as they are written: a failure after a checkpoint and a
/// run elsewhere at a lower parallelism (one instance inherits both old
/// instances' open objects), and every row is in the objects once, with no
/// upload left in progress.
#[test]
fn rolling_objects_span_checkpoints_in_parts_and_hold_every_row_once() {
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    const WIDE_ROWS: u64 = 240_000;
    let root = dir("store-rolling");
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let (out, checkpoints) = (format!("{name}/out"), format!("{name}/checkpoints"));
    let store =
        Arc::new(ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &checkpoints).unwrap());
    let prefix = StorePrefix::s3(Some(&endpoint), &bucket, &out).unwrap();
    let url = format!("s3://{bucket}/{out}");
    let run = |p: u32, machine: &str| {
        let sink = FileSink::<Row>::json("")
            .rolling(10 << 20, std::time::Duration::from_secs(3_600))
            .into_store(prefix.clone());
        let rows = Held::new(GeneratorSource::new(wide_row).take(WIDE_ROWS), 1);
        let options = exactly_once_stored(&root.join(machine), store.clone(), 0);
        job! {
            delivery exactly_once;
            source rows[p] = rows;
            operator kept[p] = |r: Row| checked_wide(r) <- rows;
            sink out[p] = sink <- kept;
        }
        .unwrap()
        .run_with(options)
    };
    ROLL_ARMED.store(true, Ordering::SeqCst);
    let error = run(2, "one").expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    // One instance takes over both: it writes every row from the restored
    // checkpoint on (at least the 90,000 past the failure, 15 MB), so its
    // first object rolls past 10 MiB whenever the checkpoints fell.
    let report = run(1, "two").unwrap();
    assert!(report.recovery.restored_from.is_some());
    assert!(prefix.uploads_in_progress().unwrap().is_empty());
    let listed = prefix.list().unwrap();
    assert!(
        listed.iter().any(|(_, size)| *size > 8 << 20),
        "an object of several parts: {listed:?}"
    );
    assert_eq!(
        ids_under(&url),
        (0..WIDE_ROWS).collect::<Vec<_>>(),
        "every row once"
    );
}

static TAGS: AtomicU64 = AtomicU64::new(0);
static TAG_ARMED: AtomicBool = AtomicBool::new(false);

/// Not deterministic: a row's name is how many rows came before it in this
/// process, so a replay names it differently; fails once, armed, at 7,000.
fn tag(id: u64) -> Row {
    if id == 7_000 && TAG_ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    Row {
        id,
        name: TAGS.fetch_add(1, Ordering::SeqCst).to_string(),
    }
}

/// An operator that is not deterministic before the object-store sink (a
/// replay emits other rows for the same input), a failure after a
/// checkpoint, a run at another parallelism with nothing local: each input
/// is in the objects once.
#[test]
fn a_nondeterministic_operator_before_the_sink_still_writes_each_input_once() {
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let root = dir("store-tagged");
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let (out, checkpoints) = (format!("{name}/out"), format!("{name}/checkpoints"));
    let store =
        Arc::new(ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &checkpoints).unwrap());
    let url = format!("s3://{bucket}/{out}");
    let run = |p: u32, machine: &str| {
        let ids = Held::new(GeneratorSource::new(|i: u64| i).take(20_000), 1);
        // The prefix by its URL, the endpoint from AWS_ENDPOINT_URL.
        let prefix = StorePrefix::url(&url).unwrap();
        let options = exactly_once_stored(&root.join(machine), store.clone(), 0);
        job! {
            delivery exactly_once;
            source ids[p] = ids;
            operator tagged[p] = |id: u64| tag(id) <- ids;
            sink out[p] = FileSink::<Row>::json("").into_store(prefix) <- tagged;
        }
        .unwrap()
        .run_with(options)
    };
    TAG_ARMED.store(true, Ordering::SeqCst);
    let error = run(2, "one").expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    let report = run(3, "two").unwrap();
    assert!(report.recovery.restored_from.is_some());
    assert_eq!(ids_under(&url), (0..20_000).collect::<Vec<_>>());

    // A file sink given the URL as a local path says what to write.
    let refused = job! {
        source ids = VecSource::new(vec![1u64]);
        sink out = FileSink::<u64>::json(&url) <- ids;
    }
    .unwrap()
    .run()
    .expect_err("a URL is not a local path")
    .to_string();
    assert!(
        refused.contains("into_store(StorePrefix::url("),
        "{refused}"
    );
}

/// The `s3_json_lines` example (rolling objects uploaded in parts) killed
/// with SIGKILL once an object is visible, while others are being
/// uploaded, then carried on by a process with an empty working directory
/// of its own at another parallelism: every event is in the bucket once,
/// and no upload is left in progress.
#[test]
fn the_rolling_json_example_killed_and_resumed_elsewhere_writes_every_event_once() {
    use std::process::{Command, Stdio};
    let Some((_, bucket)) = support::s3_server() else {
        return;
    };
    let example = support::example(
        "s3_json_lines",
        "cargo build --features s3 --example s3_json_lines",
    );
    let events = 1_000_000u64;
    for (first, second) in [(2u32, 3u32), (3, 1)] {
        let root = dir("json-lines-kill");
        let prefix = root.file_name().unwrap().to_str().unwrap().to_string();
        let url = format!("s3://{bucket}/{prefix}/events");
        let objects = StorePrefix::url(&url).unwrap();
        let start = |p: u32, machine: &str| {
            Command::new(&example)
                .args(["--events", &events.to_string(), "--prefix", &prefix])
                .args(["--parallelism", &p.to_string()])
                .arg("--work")
                .arg(root.join(machine))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starting s3_json_lines")
        };
        let mut killed = start(first, "one");
        assert!(
            support::kill_once_visible(&mut killed, || !objects.list().unwrap().is_empty()),
            "{first} → {second}: the first process ended before its kill"
        );
        let said = support::resumed_from_a_checkpoint(start(second, "two"));
        assert!(said.contains(", 0 uploads in progress"), "{said}");
        assert_eq!(
            ids_under(&url),
            (0..events).collect::<Vec<_>>(),
            "{first} → {second}: every event once"
        );
    }
}

/// The builder keeps the promise `job!` keeps: an exactly-once job built
/// with `JobBuilder::exactly_once` writing rolling objects to the store
/// fails after a checkpoint, restarts from it, and every row is in the
/// objects once.
#[test]
fn the_builder_writes_objects_exactly_once_across_a_failure() {
    static BUILDER_ARMED: AtomicBool = AtomicBool::new(false);
    let Some((_, bucket)) = support::s3_server() else {
        return;
    };
    let root = dir("store-builder");
    let url = format!(
        "s3://{bucket}/{}/out",
        root.file_name().unwrap().to_str().unwrap()
    );
    BUILDER_ARMED.store(true, Ordering::SeqCst);
    let mut job = JobBuilder::new("objects").exactly_once();
    let rows = job.source(
        "rows",
        2,
        Held::new(GeneratorSource::new(wide_row).take(50_000), 1),
    );
    job.flow(rows)
        .map(|row: Row| {
            if row.id == 30_000 && BUILDER_ARMED.swap(false, Ordering::SeqCst) {
                panic!("injected failure after a checkpoint");
            }
            row
        })
        .sink(
            "out",
            FileSink::<Row>::json("")
                .rolling(6 << 20, std::time::Duration::from_secs(3_600))
                .into_store(StorePrefix::url(&url).unwrap()),
        );
    let report = job
        .build()
        .unwrap()
        .run_with(support::exactly_once(&root.join("checkpoints"), 1))
        .unwrap();
    assert_eq!(report.restarts, 1, "the failure fired");
    assert!(
        StorePrefix::url(&url)
            .unwrap()
            .uploads_in_progress()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids_under(&url),
        (0..50_000).collect::<Vec<_>>(),
        "every row once"
    );
}
