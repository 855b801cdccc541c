//! Checkpoints in a store beyond the working directory: a run that dies
//! after its first checkpoints is carried on by a run with an empty
//! directory of its own, restoring from the store, and the committed output
//! is that of an uninterrupted run. The store is another directory here
//! (always run), and an S3-compatible server with the `s3` feature
//! (`scripts/s3-test-server.sh`, skipped without it).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::state::testkit::{FaultyStore, WriteFault};
use streamwork::state::{CheckpointStore, DirectoryStore};
use support::{
    Numbers, RunningSum, assert_same, committed_sums, dir, exactly_once_stored, expected_sums,
    sum_files,
};

/// The sums job, failing before record `fail_at` of its only checker. Its
/// source holds halfway until a checkpoint is complete and its output is
/// committed (a store slower than a directory can take longer to complete
/// it than the source takes to reach the fault).
fn sums(n: u64, output: &Path, fail_at: Option<usize>) -> JobGraph {
    let fault = InjectFault::new(0, Fault::BeforeRecord(fail_at.unwrap_or(usize::MAX)));
    let committed = output.to_path_buf();
    let numbers = Numbers::new(n).until(move |c| {
        c.completed() != CheckpointId::NONE && !committed_sums(&committed).0.is_empty()
    });
    job! {
        delivery exactly_once;
        source numbers = numbers;
        operator checked = fault <- numbers;
        operator sums[2] = RunningSum::default() <- checked.key(|(k, _): &(u64, i64)| *k);
        sink out[2] = sum_files(output) <- sums;
    }
    .unwrap()
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
    let options = |machine: &str| exactly_once_stored(&root.join(machine), store.clone(), 0);
    let error = sums(n, &output, Some(3_000))
        .run_with(options("one"))
        .expect_err("the injected fault ends the first run");
    assert!(error.to_string().contains("injected fault"), "{error}");
    let before = committed_sums(&output).0;
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
    assert_same(&committed_sums(&output).0, &expected_sums(n), name);
    let report = sums(n, &output, None).run_with(options("one")).unwrap();
    assert!(report.recovery.restored_from.is_some());
    assert_same(
        &committed_sums(&output).0,
        &expected_sums(n),
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
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let prefix = dir("s3-prefix");
    let prefix = prefix.file_name().unwrap().to_str().unwrap();
    let store = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, prefix).unwrap();
    carried_on_elsewhere("store-s3-job", Arc::new(store));
}

/// A job whose store is fenced while it runs (its process lost the
/// partition's lease) and is then stopped, as the group runner stops it:
/// the stop's savepoint is refused, the job ends with that error rather
/// than hanging or publishing, and no output after its last published
/// checkpoint is committed. The process that carries on from the store
/// ends with the output of an uninterrupted run.
#[test]
fn a_job_stopped_after_its_store_was_fenced_publishes_nothing_more() {
    let n = 4_000;
    let root = dir("fenced-stop");
    let output = root.join("out");
    // Refusing writes as the group runner's store of a partition does once
    // this process lost the partition's lease.
    let fenceable = FaultyStore::new(Arc::new(DirectoryStore::new(root.join("store"))));
    let store: Arc<dyn CheckpointStore> = Arc::new(fenceable.clone());
    let options = |machine: &str| exactly_once_stored(&root.join(machine), store.clone(), 0);
    // The source holds halfway until the store refuses writes (after a
    // checkpoint was published), then reads on to its end: what it reads
    // from then on must never be committed.
    let checkpointed = Arc::new(AtomicBool::new(false));
    let refusing = Arc::new(AtomicBool::new(false));
    let source = {
        let (checkpointed, refusing) = (checkpointed.clone(), refusing.clone());
        Numbers::holding_at(n, Some(n / 2)).until(move |c| {
            if c.completed() != CheckpointId::NONE {
                checkpointed.store(true, Ordering::Relaxed);
            }
            refusing.load(Ordering::Relaxed)
        })
    };
    // The shape of `sums`, with a fault that never fires.
    let fault = InjectFault::new(0, Fault::BeforeRecord(usize::MAX));
    let graph = job! {
        delivery exactly_once;
        source numbers = source;
        operator checked = fault <- numbers;
        operator sums[2] = RunningSum::default() <- checked.key(|(k, _): &(u64, i64)| *k);
        sink out[2] = sum_files(&output) <- sums;
    }
    .unwrap();
    let handle = streamwork::runtime::start_with(graph, options("one")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
    while !checkpointed.load(Ordering::Relaxed) {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint was published"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    fenceable.set(WriteFault::Refuse);
    let published = committed_sums(&output).0;
    refusing.store(true, Ordering::Relaxed);
    handle.stop();
    let error = handle
        .join()
        .expect_err("the next checkpoint, or the savepoint, was refused");
    assert!(error.to_string().contains("refused"), "{error}");
    let after = committed_sums(&output).0;
    assert!(
        after.len() <= n as usize / 2,
        "rows read after the store refused writes were committed: {} rows",
        after.len()
    );
    assert!(
        published.iter().all(|row| after.contains(row)),
        "committed rows went missing"
    );
    fenceable.set(WriteFault::None);
    let report = sums(n, &output, None).run_with(options("two")).unwrap();
    assert!(report.recovery.restored_from.is_some());
    assert_same(&committed_sums(&output).0, &expected_sums(n), "carried on");
    let _ = std::fs::remove_dir_all(&root);
}

/// `write_if` is a compare-and-swap: a create when the object exists, and
/// a replace of a version that changed, are refused; the winner's version
/// is what the next write must name.
fn conditional_writes_compare_and_swap(store: &dyn CheckpointStore) {
    assert_eq!(store.read_versioned("OWNER").unwrap(), None);
    let first = store
        .write_if("OWNER", b"a 1".to_vec(), None)
        .unwrap()
        .expect("created");
    assert_eq!(
        store.write_if("OWNER", b"b 1".to_vec(), None).unwrap(),
        None,
        "a second create"
    );
    let (bytes, version) = store.read_versioned("OWNER").unwrap().unwrap();
    assert_eq!(
        (bytes.as_slice(), version.as_str()),
        (&b"a 1"[..], first.as_str())
    );
    let second = store
        .write_if("OWNER", b"a 2".to_vec(), Some(&first))
        .unwrap()
        .expect("replaced at its version");
    assert_ne!(first, second);
    assert_eq!(
        store
            .write_if("OWNER", b"b 2".to_vec(), Some(&first))
            .unwrap(),
        None,
        "a replace of a stale version"
    );
    assert_eq!(store.read_versioned("OWNER").unwrap().unwrap().0, b"a 2");
    store.delete("OWNER").unwrap();
    assert_eq!(store.read_versioned("OWNER").unwrap(), None);
}

#[test]
fn a_directory_store_writes_conditionally() {
    let root = dir("store-cas");
    conditional_writes_compare_and_swap(&DirectoryStore::new(&root));
    let _ = std::fs::remove_dir_all(&root);
}

#[cfg(feature = "s3")]
#[test]
fn an_s3_store_writes_conditionally() {
    use streamwork::state::ObjectStoreCheckpoints;
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let prefix = dir("s3-cas");
    let prefix = prefix.file_name().unwrap().to_str().unwrap();
    let store = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, prefix).unwrap();
    conditional_writes_compare_and_swap(&store);
}
