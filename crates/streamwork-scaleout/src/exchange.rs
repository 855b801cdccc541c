//! A keyed exchange between two stages, through a Kafka topic of the job's
//! own (`GROUP-COMPONENT-PORT-repartition`): the writing stage's sink and
//! the reading stage's source, both of [`Envelope`]s.
//!
//! The sink writes each envelope to partition `key_hash % partitions`,
//! keyed by the key's hash, with its writer and sequence number as its
//! [`Origin`] header. The source reads one partition and drops what a
//! writer wrote again after restarting from a checkpoint
//! ([`KafkaSource::drop_replayed`]: the last number seen from each writer
//! is checkpointed with the position).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use streamwork_connectors::kafka::{
    KafkaRecord, KafkaSink, KafkaSource, ORIGIN_HEADER, Origin, SourceProgress,
};
use streamwork_core::checkpoint::{Replayable, Restore, StateBytes};
use streamwork_core::{
    CheckpointId, Collector, ConnectorError, Envelope, InstanceContext, Source, SourcePoll,
};

/// The writer number of the marker records [`mark_partitions`] writes.
const MARKER_WRITER: i32 = -1;

/// Writes a marker record into each partition of an exchange's topic,
/// which readers skip: tansu 0.6 loses the first batch of a partition when
/// two producers write the first batches of that partition at the same
/// moment (as the writers of an exchange's partitions do when a job
/// starts), and a partition that holds a record does not show it. A marker
/// lost that way is lost harmlessly.
pub(crate) fn mark_partitions(
    brokers: &str,
    topic: &str,
    partitions: u32,
) -> Result<(), ConnectorError> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| broker_error(format!("a producer for `{topic}`: {e}")))?;
    let marker = Origin {
        partition: MARKER_WRITER,
        offset: 0,
        index: 0,
    }
    .to_bytes();
    for partition in 0..partitions as i32 {
        let record = BaseRecord::<(), [u8]>::to(topic)
            .payload(&[])
            .partition(partition)
            .headers(OwnedHeaders::new_with_capacity(1).insert(Header {
                key: ORIGIN_HEADER,
                value: Some(&marker[..]),
            }));
        producer.send(record).map_err(|(e, _)| {
            broker_error(format!("marking `{topic}` partition {partition}: {e}"))
        })?;
    }
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| broker_error(format!("marking `{topic}`: {e}")))
}

/// A failure of the brokers (not the job's fault).
fn broker_error(message: String) -> ConnectorError {
    ConnectorError {
        domain: streamwork_core::ErrorDomain::External,
        message: format!("kafka: {message}"),
        source: None,
    }
}

/// The sink of an exchange's topic.
pub(crate) fn exchange_sink(
    brokers: &str,
    topic: &str,
    partitions: u32,
    extra: &[(String, String)],
) -> KafkaSink<Envelope> {
    let partitions = u64::from(partitions.max(1));
    let mut sink = KafkaSink::new(brokers, topic, |e: &Envelope| {
        (Some(e.key_hash.to_be_bytes().to_vec()), e.payload.clone())
    })
    .partition_by(move |e: &Envelope| (e.key_hash % partitions) as i32)
    .origin(|e: &Envelope| Origin {
        partition: e.writer as i32,
        offset: e.seq as i64,
        index: 0,
    });
    for (key, value) in extra {
        sink = sink.property(key, value);
    }
    sink
}

/// The source of one partition of an exchange's topic.
pub(crate) struct ExchangeSource {
    topic: String,
    inner: KafkaSource,
    read: Collector<KafkaRecord>,
}

impl ExchangeSource {
    pub(crate) fn new(
        brokers: &str,
        topic: &str,
        group: &str,
        partition: i32,
        progress: Arc<SourceProgress>,
        extra: &[(String, String)],
    ) -> Self {
        let mut inner = KafkaSource::new(brokers, topic, group)
            .assign([partition])
            .drop_replayed()
            .report_to(progress);
        for (key, value) in extra {
            inner = inner.property(key, value);
        }
        ExchangeSource {
            topic: topic.to_string(),
            inner,
            read: Collector::detached(),
        }
    }
}

impl Clone for ExchangeSource {
    fn clone(&self) -> Self {
        ExchangeSource {
            topic: self.topic.clone(),
            inner: self.inner.clone(),
            read: Collector::detached(),
        }
    }
}

impl Source for ExchangeSource {
    type Out = Collector<Envelope>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.inner.open(ctx)
    }

    fn poll(&mut self, out: &mut Collector<Envelope>) -> Result<SourcePoll, ConnectorError> {
        let poll = self.inner.poll(&mut self.read)?;
        for record in self.read.take_buffered() {
            let time = record.time;
            let record = record.value;
            let Some(origin) = record.origin else {
                return Err(ConnectorError::user(format!(
                    "exchange topic `{}` partition {} offset {}: a record without a writer's number (origin header): the topic is the job's own, and only its stages may write to it",
                    self.topic, record.partition, record.offset
                )));
            };
            if origin.partition == MARKER_WRITER {
                continue;
            }
            let key_hash = record
                .key
                .as_deref()
                .and_then(|key| <[u8; 8]>::try_from(key).ok())
                .map_or(0, u64::from_be_bytes);
            let envelope = Envelope {
                key_hash,
                writer: origin.partition as u32,
                seq: origin.offset as u64,
                payload: record.value,
            };
            match time {
                Some(time) => out.emit_at(envelope, time),
                None => out.emit(envelope),
            }
        }
        Ok(poll)
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.inner.close()
    }

    fn replayable(&self) -> bool {
        true
    }

    fn partitioned_log(&self) -> Option<String> {
        Some(self.topic.clone())
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        self.inner.snapshot()
    }

    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        self.inner.snapshot_taken(checkpoint)
    }

    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        self.inner.suspended_at(checkpoint)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.inner.restore(restore)
    }
}

impl Replayable for ExchangeSource {}
