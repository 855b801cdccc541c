//! A keyed exchange between two stages, through a Kafka topic of the job's
//! own (`GROUP-COMPONENT-PORT-repartition`): the writing stage's sink and
//! the reading stage's source, both of [`Envelope`](streamwork_runtime::cut::Envelope)s.
//!
//! **Written ahead.** [`ExchangeSink`] sends nothing a checkpoint has not
//! covered: what a stage writes between two barriers is staged in memory,
//! kept in the stage's checkpoint at the barrier (its part, in the
//! checkpoint store with the rest), and sent once that checkpoint is
//! complete. A stage restored from a checkpoint sends again what the
//! checkpoint holds staged or not yet acknowledged: the very records, with
//! the very numbers, that the first run computed. What the next stage reads
//! is therefore always what a completed checkpoint of the writer covers,
//! whatever a replay computes after it (operators before an exchange need
//! not be deterministic: hash-map order, processing time, randomness).
//!
//! **Numbered per partition.** Each writer numbers the records it sends to
//! each partition 1, 2, 3, ... (the numbers are in its checkpoint), and
//! stamps each with the checkpoint that covered it. [`ExchangeSource`]
//! keeps, per writer, the last number and checkpoint it read (in its own
//! checkpoint, with its position), and admits a record only if it is the
//! next one. A record it has read already is dropped (a resend after a
//! restore); a number skipped (records lost between the writer and the
//! reader) or a number seen again with a later checkpoint than the one it
//! was first read with (a writer restored from an older checkpoint than
//! one whose records were read: its new records reuse numbers) fails the
//! reading stage with both named, never a silent loss or double count.
//!
//! Each record's value is a frame: `0xE2`, its kind (record or marker), the
//! writer (`u32`), the checkpoint (`u64`) and the number (`u64`), little
//! endian, then the record's bytes ([`Portable`](streamwork_core::Portable)).
//! Its key is its key's hash, and it goes to the partition that owns the
//! key's group ([`KeyGroups::route`]), as the record would go to that
//! instance in one process.
//!
//! * `frame`: the frames, on the topic and staged;
//! * `sink`: the writing end, [`ExchangeSink`];
//! * `source`: the reading end, [`ExchangeSource`].

mod frame;
mod sink;
mod source;

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use streamwork_core::{ConnectorError, ErrorDomain};

use self::frame::{FrameHead, HEAD, MARKER, MARKER_WRITER};
pub(crate) use self::sink::{ExchangeSink, Unsent, resend_part};
pub(crate) use self::source::{ExchangeSource, read_part, undelivered};

/// How long closing a sink waits for the brokers to acknowledge.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Writes a marker frame into each partition of an exchange's topic,
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
    let mut marker = Vec::with_capacity(HEAD);
    FrameHead {
        kind: MARKER,
        writer: MARKER_WRITER,
        checkpoint: 0,
        seq: 0,
    }
    .write(&mut marker);
    for partition in 0..partitions as i32 {
        let record = BaseRecord::<(), [u8]>::to(topic)
            .payload(&marker[..])
            .partition(partition);
        producer.send(record).map_err(|(e, _)| {
            broker_error(format!("marking `{topic}` partition {partition}: {e}"))
        })?;
    }
    producer
        .flush(CLOSE_WAIT)
        .map_err(|e| broker_error(format!("marking `{topic}`: {e}")))
}

/// A failure of the brokers (not the job's fault).
fn broker_error(message: String) -> ConnectorError {
    ConnectorError {
        domain: ErrorDomain::External,
        message: format!("kafka: {message}"),
        source: None,
    }
}

/// A refusal of what an exchange holds: not the user's fault, not healed
/// by a retry.
fn exchange_refusal(message: String) -> ConnectorError {
    ConnectorError {
        domain: ErrorDomain::Internal,
        message,
        source: None,
    }
}
