//! What the Kafka test files share: the test broker's address and names
//! no other run uses.

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
