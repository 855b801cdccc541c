//! Checkpoints in a store beyond the working directory: a run that dies
//! after its first checkpoints is carried on by a run with an empty
//! directory of its own, restoring from the store, and the committed output
//! is that of an uninterrupted run. The store is another directory here
//! (always run), and an S3-compatible server with the `s3` feature
//! (`scripts/s3-test-server.sh`, skipped without it).

mod support;

use std::path::Path;
use std::sync::Arc;

use streamwork::connectors::TransactionalFileSink;
use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::state::{CheckpointStore, DirectoryStore};
use support::{Numbers, assert_same, dir, exactly_once};

/// A running sum per key.
#[derive(Clone, Default, State)]
struct RunningSum {
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

fn files(output: &Path) -> TransactionalFileSink<(u64, i64, i64)> {
    FileSink::new(output, |(k, v, s): &(u64, i64, i64), line: &mut Vec<u8>| {
        line.extend_from_slice(format!("{k},{v},{s}").as_bytes());
    })
    .transactional()
}

/// The sums job, failing before record `fail_at` of its only checker.
fn sums(n: u64, output: &Path, fail_at: Option<usize>) -> JobGraph {
    let fault = InjectFault::new(0, Fault::BeforeRecord(fail_at.unwrap_or(usize::MAX)));
    job! {
        delivery exactly_once;
        source numbers = Numbers::new(n);
        operator checked = fault <- numbers;
        operator sums[2] = RunningSum::default() <- checked.key(|(k, _): &(u64, i64)| *k);
        sink out[2] = files(output) <- sums;
    }
    .unwrap()
}

fn committed(output: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(output).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with('.') {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            rows.extend(text.lines().map(String::from));
        }
    }
    rows.sort();
    rows
}

fn expected(n: u64) -> Vec<String> {
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

/// Process one, in its own directory, dies after its first checkpoints;
/// process two, in an empty directory, restores from `store` and ends the
/// job; then process one comes back with its old directory and finds the
/// job ended (it restores the final checkpoint from the store, not its own
/// older one, and publishes nothing again).
fn carried_on_elsewhere(name: &str, store: Arc<dyn CheckpointStore>) {
    let n = 4_000;
    let root = dir(name);
    let output = root.join("out");
    let options = |machine: &str| {
        let mut options = exactly_once(&root.join(machine), 0);
        let config = options.checkpoints.take().unwrap();
        options.checkpoints = Some(config.stored_in(store.clone()));
        options
    };
    let error = sums(n, &output, Some(3_000))
        .run_with(options("one"))
        .expect_err("the injected fault ends the first run");
    assert!(error.to_string().contains("injected fault"), "{error}");
    let before = committed(&output);
    assert!(
        !before.is_empty() && before.len() < n as usize,
        "the precondition: some output was published before the crash ({} rows)",
        before.len()
    );
    let report = sums(n, &output, None).run_with(options("two")).unwrap();
    assert!(
        report.recovery.restored_from.is_some(),
        "the second run restored from the store"
    );
    assert_same(&committed(&output), &expected(n), name);
    let report = sums(n, &output, None).run_with(options("one")).unwrap();
    assert!(report.recovery.restored_from.is_some());
    assert_same(
        &committed(&output),
        &expected(n),
        "after the first came back",
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_run_with_an_empty_directory_carries_on_from_a_directory_store() {
    let root = dir("store-dir");
    carried_on_elsewhere("store-dir-job", Arc::new(DirectoryStore::new(&root)));
    let _ = std::fs::remove_dir_all(&root);
}

#[cfg(feature = "s3")]
#[test]
fn a_run_with_an_empty_directory_carries_on_from_an_s3_store() {
    use streamwork::state::ObjectStoreCheckpoints;
    let (Ok(endpoint), Ok(bucket)) = (
        std::env::var("STREAMWORK_S3_ENDPOINT"),
        std::env::var("STREAMWORK_S3_BUCKET"),
    ) else {
        println!("skipped: no S3 server (see scripts/s3-test-server.sh)");
        return;
    };
    let prefix = dir("s3-prefix");
    let prefix = prefix.file_name().unwrap().to_str().unwrap();
    let store = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, prefix).unwrap();
    carried_on_elsewhere("store-s3-job", Arc::new(store));
}
