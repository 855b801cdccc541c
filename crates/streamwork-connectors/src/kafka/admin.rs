//! Topics: creating them, and their end offsets.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use streamwork_core::{ConnectorError, ErrorDomain};

use super::kafka_error;

/// Creates `topic` with `partitions` partitions on `brokers` (replication
/// factor 1), if it does not exist yet.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), ConnectorError> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| kafka_error("creating an admin client", e))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = block_on(admin.create_topics([&new], &options))
        .map_err(|e| kafka_error(format!("creating topic `{topic}`"), e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(ConnectorError {
                    domain: ErrorDomain::External,
                    message: format!("kafka: creating topic `{name}`: {code}"),
                    source: None,
                });
            }
        }
    }
    Ok(())
}

/// Runs a future to completion on this thread (the admin client's futures
/// are completed by its own polling thread).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// The end offset (the next offset to be written) of every partition of
/// `topic`, by partition.
pub fn end_offsets(
    brokers: &str,
    topic: &str,
) -> Result<std::collections::BTreeMap<i32, i64>, ConnectorError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| kafka_error("creating a consumer", e))?;
    end_offsets_with(&consumer, topic)
}

/// [`end_offsets`] through an existing client.
pub(crate) fn end_offsets_with<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> Result<std::collections::BTreeMap<i32, i64>, ConnectorError> {
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| kafka_error(format!("reading the metadata of `{topic}`"), e))?;
    let mut ends = std::collections::BTreeMap::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic) {
        for partition in t.partitions() {
            let (_, high) = consumer
                .fetch_watermarks(topic, partition.id(), timeout)
                .map_err(|e| kafka_error(format!("reading the end of `{topic}`"), e))?;
            ends.insert(partition.id(), high);
        }
    }
    Ok(ends)
}
