//! Kafka (behind the `kafka` feature), on `rdkafka`: a source whose
//! positions live in Streamwork's own checkpoints, a sink producing keyed
//! records with the idempotent producer, and per-partition watermarks.
//! Scale-out across processes through a consumer group is not a connector:
//! it is `streamwork-scaleout`, which drives these.
//!
//! * [`KafkaSource`] splits a topic's partitions among its instances
//!   (partition `p` to instance `p % parallelism`, or an explicit list) and
//!   reads each from the offset its checkpoint recorded, or from the group's
//!   committed offset, or from the beginning: it is replayable, so a job
//!   promising exactly-once may read Kafka. Payloads that fail the source's
//!   check are counted and produced to a dead-letter topic instead.
//! * [`KafkaSink`] produces keyed records (idempotent producer); a record's
//!   partition follows its key, so the latest value per key is an upsert.
//!   It can stamp each record with its [`Origin`], the input record it was
//!   derived from, so that a reader of an intermediate topic drops the
//!   duplicates a replay produced ([`OriginFilter`]).
//!   [`KafkaSink::transactional`] publishes each checkpoint's records in
//!   one Kafka transaction when the checkpoint completes
//!   ([`TransactionalKafkaSink`]).
//! * [`PartitionWatermarks`] tracks event time per partition: the watermark
//!   is the minimum over the partitions, and an idle partition does not hold
//!   it back.
//! * [`OffsetHoles`] keeps a reader of a topic without holes in its
//!   offsets from passing over records a broker shows late
//!   ([`KafkaSource::expect_no_holes`]).
//! * [`EndProbe`] finds where partitions end, and [`SourceProgress`] is
//!   what a source reports to a scale-out runner.
//!
//! ```no_run
//! use streamwork::connectors::kafka::{KafkaSink, KafkaSource};
//! let lines = KafkaSource::new("127.0.0.1:9092", "lines", "word-count");
//! let counts = KafkaSink::new("127.0.0.1:9092", "counts", |(word, count): &(String, u64)| {
//!     (Some(word.as_bytes().to_vec()), count.to_string().into_bytes())
//! });
//! # let _ = (lines, counts);
//! ```

mod admin;
mod holes;
mod origin;
mod sink;
mod source;
mod transactional;
mod watermarks;

pub use admin::{
    EndProbe, RecordPurger, cluster_replication, create_replicated_topic, create_topic,
    end_offsets, partition_count,
};
pub use holes::{HoleVerdict, OffsetHoles};
pub use origin::{ORIGIN_HEADER, Origin, OriginFilter};
pub use sink::KafkaSink;
pub use source::{BusySpan, KafkaRecord, KafkaSource, Malformed, SourceProgress};
pub use transactional::TransactionalKafkaSink;
pub use watermarks::PartitionWatermarks;

use rdkafka::error::KafkaError;
use streamwork_core::{ConnectorError, ErrorDomain};

fn kafka_error(doing: impl Into<String>, error: KafkaError) -> ConnectorError {
    ConnectorError {
        domain: ErrorDomain::External,
        message: format!("kafka: {}: {error}", doing.into()),
        source: Some(Box::new(error)),
    }
}
