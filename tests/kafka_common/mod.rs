//! What the Kafka test files share: the test broker's address, names no
//! other run uses, and reading a topic back.

use std::time::Duration;

use streamwork::connectors::kafka::{KafkaRecord, KafkaSink, KafkaSource, create_topic};
use streamwork::prelude::*;

/// The key of the record [`create_output_topic`] writes first into each
/// partition; [`read_all`] leaves such records out.
const WARM_UP_KEY: &[u8] = b"streamwork-test-warm-up";

/// The test broker (`STREAMWORK_KAFKA_BROKERS`), or `None` after saying
/// the test is skipped. Under CI (`CI` set) a missing broker fails the
/// test instead: CI starts it, and a test that skips there proves nothing.
pub fn brokers() -> Option<String> {
    match std::env::var("STREAMWORK_KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Some(brokers),
        _ => {
            let missing =
                "no broker (set STREAMWORK_KAFKA_BROKERS, see scripts/kafka-test-broker.sh)";
            assert!(
                std::env::var_os("CI").is_none(),
                "{missing}: under CI every Kafka test runs"
            );
            println!("skipped: {missing}");
            None
        }
    }
}

/// `name` made unique to this run: for topics, groups and directories.
///
/// The clock alone is not enough: two tests running at once read the same
/// nanosecond now and then, and then shared their topics (a staged job's
/// test once read the counts another test's job wrote). A counter of this
/// process makes every name distinct.
pub fn unique(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{name}-{}-{nanos}-{n}", std::process::id())
}

/// Creates `topic` with `partitions` partitions for a job whose parallel
/// sink instances write into the same partitions, and writes one warm-up
/// record into each partition first (left out by [`read_all`]).
///
/// Why: tansu 0.6 loses the first batch of a partition when two producers
/// write the first batches of that partition at the same moment (two
/// transactional producers, 2,000 records each, into a new one-partition
/// topic: 1 round in 12 ends with 2,000 of the 4,000 records, offsets 0 to
/// 1,999 gone, for read_committed and read_uncommitted readers alike). A
/// partition that already holds a record does not show it.
#[allow(dead_code)] // not every test file writes with parallel sinks
pub fn create_output_topic(brokers: &str, topic: &str, partitions: i32) {
    create_topic(brokers, topic, partitions).unwrap();
    let sink = KafkaSink::new(brokers, topic, |partition: &i32| {
        (
            Some(WARM_UP_KEY.to_vec()),
            partition.to_string().into_bytes(),
        )
    })
    .partition_by(|partition: &i32| *partition);
    job! {
        source partitions = streamwork::connectors::VecSource::new((0..partitions).collect());
        sink out = sink <- partitions;
    }
    .unwrap()
    .run()
    .unwrap();
}

/// Every record of `topic`, in offset order per partition.
pub fn read_all(brokers: &str, topic: &str) -> Vec<KafkaRecord> {
    read_with(KafkaSource::new(brokers, topic, &unique("reader")).idle_exit(Duration::from_secs(2)))
}

/// Every record `source` (which has an idle exit) reads, in offset order
/// per partition, without the warm-up records.
pub fn read_with(source: KafkaSource) -> Vec<KafkaRecord> {
    let seen = CollectSink::new();
    job! {
        source records = source;
        sink out = seen.clone() <- records;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut records = seen.values();
    records.retain(|r| r.key.as_deref() != Some(WARM_UP_KEY));
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}
