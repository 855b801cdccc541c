//! The reading end of an exchange: [`ExchangeSource`] admits each record
//! of its partition once, in its writer's order, and refuses a gap or a
//! number reused ([`WriterLog`]; see the [module docs](super)).

use std::collections::BTreeMap;
use std::sync::Arc;

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use streamwork_connectors::kafka::{
    EndProbe, HoleVerdict, KafkaRecord, KafkaSource, OffsetHoles, SourceProgress,
};
use streamwork_core::checkpoint::{Replayable, Restore, RestoredPart, StateBytes};
use streamwork_core::{
    CheckpointId, Collector, ConnectorError, InstanceContext, Record, Source, SourcePoll, Timestamp,
};
use streamwork_runtime::cut::Envelope;

use super::frame::{FrameHead, HEAD, MARKER};
use super::{broker_error, exchange_refusal};

/// How long a reader reads again offsets a broker passed over before it
/// takes the records after them (see [`OffsetHoles`]): an exchange's
/// topic is written without transactions and never compacted, so its
/// offsets have no holes, and a record passed over is one the broker shows
/// late. A hole that outlasts it is left to the writers' numbers to judge.
const HOLE_WAIT: Duration = Duration::from_secs(10);

/// The layout of [`ExchangeSource`]'s part of a checkpoint.
const READ_SCHEMA: u32 = 3;

/// Why a reader refuses a record of an exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A number was skipped: records were lost between writer and reader.
    Gap {
        writer: u32,
        expected: u64,
        found: u64,
    },
    /// A number read before came again with a later checkpoint: the writer
    /// was restored from an older checkpoint than one whose records were
    /// read, and its new records reuse their numbers.
    Differs {
        writer: u32,
        seq: u64,
        checkpoint: u64,
        read_with: u64,
    },
}

impl Refusal {
    fn explain(&self, topic: &str, partition: i32, offset: i64) -> String {
        match self {
            Refusal::Gap {
                writer,
                expected,
                found,
            } => format!(
                "exchange `{topic}` partition {partition} offset {offset}: writer {writer}'s record {found} follows its record {}: records {expected}..{found} were lost between the stages (a broker that lost acknowledged records, or the topic's records deleted before this stage read them); the stage stops rather than go on without them",
                expected - 1
            ),
            Refusal::Differs {
                writer,
                seq,
                checkpoint,
                read_with,
            } => format!(
                "exchange `{topic}` partition {partition} offset {offset}: writer {writer} sent its record {seq} again as part of its checkpoint {checkpoint}, after this stage had read records up to its checkpoint {read_with}: the writer was restored from an older checkpoint than one whose output was read (its checkpoint store lost its newest checkpoints, or another store was given); the stage stops rather than count records twice or lose them"
            ),
        }
    }
}

/// What one reader of an exchange partition has read from each writer: its
/// last number and the checkpoint that covered it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WriterLog {
    last: BTreeMap<u32, (u64, u64)>,
}

impl WriterLog {
    /// Whether the record of `head` is new (`Ok(false)`: read already), or
    /// why it is refused.
    pub(crate) fn admit(&mut self, head: &FrameHead) -> Result<bool, Refusal> {
        let (writer, checkpoint, seq) = (head.writer, head.checkpoint, head.seq);
        let (last_checkpoint, last_seq) = self.last.get(&writer).copied().unwrap_or((0, 0));
        if seq <= last_seq {
            // A resend carries the checkpoint it was first sent with.
            if checkpoint > last_checkpoint {
                return Err(Refusal::Differs {
                    writer,
                    seq,
                    checkpoint,
                    read_with: last_checkpoint,
                });
            }
            return Ok(false);
        }
        if seq != last_seq + 1 {
            return Err(Refusal::Gap {
                writer,
                expected: last_seq + 1,
                found: seq,
            });
        }
        if checkpoint < last_checkpoint {
            return Err(Refusal::Differs {
                writer,
                seq,
                checkpoint,
                read_with: last_checkpoint,
            });
        }
        self.last.insert(writer, (checkpoint, seq));
        Ok(true)
    }

    fn write_to(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&(self.last.len() as u32).to_le_bytes());
        for (&writer, &(checkpoint, seq)) in &self.last {
            bytes.extend_from_slice(&writer.to_le_bytes());
            bytes.extend_from_slice(&checkpoint.to_le_bytes());
            bytes.extend_from_slice(&seq.to_le_bytes());
        }
    }

    fn read_from(bytes: &[u8]) -> Option<WriterLog> {
        let (count, mut rest) = bytes.split_first_chunk::<4>()?;
        let mut log = WriterLog::default();
        for _ in 0..u32::from_le_bytes(*count) {
            let (writer, after) = rest.split_first_chunk::<4>()?;
            let (checkpoint, after) = after.split_first_chunk::<8>()?;
            let (seq, after) = after.split_first_chunk::<8>()?;
            log.last.insert(
                u32::from_le_bytes(*writer),
                (u64::from_le_bytes(*checkpoint), u64::from_le_bytes(*seq)),
            );
            rest = after;
        }
        rest.is_empty().then_some(log)
    }

    /// Takes in what `other` has read: the later of each writer's.
    fn merge(&mut self, other: WriterLog) {
        for (writer, last) in other.last {
            let entry = self.last.entry(writer).or_insert(last);
            *entry = (*entry).max(last);
        }
    }
}

/// How many times a rescale asks where `topic` ends before it gives up.
const END_ATTEMPTS: u32 = 6;

/// Where every partition of `topic` ends, asked again (at most
/// [`END_ATTEMPTS`] times, ten seconds each) when a partition does not
/// answer: a broker busy with the transactions of killed processes may
/// take longer than one probe waits, and a rescale that gave up there
/// would fail the whole process.
fn ends_with_retries(
    brokers: &str,
    extra: &[(String, String)],
    topic: &str,
) -> Result<std::collections::BTreeMap<i32, i64>, ConnectorError> {
    let mut attempt = 1;
    loop {
        match EndProbe::new(brokers, extra)?.ends(topic) {
            Ok(ends) => return Ok(ends),
            Err(error) if attempt < END_ATTEMPTS => {
                tracing::warn!("{error}; asking again ({attempt} of {END_ATTEMPTS})");
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The records of `topic`'s partition `partition`, from offset `from` to
/// its end, that a reader restored with `log` would admit, in order: what
/// a rescale moves into the exchange's new topic.
pub(crate) fn undelivered(
    brokers: &str,
    extra: &[(String, String)],
    topic: &str,
    partition: i32,
    from: i64,
    mut log: WriterLog,
) -> Result<Vec<Record<Envelope>>, ConnectorError> {
    let end = ends_with_retries(brokers, extra, topic)?
        .get(&partition)
        .copied()
        .unwrap_or(0);
    let mut records = Vec::new();
    if from >= end {
        return Ok(records);
    }
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("{topic}-rescale"))
        .set("enable.auto.commit", "false");
    for (key, value) in extra {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| broker_error(format!("a consumer of `{topic}`: {e}")))?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .and_then(|()| consumer.assign(&assignment))
        .map_err(|e| broker_error(format!("reading `{topic}` partition {partition}: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut next = from;
    let mut holes = OffsetHoles::new(HOLE_WAIT);
    while next < end {
        if Instant::now() > deadline {
            return Err(broker_error(format!(
                "`{topic}` partition {partition} not read from {from} to {end} within 120 s"
            )));
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => continue,
            Some(Err(e)) => {
                return Err(broker_error(format!(
                    "reading `{topic}` partition {partition}: {e}"
                )));
            }
            Some(Ok(message)) => message,
        };
        if let HoleVerdict::ReadAgainFrom(again) =
            holes.check(partition, Some(next), message.offset(), Instant::now)
        {
            consumer
                .seek(
                    topic,
                    partition,
                    Offset::Offset(again),
                    Duration::from_secs(10),
                )
                .map_err(|e| {
                    broker_error(format!(
                        "reading `{topic}` partition {partition} again from {again}: {e}"
                    ))
                })?;
            continue;
        }
        next = message.offset() + 1;
        let value = message.payload().unwrap_or_default();
        let Some(head) = FrameHead::read(value) else {
            return Err(exchange_refusal(format!(
                "exchange topic `{topic}` partition {partition} offset {}: not an exchange record of this version",
                message.offset()
            )));
        };
        if head.kind == MARKER {
            continue;
        }
        match log.admit(&head) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(refusal) => {
                return Err(exchange_refusal(refusal.explain(
                    topic,
                    partition,
                    message.offset(),
                )));
            }
        }
        let key_hash = message
            .key()
            .and_then(|key| <[u8; 8]>::try_from(key).ok())
            .map_or(0, u64::from_be_bytes);
        let envelope = Envelope {
            key_hash,
            writer: head.writer,
            seq: head.seq,
            payload: value[HEAD..].to_vec(),
        };
        records.push(match message.timestamp().to_millis() {
            Some(time) => Record::at(envelope, Timestamp::from_millis(time)),
            None => Record::new(envelope),
        });
    }
    Ok(records)
}

/// A reader's part of a checkpoint, read back: the next offset of each
/// partition it read, and what it read of each writer (`None`: torn, or
/// of another layout).
pub(crate) fn read_part(part: &RestoredPart<'_>) -> Option<(BTreeMap<i32, i64>, WriterLog)> {
    if part.schema != READ_SCHEMA {
        return None;
    }
    let (_, rest) = part.bytes.split_first_chunk::<4>()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let (inner, writers) = rest.split_at_checked(u32::from_le_bytes(*len) as usize)?;
    // The Kafka source's positions: 12 bytes a partition.
    if !inner.len().is_multiple_of(12) {
        return None;
    }
    let positions = inner
        .chunks_exact(12)
        .map(|entry| {
            let (partition, next) = entry.split_at(4);
            (
                i32::from_le_bytes(partition.try_into().unwrap_or_default()),
                i64::from_le_bytes(next.try_into().unwrap_or_default()),
            )
        })
        .collect();
    Some((positions, WriterLog::read_from(writers)?))
}

/// The source of one partition of an exchange's topic: admits each record
/// once (see the [module docs](self)).
pub(crate) struct ExchangeSource {
    topic: String,
    inner: KafkaSource,
    read: Collector<KafkaRecord>,
    writers: WriterLog,
    /// Records dropped as read already, since the last snapshot.
    dropped: u64,
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
            .expect_no_holes(HOLE_WAIT)
            .report_to(progress);
        for (key, value) in extra {
            inner = inner.property(key, value);
        }
        ExchangeSource {
            topic: topic.to_string(),
            inner,
            read: Collector::detached(),
            writers: WriterLog::default(),
            dropped: 0,
        }
    }
}

impl Clone for ExchangeSource {
    fn clone(&self) -> Self {
        ExchangeSource {
            topic: self.topic.clone(),
            inner: self.inner.clone(),
            read: Collector::detached(),
            writers: self.writers.clone(),
            dropped: 0,
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
            let mut record = record.value;
            let Some(head) = FrameHead::read(&record.value) else {
                return Err(exchange_refusal(format!(
                    "exchange topic `{}` partition {} offset {}: not an exchange record of this version (written by an older version of Streamwork, or by something else than the job's stages): run the changed job as a new group",
                    self.topic, record.partition, record.offset
                )));
            };
            if head.kind == MARKER {
                continue;
            }
            match self.writers.admit(&head) {
                Ok(true) => {}
                Ok(false) => {
                    self.dropped += 1;
                    continue;
                }
                Err(refusal) => {
                    return Err(exchange_refusal(refusal.explain(
                        &self.topic,
                        record.partition,
                        record.offset,
                    )));
                }
            }
            let key_hash = record
                .key
                .as_deref()
                .and_then(|key| <[u8; 8]>::try_from(key).ok())
                .map_or(0, u64::from_be_bytes);
            record.value.drain(..HEAD);
            let envelope = Envelope {
                key_hash,
                writer: head.writer,
                seq: head.seq,
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

    fn split_input(&self) -> Option<String> {
        Some(self.topic.clone())
    }

    /// The position and, per writer, what was read.
    fn snapshot(&mut self) -> Option<StateBytes> {
        if self.dropped > 0 {
            tracing::info!(
                "exchange `{}`: dropped {} records sent again after a restore (read already)",
                self.topic,
                std::mem::take(&mut self.dropped)
            );
        }
        let inner = self.inner.snapshot()?;
        let mut bytes = Vec::with_capacity(8 + inner.bytes.len());
        bytes.extend_from_slice(&inner.schema.to_le_bytes());
        bytes.extend_from_slice(&(inner.bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&inner.bytes);
        self.writers.write_to(&mut bytes);
        Some(StateBytes::new(READ_SCHEMA, bytes))
    }

    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        self.inner.snapshot_taken(checkpoint)
    }

    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        self.inner.suspended_at(checkpoint)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut inner_parts = Vec::with_capacity(restore.parts.len());
        for part in &restore.parts {
            let refused = |what: String| {
                exchange_refusal(format!(
                    "exchange `{}`: the reader's part of checkpoint {} {what}: run the changed job as a new group",
                    self.topic, restore.checkpoint
                ))
            };
            if part.schema != READ_SCHEMA {
                return Err(refused(format!(
                    "has layout {} (this version reads layout {READ_SCHEMA}): it was written by another version of the exchange protocol",
                    part.schema
                )));
            }
            let torn = || refused("is torn".to_string());
            let (schema, rest) = part.bytes.split_first_chunk::<4>().ok_or_else(torn)?;
            let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(torn)?;
            let (inner, writers) = rest
                .split_at_checked(u32::from_le_bytes(*len) as usize)
                .ok_or_else(torn)?;
            self.writers
                .merge(WriterLog::read_from(writers).ok_or_else(torn)?);
            inner_parts.push(RestoredPart {
                part: part.part,
                schema: u32::from_le_bytes(*schema),
                bytes: inner,
            });
        }
        self.inner.restore(&restore.with_parts(inner_parts))
    }
}

impl Replayable for ExchangeSource {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::frame::tests::head;
    use super::*;

    #[test]
    fn a_reader_refuses_gaps_and_reused_numbers_by_name() {
        let mut log = WriterLog::default();
        assert_eq!(
            log.admit(&head(1, 3, 2)),
            Err(Refusal::Gap {
                writer: 1,
                expected: 1,
                found: 2
            }),
            "a writer's first record is its number 1"
        );
        assert_eq!(log.admit(&head(1, 3, 1)), Ok(true));
        assert_eq!(log.admit(&head(1, 3, 2)), Ok(true));
        assert_eq!(log.admit(&head(1, 3, 1)), Ok(false), "sent again");
        assert_eq!(log.admit(&head(1, 5, 3)), Ok(true));
        assert_eq!(
            log.admit(&head(1, 9, 2)),
            Err(Refusal::Differs {
                writer: 1,
                seq: 2,
                checkpoint: 9,
                read_with: 5
            }),
            "a number reused by a later checkpoint"
        );
        assert!(matches!(
            log.admit(&head(1, 5, 5)),
            Err(Refusal::Gap { expected: 4, .. })
        ));
        assert_eq!(log.admit(&head(2, 1, 1)), Ok(true), "writers apart");
        let mut bytes = Vec::new();
        log.write_to(&mut bytes);
        assert_eq!(WriterLog::read_from(&bytes), Some(log.clone()));
        assert_eq!(WriterLog::read_from(&bytes[..bytes.len() - 1]), None);
        let message = Refusal::Gap {
            writer: 4,
            expected: 3,
            found: 7,
        }
        .explain("g-x-repartition", 1, 88);
        assert!(
            message.contains("writer 4's record 7 follows its record 2") && message.contains("88"),
            "{message}"
        );
    }

    proptest! {
        /// A writer that stages records per checkpoint and sends a
        /// checkpoint's records once it completes (a crash may cut the
        /// sending anywhere, and may come before the last checkpoint of a
        /// run completes); restored from its latest completed checkpoint,
        /// it sends that checkpoint's records again and goes on with new
        /// records under new checkpoint ids, reusing the numbers of what
        /// was never sent. The reader admits every record of every
        /// completed checkpoint once, in order, nothing else, and never
        /// refuses.
        #[test]
        fn a_reader_admits_each_completed_record_once_whatever_a_replay_computes(
            runs in proptest::collection::vec(
                (proptest::collection::vec(0u64..4, 1..6), any::<bool>(), 0usize..30),
                1..6,
            ),
        ) {
            let mut sent: Vec<FrameHead> = Vec::new();
            let mut next_checkpoint = 1u64;
            // The last number a completed checkpoint covers, and the
            // records of completed checkpoints: what must be admitted.
            let mut covered = 0u64;
            let mut completed: Vec<FrameHead> = Vec::new();
            for (checkpoints, last_completes, cut) in runs {
                // Restored: what the latest completed checkpoint may hold
                // unacknowledged is sent again (here: all of it, the most).
                sent.extend(completed.iter().copied());
                let mut seq = covered;
                let mut run_sent: Vec<FrameHead> = Vec::new();
                let count = checkpoints.len();
                for (index, records) in checkpoints.into_iter().enumerate() {
                    let checkpoint = next_checkpoint;
                    next_checkpoint += 1;
                    let staged: Vec<FrameHead> = (0..records)
                        .map(|_| {
                            seq += 1;
                            head(0, checkpoint, seq)
                        })
                        .collect();
                    if index + 1 == count && !last_completes {
                        // Staged, never completed, never sent.
                        break;
                    }
                    completed.extend(staged.iter().copied());
                    covered = seq;
                    run_sent.extend(staged);
                }
                // A crash cuts the sending anywhere.
                let keep = run_sent.len().saturating_sub(cut % (run_sent.len() + 1));
                sent.extend_from_slice(&run_sent[..keep]);
            }
            sent.extend(completed.iter().copied());
            let mut log = WriterLog::default();
            let mut admitted = Vec::new();
            for frame in &sent {
                match log.admit(frame) {
                    Ok(true) => admitted.push(*frame),
                    Ok(false) => {}
                    Err(refusal) => prop_assert!(false, "refused {frame:?}: {refusal:?}"),
                }
            }
            prop_assert_eq!(admitted, completed);
        }
    }
}
