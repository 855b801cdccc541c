//! What the Kafka test files share: the test broker's address, names no
//! other run uses, and reading a topic back.

use std::time::Duration;

use streamwork::connectors::kafka::{KafkaRecord, KafkaSource};
use streamwork::prelude::*;

/// The test broker (`STREAMWORK_KAFKA_BROKERS`), or `None` after saying
/// the test is skipped.
pub fn brokers() -> Option<String> {
    match std::env::var("STREAMWORK_KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Some(brokers),
        _ => {
            println!(
                "skipped: no broker (set STREAMWORK_KAFKA_BROKERS, see scripts/kafka-test-broker.sh)"
            );
            None
        }
    }
}

/// `name` made unique to this run: for topics, groups and directories.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{}-{nanos}", std::process::id())
}

/// Every record of `topic`, in offset order per partition.
pub fn read_all(brokers: &str, topic: &str) -> Vec<KafkaRecord> {
    let seen = CollectSink::new();
    let source =
        KafkaSource::new(brokers, topic, &unique("reader")).idle_exit(Duration::from_secs(2));
    job! {
        source records = source;
        sink out = seen.clone() <- records;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut records = seen.values();
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}
