//! Topics: creating them, and their end offsets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::metadata::Metadata;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use streamwork_core::{ConnectorError, ErrorDomain};

use super::kafka_error;

/// Creates `topic` with `partitions` partitions on `brokers` (replication
/// factor 1), if it does not exist yet.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), ConnectorError> {
    create_replicated_topic(brokers, topic, partitions, 1, &[])
}

/// Creates `topic` with `partitions` partitions, `replication` copies of
/// each, and the topic settings `config` (`("min.insync.replicas", "2")`,
/// say), if it does not exist yet.
pub fn create_replicated_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    config: &[(&str, &str)],
) -> Result<(), ConnectorError> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| kafka_error("creating an admin client", e))?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    for (key, value) in config {
        new = new.set(key, value);
    }
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

/// How many brokers the cluster has, and the replication factor of
/// `topic` (the fewest copies of any of its partitions), if it exists.
pub fn cluster_replication(
    brokers: &str,
    topic: &str,
) -> Result<(usize, Option<usize>), ConnectorError> {
    let metadata = topic_metadata(brokers, topic)?;
    let replication = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .and_then(|t| t.partitions().iter().map(|p| p.replicas().len()).min());
    Ok((metadata.brokers().len(), replication))
}

/// How many partitions `topic` has, from the cluster's metadata (0 if the
/// metadata does not show it yet). Unlike [`end_offsets`], it reads no
/// partition, so an open transaction cannot hold it up.
pub fn partition_count(brokers: &str, topic: &str) -> Result<usize, ConnectorError> {
    Ok(topic_metadata(brokers, topic)?
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len()))
}

/// The cluster's metadata about `topic` (and its brokers).
fn topic_metadata(brokers: &str, topic: &str) -> Result<Metadata, ConnectorError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| kafka_error("creating a metadata client", e))?;
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| kafka_error(format!("reading the metadata of `{topic}`"), e))
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
    EndProbe::new(brokers, &[])?.ends(topic)
}

/// Finds where partitions end, through a consumer of its own.
///
/// The broker's answer to "the latest offset" is checked by reading from
/// the offset before it to the end of the partition: tansu 0.6 answers
/// with the first offset of the last batch plus one, which falls short of
/// the end when that batch holds more than one record. Reading the last
/// batch (one record on a broker that answers right) costs one fetch per
/// partition.
pub struct EndProbe {
    consumer: BaseConsumer<EndsAreNoErrors>,
}

/// The client context of a consumer told where partitions end
/// (`enable.partition.eof`): the end of a partition, which librdkafka also
/// reports as a client-wide error, is an answer the consumer asked for,
/// not an error to log. Other errors are logged as a warning saying what
/// the consumer was `doing`.
pub(super) struct EndsAreNoErrors {
    pub(super) doing: &'static str,
}

impl ClientContext for EndsAreNoErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            tracing::warn!("kafka: {}: {error}: {reason}", self.doing);
        }
    }
}

impl ConsumerContext for EndsAreNoErrors {}

impl EndProbe {
    /// A probe on `brokers`, with `extra` client settings (security, say).
    pub fn new(brokers: &str, extra: &[(String, String)]) -> Result<Self, ConnectorError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("group.id", "streamwork-end-probe")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true");
        for (key, value) in extra {
            config.set(key, value);
        }
        let consumer = config
            .create_with_context(EndsAreNoErrors {
                doing: "finding where partitions end",
            })
            .map_err(|e| kafka_error("creating a consumer", e))?;
        Ok(EndProbe { consumer })
    }

    /// The end offset of every partition of `topic`, by partition.
    pub fn ends(
        &self,
        topic: &str,
    ) -> Result<std::collections::BTreeMap<i32, i64>, ConnectorError> {
        let timeout = Duration::from_secs(10);
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| kafka_error(format!("reading the metadata of `{topic}`"), e))?;
        let mut ends = std::collections::BTreeMap::new();
        let mut last_batches = TopicPartitionList::new();
        for t in metadata.topics().iter().filter(|t| t.name() == topic) {
            for partition in t.partitions() {
                let (low, high) = self
                    .consumer
                    .fetch_watermarks(topic, partition.id(), timeout)
                    .map_err(|e| kafka_error(format!("reading the end of `{topic}`"), e))?;
                ends.insert(partition.id(), high);
                if high > low {
                    last_batches
                        .add_partition_offset(topic, partition.id(), Offset::Offset(high - 1))
                        .map_err(|e| kafka_error(format!("reading the end of `{topic}`"), e))?;
                }
            }
        }
        if last_batches.count() == 0 {
            return Ok(ends);
        }
        self.consumer
            .assign(&last_batches)
            .map_err(|e| kafka_error(format!("reading the end of `{topic}`"), e))?;
        let mut open: std::collections::BTreeSet<i32> = last_batches
            .elements()
            .iter()
            .map(|e| e.partition())
            .collect();
        let deadline = Instant::now() + timeout;
        let outcome = loop {
            if open.is_empty() {
                break Ok(ends);
            }
            if Instant::now() >= deadline {
                break Err(ConnectorError {
                    domain: ErrorDomain::External,
                    message: format!(
                        "kafka: reading the end of `{topic}`: partitions {open:?} did not answer within {timeout:?}"
                    ),
                    source: None,
                });
            }
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => {
                    let end = ends.entry(message.partition()).or_insert(0);
                    *end = (*end).max(message.offset() + 1);
                }
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    open.remove(&partition);
                }
                Some(Err(error)) => {
                    break Err(kafka_error(format!("reading the end of `{topic}`"), error));
                }
                None => {}
            }
        };
        let _ = self.consumer.unassign();
        outcome
    }
}

/// Deletes the records before given offsets (Kafka's `DeleteRecords`),
/// through an admin client of its own.
///
/// A partition's records before the offset become unreadable and their
/// space is freed; the partition's offsets do not change.
pub struct RecordPurger {
    admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
}

impl RecordPurger {
    /// A purger on `brokers`, with `extra` client settings (security, say).
    pub fn new(brokers: &str, extra: &[(String, String)]) -> Result<Self, ConnectorError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        for (key, value) in extra {
            config.set(key, value);
        }
        let admin = config
            .create()
            .map_err(|e| kafka_error("creating an admin client", e))?;
        Ok(RecordPurger { admin })
    }

    /// Deletes the records of `topic` before `before` (partition → the
    /// first offset to keep). An error names the first partition the
    /// brokers refused, or the request that failed.
    pub fn purge(
        &self,
        topic: &str,
        before: &std::collections::BTreeMap<i32, i64>,
    ) -> Result<(), ConnectorError> {
        use rdkafka::admin::AdminOptions;
        let mut list = TopicPartitionList::new();
        for (&partition, &offset) in before {
            list.add_partition_offset(topic, partition, Offset::Offset(offset))
                .map_err(|e| kafka_error(format!("deleting records of `{topic}`"), e))?;
        }
        if list.count() == 0 {
            return Ok(());
        }
        let options = AdminOptions::new()
            .request_timeout(Some(Duration::from_secs(10)))
            .operation_timeout(Some(Duration::from_secs(10)));
        let answer = block_on(self.admin.delete_records(&list, &options))
            .map_err(|e| kafka_error(format!("deleting records of `{topic}`"), e))?;
        for element in answer.elements() {
            if let Err(error) = element.error() {
                return Err(kafka_error(
                    format!(
                        "deleting records of `{topic}` partition {} before offset {}",
                        element.partition(),
                        before.get(&element.partition()).copied().unwrap_or(-1)
                    ),
                    error,
                ));
            }
        }
        Ok(())
    }
}
