//! The transactional Kafka sink: what a checkpoint covers becomes visible
//! to `read_committed` readers when the checkpoint completes, once.
//!
//! Records are staged, not sent, between checkpoints: appended in memory,
//! and at each barrier made the sink's part of the checkpoint
//! ([`Sink::snapshot`]), so they live wherever the checkpoints live (in the
//! checkpoint store when the job has one): a process on another machine
//! that restores the checkpoint has them. When the checkpoint completes,
//! `commit` sends the staged records in one Kafka transaction that also
//! commits a marker, the run's epoch and the checkpoint id packed into the
//! offset of a consumer group of the sink's own (offset metadata would be
//! the natural place for the run, but not every broker keeps it). The
//! transaction and its marker land together or not at all, so after a crash
//! `restore` knows which staged checkpoints reached Kafka (at or below the
//! marker) and sends the others the restored checkpoint holds. Librdkafka
//! cannot resume another producer's open transaction, which is why records
//! wait in the checkpoint rather than in an open transaction: a crash
//! between a checkpoint's completion and its commit loses nothing.
//!
//! The transactional id fences: opening an instance aborts what a previous
//! producer with its id left open, and a zombie of that producer can no
//! longer commit.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use streamwork_core::checkpoint::{CheckpointId, CheckpointView, Transactional};
use streamwork_core::{
    ConnectorError, Data, InstanceContext, InstanceIdx, Record, Restore, Sink, StateBytes,
};

use super::kafka_error;
use super::origin::ORIGIN_HEADER;
use super::sink::{KafkaSink, kafka_timestamp, send_waiting};

/// How long a transaction step may take before the sink fails.
const TIMEOUT: Duration = Duration::from_secs(30);
/// What an instance stages before it asks for an early checkpoint, unless
/// set ([`TransactionalKafkaSink::max_pending_bytes`]).
const MAX_PENDING_BYTES: usize = 64 << 20;
/// The layout of the sink's part of a checkpoint: its run's epoch and what
/// it staged and has not published.
const STAGED_SCHEMA: u32 = 1;

/// A [`KafkaSink`] that publishes each checkpoint's records in a Kafka
/// transaction when the checkpoint completes (see the module docs); made
/// by [`KafkaSink::transactional`]. It is `Transactional`, so a job with
/// `delivery exactly_once;` accepts it.
///
/// Readers see each record once with `isolation.level=read_committed`
/// (the default of a [`KafkaSource`](super::KafkaSource)). Output is as
/// late as the checkpoint interval. What a checkpoint staged is in the
/// checkpoint, so nothing is shared between the processes that may run the
/// sink but the brokers and the checkpoints.
///
/// Memory: an instance holds what it staged since the last barrier; when
/// that passes [`max_pending_bytes`](Self::max_pending_bytes) (64 MiB by
/// default) it asks for the job's next checkpoint at once, so input faster
/// than the checkpoint interval does not grow it without bound. Without
/// checkpoints (an at-most-once job) it publishes what it staged in a
/// transaction each time it passes that size, and the rest at the end: a
/// failure loses what was not yet published, as at most once allows.
pub struct TransactionalKafkaSink<T> {
    sink: KafkaSink<T>,
    transactional_id: String,
    max_pending: usize,
    instance: Option<Instance>,
}

impl<T> Clone for TransactionalKafkaSink<T> {
    fn clone(&self) -> Self {
        TransactionalKafkaSink {
            sink: self.sink.clone(),
            transactional_id: self.transactional_id.clone(),
            max_pending: self.max_pending,
            instance: None,
        }
    }
}

impl<T: Data> KafkaSink<T> {
    /// Publishes each checkpoint's records in one transaction when the
    /// checkpoint completes. `transactional_id` names the sink for the
    /// brokers (instance `i` uses `ID-i`, for its producer and the marker
    /// group): keep it across restarts and unique per sink.
    pub fn transactional(self, transactional_id: &str) -> TransactionalKafkaSink<T> {
        TransactionalKafkaSink {
            sink: self,
            transactional_id: transactional_id.to_string(),
            max_pending: MAX_PENDING_BYTES,
            instance: None,
        }
    }
}

impl<T> TransactionalKafkaSink<T> {
    /// How much an instance stages (encoded) before it asks for the job's
    /// next checkpoint now, rather than at the interval; at least 1 byte.
    ///
    /// ```no_run
    /// use streamwork::connectors::kafka::KafkaSink;
    /// let sink = KafkaSink::new("127.0.0.1:9092", "totals", |n: &u64| (None, n.to_string().into_bytes()))
    ///     .transactional("totals-sink")
    ///     .max_pending_bytes(16 << 20);
    /// # let _ = sink;
    /// ```
    pub fn max_pending_bytes(mut self, bytes: usize) -> Self {
        self.max_pending = bytes.max(1);
        self
    }
}

/// One open instance: what it staged and its transactional producer.
struct Instance {
    /// `ID-i`.
    id: String,
    publisher: Publisher,
    /// Frames written since the last barrier.
    pending: Vec<u8>,
    /// Staged for checkpoints not yet published, oldest first.
    staged: Vec<(Staged, Vec<u8>)>,
    /// Whether this run's epoch is set: by `restore`, or by the first
    /// write of a fresh run.
    started: bool,
    /// Whether the job takes checkpoints; without, `close` publishes.
    checkpointed: bool,
    /// The frame being written.
    scratch: Vec<u8>,
    /// This run's epoch: one more than the last run's marker.
    run: u64,
    /// The job's checkpoints, asked for one early when `pending` is full.
    checkpoints: Option<CheckpointView>,
    /// Whether `pending` asked already (until its barrier).
    asked: bool,
}

/// A transactional producer and the marker group of one instance id.
struct Publisher {
    topic: String,
    producer: BaseProducer,
    marker: BaseConsumer,
}

impl Publisher {
    fn new(
        brokers: &str,
        topic: &str,
        id: &str,
        extra: &[(String, String)],
    ) -> Result<Self, ConnectorError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("transactional.id", id)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        for (key, value) in extra {
            config.set(key, value);
        }
        let producer: BaseProducer = config
            .create()
            .map_err(|e| kafka_error("creating a transactional producer", e))?;
        // Fences older producers of this id and aborts what they left open.
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| kafka_error(format!("initialising transactions as `{id}`"), e))?;
        let marker: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", id)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| kafka_error("creating the marker consumer", e))?;
        Ok(Publisher {
            topic: topic.to_string(),
            producer,
            marker,
        })
    }

    /// The last marker that reached Kafka, as `(epoch, checkpoint)`.
    fn marker(&self) -> Result<Option<(u64, u64)>, ConnectorError> {
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(&self.topic, 0);
        let committed = self
            .marker
            .committed_offsets(wanted, TIMEOUT)
            .map_err(|e| kafka_error("reading the sink's marker", e))?;
        Ok(committed
            .find_partition(&self.topic, 0)
            .and_then(|marker| match marker.offset() {
                Offset::Offset(at) if at >= 0 => Some(unpack(at)),
                _ => None,
            }))
    }

    /// Sends one checkpoint's staged frames and its marker in one
    /// transaction.
    fn publish(&self, bytes: &[u8], staged: Staged, run: u64) -> Result<(), ConnectorError> {
        let doing = format!("publishing checkpoint {staged:?} to `{}`", self.topic);
        self.producer
            .begin_transaction()
            .map_err(|e| kafka_error(doing.clone(), e))?;
        let outcome = self.send_all(bytes).and_then(|()| {
            let mut marker = TopicPartitionList::new();
            let mut at = marker.add_partition(&self.topic, 0);
            at.set_offset(Offset::Offset(staged.marker(run)))
                .map_err(|e| kafka_error(doing.clone(), e))?;
            let group = self
                .marker
                .group_metadata()
                .ok_or_else(|| ConnectorError::user("the marker consumer has no group"))?;
            self.producer
                .send_offsets_to_transaction(&marker, &group, TIMEOUT)
                .map_err(|e| kafka_error(doing.clone(), e))?;
            self.producer
                .commit_transaction(TIMEOUT)
                .map_err(|e| kafka_error(doing.clone(), e))
        });
        if outcome.is_err() {
            let _ = self.producer.abort_transaction(TIMEOUT);
        }
        outcome
    }

    fn send_all(&self, mut bytes: &[u8]) -> Result<(), ConnectorError> {
        while !bytes.is_empty() {
            let (frame, rest) = Frame::decode(bytes).ok_or_else(|| {
                ConnectorError::user(format!(
                    "transactional kafka sink of `{}`: staged records are torn",
                    self.topic
                ))
            })?;
            bytes = rest;
            let mut send = BaseRecord::<[u8], [u8]>::to(&self.topic).payload(frame.value);
            if let Some(key) = frame.key {
                send = send.key(key);
            }
            if let Some(partition) = frame.partition {
                send = send.partition(partition);
            }
            if let Some(timestamp) = frame.timestamp {
                send = send.timestamp(timestamp);
            }
            if let Some(origin) = frame.origin {
                send = send.headers(OwnedHeaders::new_with_capacity(1).insert(Header {
                    key: ORIGIN_HEADER,
                    value: Some(origin),
                }));
            }
            send_waiting(&self.producer, send, &self.topic)?;
        }
        Ok(())
    }
}

/// A staged file's checkpoint.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Staged {
    At(u64),
    Final,
}

impl Staged {
    fn of(checkpoint: CheckpointId) -> Self {
        if checkpoint.is_final() {
            Staged::Final
        } else {
            Staged::At(checkpoint.get())
        }
    }

    /// Its bytes in the sink's part: the final checkpoint as `u64::MAX`.
    fn to_raw(self) -> u64 {
        match self {
            Staged::At(id) => id,
            Staged::Final => u64::MAX,
        }
    }

    fn from_raw(raw: u64) -> Self {
        match raw {
            u64::MAX => Staged::Final,
            id => Staged::At(id),
        }
    }

    /// The checkpoint's part of a marker: its id, the final one largest.
    fn id(self) -> u64 {
        match self {
            Staged::At(id) => id.min(CHECKPOINT_MASK - 1),
            Staged::Final => CHECKPOINT_MASK,
        }
    }

    /// The marker offset of this checkpoint in run `epoch`.
    fn marker(self, epoch: u64) -> i64 {
        ((epoch.min(EPOCH_MAX) << CHECKPOINT_BITS) | self.id()) as i64
    }

    fn is_published_by(self, checkpoint: u64) -> bool {
        self.id() <= checkpoint
    }
}

/// One staged record: key, value, partition, timestamp and origin, each
/// length-prefixed (`u32::MAX` for none) in little endian.
struct Frame<'a> {
    key: Option<&'a [u8]>,
    value: &'a [u8],
    partition: Option<i32>,
    timestamp: Option<i64>,
    origin: Option<&'a [u8]>,
}

impl<'a> Frame<'a> {
    fn encode(&self, out: &mut Vec<u8>) {
        fn bytes(out: &mut Vec<u8>, field: Option<&[u8]>) {
            match field {
                Some(b) => {
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
                None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
        }
        bytes(out, self.key);
        bytes(out, Some(self.value));
        out.push(u8::from(self.partition.is_some()));
        out.extend_from_slice(&self.partition.unwrap_or(0).to_le_bytes());
        out.push(u8::from(self.timestamp.is_some()));
        out.extend_from_slice(&self.timestamp.unwrap_or(0).to_le_bytes());
        bytes(out, self.origin);
    }

    fn decode(input: &'a [u8]) -> Option<(Frame<'a>, &'a [u8])> {
        fn bytes(input: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
            let (len, rest) = input.split_first_chunk::<4>()?;
            match u32::from_le_bytes(*len) {
                u32::MAX => Some((None, rest)),
                len => {
                    let len = len as usize;
                    (rest.len() >= len).then(|| (Some(&rest[..len]), &rest[len..]))
                }
            }
        }
        let (key, rest) = bytes(input)?;
        let (value, rest) = bytes(rest)?;
        let (&has_partition, rest) = rest.split_first()?;
        let (partition, rest) = rest.split_first_chunk::<4>()?;
        let (&has_timestamp, rest) = rest.split_first()?;
        let (timestamp, rest) = rest.split_first_chunk::<8>()?;
        let (origin, rest) = bytes(rest)?;
        Some((
            Frame {
                key,
                value: value?,
                partition: (has_partition == 1).then(|| i32::from_le_bytes(*partition)),
                timestamp: (has_timestamp == 1).then(|| i64::from_le_bytes(*timestamp)),
                origin,
            },
            rest,
        ))
    }
}

/// An instance's part of a checkpoint, read back: its run's epoch and
/// what it staged.
struct Part {
    run: u64,
    staged: Vec<(Staged, Vec<u8>)>,
}

impl Part {
    fn decode(bytes: &[u8]) -> Option<Part> {
        let (run, mut rest) = bytes.split_first_chunk::<8>()?;
        let mut staged = Vec::new();
        while !rest.is_empty() {
            let (which, after) = rest.split_first_chunk::<8>()?;
            let (len, after) = after.split_first_chunk::<8>()?;
            let (frames, after) =
                after.split_at_checked(usize::try_from(u64::from_le_bytes(*len)).ok()?)?;
            staged.push((
                Staged::from_raw(u64::from_le_bytes(*which)),
                frames.to_vec(),
            ));
            rest = after;
        }
        Some(Part {
            run: u64::from_le_bytes(*run),
            staged,
        })
    }
}

impl Instance {
    /// A fresh run: a new epoch, past every earlier run's marker.
    fn start_fresh(&mut self) -> Result<(), ConnectorError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        self.staged.clear();
        self.run = self.publisher.marker()?.map_or(1, |(epoch, _)| epoch + 1);
        Ok(())
    }

    /// Makes the pending records `checkpoint`'s.
    fn stage(&mut self, checkpoint: CheckpointId) {
        self.asked = false;
        let frames = std::mem::take(&mut self.pending);
        self.staged.push((Staged::of(checkpoint), frames));
    }

    /// This instance's part of a checkpoint.
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&self.run.to_le_bytes());
        for (which, frames) in &self.staged {
            bytes.extend_from_slice(&which.to_raw().to_le_bytes());
            bytes.extend_from_slice(&(frames.len() as u64).to_le_bytes());
            bytes.extend_from_slice(frames);
        }
        bytes
    }

    /// After a restore from a checkpoint covering `covered`, whose part of
    /// this instance is `part`: publishes what the part staged that the
    /// marker says did not reach Kafka.
    fn recover(&mut self, covered: Staged, part: Part) -> Result<(), ConnectorError> {
        self.started = true;
        self.staged.clear();
        let marker = self.publisher.marker()?;
        self.run = part.run;
        let published = marker
            .filter(|&(epoch, _)| epoch == self.run)
            .map(|(_, checkpoint)| checkpoint);
        if let Some(published) = published.filter(|&p| p > covered.id()) {
            let what = if published == Staged::Final.id() {
                "the final checkpoint".to_string()
            } else {
                format!("checkpoint {published}")
            };
            return Err(ConnectorError::user(format!(
                "transactional kafka sink `{}` has published the output of {what} to `{}`, but this run restores an older checkpoint: that output would be published twice. The job is not restoring from the checkpoints this output was written with, or they lost their newest checkpoints: point the job at them",
                self.id, self.publisher.topic,
            )));
        }
        for (which, frames) in part.staged {
            let reached_kafka = published.is_some_and(|marker| which.is_published_by(marker));
            if !reached_kafka && which <= covered {
                self.publisher.publish(&frames, which, self.run)?;
            }
        }
        Ok(())
    }

    /// Publishes every staged checkpoint up to `checkpoint`, in order.
    fn publish_up_to(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let upto = Staged::of(checkpoint);
        while let Some((which, frames)) = self.staged.first() {
            if *which > upto {
                break;
            }
            self.publisher.publish(frames, *which, self.run)?;
            self.staged.remove(0);
        }
        Ok(())
    }
}

/// A marker is `epoch << 40 | checkpoint`: 2^40 checkpoints a run (one
/// a millisecond for 34 years), 2^23 runs.
const CHECKPOINT_BITS: u32 = 40;
const CHECKPOINT_MASK: u64 = (1 << CHECKPOINT_BITS) - 1;
const EPOCH_MAX: u64 = (1 << (63 - CHECKPOINT_BITS)) - 1;

fn unpack(marker: i64) -> (u64, u64) {
    let marker = marker as u64;
    (marker >> CHECKPOINT_BITS, marker & CHECKPOINT_MASK)
}

impl<T: Data> TransactionalKafkaSink<T> {
    /// The producer of instance `index` (opening it fences its zombies).
    fn open_instance(
        &self,
        index: u32,
        checkpoints: Option<&CheckpointView>,
    ) -> Result<Instance, ConnectorError> {
        let id = format!("{}-{index}", self.transactional_id);
        let publisher = Publisher::new(
            self.sink.brokers(),
            self.sink.topic(),
            &id,
            self.sink.extra(),
        )?;
        Ok(Instance {
            id,
            publisher,
            pending: Vec::new(),
            staged: Vec::new(),
            started: false,
            checkpointed: checkpoints.is_some(),
            scratch: Vec::new(),
            run: 0,
            checkpoints: checkpoints.cloned(),
            asked: false,
        })
    }

    fn instance(&mut self) -> Result<&mut Instance, ConnectorError> {
        self.instance.as_mut().ok_or_else(|| {
            ConnectorError::user("transactional kafka sink used before it was opened")
        })
    }
}

/// The part of a checkpoint an instance wrote, read back, or a refusal
/// naming the sink.
fn read_part(
    restore: &Restore<'_>,
    bytes: &[u8],
    schema: u32,
    part: InstanceIdx,
) -> Result<Part, ConnectorError> {
    if schema != STAGED_SCHEMA {
        return Err(ConnectorError::user(format!(
            "transactional kafka sink `{}`: instance {part}'s part of checkpoint {} has layout {schema} (this version reads layout {STAGED_SCHEMA}): a checkpoint of another version of the sink",
            restore.component, restore.checkpoint
        )));
    }
    Part::decode(bytes).ok_or_else(|| {
        ConnectorError::user(format!(
            "transactional kafka sink `{}`: instance {part}'s part of checkpoint {} is torn",
            restore.component, restore.checkpoint
        ))
    })
}

impl<T: Data> Transactional for TransactionalKafkaSink<T> {}

impl<T: Data> Sink for TransactionalKafkaSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let instance = self.open_instance(ctx.instance().0, ctx.checkpoints())?;
        self.instance = Some(instance);
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let (key, value) = self.sink.encode(&record.value)?;
        let origin = self.sink.origin_of(&record.value);
        let frame = Frame {
            key: key.as_deref(),
            value: &value,
            partition: self.sink.partition_of(&record.value),
            timestamp: kafka_timestamp(&record),
            origin: origin.as_ref().map(|o| &o[..]),
        };
        let max_pending = self.max_pending;
        let instance = self.instance()?;
        instance.start_fresh()?;
        // One buffer for every record's frame.
        let mut scratch = std::mem::take(&mut instance.scratch);
        scratch.clear();
        frame.encode(&mut scratch);
        instance.pending.extend_from_slice(&scratch);
        instance.scratch = scratch;
        if instance.pending.len() >= max_pending {
            if !instance.checkpointed {
                // No checkpoint will come: publish what is staged now.
                instance.stage(CheckpointId::FINAL);
                instance.publish_up_to(CheckpointId::FINAL)?;
            } else if !instance.asked {
                instance.asked = true;
                if let Some(checkpoints) = &instance.checkpoints {
                    checkpoints.request_checkpoint();
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        // Nothing is visible before its checkpoint completes.
        Ok(())
    }

    /// In a job without checkpoints, everything is published at the end,
    /// in one transaction.
    fn close(&mut self) -> Result<(), ConnectorError> {
        let instance = self.instance()?;
        if !instance.checkpointed {
            instance.start_fresh()?;
            instance.stage(CheckpointId::FINAL);
            instance.publish_up_to(CheckpointId::FINAL)?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let instance = self.instance()?;
        instance.start_fresh()?;
        instance.stage(checkpoint);
        Ok(())
    }

    /// The run's epoch and what is staged and not published.
    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let instance = self.instance()?;
        Ok(Some(StateBytes::new(STAGED_SCHEMA, instance.encode())))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let instance = self.instance()?;
        instance.start_fresh()?;
        instance.publish_up_to(checkpoint)
    }

    /// Publishes what the checkpoint restored from staged and the markers
    /// say did not reach Kafka (what was staged after it is not in it: its
    /// records come again from the replay); after a scale-down, the same for
    /// the parts of the removed instances (old instance `k` by new instance
    /// `k % parallelism`, through `ID-k`, which fences `k`'s zombies).
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if restore.is_fresh() {
            // Nothing an earlier run staged completed: a new epoch.
            return self.instance()?.start_fresh();
        }
        let parallelism = restore.parallelism.max(1);
        let covered_of = |k: InstanceIdx| {
            if restore.is_final || restore.ended.contains(&k) {
                Staged::Final
            } else {
                Staged::of(restore.checkpoint)
            }
        };
        let mut own = false;
        for part in &restore.parts {
            let k = part.part;
            if k.0 % parallelism != restore.instance.0 {
                continue;
            }
            let staged = read_part(restore, part.bytes, part.schema, k)?;
            if k == restore.instance {
                own = true;
                self.instance()?.recover(covered_of(k), staged)?;
            } else {
                let mut orphan = self.open_instance(k.0, None)?;
                orphan.checkpointed = true;
                orphan.recover(covered_of(k), staged)?;
            }
        }
        if !own {
            // A new instance (a scale-up): a run of its own.
            self.instance()?.start_fresh()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_as_written() {
        let frames = [
            Frame {
                key: Some(b"k"),
                value: b"value",
                partition: Some(3),
                timestamp: Some(1_700_000_000_000),
                origin: Some(b"origin"),
            },
            Frame {
                key: None,
                value: b"",
                partition: None,
                timestamp: None,
                origin: None,
            },
        ];
        let mut bytes = Vec::new();
        for frame in &frames {
            frame.encode(&mut bytes);
        }
        let (first, rest) = Frame::decode(&bytes).unwrap();
        assert_eq!(first.key, Some(&b"k"[..]));
        assert_eq!(first.value, b"value");
        assert_eq!(first.partition, Some(3));
        assert_eq!(first.timestamp, Some(1_700_000_000_000));
        assert_eq!(first.origin, Some(&b"origin"[..]));
        let (second, rest) = Frame::decode(rest).unwrap();
        assert_eq!(
            (second.key, second.value, second.partition),
            (None, &b""[..], None)
        );
        assert_eq!((second.timestamp, second.origin), (None, None));
        assert!(rest.is_empty());
        // A torn frame is refused, not misread.
        for cut in 1..8 {
            let torn = &bytes[..cut];
            assert!(Frame::decode(torn).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn staged_checkpoints_sort_with_the_final_one_last() {
        let mut staged = vec![Staged::Final, Staged::At(10), Staged::At(2)];
        staged.sort();
        assert_eq!(staged, [Staged::At(2), Staged::At(10), Staged::Final]);
        for s in staged {
            assert_eq!(Staged::from_raw(s.to_raw()), s);
        }
        assert!(Staged::At(3).is_published_by(3));
        assert!(!Staged::At(4).is_published_by(3));
        assert!(!Staged::Final.is_published_by(3));
        assert!(Staged::Final.is_published_by(CHECKPOINT_MASK));
        for (epoch, staged) in [(1, Staged::At(7)), (EPOCH_MAX, Staged::Final)] {
            let marker = staged.marker(epoch);
            assert!(marker >= 0);
            assert_eq!(unpack(marker), (epoch, staged.id()));
        }
        assert!(
            Staged::At(1).marker(2) > Staged::Final.marker(1),
            "a later run's markers are larger"
        );
    }
}
