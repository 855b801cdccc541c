//! The Kafka source: partitions read from checkpointed positions, payloads
//! checked and dead-lettered.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use streamwork_core::checkpoint::{CheckpointId, CheckpointView, Replayable};
use streamwork_core::{
    Collector, ConnectorError, FormatError, InstanceContext, Restore, Source, SourcePoll,
    StateBytes, Timestamp,
};

use super::admin::EndsAreNoErrors;
use super::holes::{HoleVerdict, OffsetHoles};
use super::kafka_error;
use super::origin::{ORIGIN_HEADER, Origin, OriginFilter};

/// How long a poll waits for a message before the source reports idle.
const POLL_WAIT: Duration = Duration::from_millis(20);
/// How long a source waits for the brokers to move its fetch position
/// back to a hole ([`KafkaSource::expect_no_holes`]).
const SEEK_WAIT: Duration = Duration::from_secs(10);
/// Messages emitted per poll at most.
const PER_POLL: usize = 1024;
/// The layout version of the source's checkpointed positions.
const POSITIONS_SCHEMA: u32 = 1;
/// The layout of a snapshot with the origins seen ([`KafkaSource::drop_replayed`]):
/// a `u32` count of positions, the positions (12 bytes each), then the
/// [`OriginFilter`].
const POSITIONS_AND_ORIGINS_SCHEMA: u32 = 2;

/// One record read from Kafka.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The input record it was derived from, if a Streamwork sink stamped
    /// one (see [`Origin`]).
    pub origin: Option<Origin>,
}

type Check = Arc<dyn Fn(&KafkaRecord) -> Result<(), FormatError> + Send + Sync>;

/// The count of malformed payloads a source dead-lettered, shared by its
/// instances (clone it before handing the source to a job).
#[derive(Clone, Debug, Default)]
pub struct Malformed(Arc<AtomicU64>);

impl Malformed {
    /// Payloads dead-lettered so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a scale-out runner learns from the sources it started (see
/// [`KafkaSource::report_to`]): records read, when, and how far the
/// completed checkpoints have read.
#[derive(Debug, Default)]
pub struct SourceProgress {
    records: AtomicU64,
    /// The positions of the latest completed checkpoint: safe to commit as
    /// the group's offsets (a later snapshot's are not, until it completes).
    positions: Mutex<BTreeMap<i32, i64>>,
    /// The positions of the final snapshot, for when the job ends well.
    final_positions: Mutex<Option<BTreeMap<i32, i64>>>,
    busy: Mutex<BusySpan>,
}

/// When records were first and last read (per poll that read some).
#[derive(Clone, Copy, Debug, Default)]
pub struct BusySpan {
    first: Option<Instant>,
    last: Option<Instant>,
}

impl SourceProgress {
    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// The next offset of every partition read, as of the latest completed
    /// checkpoint: the offsets a runner may commit for the group.
    pub fn committed_positions(&self) -> BTreeMap<i32, i64> {
        self.positions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the source read.
    pub fn busy(&self) -> BusySpan {
        *self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job ended well (its final checkpoint completed): its final
    /// positions become the committed ones.
    pub fn adopt_final(&self) {
        let last = self
            .final_positions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(last) = last {
            *self.positions.lock().unwrap_or_else(|p| p.into_inner()) = last;
        }
    }
}

impl BusySpan {
    fn mark(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the first records were read, if any were.
    pub fn first(&self) -> Option<Instant> {
        self.first
    }

    /// Takes in `other`'s span.
    pub fn merge(&mut self, other: BusySpan) {
        self.first = match (self.first, other.first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last = self.last.max(other.last);
    }

    /// From the first read to the last.
    pub fn duration(&self) -> Duration {
        match (self.first, self.last) {
            (Some(first), Some(last)) => last.saturating_duration_since(first),
            _ => Duration::ZERO,
        }
    }
}

/// Reads a topic's partitions (see the [module docs](super)).
///
/// Positions are Streamwork's: a restored source resumes from its
/// checkpoint. Without one, a partition starts at the group's committed
/// offset, or at the beginning. A source closing commits to the group what
/// it read, or, in a run that takes checkpoints, only what a completed
/// checkpoint covers: a run that fails before its first checkpoint
/// completes leaves the group where it was, so that the next run reads
/// again what the failed one's sinks never committed.
pub struct KafkaSource {
    brokers: String,
    topic: String,
    group: String,
    idle_exit: Option<Duration>,
    extra: Vec<(String, String)>,
    /// Partitions to read, split among the instances; `None`: all of them.
    assigned: Option<Vec<i32>>,
    check: Option<Check>,
    dead_letter: Option<String>,
    malformed: Malformed,
    /// With [`drop_replayed`](KafkaSource::drop_replayed): the last origin
    /// read from each writer.
    replayed: Option<OriginFilter>,
    /// Records dropped as replays.
    dropped_replays: u64,
    /// With [`expect_no_holes`](KafkaSource::expect_no_holes): how long a
    /// hole is read again.
    hole_wait: Option<Duration>,
    /// The holes being read again, once open.
    holes: Option<OffsetHoles>,
    /// With `expect_no_holes`: where each owned partition without a
    /// restored position starts (its group's committed offset, or its
    /// first), so that a hole before its first record is seen too.
    starts: BTreeMap<i32, i64>,
    progress: Option<Arc<SourceProgress>>,
    /// Snapshots not known complete yet, by checkpoint.
    pending: Vec<(CheckpointId, BTreeMap<i32, i64>)>,
    /// The positions of the latest completed checkpoint (a checkpointed
    /// run): all that the group's offsets may be moved to.
    last_completed: Option<BTreeMap<i32, i64>>,
    /// The final snapshot's positions, and the last complete checkpoint
    /// when it was taken: any checkpoint completed since holds them.
    final_taken: Option<(BTreeMap<i32, i64>, CheckpointId)>,
    hooks: Option<CheckpointView>,
    commit_on_close: bool,
    consumer: Option<BaseConsumer<EndsAreNoErrors>>,
    dead_letters: Option<BaseProducer>,
    /// The records of owned partitions (partition, offset) the dead-letter
    /// topic already holds, read when opening: a replay does not produce
    /// them again.
    dead_lettered: HashSet<(i32, i64)>,
    /// The next offset to read, per owned partition.
    positions: BTreeMap<i32, i64>,
    /// Positions restored from a checkpoint, applied when opening.
    restored: BTreeMap<i32, i64>,
    last_message: Option<Instant>,
    /// The partitions this instance reads, once open.
    owned: Vec<i32>,
    /// With an idle exit: the owned partitions read to their end (the
    /// broker said so) and given nothing since.
    at_end: BTreeSet<i32>,
    /// With an idle exit: a reader of every record's offsets, committed or
    /// not, asked before the input ends (see [`KafkaSource::held_back`]).
    ends: Option<BaseConsumer<EndsAreNoErrors>>,
}

/// A clone has the settings, and the state of a source not yet opened.
impl Clone for KafkaSource {
    fn clone(&self) -> Self {
        KafkaSource {
            idle_exit: self.idle_exit,
            extra: self.extra.clone(),
            assigned: self.assigned.clone(),
            check: self.check.clone(),
            dead_letter: self.dead_letter.clone(),
            malformed: self.malformed.clone(),
            replayed: self.replayed.clone(),
            hole_wait: self.hole_wait,
            progress: self.progress.clone(),
            commit_on_close: self.commit_on_close,
            ..KafkaSource::new(&self.brokers, &self.topic, &self.group)
        }
    }
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("group", &self.group)
            .field("assigned", &self.assigned)
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

impl KafkaRecord {
    /// Its value as a JSON value of type `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, FormatError> {
        let text = std::str::from_utf8(&self.value)
            .map_err(|e| FormatError::new(format!("invalid UTF-8 ({e})")))?;
        crate::formats::from_json_line(text)
    }

    /// Its value as one CSV record of type `T`.
    pub fn csv<T: serde::de::DeserializeOwned>(&self) -> Result<T, FormatError> {
        let text = std::str::from_utf8(&self.value)
            .map_err(|e| FormatError::new(format!("invalid UTF-8 ({e})")))?;
        crate::formats::from_csv_line(text)
    }
}

impl KafkaSource {
    /// Refuses every payload that is not a JSON value of type `T` (see
    /// [`check`](Self::check): counted, and with
    /// [`dead_letter`](Self::dead_letter) produced to the dead-letter topic
    /// with the reason), so that a step after it decodes with
    /// [`KafkaRecord::json`] knowing it succeeds.
    ///
    /// ```no_run
    /// use streamwork::connectors::kafka::{KafkaRecord, KafkaSource};
    /// #[derive(Clone, serde::Deserialize)]
    /// struct Bid { auction: u64, price: u64 }
    /// let bids = KafkaSource::new("127.0.0.1:9092", "bids", "g")
    ///     .json_checked::<Bid>()
    ///     .dead_letter("bids-dead");
    /// // downstream: filter_map(|r: KafkaRecord| r.json::<Bid>().ok())
    /// # let _ = bids;
    /// ```
    pub fn json_checked<T: serde::de::DeserializeOwned>(self) -> Self {
        self.check(|record| record.json::<T>().map(|_| ()))
    }

    /// The same for CSV records of type `T`.
    pub fn csv_checked<T: serde::de::DeserializeOwned>(self) -> Self {
        self.check(|record| record.csv::<T>().map(|_| ()))
    }

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
            assigned: None,
            check: None,
            dead_letter: None,
            malformed: Malformed::default(),
            replayed: None,
            dropped_replays: 0,
            hole_wait: None,
            holes: None,
            starts: BTreeMap::new(),
            progress: None,
            pending: Vec::new(),
            last_completed: None,
            final_taken: None,
            hooks: None,
            commit_on_close: true,
            consumer: None,
            dead_letters: None,
            dead_lettered: HashSet::new(),
            positions: BTreeMap::new(),
            restored: BTreeMap::new(),
            last_message: None,
            owned: Vec::new(),
            at_end: BTreeSet::new(),
            ends: None,
        }
    }

    /// Tells the source that the topic's offsets have no holes (written
    /// without transactions, never compacted): a fetch that answers a later
    /// offset than the next one is read again from the next one, for up to
    /// `wait` per hole, before the records after the hole are taken (see
    /// [`OffsetHoles`]). What the exchanges of a scale-out job are read
    /// with: a broker that shows later records before earlier ones (tansu
    /// 0.6 does, under concurrent writes) does not make the reader pass
    /// over the earlier ones.
    pub fn expect_no_holes(mut self, wait: Duration) -> Self {
        self.hole_wait = Some(wait);
        self
    }

    /// Ends the input once every partition it reads is read to its end and
    /// `idle` has passed without a new record (for bounded runs). A broker
    /// slow to answer delays the end; it never cuts the input short. Nor
    /// does a transaction still open: `read_committed` (the default) ends a
    /// partition before the records of a transaction neither committed nor
    /// aborted yet, and the input waits for it (a writer that died in one
    /// is aborted by the broker after its `transaction.timeout.ms`).
    pub fn idle_exit(mut self, idle: Duration) -> Self {
        self.idle_exit = Some(idle);
        self
    }

    /// Drops every record whose [`Origin`] (header) is not after the last
    /// one read from the same writer (the origin's partition): what a writer
    /// that restarted from a checkpoint writes again. The last origin of
    /// each writer is part of the source's checkpoint, so the filter and
    /// the positions move together. Records without an origin pass.
    ///
    /// What a scale-out runner reads the records of a keyed exchange with
    /// (each writer numbers what it writes, and numbers a replay the same).
    pub fn drop_replayed(mut self) -> Self {
        self.replayed = Some(OriginFilter::default());
        self
    }

    /// Records dropped so far as replays (see [`drop_replayed`](Self::drop_replayed)).
    pub fn dropped_replays(&self) -> u64 {
        self.dropped_replays
    }

    /// Reads only these partitions (instance `i` of `n` takes every `n`-th
    /// of them, from the `i`-th).
    pub fn assign(mut self, partitions: impl IntoIterator<Item = i32>) -> Self {
        self.assigned = Some(partitions.into_iter().collect());
        self
    }

    /// Checks every payload: a record the check refuses is not emitted but
    /// counted ([`malformed`](Self::malformed)) and, with
    /// [`dead_letter`](Self::dead_letter), produced to the dead-letter topic
    /// with its key and value unchanged and headers saying where it came
    /// from and what was wrong with it.
    ///
    /// ```no_run
    /// use streamwork::connectors::kafka::KafkaSource;
    /// let lines = KafkaSource::new("127.0.0.1:9092", "lines", "g")
    ///     .check(|r| std::str::from_utf8(&r.value).map(|_| ()).map_err(|e| e.to_string()))
    ///     .dead_letter("lines-dead");
    /// # let _ = lines;
    /// ```
    pub fn check<E: std::fmt::Display>(
        mut self,
        check: impl Fn(&KafkaRecord) -> Result<(), E> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some(Arc::new(move |record| {
            check(record).map_err(|e| FormatError::new(e.to_string()))
        }));
        self
    }

    /// Produces refused payloads to `topic` (which must exist).
    pub fn dead_letter(mut self, topic: &str) -> Self {
        self.dead_letter = Some(topic.to_string());
        self
    }

    /// The count of refused payloads, shared by every clone of this source.
    pub fn malformed(&self) -> Malformed {
        self.malformed.clone()
    }

    /// Sets an `rdkafka` consumer property.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    /// The topic read.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Reports what it reads to `progress`, for a scale-out runner, which
    /// commits the group's offsets itself (the source then does not commit
    /// on close).
    pub fn report_to(mut self, progress: Arc<SourceProgress>) -> Self {
        self.progress = Some(progress);
        self.commit_on_close = false;
        self
    }

    fn partitions(
        &self,
        consumer: &BaseConsumer<EndsAreNoErrors>,
    ) -> Result<Vec<i32>, ConnectorError> {
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

    /// Where each of `owned` without a restored position starts reading:
    /// its group's committed offset, or else its first offset (the reader
    /// resets to `earliest`).
    fn fresh_starts(
        &self,
        consumer: &BaseConsumer<EndsAreNoErrors>,
        owned: &[i32],
    ) -> Result<BTreeMap<i32, i64>, ConnectorError> {
        let fresh: Vec<i32> = owned
            .iter()
            .copied()
            .filter(|partition| !self.restored.contains_key(partition))
            .collect();
        let mut starts = BTreeMap::new();
        if fresh.is_empty() {
            return Ok(starts);
        }
        let context = |partition: i32| {
            format!(
                "finding where `{}` partition {partition} starts (to see holes from its first record)",
                self.topic
            )
        };
        let mut wanted = TopicPartitionList::new();
        for &partition in &fresh {
            wanted.add_partition(&self.topic, partition);
        }
        let committed = consumer
            .committed_offsets(wanted, Duration::from_secs(10))
            .map_err(|e| kafka_error(context(fresh[0]), e))?;
        for partition in fresh {
            let start = match committed
                .find_partition(&self.topic, partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(at)) if at >= 0 => at,
                _ => {
                    consumer
                        .fetch_watermarks(&self.topic, partition, Duration::from_secs(10))
                        .map_err(|e| kafka_error(context(partition), e))?
                        .0
                }
            };
            starts.insert(partition, start);
        }
        Ok(starts)
    }

    /// The (partition, offset) of every record of `owned` partitions that
    /// `dead_letter` holds (by its source headers). A dead letter is produced
    /// and acknowledged before the source reads on, so after a crash the
    /// topic holds exactly those the replay would produce again.
    fn read_dead_lettered(
        &self,
        dead_letter: &str,
        owned: &[i32],
    ) -> Result<HashSet<(i32, i64)>, ConnectorError> {
        let context = || {
            format!(
                "reading dead-letter topic `{dead_letter}` (so that a replay does not dead-letter a record twice)"
            )
        };
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("{}-dead-letter-scan", self.group))
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| kafka_error(context(), e))?;
        let metadata = consumer
            .fetch_metadata(Some(dead_letter), Duration::from_secs(10))
            .map_err(|e| kafka_error(context(), e))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == dead_letter)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut assignment = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for partition in partitions {
            let (low, high) = consumer
                .fetch_watermarks(dead_letter, partition, Duration::from_secs(10))
                .map_err(|e| kafka_error(context(), e))?;
            if high > low {
                assignment
                    .add_partition_offset(dead_letter, partition, Offset::Offset(low))
                    .map_err(|e| kafka_error(context(), e))?;
                ends.insert(partition, high);
            }
        }
        let mut found = HashSet::new();
        if ends.is_empty() {
            return Ok(found);
        }
        consumer
            .assign(&assignment)
            .map_err(|e| kafka_error(context(), e))?;
        let header = |message: &rdkafka::message::BorrowedMessage<'_>, key: &str| {
            message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|h| h.key == key)
                    .and_then(|h| std::str::from_utf8(h.value?).ok().map(str::to_string))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ends.is_empty() {
            if Instant::now() >= deadline {
                return Err(ConnectorError::user(format!(
                    "{}: partitions {:?} not read to their end within 30 s",
                    context(),
                    ends.keys().collect::<Vec<_>>()
                )));
            }
            let message = match consumer.poll(Duration::from_millis(100)) {
                None | Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => return Err(kafka_error(context(), e)),
                Some(Ok(message)) => message,
            };
            if ends
                .get(&message.partition())
                .is_some_and(|&end| message.offset() + 1 >= end)
            {
                ends.remove(&message.partition());
            }
            let from_here =
                header(&message, "streamwork-source-topic").as_deref() == Some(&self.topic);
            let partition =
                header(&message, "streamwork-source-partition").and_then(|p| p.parse().ok());
            let offset = header(&message, "streamwork-source-offset").and_then(|o| o.parse().ok());
            if let (true, Some(partition), Some(offset)) = (from_here, partition, offset)
                && owned.contains(&partition)
            {
                found.insert((partition, offset));
            }
        }
        Ok(found)
    }

    /// Counts a refused record and produces it to the dead-letter topic
    /// (unless the topic already holds it: a replay).
    fn refuse(&mut self, record: &KafkaRecord, reason: &str) -> Result<(), ConnectorError> {
        self.malformed.0.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            "kafka: `{}` partition {} offset {} refused: {reason}",
            self.topic,
            record.partition,
            record.offset
        );
        let (Some(producer), Some(topic)) = (self.dead_letters.as_ref(), &self.dead_letter) else {
            return Ok(());
        };
        if self
            .dead_lettered
            .contains(&(record.partition, record.offset))
        {
            return Ok(());
        }
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "streamwork-error",
                value: Some(reason),
            })
            .insert(Header {
                key: "streamwork-source-topic",
                value: Some(&self.topic),
            })
            .insert(Header {
                key: "streamwork-source-partition",
                value: Some(&partition),
            })
            .insert(Header {
                key: "streamwork-source-offset",
                value: Some(&offset),
            });
        let mut send = BaseRecord::to(topic)
            .payload(&record.value)
            .headers(headers);
        if let Some(key) = &record.key {
            send = send.key(key);
        }
        producer
            .send(send)
            .map_err(|(e, _)| kafka_error(format!("dead-lettering to `{topic}`"), e))?;
        // Refused records are rare: waiting for each to be acknowledged
        // means no checkpoint can record a position past a lost one.
        self.flush_dead_letters()
    }

    /// Tells the runner the positions of the latest snapshot whose
    /// checkpoint has completed.
    fn publish_completed(&mut self) {
        let Some(hooks) = &self.hooks else {
            return;
        };
        let completed = hooks.completed();
        let done = self
            .pending
            .iter()
            .take_while(|(id, _)| *id <= completed && !id.is_final())
            .count();
        if let Some((_, positions)) = self.pending.drain(..done).next_back() {
            if let Some(progress) = &self.progress {
                *progress.positions.lock().unwrap_or_else(|p| p.into_inner()) = positions.clone();
            }
            self.last_completed = Some(positions);
        }
    }

    /// The offsets the group may be moved to when the source closes: in a
    /// run without checkpoints, what was read; in a checkpointed run, only
    /// what a completed checkpoint covers (a run that fails before its
    /// sinks commit must not move the group past their output: a fresh
    /// start reads from the group's offsets).
    fn closing_positions(&mut self) -> Option<BTreeMap<i32, i64>> {
        self.publish_completed();
        let Some(hooks) = &self.hooks else {
            return Some(self.positions.clone());
        };
        match &self.final_taken {
            Some((positions, then)) if hooks.completed() > *then => Some(positions.clone()),
            _ => self.last_completed.clone(),
        }
    }

    /// Whether the broker has said every owned partition is read to its
    /// end (with nothing new since).
    fn read_to_end(&self) -> bool {
        self.owned.iter().all(|p| self.at_end.contains(p))
    }

    /// Waits until every dead letter is acknowledged.
    fn flush_dead_letters(&self) -> Result<(), ConnectorError> {
        if let Some(producer) = &self.dead_letters {
            producer
                .flush(Duration::from_secs(30))
                .map_err(|e| kafka_error("flushing dead letters", e))?;
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    type Out = Collector<KafkaRecord>;

    fn replayable(&self) -> bool {
        true
    }

    fn split_input(&self) -> Option<String> {
        Some(self.topic.clone())
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.hooks = ctx.checkpoints().cloned();
        // A scale-out runner follows the partitions it assigned.
        if self.progress.is_none()
            && let Some(progress) = ctx.runner_link::<SourceProgress>()
        {
            self.progress = Some(progress);
            self.commit_on_close = false;
        }
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        if self.idle_exit.is_some() {
            // Told when a partition is read to its end (after the user's
            // properties: the idle exit cannot do without it).
            config.set("enable.partition.eof", "true");
        }
        let consumer: BaseConsumer<EndsAreNoErrors> = config
            .create_with_context(EndsAreNoErrors {
                doing: "reading a topic",
            })
            .map_err(|e| kafka_error("creating a consumer", e))?;
        let (instance, parallelism) =
            (ctx.instance().0 as usize, ctx.parallelism().max(1) as usize);
        // A runner that splits the job by partition assigns this instance
        // its own.
        let owned: Vec<i32> = match (ctx.assigned_splits(), &self.assigned) {
            (Some(own), _) => own.to_vec(),
            (None, Some(list)) => list
                .iter()
                .copied()
                .skip(instance)
                .step_by(parallelism)
                .collect(),
            (None, None) => self
                .partitions(&consumer)?
                .into_iter()
                .filter(|&p| p as usize % parallelism == instance)
                .collect(),
        };
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
        self.starts = match self.hole_wait {
            Some(_) => self.fresh_starts(&consumer, &owned)?,
            None => BTreeMap::new(),
        };
        self.at_end.clear();
        if self.dead_letter.is_some() {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &self.brokers)
                .set("enable.idempotence", "true")
                .create()
                .map_err(|e| kafka_error("creating the dead-letter producer", e))?;
            self.dead_letters = Some(producer);
            if let Some(dead_letter) = &self.dead_letter {
                self.dead_lettered = self.read_dead_lettered(dead_letter, &owned)?;
            }
        }
        self.consumer = Some(consumer);
        self.holes = self.hole_wait.map(OffsetHoles::new);
        self.owned = owned;
        self.last_message = Some(Instant::now());
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<KafkaRecord>) -> Result<SourcePoll, ConnectorError> {
        let Some(consumer) = self.consumer.take() else {
            return Ok(SourcePoll::Finished);
        };
        self.publish_completed();
        let polled = self.poll_from(&consumer, out);
        self.consumer = Some(consumer);
        let read = polled?;
        if read > 0 {
            let now = Instant::now();
            if let Some(progress) = &self.progress {
                progress.records.fetch_add(read as u64, Ordering::Relaxed);
                progress
                    .busy
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .mark(now);
            }
            self.last_message = Some(now);
            return Ok(SourcePoll::Emitted);
        }
        let idle_for = self.last_message.map_or(Duration::ZERO, |t| t.elapsed());
        match self.idle_exit {
            Some(limit) if idle_for >= limit && self.read_to_end() => {
                if self.held_back() {
                    // Asked again after another idle period.
                    self.last_message = Some(Instant::now());
                    return Ok(SourcePoll::Idle);
                }
                Ok(SourcePoll::Finished)
            }
            _ => Ok(SourcePoll::Idle),
        }
    }

    /// Keeps the snapshot's positions until its checkpoint completes (for
    /// a scale-out runner, which commits only completed positions).
    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        // What completed since the last snapshot is settled first, so that
        // `pending` holds only checkpoints in flight.
        self.publish_completed();
        // Called right after `snapshot`: the positions have not moved.
        let positions = self.positions.clone();
        if checkpoint.is_final() {
            if let Some(progress) = &self.progress {
                *progress
                    .final_positions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(positions.clone());
            }
            let then = self
                .hooks
                .as_ref()
                .map_or(CheckpointId::NONE, CheckpointView::completed);
            self.final_taken = Some((positions, then));
        } else {
            self.pending.push((checkpoint, positions));
        }
    }

    /// The savepoint's positions become the committed ones: the runner
    /// hands the partition on from there.
    fn suspended_at(&mut self, _: CheckpointId) {
        self.publish_completed();
    }

    /// The next offset of every partition read so far.
    fn snapshot(&mut self) -> Option<StateBytes> {
        let mut bytes = Vec::with_capacity(4 + self.positions.len() * 12);
        if self.replayed.is_some() {
            bytes.extend_from_slice(&(self.positions.len() as u32).to_le_bytes());
        }
        for (&partition, &next) in &self.positions {
            bytes.extend_from_slice(&partition.to_le_bytes());
            bytes.extend_from_slice(&next.to_le_bytes());
        }
        match &self.replayed {
            Some(filter) => {
                filter.write_to(&mut bytes);
                Some(StateBytes::new(POSITIONS_AND_ORIGINS_SCHEMA, bytes))
            }
            None => Some(StateBytes::new(POSITIONS_SCHEMA, bytes)),
        }
    }

    /// Takes the positions every old instance recorded: at another
    /// parallelism, each partition's position goes to its new owner.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        for part in &restore.parts {
            let refused = || {
                ConnectorError::user(format!(
                    "kafka source `{}`: positions of schema {} and {} bytes (this version reads schema {POSITIONS_SCHEMA}, 12 bytes a partition, and schema {POSITIONS_AND_ORIGINS_SCHEMA}, positions and the origins seen)",
                    restore.component,
                    part.schema,
                    part.bytes.len()
                ))
            };
            let positions = match part.schema {
                POSITIONS_SCHEMA if part.bytes.len().is_multiple_of(12) => part.bytes,
                POSITIONS_AND_ORIGINS_SCHEMA => {
                    let (count, rest) = part.bytes.split_first_chunk::<4>().ok_or_else(refused)?;
                    let len = (u32::from_le_bytes(*count) as usize)
                        .checked_mul(12)
                        .filter(|&len| len <= rest.len())
                        .ok_or_else(refused)?;
                    let (positions, origins) = rest.split_at(len);
                    let (filter, after) = OriginFilter::read_from(origins).ok_or_else(refused)?;
                    if !after.is_empty() {
                        return Err(refused());
                    }
                    // A source restored without the filter (a changed job)
                    // reads on without it.
                    if let Some(replayed) = &mut self.replayed {
                        replayed.merge(&filter);
                    }
                    positions
                }
                _ => return Err(refused()),
            };
            for entry in positions.chunks_exact(12) {
                let (partition, next) = entry.split_at(4);
                let partition = i32::from_le_bytes(partition.try_into().unwrap_or_default());
                let next = i64::from_le_bytes(next.try_into().unwrap_or_default());
                self.restored.insert(partition, next);
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.ends = None;
        let closing = self.closing_positions();
        // Offsets are Streamwork's to keep; the group's committed offsets are
        // advanced too, for tools that watch the group's lag (a scale-out
        // runner commits them itself, as the group's member).
        if let Some(consumer) = self.consumer.take()
            && self.commit_on_close
            && let Some(positions) = closing.filter(|p| !p.is_empty())
        {
            let mut committed = TopicPartitionList::new();
            for (&partition, &next) in &positions {
                committed
                    .add_partition_offset(&self.topic, partition, Offset::Offset(next))
                    .map_err(|e| kafka_error("committing offsets", e))?;
            }
            consumer
                .commit(&committed, CommitMode::Sync)
                .map_err(|e| kafka_error("committing offsets", e))?;
        }
        Ok(())
    }
}

impl KafkaSource {
    /// Whether an owned partition read to its end still holds records
    /// after it: the records of a transaction not committed or aborted
    /// yet, which `read_committed` does not show, or records committed
    /// since the end was reached. Its end with every record (the high
    /// watermark, asked with `read_uncommitted`) is compared with the
    /// reader's position past the last record and control marker it was
    /// given; with no position (nothing read yet), with the end of the
    /// records it can read. A broker that does not answer holds the input
    /// back too: the end is asked again after another idle period.
    fn held_back(&mut self) -> bool {
        if self.ends.is_none() {
            let mut config = ClientConfig::new();
            config
                .set("bootstrap.servers", &self.brokers)
                .set("group.id", &self.group);
            for (key, value) in &self.extra {
                config.set(key, value);
            }
            config.set("isolation.level", "read_uncommitted");
            match config.create_with_context(EndsAreNoErrors {
                doing: "reading a topic's ends",
            }) {
                Ok(ends) => self.ends = Some(ends),
                Err(e) => {
                    tracing::warn!(topic = %self.topic, "kafka: cannot ask for the partitions' ends, so the input waits: {e}");
                    return true;
                }
            }
        }
        let (Some(consumer), Some(ends)) = (&self.consumer, &self.ends) else {
            return true;
        };
        let positions = match consumer.position() {
            Ok(positions) => positions,
            Err(e) => {
                tracing::warn!(topic = %self.topic, "kafka: cannot read the reader's positions, so the input waits: {e}");
                return true;
            }
        };
        for &partition in &self.owned {
            let every = ends.fetch_watermarks(&self.topic, partition, SEEK_WAIT);
            let position = positions
                .find_partition(&self.topic, partition)
                .and_then(|p| match p.offset() {
                    Offset::Offset(n) => Some(n),
                    _ => None,
                });
            let reached = match position {
                Some(n) => Ok(n),
                None => consumer
                    .fetch_watermarks(&self.topic, partition, SEEK_WAIT)
                    .map(|(_, visible)| visible),
            };
            match (every, reached) {
                (Ok((_, end)), Ok(reached)) if reached >= end => {}
                (Ok((_, end)), Ok(reached)) => {
                    tracing::info!(
                        topic = %self.topic,
                        partition,
                        "kafka: partition {partition} of `{}` is read to offset {reached} and holds records up to {end}, in a transaction not committed or aborted yet, or not read yet: the input ends after them",
                        self.topic
                    );
                    return true;
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(topic = %self.topic, partition, "kafka: cannot ask where partition {partition} ends, so the input waits: {e}");
                    return true;
                }
            }
        }
        false
    }

    /// Emits what the consumer has, up to [`PER_POLL`] records; returns how
    /// many were read (emitted or refused).
    fn poll_from(
        &mut self,
        consumer: &BaseConsumer<EndsAreNoErrors>,
        out: &mut Collector<KafkaRecord>,
    ) -> Result<usize, ConnectorError> {
        let mut read = 0;
        let mut wait = POLL_WAIT;
        while read < PER_POLL {
            let Some(message) = consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            let message = match message {
                Ok(message) => message,
                // The end of a partition is not an error.
                Err(KafkaError::PartitionEOF(partition)) => {
                    self.at_end.insert(partition);
                    continue;
                }
                Err(e) => return Err(kafka_error(format!("reading `{}`", self.topic), e)),
            };
            if let Some(holes) = &mut self.holes {
                let partition = message.partition();
                let expected = self
                    .positions
                    .get(&partition)
                    .or_else(|| self.starts.get(&partition))
                    .copied();
                if let HoleVerdict::ReadAgainFrom(next) =
                    holes.check(partition, expected, message.offset(), Instant::now)
                {
                    consumer
                        .seek(&self.topic, partition, Offset::Offset(next), SEEK_WAIT)
                        .map_err(|e| {
                            kafka_error(
                                format!(
                                    "reading `{}` partition {partition} again from offset {next}",
                                    self.topic
                                ),
                                e,
                            )
                        })?;
                    break;
                }
            }
            let timestamp = message.timestamp().to_millis();
            let origin = message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|h| h.key == ORIGIN_HEADER)
                    .and_then(|h| Origin::from_bytes(h.value?))
            });
            let record = KafkaRecord {
                partition: message.partition(),
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                timestamp,
                origin,
            };
            self.positions.insert(record.partition, record.offset + 1);
            if !self.at_end.is_empty() {
                self.at_end.remove(&record.partition);
            }
            read += 1;
            if let (Some(filter), Some(origin)) = (&mut self.replayed, record.origin)
                && !filter.admit(origin)
            {
                self.dropped_replays += 1;
                continue;
            }
            if let Some(check) = &self.check
                && let Err(reason) = check(&record)
            {
                self.refuse(&record, reason.reason())?;
                continue;
            }
            match timestamp {
                Some(t) => out.emit_at(record, Timestamp::from_millis(t)),
                None => out.emit(record),
            }
        }
        Ok(read)
    }
}

impl Replayable for KafkaSource {}

#[cfg(test)]
mod tests {
    use streamwork_core::KeyGroups;
    use streamwork_core::checkpoint::RestoredPart;

    use super::*;

    /// The test broker (`scripts/kafka-test-broker.sh`); under CI, a test
    /// that needs one fails without it.
    fn test_brokers() -> Option<String> {
        match std::env::var("STREAMWORK_KAFKA_BROKERS") {
            Ok(brokers) if !brokers.is_empty() => Some(brokers),
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "no broker (set STREAMWORK_KAFKA_BROKERS, see scripts/kafka-test-broker.sh): under CI every Kafka test runs"
                );
                None
            }
        }
    }

    /// The values `out` holds, in order.
    fn values(out: &mut Collector<KafkaRecord>) -> Vec<String> {
        out.take_buffered()
            .into_iter()
            .map(|r| String::from_utf8(r.value.value).unwrap())
            .collect()
    }

    #[test]
    fn an_idle_exit_waits_for_the_records_of_a_transaction_still_open() {
        let Some(brokers) = test_brokers() else {
            return;
        };
        const WAIT: Duration = Duration::from_secs(30);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let topic = format!("open-transaction-{}-{nanos}", std::process::id());
        super::super::admin::create_topic(&brokers, &topic, 1).unwrap();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("transactional.id", &topic)
            .create()
            .unwrap();
        producer.init_transactions(WAIT).unwrap();
        let send = |values: std::ops::Range<u32>| {
            producer.begin_transaction().unwrap();
            for i in values {
                let value = i.to_string();
                producer
                    .send(BaseRecord::<(), _>::to(&topic).payload(&value))
                    .unwrap();
            }
            producer.flush(WAIT).unwrap();
        };
        send(0..5);
        producer.commit_transaction(WAIT).unwrap();
        // Written and flushed, neither committed nor aborted.
        send(5..12);
        let mut source =
            KafkaSource::new(&brokers, &topic, &format!("{topic}-group")).idle_exit(Duration::ZERO);
        source
            .open(&InstanceContext::new(
                "records",
                streamwork_core::InstanceIdx(0),
                1,
                KeyGroups::DEFAULT,
            ))
            .unwrap();
        let mut out = Collector::detached();
        // Read to the partition's end for `read_committed` (bounded: the
        // broker answers within the loop, or the test fails)...
        for _ in 0..5_000 {
            if source.read_to_end() {
                break;
            }
            source.poll(&mut out).unwrap();
        }
        assert!(source.read_to_end(), "the partition's end never came");
        assert_eq!(values(&mut out), ["0", "1", "2", "3", "4"]);
        // ... with no record for longer than the idle exit's limit: the
        // input does not end before the open transaction's records.
        assert_eq!(source.poll(&mut out).unwrap(), SourcePoll::Idle);
        assert_eq!(source.poll(&mut out).unwrap(), SourcePoll::Idle);
        producer.commit_transaction(WAIT).unwrap();
        let mut finished = false;
        for _ in 0..5_000 {
            if source.poll(&mut out).unwrap() == SourcePoll::Finished {
                finished = true;
                break;
            }
        }
        assert!(finished, "the input never ended");
        let expected: Vec<String> = (5..12).map(|i| i.to_string()).collect();
        assert_eq!(values(&mut out), expected);
        source.close().unwrap();
    }

    fn restore_of<'a>(parts: &'a [StateBytes]) -> Restore<'a> {
        Restore {
            records: None,
            component: "records",
            checkpoint: CheckpointId::new(3),
            is_final: false,
            ended: Vec::new(),
            instance: streamwork_core::InstanceIdx(0),
            parallelism: 2,
            key_groups: KeyGroups::DEFAULT,
            parts: parts
                .iter()
                .enumerate()
                .map(|(i, p)| RestoredPart {
                    part: streamwork_core::InstanceIdx(i as u32),
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
        let bad = [StateBytes::new(2, vec![0; 12])];
        let mut source = KafkaSource::new("127.0.0.1:1", "t", "g");
        let error = source.restore(&restore_of(&bad)).unwrap_err();
        assert!(error.to_string().contains("schema 2"), "{error}");
        let torn = [StateBytes::new(POSITIONS_SCHEMA, vec![0; 13])];
        assert!(source.restore(&restore_of(&torn)).is_err());
    }
}
