//! How long a partition with 100 MB of state takes to move from one
//! process of a consumer group to another, from the old owner being asked
//! to stop it to the first record the new owner reads: a measurement, run
//! on demand (it writes 100 MB through the broker and the store):
//!
//! ```sh
//! eval "$(scripts/kafka-test-broker.sh start)"; eval "$(scripts/s3-test-server.sh start)"
//! cargo test --release --features kafka,s3 --test kafka_handover -- --ignored --nocapture
//! ```
//!
//! Two runners of one `job!` in this process, each with a checkpoint
//! directory of its own and the checkpoints in the S3 bucket (a directory
//! store without `STREAMWORK_S3_ENDPOINT`). The first reads 100,000 keys
//! of 1,000 bytes each into one partition's keyed state; the second joins;
//! the first leaves; more records arrive all along. The results are
//! checked exact; the hand-overs are printed.
#![cfg(feature = "kafka")]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use streamwork::connectors::kafka::{KafkaRecord, KafkaSink, KafkaSource, create_topic};
use streamwork::prelude::*;
use streamwork::scaleout::{GroupReport, GroupRunner, TaskRun, handovers};
use streamwork::state::CheckpointStore;

mod kafka_common;
mod support;

use kafka_common::{brokers, create_output_topic, read_all, unique};

const KEYS: u64 = 100_000;
const BYTES: u32 = 1_000;

/// One blob of bytes per key: the partition's state.
#[derive(Clone, Default, State)]
struct Blobs {
    blobs: KeyedState<u64, Vec<u8>>,
}

#[operator]
impl Blobs {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        grow: (u64, u32),
        out: &mut Collector<(u64, u64)>,
    ) {
        let blob = self.blobs.get_or_default(key);
        blob.extend(std::iter::repeat_n(grow.0 as u8, grow.1 as usize));
        let len = blob.len() as u64;
        out.emit((grow.0, len));
    }
}

/// `KEY,BYTES`.
fn parse(record: KafkaRecord) -> Option<(u64, u32)> {
    let text = std::str::from_utf8(&record.value).ok()?;
    let (key, bytes) = text.split_once(',')?;
    Some((key.parse().ok()?, bytes.parse().ok()?))
}

fn blobs_job(
    brokers: &str,
    input: &str,
    output: &str,
    group: &str,
) -> Result<JobGraph, GraphError> {
    let lines = KafkaSource::new(brokers, input, group);
    let sizes = KafkaSink::new(brokers, output, |(key, len): &(u64, u64)| {
        (
            Some(key.to_string().into_bytes()),
            len.to_string().into_bytes(),
        )
    });
    job! {
        name "blobs";
        delivery at_least_once;
        source lines = lines;
        operator grows = filter_map(parse) <- lines;
        operator blobs = Blobs::default() <- grows.key(|(key, _): &(u64, u32)| *key);
        sink sizes = sizes <- blobs;
    }
}

fn produce(brokers: &str, topic: &str, records: Vec<(u64, u32)>) {
    let sink = KafkaSink::new(brokers, topic, |(key, bytes): &(u64, u32)| {
        (None, format!("{key},{bytes}").into_bytes())
    });
    job! {
        source records = VecSource::new(records);
        sink out = sink <- records;
    }
    .unwrap()
    .run()
    .unwrap();
}

fn store(prefix: &str, root: &Path) -> Arc<dyn CheckpointStore> {
    #[cfg(feature = "s3")]
    if let Some((endpoint, bucket)) = support::s3_server_if_running() {
        println!("checkpoints in s3://{bucket} at {endpoint}");
        return Arc::new(
            streamwork::state::ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, prefix)
                .unwrap(),
        );
    }
    println!("checkpoints in a directory store");
    Arc::new(streamwork::state::DirectoryStore::new(root.join(prefix)))
}

/// Waits (at most `limit`) for `done`.
fn wait(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "a measurement: 100 MB through the broker and the store (see the file's docs)"]
fn a_partition_with_100_mb_of_state_moves_to_another_process() {
    let Some(brokers) = brokers() else { return };
    let (input, output, group) = (unique("grows"), unique("sizes"), unique("handover"));
    create_topic(&brokers, &input, 1).unwrap();
    create_output_topic(&brokers, &output, 1);
    let root = std::env::temp_dir().join(unique("handover"));
    let store = store(&group, &root);
    produce(&brokers, &input, (0..KEYS).map(|k| (k, BYTES)).collect());

    let runner = |name: &str, leave: Arc<AtomicBool>| {
        let (brokers, input, output, group) = (
            brokers.clone(),
            input.clone(),
            output.clone(),
            group.clone(),
        );
        let runner = GroupRunner::new(&brokers, &group, &[], root.join(name))
            .checkpoint_store(store.clone())
            .checkpoint_interval(Duration::from_secs(2))
            .delivery(Delivery::AtLeastOnce)
            .idle_exit(Duration::from_secs(5))
            .leave_when(leave);
        std::thread::spawn(move || -> GroupReport {
            runner
                .run_job(move || blobs_job(&brokers, &input, &output, &group))
                .unwrap()
        })
    };
    let first_leaves = Arc::new(AtomicBool::new(false));
    let first = runner("first", first_leaves.clone());
    // The first holds every key's blob once their sizes are out.
    // (One warm-up record, then a size per growth.)
    let sizes = || {
        streamwork::connectors::kafka::end_offsets(&brokers, &output)
            .map_or(0, |ends| ends.values().sum::<i64>() as u64)
    };
    wait("the first runner's state", Duration::from_secs(600), || {
        sizes() > KEYS
    });
    // More keeps arriving (bounded) while the second joins and the first
    // leaves: 40 batches of 50 growths, 250 ms apart.
    let trickle = {
        let (brokers, input) = (brokers.clone(), input.clone());
        std::thread::spawn(move || {
            for batch in 0..40u64 {
                let records = (0..50)
                    .map(|i| ((batch * 50 + i) * 37 % KEYS, 10))
                    .collect();
                produce(&brokers, &input, records);
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let second = runner("second", Arc::new(AtomicBool::new(false)));
    wait(
        "the second runner's first task",
        Duration::from_secs(120),
        || std::fs::read_dir(root.join("second")).is_ok_and(|mut d| d.next().is_some()),
    );
    first_leaves.store(true, Ordering::Relaxed);
    let first = first.join().unwrap();
    trickle.join().unwrap();
    let second = second.join().unwrap();

    // Exact: each key's last size is 1,000 bytes and 10 per growth.
    let mut expected = vec![u64::from(BYTES); KEYS as usize];
    for batch in 0..40u64 {
        for i in 0..50 {
            expected[((batch * 50 + i) * 37 % KEYS) as usize] += 10;
        }
    }
    let mut last = vec![0u64; KEYS as usize];
    for record in read_all(&brokers, &output) {
        let key: usize = std::str::from_utf8(record.key.as_deref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        last[key] = std::str::from_utf8(&record.value).unwrap().parse().unwrap();
    }
    assert!(last == expected, "every key's last size");

    let runs: Vec<(&str, TaskRun)> = first
        .runs
        .iter()
        .map(|r| ("first", r.clone()))
        .chain(second.runs.iter().map(|r| ("second", r.clone())))
        .collect();
    let only: Vec<TaskRun> = runs.iter().map(|(_, r)| r.clone()).collect();
    let moved: Vec<_> = handovers(&only)
        .into_iter()
        .filter(|h| h.task == "blobs/0" && runs[h.from].0 != runs[h.to].0)
        .collect();
    assert!(
        !moved.is_empty(),
        "the state partition never moved: {runs:#?}"
    );
    let files: u64 = walk(&root.join("second").join("blobs").join("0"));
    for h in moved {
        println!(
            "hand-over of blobs/0 ({KEYS} keys of {BYTES} bytes: {:.0} MB of state; {:.1} MB of checkpoint files kept at the end) from {} to {}: {:?} = stopping {:?} + rebalance {:?} + resuming {:?}",
            (KEYS * u64::from(BYTES)) as f64 / 1e6,
            files as f64 / 1e6,
            runs[h.from].0,
            runs[h.to].0,
            h.total(),
            h.stopping,
            h.rebalance,
            h.resuming
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The bytes of the files under `dir`.
fn walk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => walk(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
