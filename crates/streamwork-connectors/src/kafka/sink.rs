//! The Kafka sink: keyed records through the idempotent producer.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use streamwork_core::{
    ConnectorError, Data, ErrorDomain, FormatError, InstanceContext, Record, Sink,
};

use super::kafka_error;
use super::origin::{ORIGIN_HEADER, Origin};

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

/// A record's key and value, or why it cannot be encoded.
type Encode<T> = Arc<dyn Fn(&T) -> Result<(Option<Vec<u8>>, Vec<u8>), FormatError> + Send + Sync>;
type OriginOf<T> = Arc<dyn Fn(&T) -> Origin + Send + Sync>;
type PartitionOf<T> = Arc<dyn Fn(&T) -> i32 + Send + Sync>;

/// The Kafka timestamp of a record: its event time, which travels with it.
/// None at or before the epoch: Kafka has no such timestamps, and the
/// producer reads 0 as "now".
pub(crate) fn kafka_timestamp<T>(record: &Record<T>) -> Option<i64> {
    record.time.map(|t| t.millis()).filter(|&t| t > 0)
}

/// Queues `send` on `producer`, waiting while its local queue is full.
pub(crate) fn send_waiting<C, K, P>(
    producer: &BaseProducer<C>,
    mut send: BaseRecord<'_, K, P>,
    topic: &str,
) -> Result<(), ConnectorError>
where
    C: ProducerContext<DeliveryOpaque = ()>,
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(send) {
            Ok(()) => break,
            // The local queue is full: serve delivery reports, retry.
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                producer.poll(Duration::from_millis(10));
                send = back;
            }
            Err((e, _)) => return Err(kafka_error(format!("producing to `{topic}`"), e)),
        }
    }
    producer.poll(Duration::ZERO);
    Ok(())
}

/// Produces records to a topic with the idempotent producer: each record
/// becomes a key (or none) and a value. A record's partition follows its
/// key, so the latest value per key is an upsert a compacted topic keeps.
///
/// A record's event time becomes its Kafka timestamp, for a
/// [`KafkaSource`](super::KafkaSource) downstream to read back; a record
/// without one, or at or before the epoch (Kafka has no such timestamps),
/// is stamped by the producer with the time it is sent.
/// [`partition_by`](Self::partition_by) chooses partitions by hand and
/// [`origin`](Self::origin) stamps records for duplicate removal.
///
/// ```no_run
/// use streamwork::connectors::kafka::KafkaSink;
/// // (word, count) upserts keyed by word.
/// let counts = KafkaSink::new("127.0.0.1:9092", "counts", |(word, count): &(String, u64)| {
///     (Some(word.clone().into_bytes()), count.to_string().into_bytes())
/// });
/// # let _ = counts;
/// ```
pub struct KafkaSink<T> {
    brokers: String,
    topic: String,
    encode: Encode<T>,
    origin: Option<OriginOf<T>>,
    partition: Option<PartitionOf<T>>,
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
            origin: self.origin.clone(),
            partition: self.partition.clone(),
            extra: self.extra.clone(),
            producer: None,
            context: DeliveryContext::default(),
        }
    }
}

impl<T: Data + serde::Serialize> KafkaSink<T> {
    /// Produces each record to `topic` on `brokers` as a JSON value (no
    /// key); a record that cannot be written as JSON fails the write with
    /// the reason.
    pub fn json(brokers: &str, topic: &str) -> Self {
        KafkaSink::encoded(brokers, topic, |value: &T| {
            let mut bytes = Vec::new();
            crate::formats::json_line(value, &mut bytes)?;
            Ok::<_, FormatError>((None, bytes))
        })
    }

    /// Produces each record to `topic` as one CSV record (no key).
    pub fn csv(brokers: &str, topic: &str) -> Self {
        KafkaSink::encoded(brokers, topic, |value: &T| {
            let mut bytes = Vec::new();
            crate::formats::csv_line(value, &mut bytes)?;
            Ok::<_, FormatError>((None, bytes))
        })
    }
}

impl<T: Data> KafkaSink<T> {
    /// Produces to `topic` on `brokers`; `encode` gives each record's key and
    /// value, or says why it cannot (the write then fails with the reason).
    pub fn encoded<E: Into<FormatError>>(
        brokers: &str,
        topic: &str,
        encode: impl Fn(&T) -> Result<(Option<Vec<u8>>, Vec<u8>), E> + Send + Sync + 'static,
    ) -> Self {
        let mut sink = KafkaSink::new(brokers, topic, |_: &T| (None, Vec::new()));
        sink.encode = Arc::new(move |value: &T| encode(value).map_err(Into::into));
        sink
    }

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
            encode: Arc::new(move |value: &T| Ok(encode(value))),
            origin: None,
            partition: None,
            extra: Vec::new(),
            producer: None,
            context: DeliveryContext::default(),
        }
    }

    /// Stamps every record with the input record it was derived from (in
    /// the [`ORIGIN_HEADER`] header), so that a reader of this topic can drop
    /// the duplicates a replay writes ([`OriginFilter`](super::OriginFilter)).
    pub fn origin(mut self, origin: impl Fn(&T) -> Origin + Send + Sync + 'static) -> Self {
        self.origin = Some(Arc::new(origin));
        self
    }

    /// Chooses each record's partition (by default its key's hash does, or
    /// the producer for a record without a key).
    pub fn partition_by(mut self, partition: impl Fn(&T) -> i32 + Send + Sync + 'static) -> Self {
        self.partition = Some(Arc::new(partition));
        self
    }

    /// Sets an `rdkafka` producer property.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    pub(crate) fn brokers(&self) -> &str {
        &self.brokers
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn extra(&self) -> &[(String, String)] {
        &self.extra
    }

    /// The record's key and value; a record that cannot be encoded is the
    /// user's error, naming the topic and the reason.
    pub(crate) fn encode(&self, value: &T) -> Result<(Option<Vec<u8>>, Vec<u8>), ConnectorError> {
        (self.encode)(value).map_err(|reason| {
            ConnectorError::user(format!(
                "kafka topic `{}`: cannot encode a record: {reason}",
                self.topic
            ))
        })
    }

    pub(crate) fn origin_of(&self, value: &T) -> Option<[u8; 16]> {
        self.origin.as_ref().map(|of| of(value).to_bytes())
    }

    pub(crate) fn partition_of(&self, value: &T) -> Option<i32> {
        self.partition.as_ref().map(|of| of(value))
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
        let (key, value) = self.encode(&record.value)?;
        let mut send = BaseRecord::to(&self.topic).payload(&value);
        if let Some(key) = key.as_ref() {
            send = send.key(key);
        }
        if let Some(partition) = self.partition_of(&record.value) {
            send = send.partition(partition);
        }
        if let Some(timestamp) = kafka_timestamp(&record) {
            send = send.timestamp(timestamp);
        }
        let origin = self.origin_of(&record.value);
        if let Some(origin) = &origin {
            send = send.headers(OwnedHeaders::new_with_capacity(1).insert(Header {
                key: ORIGIN_HEADER,
                value: Some(&origin[..]),
            }));
        }
        send_waiting(producer, send, &self.topic)
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

#[cfg(test)]
mod tests {
    use super::KafkaSink;
    use crate::kafka::KafkaRecord;

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Bid {
        auction: u64,
        price: f64,
    }

    fn record(value: &[u8]) -> KafkaRecord {
        KafkaRecord {
            partition: 0,
            offset: 0,
            key: None,
            value: value.to_vec(),
            timestamp: None,
            origin: None,
        }
    }

    #[test]
    fn json_and_csv_values_round_trip_through_the_sink_and_a_record() {
        let bid = Bid {
            auction: 7,
            price: 2.5,
        };
        let (key, value) = KafkaSink::<Bid>::json("127.0.0.1:9", "bids")
            .encode(&bid)
            .unwrap();
        assert_eq!(key, None);
        assert_eq!(record(&value).json::<Bid>().unwrap(), bid);
        let (_, value) = KafkaSink::<Bid>::csv("127.0.0.1:9", "bids")
            .encode(&bid)
            .unwrap();
        assert_eq!(value, b"7,2.5");
        assert_eq!(record(&value).csv::<Bid>().unwrap(), bid);
    }

    #[test]
    fn a_payload_that_is_not_the_record_says_why() {
        let why = |payload: &[u8]| {
            record(payload)
                .json::<Bid>()
                .unwrap_err()
                .reason()
                .to_owned()
        };
        assert!(why(b"{\"auction\": 1}").contains("price"));
        assert!(why(b"\xff").contains("UTF-8"));
    }

    #[test]
    fn a_record_that_cannot_be_encoded_fails_the_write_with_the_reason() {
        // A map with non-string keys is not JSON.
        let map: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
        let sink = KafkaSink::json("127.0.0.1:9", "maps");
        let error = sink.encode(&map).unwrap_err().to_string();
        assert!(
            error.contains("maps") && error.contains("cannot encode"),
            "{error}"
        );
    }
}
