//! The transactional Kafka sink: what a checkpoint covers becomes visible
//! to `read_committed` readers when the checkpoint completes, once.
//!
//! Records are staged, not sent, between checkpoints: appended to a file
//! of the instance's staging directory, which `pre_commit` makes durable
//! and names after the checkpoint. When the checkpoint completes, `commit`
//! sends the staged records in one Kafka transaction that also commits a
//! marker, the run's epoch and the checkpoint id packed into the offset of
//! a consumer group of the sink's own (offset metadata would be the natural
//! place for the run, but not every broker keeps it). The transaction
//! and its marker land together or not at all, so after a crash `restore`
//! knows which staged checkpoints reached Kafka (at or below the marker)
//! and sends the others the completed checkpoint covers. Librdkafka cannot
//! resume another producer's open transaction, which is why records wait
//! in files rather than in an open transaction: a crash between a
//! checkpoint's completion and its commit loses nothing.
//!
//! The transactional id fences: opening an instance aborts what a previous
//! producer with its id left open, and a zombie of that producer can no
//! longer commit.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use streamwork_core::checkpoint::{CheckpointId, Transactional};
use streamwork_core::{ConnectorError, Data, InstanceContext, Record, Restore, Sink};

use super::kafka_error;
use super::origin::ORIGIN_HEADER;
use super::sink::{KafkaSink, kafka_timestamp, send_waiting};

/// How long a transaction step may take before the sink fails.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A [`KafkaSink`] that publishes each checkpoint's records in a Kafka
/// transaction when the checkpoint completes (see the module docs); made
/// by [`KafkaSink::transactional`]. It is `Transactional`, so a job with
/// `delivery exactly_once;` accepts it.
///
/// Readers see each record once with `isolation.level=read_committed`
/// (the default of a [`KafkaSource`](super::KafkaSource)). Output is as
/// late as the checkpoint interval.
pub struct TransactionalKafkaSink<T> {
    sink: KafkaSink<T>,
    transactional_id: String,
    staging: PathBuf,
    instance: Option<Instance>,
}

impl<T> Clone for TransactionalKafkaSink<T> {
    fn clone(&self) -> Self {
        TransactionalKafkaSink {
            sink: self.sink.clone(),
            transactional_id: self.transactional_id.clone(),
            staging: self.staging.clone(),
            instance: None,
        }
    }
}

impl<T: Data> KafkaSink<T> {
    /// Publishes each checkpoint's records in one transaction when the
    /// checkpoint completes. `transactional_id` names the sink for the
    /// brokers (instance `i` uses `ID-i`, for its producer and the marker
    /// group): keep it across restarts and unique per sink. `staging` holds
    /// the records of checkpoints not yet published, `staging/ID-i/`: keep
    /// it across restarts, on storage every process that may run the
    /// instance can reach.
    pub fn transactional(
        self,
        transactional_id: &str,
        staging: impl Into<PathBuf>,
    ) -> TransactionalKafkaSink<T> {
        TransactionalKafkaSink {
            sink: self,
            transactional_id: transactional_id.to_string(),
            staging: staging.into(),
            instance: None,
        }
    }
}

/// One open instance: its staging files and its transactional producer.
struct Instance {
    dir: PathBuf,
    publisher: Publisher,
    pending: Option<BufWriter<File>>,
    /// Whether this run's epoch is set: by `restore`, or by the first
    /// write of a fresh run (which first clears what an older run left).
    started: bool,
    /// Whether the job takes checkpoints; without, `close` publishes.
    checkpointed: bool,
    /// The frame being written.
    scratch: Vec<u8>,
    /// This run's epoch: one more than the last run's marker.
    run: u64,
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

    /// Sends one staged file and its marker in one transaction.
    fn publish(&self, path: &Path, staged: Staged, run: u64) -> Result<(), ConnectorError> {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| ConnectorError::io(format!("reading {}", path.display()), e))?;
        let doing = format!("publishing checkpoint {staged:?} to `{}`", self.topic);
        self.producer
            .begin_transaction()
            .map_err(|e| kafka_error(doing.clone(), e))?;
        let outcome = self.send_all(&bytes, path).and_then(|()| {
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

    fn send_all(&self, mut bytes: &[u8], path: &Path) -> Result<(), ConnectorError> {
        while !bytes.is_empty() {
            let (frame, rest) = Frame::decode(bytes).ok_or_else(|| {
                ConnectorError::user(format!(
                    "{} is torn or not a staging file: remove it only if its checkpoint was never completed",
                    path.display()
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

    fn file_name(self) -> String {
        match self {
            Staged::At(id) => format!("staged-{id:020}"),
            Staged::Final => "staged-final".to_string(),
        }
    }

    fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("staged-")?;
        if rest == "final" {
            return Some(Staged::Final);
        }
        rest.parse().ok().map(Staged::At)
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

impl Instance {
    fn pending_path(&self) -> PathBuf {
        self.dir.join("pending")
    }

    /// The staged files, oldest checkpoint first.
    fn staged(&self) -> Result<Vec<(Staged, PathBuf)>, ConnectorError> {
        let mut staged = Vec::new();
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| ConnectorError::io(format!("listing {}", self.dir.display()), e))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| ConnectorError::io(format!("listing {}", self.dir.display()), e))?;
            if let Some(which) = entry.file_name().to_str().and_then(Staged::parse) {
                staged.push((which, entry.path()));
            }
        }
        staged.sort();
        Ok(staged)
    }

    /// A fresh run: what an older run left is not this run's.
    fn start_fresh(&mut self) -> Result<(), ConnectorError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        for (_, path) in self.staged()? {
            remove(&path)?;
        }
        // A new epoch, past every earlier run's marker.
        self.run = self.publisher.marker()?.map_or(1, |(epoch, _)| epoch + 1);
        self.write_run()
    }

    fn write_run(&self) -> Result<(), ConnectorError> {
        let run_path = self.dir.join("run");
        fs::write(&run_path, self.run.to_string())
            .map_err(|e| ConnectorError::io(format!("writing {}", run_path.display()), e))
    }

    fn pending(&mut self) -> Result<&mut BufWriter<File>, ConnectorError> {
        if self.pending.is_none() {
            let path = self.pending_path();
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)
                .map_err(|e| ConnectorError::io(format!("creating {}", path.display()), e))?;
            self.pending = Some(BufWriter::with_capacity(1 << 16, file));
        }
        Ok(self.pending.as_mut().expect("just created"))
    }

    /// Makes the pending records durable as `checkpoint`'s.
    fn stage(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.pending()?;
        let path = self.pending_path();
        let writer = self.pending.take().expect("created above");
        let file = writer.into_inner().map_err(|e| {
            ConnectorError::io(format!("writing {}", path.display()), e.into_error())
        })?;
        file.sync_data()
            .map_err(|e| ConnectorError::io(format!("syncing {}", path.display()), e))?;
        let staged = self.dir.join(Staged::of(checkpoint).file_name());
        fs::rename(&path, &staged)
            .map_err(|e| ConnectorError::io(format!("staging {}", staged.display()), e))
    }

    /// After a restore from a checkpoint covering `covered`: publishes the
    /// staged checkpoints it covers that the marker says did not reach
    /// Kafka, and discards the rest.
    fn recover(&mut self, covered: Staged) -> Result<(), ConnectorError> {
        self.started = true;
        let marker = self.publisher.marker()?;
        let run_path = self.dir.join("run");
        match fs::read_to_string(&run_path)
            .ok()
            .and_then(|r| r.trim().parse().ok())
        {
            Some(run) => self.run = run,
            // The staging directory lost its run: take the last marker's.
            None => {
                self.run = marker.map_or(1, |(epoch, _)| epoch);
                self.write_run()?;
            }
        }
        remove(&self.pending_path())?;
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
                "transactional kafka sink {} has published the output of {what} to `{}`, but this run restores an older checkpoint: that output would be published twice. The job is not using the checkpoint directory this output was written with, or that directory lost its newest checkpoints: point the job at it",
                self.dir.display(),
                self.publisher.topic,
            )));
        }
        for (which, path) in self.staged()? {
            let reached_kafka = published.is_some_and(|marker| which.is_published_by(marker));
            if !reached_kafka && which <= covered {
                self.publisher.publish(&path, which, self.run)?;
            }
            remove(&path)?;
        }
        Ok(())
    }

    /// Publishes every staged checkpoint up to `checkpoint`, in order.
    fn publish_up_to(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let upto = Staged::of(checkpoint);
        for (which, path) in self.staged()? {
            if which <= upto {
                self.publisher.publish(&path, which, self.run)?;
                remove(&path)?;
            }
        }
        Ok(())
    }
}

fn remove(path: &Path) -> Result<(), ConnectorError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ConnectorError::io(
            format!("removing {}", path.display()),
            e,
        )),
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
    /// The staging directory and producer of instance `index`.
    fn open_instance(&self, index: u32, checkpointed: bool) -> Result<Instance, ConnectorError> {
        let id = format!("{}-{index}", self.transactional_id);
        let dir = self.staging.join(&id);
        fs::create_dir_all(&dir)
            .map_err(|e| ConnectorError::io(format!("creating {}", dir.display()), e))?;
        let publisher = Publisher::new(
            self.sink.brokers(),
            self.sink.topic(),
            &id,
            self.sink.extra(),
        )?;
        Ok(Instance {
            dir,
            publisher,
            pending: None,
            started: false,
            checkpointed,
            scratch: Vec::new(),
            run: 0,
        })
    }

    /// The instances of a larger previous run that this one now stands
    /// for (old instance `k` by new instance `k % parallelism`).
    fn orphans(&self, restore: &Restore<'_>) -> Result<Vec<u32>, ConnectorError> {
        let prefix = format!("{}-", self.transactional_id);
        let entries = match fs::read_dir(&self.staging) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ConnectorError::io(
                    format!("listing {}", self.staging.display()),
                    e,
                ));
            }
        };
        let mut orphans = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let index = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|k| k.parse::<u32>().ok());
            if let Some(k) = index
                && k >= restore.parallelism
                && k % restore.parallelism.max(1) == restore.instance.0
            {
                orphans.push(k);
            }
        }
        orphans.sort_unstable();
        Ok(orphans)
    }

    fn instance(&mut self) -> Result<&mut Instance, ConnectorError> {
        self.instance.as_mut().ok_or_else(|| {
            ConnectorError::user("transactional kafka sink used before it was opened")
        })
    }
}

impl<T: Data> Transactional for TransactionalKafkaSink<T> {}

impl<T: Data> Sink for TransactionalKafkaSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let instance = self.open_instance(ctx.instance().0, ctx.checkpoints().is_some())?;
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
        let instance = self.instance()?;
        instance.start_fresh()?;
        // One buffer for every record's frame.
        let mut scratch = std::mem::take(&mut instance.scratch);
        scratch.clear();
        frame.encode(&mut scratch);
        let written = instance.pending()?.write_all(&scratch);
        instance.scratch = scratch;
        written.map_err(|e| {
            ConnectorError::io(format!("writing {}", instance.pending_path().display()), e)
        })
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
            instance.stage(CheckpointId::FINAL)?;
            instance.publish_up_to(CheckpointId::FINAL)?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let instance = self.instance()?;
        instance.start_fresh()?;
        instance.stage(checkpoint)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let instance = self.instance()?;
        instance.start_fresh()?;
        instance.publish_up_to(checkpoint)
    }

    /// Publishes the staged checkpoints the restored one covers that did
    /// not reach Kafka, and discards those after it (their records come
    /// again from the replay); after a scale-down, the same for what the
    /// removed instances staged (old instance `k` by new `k % parallelism`).
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if restore.is_fresh() {
            // Nothing an earlier run staged completed: a new epoch, and the
            // removed instances' leftovers go (opening each fences its
            // producer id, aborting what it left open).
            self.instance()?.start_fresh()?;
            for k in self.orphans(restore)? {
                let orphan = self.open_instance(k, true)?;
                fs::remove_dir_all(&orphan.dir).map_err(|e| {
                    ConnectorError::io(format!("removing {}", orphan.dir.display()), e)
                })?;
            }
            return Ok(());
        }
        let covered = if restore.finished() {
            Staged::Final
        } else {
            Staged::of(restore.checkpoint)
        };
        self.instance()?.recover(covered)?;
        // After a scale-down, what the removed instances staged.
        for k in self.orphans(restore)? {
            let mut orphan = self.open_instance(k, true)?;
            let ended =
                restore.is_final || restore.ended.contains(&streamwork_core::InstanceIdx(k));
            orphan.recover(if ended {
                Staged::Final
            } else {
                Staged::of(restore.checkpoint)
            })?;
            fs::remove_dir_all(&orphan.dir)
                .map_err(|e| ConnectorError::io(format!("removing {}", orphan.dir.display()), e))?;
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
            assert_eq!(Staged::parse(&s.file_name()), Some(s));
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
