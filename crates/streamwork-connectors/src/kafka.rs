//! Kafka (behind the `kafka` feature), on `rdkafka`: a source reading the
//! partitions of a topic, its positions kept in Streamwork's own checkpoints,
//! and a sink producing keyed records with the idempotent producer.
//!
//! The source splits a topic's partitions among its instances (partition `p`
//! to instance `p % parallelism`) and reads each from the offset its
//! checkpoint recorded, or from the group's committed offset, or from the
//! beginning: it is replayable, so a job promising exactly-once may read
//! Kafka. Consumer-group scale-out across processes builds on it.
//!
//! ```no_run
//! use streamwork_connectors::kafka::{KafkaSink, KafkaSource};
//! let lines = KafkaSource::new("127.0.0.1:9092", "lines", "word-count");
//! let counts = KafkaSink::new("127.0.0.1:9092", "counts", |(word, count): &(String, u64)| {
//!     (Some(word.as_bytes().to_vec()), count.to_string().into_bytes())
//! });
//! # let _ = (lines, counts);
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use streamwork_core::checkpoint::Replayable;
use streamwork_core::{
    Collector, ConnectorError, Data, ErrorDomain, InstanceContext, Record, Restore, Sink, Source,
    SourcePoll, StateBytes, Timestamp,
};

/// How long a poll waits for a message before the source reports idle.
const POLL_WAIT: Duration = Duration::from_millis(20);
/// Messages emitted per poll at most.
const PER_POLL: usize = 1024;
/// The layout version of the source's checkpointed positions.
const POSITIONS_SCHEMA: u32 = 1;

fn kafka_error(doing: impl Into<String>, error: KafkaError) -> ConnectorError {
    ConnectorError {
        domain: ErrorDomain::External,
        message: format!("kafka: {}: {error}", doing.into()),
        source: Some(Box::new(error)),
    }
}

/// One record read from Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key, if any.
    pub key: Option<Vec<u8>>,
    /// Its value (empty for a null value).
    pub value: Vec<u8>,
    /// Its timestamp, in ms since the epoch, if the broker gave one (also
    /// the record's event time).
    pub timestamp: Option<i64>,
}

/// Reads a topic's partitions (see the [module docs](self)).
pub struct KafkaSource {
    brokers: String,
    topic: String,
    group: String,
    idle_exit: Option<Duration>,
    extra: Vec<(String, String)>,
    consumer: Option<BaseConsumer>,
    /// The next offset to read, per owned partition.
    positions: BTreeMap<i32, i64>,
    /// Positions restored from a checkpoint, applied when opening.
    restored: BTreeMap<i32, i64>,
    last_message: Option<Instant>,
}

impl Clone for KafkaSource {
    fn clone(&self) -> Self {
        KafkaSource {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            group: self.group.clone(),
            idle_exit: self.idle_exit,
            extra: self.extra.clone(),
            consumer: None,
            positions: BTreeMap::new(),
            restored: BTreeMap::new(),
            last_message: None,
        }
    }
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("group", &self.group)
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// Reads `topic` from `brokers` (`host:port,...`) as consumer group
    /// `group` (whose committed offsets are the starting point when no
    /// checkpoint says otherwise).
    pub fn new(brokers: &str, topic: &str, group: &str) -> Self {
        KafkaSource {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            group: group.to_string(),
            idle_exit: None,
            extra: Vec::new(),
            consumer: None,
            positions: BTreeMap::new(),
            restored: BTreeMap::new(),
            last_message: None,
        }
    }

    /// Ends the input after `idle` without a new record (for bounded runs).
    pub fn idle_exit(mut self, idle: Duration) -> Self {
        self.idle_exit = Some(idle);
        self
    }

    /// Sets an `rdkafka` consumer property.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    fn partitions(&self, consumer: &BaseConsumer) -> Result<Vec<i32>, ConnectorError> {
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            .map_err(|e| kafka_error(format!("reading the metadata of `{}`", self.topic), e))?;
        let topic = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .filter(|t| !t.partitions().is_empty())
            .ok_or_else(|| {
                ConnectorError::user(format!(
                    "kafka: topic `{}` does not exist on {}: create it first",
                    self.topic, self.brokers
                ))
            })?;
        Ok(topic.partitions().iter().map(|p| p.id()).collect())
    }
}

impl Source for KafkaSource {
    type Out = Collector<KafkaRecord>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        let consumer: BaseConsumer = config
            .create()
            .map_err(|e| kafka_error("creating a consumer", e))?;
        let (instance, parallelism) = (ctx.instance().0 as i32, ctx.parallelism().max(1) as i32);
        let owned: Vec<i32> = self
            .partitions(&consumer)?
            .into_iter()
            .filter(|p| p % parallelism == instance)
            .collect();
        let mut assignment = TopicPartitionList::new();
        for &partition in &owned {
            let offset = match self.restored.get(&partition) {
                Some(&next) => Offset::Offset(next),
                None => Offset::Stored,
            };
            assignment
                .add_partition_offset(&self.topic, partition, offset)
                .map_err(|e| kafka_error("assigning partitions", e))?;
            if let Some(&next) = self.restored.get(&partition) {
                self.positions.insert(partition, next);
            }
        }
        consumer
            .assign(&assignment)
            .map_err(|e| kafka_error("assigning partitions", e))?;
        self.consumer = Some(consumer);
        self.last_message = Some(Instant::now());
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<KafkaRecord>) -> Result<SourcePoll, ConnectorError> {
        let Some(consumer) = self.consumer.as_ref() else {
            return Ok(SourcePoll::Finished);
        };
        let mut emitted = 0;
        let mut wait = POLL_WAIT;
        while emitted < PER_POLL {
            let Some(message) = consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            let message = match message {
                Ok(message) => message,
                // The end of a partition is not an error.
                Err(KafkaError::PartitionEOF(_)) => continue,
                Err(e) => return Err(kafka_error(format!("reading `{}`", self.topic), e)),
            };
            let timestamp = message.timestamp().to_millis();
            let record = KafkaRecord {
                partition: message.partition(),
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                timestamp,
            };
            self.positions.insert(record.partition, record.offset + 1);
            match timestamp {
                Some(t) => out.emit_at(record, Timestamp::from_millis(t)),
                None => out.emit(record),
            }
            emitted += 1;
        }
        if emitted > 0 {
            self.last_message = Some(Instant::now());
            return Ok(SourcePoll::Emitted);
        }
        let idle_for = self.last_message.map_or(Duration::ZERO, |t| t.elapsed());
        match self.idle_exit {
            Some(limit) if idle_for >= limit => Ok(SourcePoll::Finished),
            _ => Ok(SourcePoll::Idle),
        }
    }

    /// The next offset of every partition read so far.
    fn snapshot(&mut self) -> Option<StateBytes> {
        let mut bytes = Vec::with_capacity(self.positions.len() * 12);
        for (&partition, &next) in &self.positions {
            bytes.extend_from_slice(&partition.to_le_bytes());
            bytes.extend_from_slice(&next.to_le_bytes());
        }
        Some(StateBytes {
            schema: POSITIONS_SCHEMA,
            bytes,
        })
    }

    /// Takes the positions every old instance recorded: at another
    /// parallelism, each partition's position goes to its new owner.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        for part in &restore.parts {
            if part.schema != POSITIONS_SCHEMA || !part.bytes.len().is_multiple_of(12) {
                return Err(ConnectorError::user(format!(
                    "kafka source `{}`: positions of schema {} and {} bytes (this version reads schema {POSITIONS_SCHEMA}, 12 bytes a partition)",
                    restore.component,
                    part.schema,
                    part.bytes.len()
                )));
            }
            for entry in part.bytes.chunks_exact(12) {
                let (partition, next) = entry.split_at(4);
                let partition = i32::from_le_bytes(partition.try_into().unwrap_or_default());
                let next = i64::from_le_bytes(next.try_into().unwrap_or_default());
                self.restored.insert(partition, next);
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        // Offsets are Streamwork's to keep; the group's committed offsets are
        // advanced too, for tools that watch the group's lag.
        if let Some(consumer) = self.consumer.take()
            && !self.positions.is_empty()
        {
            let mut committed = TopicPartitionList::new();
            for (&partition, &next) in &self.positions {
                committed
                    .add_partition_offset(&self.topic, partition, Offset::Offset(next))
                    .map_err(|e| kafka_error("committing offsets", e))?;
            }
            consumer
                .commit(&committed, rdkafka::consumer::CommitMode::Sync)
                .map_err(|e| kafka_error("committing offsets", e))?;
        }
        Ok(())
    }
}

impl Replayable for KafkaSource {}

/// Counts failed deliveries, for the sink to report at its next flush.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ClientContext for DeliveryContext {}

/// The producer's context: delivery reports.
#[derive(Clone, Default)]
struct DeliveryContext(Arc<Deliveries>);

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        if let Err((error, _)) = result {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
            *self.0.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
        }
    }
}

type Encode<T> = Arc<dyn Fn(&T) -> (Option<Vec<u8>>, Vec<u8>) + Send + Sync>;

/// Produces records to a topic with the idempotent producer: each record
/// becomes a key (or none) and a value. A record's partition follows its
/// key, so the latest value per key is an upsert a compacted topic keeps.
pub struct KafkaSink<T> {
    brokers: String,
    topic: String,
    encode: Encode<T>,
    extra: Vec<(String, String)>,
    producer: Option<BaseProducer<DeliveryContext>>,
    context: DeliveryContext,
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            encode: self.encode.clone(),
            extra: self.extra.clone(),
            producer: None,
            context: DeliveryContext::default(),
        }
    }
}

impl<T: Data> KafkaSink<T> {
    /// Produces to `topic` on `brokers`; `encode` gives each record's key and
    /// value.
    pub fn new(
        brokers: &str,
        topic: &str,
        encode: impl Fn(&T) -> (Option<Vec<u8>>, Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        KafkaSink {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            encode: Arc::new(encode),
            extra: Vec::new(),
            producer: None,
            context: DeliveryContext::default(),
        }
    }

    /// Sets an `rdkafka` producer property.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    fn check_deliveries(&self) -> Result<(), ConnectorError> {
        let failed = self.context.0.failed.swap(0, Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let last = self
            .context
            .0
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        Err(ConnectorError {
            domain: ErrorDomain::External,
            message: format!(
                "kafka: {failed} record(s) could not be delivered to `{}` (last: {last})",
                self.topic
            ),
            source: None,
        })
    }
}

impl<T: Data> Sink for KafkaSink<T> {
    type In = T;

    fn open(&mut self, _ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        self.producer = Some(
            config
                .create_with_context(self.context.clone())
                .map_err(|e| kafka_error("creating a producer", e))?,
        );
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let Some(producer) = self.producer.as_ref() else {
            return Err(ConnectorError::user(
                "kafka sink written before it was opened",
            ));
        };
        let (key, value) = (self.encode)(&record.value);
        let mut send = BaseRecord::to(&self.topic).payload(&value);
        if let Some(key) = key.as_ref() {
            send = send.key(key);
        }
        let mut send = send;
        loop {
            match producer.send(send) {
                Ok(()) => break,
                // The local queue is full: serve delivery reports, retry.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    producer.poll(Duration::from_millis(10));
                    send = back;
                }
                Err((e, _)) => {
                    return Err(kafka_error(format!("producing to `{}`", self.topic), e));
                }
            }
        }
        producer.poll(Duration::ZERO);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Some(producer) = self.producer.as_ref() {
            producer
                .flush(Duration::from_secs(30))
                .map_err(|e| kafka_error(format!("flushing to `{}`", self.topic), e))?;
        }
        self.check_deliveries()
    }
}

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

#[cfg(test)]
mod tests {
    use streamwork_core::KeyGroups;
    use streamwork_core::checkpoint::RestoredPart;

    use super::*;

    fn restore_of<'a>(parts: &'a [StateBytes]) -> Restore<'a> {
        Restore {
            component: "records",
            checkpoint: 3,
            is_final: false,
            instance: 0,
            parallelism: 2,
            key_groups: KeyGroups::DEFAULT,
            parts: parts
                .iter()
                .enumerate()
                .map(|(i, p)| RestoredPart {
                    part: i as u32,
                    schema: p.schema,
                    bytes: &p.bytes,
                })
                .collect(),
        }
    }

    #[test]
    fn positions_survive_a_snapshot_and_move_with_their_partitions() {
        // Two old instances, with partitions {0, 2} and {1, 3}.
        let parts: Vec<StateBytes> = [[(0, 17), (2, 5)], [(1, 40), (3, 0)]]
            .into_iter()
            .map(|owned| {
                let mut source = KafkaSource::new("127.0.0.1:1", "t", "g");
                source.positions = owned.into_iter().collect();
                source.snapshot().expect("positions")
            })
            .collect();
        let mut restored = KafkaSource::new("127.0.0.1:1", "t", "g");
        restored.restore(&restore_of(&parts)).unwrap();
        // Every partition's position is offered; `open` keeps the ones the
        // instance now owns.
        let expected: BTreeMap<i32, i64> = [(0, 17), (1, 40), (2, 5), (3, 0)].into_iter().collect();
        assert_eq!(restored.restored, expected);
    }

    #[test]
    fn positions_of_another_layout_are_refused() {
        let bad = [StateBytes {
            schema: 2,
            bytes: vec![0; 12],
        }];
        let mut source = KafkaSource::new("127.0.0.1:1", "t", "g");
        let error = source.restore(&restore_of(&bad)).unwrap_err();
        assert!(error.to_string().contains("schema 2"), "{error}");
        let torn = [StateBytes {
            schema: POSITIONS_SCHEMA,
            bytes: vec![0; 13],
        }];
        assert!(source.restore(&restore_of(&torn)).is_err());
    }
}
