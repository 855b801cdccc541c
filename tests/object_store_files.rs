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
use std::sync::atomic::{AtomicBool, Ordering};

use streamwork::connectors::Compression;
use streamwork::connectors::file::StorePrefix;
use streamwork::prelude::*;
use streamwork::state::{CheckpointStore, ObjectStoreCheckpoints};
use support::{Held, dir, exactly_once_stored};

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
