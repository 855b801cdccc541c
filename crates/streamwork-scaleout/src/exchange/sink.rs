//! The writing end of an exchange: [`ExchangeSink`] stages what a stage
//! writes between two barriers, keeps it in the checkpoint, and sends it
//! once the checkpoint is complete (see the [module docs](super)).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use streamwork_core::checkpoint::{CheckpointView, Restore, RestoredPart, StateBytes};
use streamwork_core::{CheckpointId, ConnectorError, InstanceContext, KeyGroups, Record, Sink};
use streamwork_runtime::cut::Envelope;

use super::frame::{FrameHead, Frames, RECORD};
use super::{CLOSE_WAIT, broker_error, exchange_refusal};

/// The layout of [`ExchangeSink`]'s part of a checkpoint.
const WRITE_SCHEMA: u32 = 1;

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
    /// The exchange's topics of earlier generations: a part of a
    /// checkpoint written for one of them was sent by the rescale that
    /// moved the exchange (see `rescale`), and starts this writer anew.
    previous: Vec<String>,
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
            previous: self.previous.clone(),
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
            previous: Vec::new(),
            open: None,
        }
    }

    /// The same sink, for an exchange whose earlier generations had the
    /// topics `previous`.
    pub(crate) fn moved_from(mut self, previous: &[String]) -> Self {
        self.previous = previous.to_vec();
        self
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

/// Sends what a writer's part of a checkpoint holds staged or
/// unacknowledged into the topic it was written for, as the writer restored
/// from it would, and waits for the brokers' acknowledgement: what a
/// rescale does for the old writers before it moves an exchange.
pub(crate) fn resend_part(
    brokers: &str,
    extra: &[(String, String)],
    part: &RestoredPart<'_>,
) -> Result<(), ConnectorError> {
    let old = WriterPart::decode(part.bytes)
        .filter(|_| part.schema == WRITE_SCHEMA)
        .ok_or_else(|| {
            exchange_refusal(format!(
                "an exchange writer's part of layout {} cannot be read: the checkpoint was written by another version of the exchange protocol",
                part.schema
            ))
        })?;
    let key_groups = KeyGroups::new(old.key_groups).unwrap_or_default();
    let mut sink = ExchangeSink::new(
        brokers,
        &old.topic,
        old.partitions,
        key_groups,
        old.writer,
        extra,
        Unsent::default(),
    );
    let ctx = InstanceContext::new("rescale", part.part, 1, key_groups)
        .with_checkpoints(CheckpointView::new(Arc::new(AtomicU64::new(0)), None));
    sink.open(&ctx)?;
    let mut restore = Restore::nothing("rescale", part.part, 1, key_groups);
    restore.checkpoint = CheckpointId::new(1);
    restore.parts = vec![*part];
    sink.restore(&restore)?;
    let outcome = sink.close();
    // Acknowledged (or failed): nothing is left to send.
    if let Some(writing) = sink.open.as_mut() {
        writing.sent.clear();
        writing.staged.clear();
    }
    outcome
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
        if self.previous.contains(&old.topic) {
            // The exchange moved to another topic since: the rescale sent
            // what the part held into the old one, and this writer starts
            // anew in the new one.
            return Ok(());
        }
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

#[cfg(test)]
mod tests {
    use streamwork_core::Timestamp;

    use super::*;

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
}
