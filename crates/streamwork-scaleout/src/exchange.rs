//! A keyed exchange between two stages, through a Kafka topic of the job's
//! own (`GROUP-COMPONENT-PORT-repartition`): the writing stage's sink and
//! the reading stage's source, both of [`Envelope`]s.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use streamwork_connectors::kafka::{KafkaRecord, KafkaSource, SourceProgress};
use streamwork_core::checkpoint::{Replayable, Restore, RestoredPart, StateBytes};
use streamwork_core::{
    CheckpointId, Collector, ConnectorError, Envelope, ErrorDomain, InstanceContext, KeyGroups,
    Record, Sink, Source, SourcePoll, Timestamp,
};

/// The first byte of every exchange frame.
const MAGIC: u8 = 0xE2;
/// A frame holding a record.
const RECORD: u8 = 0;
/// A marker frame, which readers skip.
const MARKER: u8 = 1;
/// The frame's head: magic, kind, writer, checkpoint, number.
const HEAD: usize = 2 + 4 + 8 + 8;
/// The writer of marker frames.
const MARKER_WRITER: u32 = u32::MAX;
/// How long closing a sink waits for the brokers to acknowledge.
const CLOSE_WAIT: Duration = Duration::from_secs(30);
/// The layout of [`ExchangeSink`]'s part of a checkpoint.
const WRITE_SCHEMA: u32 = 1;
/// The layout of [`ExchangeSource`]'s part of a checkpoint.
const READ_SCHEMA: u32 = 3;

/// The head of an exchange frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameHead {
    kind: u8,
    writer: u32,
    checkpoint: u64,
    seq: u64,
}

impl FrameHead {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(MAGIC);
        out.push(self.kind);
        out.extend_from_slice(&self.writer.to_le_bytes());
        out.extend_from_slice(&self.checkpoint.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
    }

    /// The head of `value`, if it is an exchange frame.
    fn read(value: &[u8]) -> Option<FrameHead> {
        let head = value.get(..HEAD)?;
        if head[0] != MAGIC || head[1] > MARKER {
            return None;
        }
        Some(FrameHead {
            kind: head[1],
            writer: u32::from_le_bytes(head[2..6].try_into().ok()?),
            checkpoint: u64::from_le_bytes(head[6..14].try_into().ok()?),
            seq: u64::from_le_bytes(head[14..22].try_into().ok()?),
        })
    }
}

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

/// Failed deliveries of an exchange sink's producer.
#[derive(Clone, Default)]
struct Deliveries(Arc<(AtomicU64, Mutex<Option<String>>)>);

impl ClientContext for Deliveries {}

/// The records of one sent batch that the brokers have not acknowledged.
type Unacked = Arc<AtomicU64>;

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Unacked;

    fn delivery(&self, result: &DeliveryResult<'_>, unacked: Unacked) {
        match result {
            Ok(_) => {
                unacked.fetch_sub(1, Ordering::AcqRel);
            }
            // The batch stays unacknowledged: kept in the next checkpoint,
            // sent again by the stage restored from it.
            Err((error, _)) => {
                self.0.0.fetch_add(1, Ordering::Relaxed);
                *self.0.1.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
            }
        }
    }
}

impl Deliveries {
    /// An error if a record could not be delivered since the last check.
    fn check(&self, topic: &str) -> Result<(), ConnectorError> {
        let failed = self.0.0.swap(0, Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let last = self.0.1.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Err(broker_error(format!(
            "{failed} record(s) could not be delivered to exchange `{topic}` (last: {}); the stage restarts from its last checkpoint and sends them again",
            last.unwrap_or_default()
        )))
    }
}

/// What this process's exchange sinks hold that the brokers have not
/// acknowledged (bytes staged, or sent and not yet acknowledged): a runner
/// leaving the group once everything is read does not leave while any is.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unsent(Arc<AtomicU64>);

impl Unsent {
    /// Bytes not yet acknowledged, over every sink.
    pub(crate) fn bytes(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// One sink's share of an [`Unsent`], taken back when the sink is dropped.
#[derive(Debug, Default)]
struct UnsentShare {
    total: Unsent,
    mine: u64,
}

impl UnsentShare {
    fn set(&mut self, bytes: u64) {
        if bytes >= self.mine {
            self.total.0.fetch_add(bytes - self.mine, Ordering::AcqRel);
        } else {
            self.total.0.fetch_sub(self.mine - bytes, Ordering::AcqRel);
        }
        self.mine = bytes;
    }
}

impl Drop for UnsentShare {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// The records one writer stages between two barriers: for each, its
/// partition, number, key hash, event time and bytes, one after another in
/// one buffer (no allocation per record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Frames(Vec<u8>);

/// One staged record, read back from [`Frames`].
struct Staged<'a> {
    partition: u32,
    seq: u64,
    key_hash: u64,
    time: Option<i64>,
    payload: &'a [u8],
}

impl Frames {
    fn push(&mut self, partition: u32, seq: u64, record: &Record<Envelope>) {
        let out = &mut self.0;
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&record.value.key_hash.to_le_bytes());
        let time = record.time.map_or(i64::MIN, Timestamp::millis);
        out.extend_from_slice(&time.to_le_bytes());
        out.extend_from_slice(&(record.value.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&record.value.payload);
    }

    /// Every staged record, or `None` if the bytes are torn.
    fn iter(&self) -> impl Iterator<Item = Option<Staged<'_>>> {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let staged = (|| {
                let (partition, after) = rest.split_first_chunk::<4>()?;
                let (seq, after) = after.split_first_chunk::<8>()?;
                let (key_hash, after) = after.split_first_chunk::<8>()?;
                let (time, after) = after.split_first_chunk::<8>()?;
                let (len, after) = after.split_first_chunk::<4>()?;
                let len = u32::from_le_bytes(*len) as usize;
                let payload = after.get(..len)?;
                rest = &after[len..];
                let time = i64::from_le_bytes(*time);
                Some(Staged {
                    partition: u32::from_le_bytes(*partition),
                    seq: u64::from_le_bytes(*seq),
                    key_hash: u64::from_le_bytes(*key_hash),
                    time: (time != i64::MIN).then_some(time),
                    payload,
                })
            })();
            if staged.is_none() {
                rest = &[];
            }
            Some(staged)
        })
    }
}

/// The sink of an exchange's topic: writes ahead (see the [module
/// docs](self)).
pub(crate) struct ExchangeSink {
    brokers: String,
    topic: String,
    partitions: u32,
    key_groups: KeyGroups,
    writer: u32,
    extra: Vec<(String, String)>,
    unsent: Unsent,
    open: Option<Writing>,
}

/// An open exchange sink.
struct Writing {
    producer: BaseProducer<Deliveries>,
    deliveries: Deliveries,
    /// Whether the job takes checkpoints: without, records are sent as they
    /// come (at most once, as the job promises).
    checkpointed: bool,
    /// The last number given in each partition.
    last_seq: Vec<u64>,
    /// Written since the last barrier.
    current: Frames,
    /// Staged for checkpoints not known complete, oldest first.
    staged: Vec<(CheckpointId, Frames)>,
    /// Sent, not yet acknowledged in full: each batch with the count of its
    /// records the brokers have not acknowledged.
    sent: Vec<(CheckpointId, Frames, Unacked)>,
    /// One value being built.
    value: Vec<u8>,
    /// What it has not sent or not had acknowledged, for the runner.
    unsent: UnsentShare,
}

impl Writing {
    /// Tells the runner what is not yet acknowledged.
    fn account(&mut self) {
        let held: usize = self.current.0.len()
            + self
                .staged
                .iter()
                .map(|(_, frames)| frames)
                .chain(self.sent.iter().map(|(_, frames, _)| frames))
                .map(|frames| frames.0.len().max(1))
                .sum::<usize>();
        self.unsent.set(held as u64);
    }
}

/// A stopped job drops its sinks: what was sent is given time to be
/// acknowledged (a producer dropped drops what it holds, which the next run
/// would send again from the checkpoint).
impl Drop for Writing {
    fn drop(&mut self) {
        let _ = self.producer.flush(CLOSE_WAIT);
    }
}

impl Clone for ExchangeSink {
    fn clone(&self) -> Self {
        ExchangeSink {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            partitions: self.partitions,
            key_groups: self.key_groups,
            writer: self.writer,
            extra: self.extra.clone(),
            unsent: self.unsent.clone(),
            open: None,
        }
    }
}

impl ExchangeSink {
    /// The sink writer `writer` writes `topic` (of `partitions` partitions)
    /// with, routing records by `key_groups`, counting what it holds in
    /// `unsent`.
    pub(crate) fn new(
        brokers: &str,
        topic: &str,
        partitions: u32,
        key_groups: KeyGroups,
        writer: u32,
        extra: &[(String, String)],
        unsent: Unsent,
    ) -> Self {
        ExchangeSink {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            partitions: partitions.max(1),
            key_groups,
            writer,
            extra: extra.to_vec(),
            unsent,
            open: None,
        }
    }

    fn writing(&mut self) -> Result<&mut Writing, ConnectorError> {
        let topic = &self.topic;
        self.open.as_mut().ok_or_else(|| {
            exchange_refusal(format!("exchange sink of `{topic}` used before it opened"))
        })
    }

    /// Sends `frames`, covered by `checkpoint`, counting in `unacked` what
    /// the brokers have not acknowledged.
    fn send(
        &self,
        writing: &mut Writing,
        checkpoint: CheckpointId,
        frames: &Frames,
        unacked: &Unacked,
    ) -> Result<(), ConnectorError> {
        let checkpoint = if checkpoint.is_final() {
            u64::MAX
        } else {
            checkpoint.get()
        };
        for staged in frames.iter() {
            let staged = staged.ok_or_else(|| {
                exchange_refusal(format!(
                    "exchange `{}`: writer {}'s staged records are torn",
                    self.topic, self.writer
                ))
            })?;
            writing.value.clear();
            FrameHead {
                kind: RECORD,
                writer: self.writer,
                checkpoint,
                seq: staged.seq,
            }
            .write(&mut writing.value);
            writing.value.extend_from_slice(staged.payload);
            let key = staged.key_hash.to_be_bytes();
            unacked.fetch_add(1, Ordering::AcqRel);
            let mut record = BaseRecord::with_opaque_to(&self.topic, unacked.clone())
                .partition(staged.partition as i32)
                .key(&key[..])
                .payload(&writing.value[..]);
            if let Some(time) = staged.time.filter(|&t| t > 0) {
                record = record.timestamp(time);
            }
            loop {
                match writing.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        writing.producer.poll(Duration::from_millis(10));
                        record = back;
                    }
                    Err((error, _)) => {
                        return Err(broker_error(format!(
                            "producing to exchange `{}`: {error}",
                            self.topic
                        )));
                    }
                }
            }
        }
        writing.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Forgets each batch sent once the brokers have acknowledged all of it.
    fn settle(writing: &mut Writing, topic: &str) -> Result<(), ConnectorError> {
        writing.producer.poll(Duration::ZERO);
        writing.deliveries.check(topic)?;
        writing
            .sent
            .retain(|(_, _, unacked)| unacked.load(Ordering::Acquire) > 0);
        writing.account();
        Ok(())
    }

    /// Sends `frames` of `checkpoint` and keeps them until acknowledged.
    fn send_batch(
        &self,
        writing: &mut Writing,
        checkpoint: CheckpointId,
        frames: Frames,
    ) -> Result<(), ConnectorError> {
        let unacked = Unacked::default();
        let sent = self.send(writing, checkpoint, &frames, &unacked);
        writing.sent.push((checkpoint, frames, unacked));
        sent
    }

    /// This writer's part of a checkpoint.
    fn encode(&self, writing: &Writing) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(self.topic.len() as u32).to_le_bytes());
        bytes.extend_from_slice(self.topic.as_bytes());
        bytes.extend_from_slice(&self.partitions.to_le_bytes());
        bytes.extend_from_slice(&self.key_groups.count().to_le_bytes());
        bytes.extend_from_slice(&self.writer.to_le_bytes());
        bytes.extend_from_slice(&(writing.last_seq.len() as u32).to_le_bytes());
        for seq in &writing.last_seq {
            bytes.extend_from_slice(&seq.to_le_bytes());
        }
        let pending: Vec<(&CheckpointId, &Frames)> = writing
            .sent
            .iter()
            .map(|(checkpoint, frames, _)| (checkpoint, frames))
            .chain(
                writing
                    .staged
                    .iter()
                    .map(|(checkpoint, frames)| (checkpoint, frames)),
            )
            .collect();
        bytes.extend_from_slice(&(pending.len() as u32).to_le_bytes());
        for (checkpoint, frames) in pending {
            bytes.extend_from_slice(&checkpoint.get().to_le_bytes());
            bytes.extend_from_slice(&(frames.0.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&frames.0);
        }
        bytes
    }
}

/// A writer's part of a checkpoint, read back.
#[derive(Debug, PartialEq, Eq)]
struct WriterPart {
    topic: String,
    partitions: u32,
    key_groups: u32,
    writer: u32,
    last_seq: Vec<u64>,
    pending: Vec<(CheckpointId, Frames)>,
}

impl WriterPart {
    fn decode(bytes: &[u8]) -> Option<WriterPart> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        let u32_of = |b: &[u8]| b.try_into().ok().map(u32::from_le_bytes);
        let u64_of = |b: &[u8]| b.try_into().ok().map(u64::from_le_bytes);
        let len = u32_of(take(4)?)? as usize;
        let topic = String::from_utf8(take(len)?.to_vec()).ok()?;
        let partitions = u32_of(take(4)?)?;
        let key_groups = u32_of(take(4)?)?;
        let writer = u32_of(take(4)?)?;
        let count = u32_of(take(4)?)? as usize;
        let mut last_seq = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            last_seq.push(u64_of(take(8)?)?);
        }
        let count = u32_of(take(4)?)? as usize;
        let mut pending = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            let checkpoint = CheckpointId::new(u64_of(take(8)?)?);
            let len = usize::try_from(u64_of(take(8)?)?).ok()?;
            pending.push((checkpoint, Frames(take(len)?.to_vec())));
        }
        rest.is_empty().then_some(WriterPart {
            topic,
            partitions,
            key_groups,
            writer,
            last_seq,
            pending,
        })
    }
}

impl Sink for ExchangeSink {
    type In = Envelope;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let deliveries = Deliveries::default();
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            // A record that cannot be delivered stops the producer rather
            // than let later ones through: a reader never sees a gap that
            // a resend would fill.
            .set("enable.gapless.guarantee", "true")
            .set("linger.ms", "5");
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        let producer = config
            .create_with_context(deliveries.clone())
            .map_err(|e| broker_error(format!("a producer for `{}`: {e}", self.topic)))?;
        self.open = Some(Writing {
            producer,
            deliveries,
            checkpointed: ctx.checkpoints().is_some(),
            last_seq: vec![0; self.partitions as usize],
            current: Frames::default(),
            staged: Vec::new(),
            sent: Vec::new(),
            value: Vec::new(),
            unsent: UnsentShare {
                total: self.unsent.clone(),
                mine: 0,
            },
        });
        Ok(())
    }

    fn write(&mut self, record: Record<Envelope>) -> Result<(), ConnectorError> {
        let partition = self
            .key_groups
            .route(record.value.key_hash, self.partitions);
        let writing = self.writing()?;
        let seq = &mut writing.last_seq[partition as usize];
        *seq += 1;
        let seq = *seq;
        writing.current.push(partition, seq, &record);
        if !writing.checkpointed {
            // At most once, as the job promises: sent as it comes.
            return self.flush();
        }
        Ok(())
    }

    /// Without checkpoints, what was written goes out now; with, nothing
    /// goes out before its checkpoint completes.
    fn flush(&mut self) -> Result<(), ConnectorError> {
        let mut writing = self.open.take();
        let outcome = match writing.as_mut() {
            Some(writing) if !writing.checkpointed => {
                let frames = std::mem::take(&mut writing.current);
                let sent = self.send(writing, CheckpointId::NONE, &frames, &Unacked::default());
                sent.and_then(|()| writing.deliveries.check(&self.topic))
            }
            Some(writing) => ExchangeSink::settle(writing, &self.topic),
            None => Ok(()),
        };
        self.open = writing;
        outcome
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let writing = self.writing()?;
        if writing.checkpointed && !writing.current.0.is_empty() {
            let frames = std::mem::take(&mut writing.current);
            writing.staged.push((checkpoint, frames));
        }
        writing.account();
        Ok(())
    }

    /// What is staged, and what was sent but not acknowledged yet: a stage
    /// restored from this checkpoint sends it (again).
    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let topic = self.topic.clone();
        let writing = self.writing()?;
        ExchangeSink::settle(writing, &topic)?;
        let Some(writing) = self.open.as_ref() else {
            return Ok(None);
        };
        Ok(Some(StateBytes::new(WRITE_SCHEMA, self.encode(writing))))
    }

    /// Sends what completed checkpoints staged.
    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let Some(mut writing) = self.open.take() else {
            return Ok(());
        };
        let ready = writing
            .staged
            .iter()
            .take_while(|(id, _)| *id <= checkpoint)
            .count();
        let mut outcome = Ok(());
        for (id, frames) in writing.staged.drain(..ready).collect::<Vec<_>>() {
            match outcome {
                Ok(()) => outcome = self.send_batch(&mut writing, id, frames),
                // Not sent: kept staged, in the checkpoints, for the
                // restored stage.
                Err(_) => writing.staged.push((id, frames)),
            }
        }
        let outcome = outcome.and_then(|()| ExchangeSink::settle(&mut writing, &self.topic));
        self.open = Some(writing);
        outcome
    }

    /// Sends again what the checkpoint restored from held staged or not
    /// acknowledged (the reader drops what it has read of it).
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if restore.is_fresh() {
            return Ok(());
        }
        let Some(part) = restore
            .own()
            .or_else(|| (restore.parts.len() == 1).then(|| restore.parts[0]))
        else {
            return Ok(());
        };
        let refused = |what: &str| {
            exchange_refusal(format!(
                "exchange `{}`: writer {}'s checkpoint {} {what}: run the changed job as a new group",
                self.topic, self.writer, restore.checkpoint
            ))
        };
        if part.schema != WRITE_SCHEMA {
            return Err(refused(&format!(
                "holds layout {} of an exchange writer (this version reads layout {WRITE_SCHEMA}): it was written by another version of the exchange protocol",
                part.schema
            )));
        }
        let old = WriterPart::decode(part.bytes).ok_or_else(|| refused("is torn"))?;
        if (&old.topic, old.partitions, old.key_groups, old.writer)
            != (
                &self.topic,
                self.partitions,
                self.key_groups.count(),
                self.writer,
            )
        {
            return Err(refused(&format!(
                "was written for `{}` of {} partitions and {} key groups as writer {}",
                old.topic, old.partitions, old.key_groups, old.writer
            )));
        }
        let mut writing = self
            .open
            .take()
            .ok_or_else(|| refused("restored unopened"))?;
        let resent: usize = old.pending.iter().map(|(_, frames)| frames.0.len()).sum();
        if resent > 0 {
            tracing::info!(
                "exchange `{}`: writer {} restored from checkpoint {} sends again {resent} bytes of records its checkpoints covered",
                self.topic,
                self.writer,
                restore.checkpoint
            );
        }
        writing.last_seq = old.last_seq;
        writing.last_seq.resize(self.partitions as usize, 0);
        let mut outcome = Ok(());
        for (id, frames) in old.pending {
            match outcome {
                Ok(()) => outcome = self.send_batch(&mut writing, id, frames),
                Err(_) => writing.staged.push((id, frames)),
            }
        }
        writing.account();
        self.open = Some(writing);
        outcome
    }

    /// Waits until the brokers have acknowledged everything sent.
    fn close(&mut self) -> Result<(), ConnectorError> {
        self.flush()?;
        let topic = self.topic.clone();
        let writing = self.writing()?;
        let deadline = Instant::now() + CLOSE_WAIT;
        while writing.producer.in_flight_count() > 0 && Instant::now() < deadline {
            writing.producer.poll(Duration::from_millis(10));
        }
        if writing.producer.in_flight_count() > 0 {
            return Err(broker_error(format!(
                "exchange `{topic}`: records not acknowledged within {CLOSE_WAIT:?}"
            )));
        }
        ExchangeSink::settle(writing, &topic)
    }
}

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

    fn partitioned_log(&self) -> Option<String> {
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
        let inner = Restore {
            component: restore.component,
            checkpoint: restore.checkpoint,
            is_final: restore.is_final,
            ended: restore.ended.clone(),
            instance: restore.instance,
            parallelism: restore.parallelism,
            key_groups: restore.key_groups,
            parts: inner_parts,
            records: restore.records,
        };
        self.inner.restore(&inner)
    }
}

impl Replayable for ExchangeSource {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn head(writer: u32, checkpoint: u64, seq: u64) -> FrameHead {
        FrameHead {
            kind: RECORD,
            writer,
            checkpoint,
            seq,
        }
    }

    #[test]
    fn frame_heads_read_back_and_other_bytes_are_not_frames() {
        let mut bytes = Vec::new();
        let written = head(7, u64::MAX, 1 << 40);
        written.write(&mut bytes);
        bytes.extend_from_slice(b"payload");
        assert_eq!(FrameHead::read(&bytes), Some(written));
        assert_eq!(FrameHead::read(&bytes[..HEAD - 1]), None, "torn");
        assert_eq!(FrameHead::read(b"a line of text, not a frame"), None);
        bytes[1] = 9;
        assert_eq!(FrameHead::read(&bytes), None, "an unknown kind");
    }

    #[test]
    fn staged_records_and_a_writers_part_read_back() {
        let mut frames = Frames::default();
        let record = |key_hash: u64, time: Option<i64>, payload: &[u8]| Record {
            value: Envelope {
                key_hash,
                writer: 0,
                seq: 0,
                payload: payload.to_vec(),
            },
            time: time.map(Timestamp::from_millis),
        };
        frames.push(2, 9, &record(u64::MAX, Some(i64::MAX), b"abc"));
        frames.push(0, 1, &record(0, None, b""));
        type Read = (u32, u64, u64, Option<i64>, Vec<u8>);
        let read: Vec<Read> = frames
            .iter()
            .map(|s| {
                let s = s.unwrap();
                (s.partition, s.seq, s.key_hash, s.time, s.payload.to_vec())
            })
            .collect();
        assert_eq!(
            read,
            [
                (2, 9, u64::MAX, Some(i64::MAX), b"abc".to_vec()),
                (0, 1, 0, None, Vec::new())
            ]
        );
        let torn = Frames(frames.0[..frames.0.len() - 1].to_vec());
        assert!(torn.iter().any(|s| s.is_none()), "a torn frame is found");

        let sink = ExchangeSink::new(
            "127.0.0.1:1",
            "x",
            3,
            KeyGroups::DEFAULT,
            2,
            &[],
            Unsent::default(),
        );
        let writing = Writing {
            producer: ClientConfig::new()
                .set("bootstrap.servers", "127.0.0.1:1")
                .create_with_context(Deliveries::default())
                .unwrap(),
            deliveries: Deliveries::default(),
            checkpointed: true,
            last_seq: vec![9, 0, 4],
            current: Frames::default(),
            staged: vec![(CheckpointId::new(5), frames.clone())],
            sent: vec![(CheckpointId::new(4), Frames(Vec::new()), Unacked::default())],
            value: Vec::new(),
            unsent: UnsentShare::default(),
        };
        let bytes = sink.encode(&writing);
        let part = WriterPart::decode(&bytes).unwrap();
        assert_eq!(
            part,
            WriterPart {
                topic: "x".into(),
                partitions: 3,
                key_groups: KeyGroups::DEFAULT.count(),
                writer: 2,
                last_seq: vec![9, 0, 4],
                pending: vec![
                    (CheckpointId::new(4), Frames(Vec::new())),
                    (CheckpointId::new(5), frames)
                ],
            },
            "what was sent but not acknowledged comes first"
        );
        for cut in 0..bytes.len() {
            assert!(WriterPart::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
    }

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
