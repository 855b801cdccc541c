//! Event time per partition: each partition of a topic is in order of its
//! own, not with the others, so a watermark over a source instance that
//! reads several is the minimum of theirs. An idle partition (no record for
//! a while, in processing time) does not hold it back until it receives
//! records again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use streamwork_core::{
    AssignsWatermarks, Collector, Context, InstanceContext, NoKey, Operator, Outputs, Restore,
    StateBytes, TaskError, Timestamp,
};
use streamwork_core::{Control, SnapshotContext, Statefulness};

use super::source::KafkaRecord;

/// The layout version of the snapshot (per partition: `i32` id, `i64`
/// largest timestamp).
const SCHEMA: u32 = 1;

type EventTime = Arc<dyn Fn(&KafkaRecord) -> Timestamp + Send + Sync>;

/// One partition's event time.
#[derive(Clone, Copy, Debug)]
struct PartitionTime {
    max_seen: i64,
    /// Received records since the last processing-time tick.
    active: bool,
    /// Processing time (ms) of the last tick that found it active.
    last_active: i64,
    idle: bool,
}

/// Watermarks per Kafka partition, right after a [`KafkaSource`](super::KafkaSource):
/// the watermark is `min over partitions (largest timestamp - bound)`,
/// skipping partitions idle for `idle_after`. A partition counts from its
/// first record; when every partition is idle, the instance declares itself
/// idle downstream.
///
/// ```no_run
/// use std::time::Duration;
/// use streamwork::connectors::kafka::{KafkaSource, PartitionWatermarks};
/// let events = KafkaSource::new("127.0.0.1:9092", "events", "g");
/// let watermarks = PartitionWatermarks::bounded(Duration::from_secs(2))
///     .idle_after(Duration::from_secs(5));
/// # let _ = (events, watermarks);
/// ```
#[derive(Clone)]
pub struct PartitionWatermarks {
    bound: i64,
    idle_after: Option<i64>,
    event_time: Option<EventTime>,
    partitions: BTreeMap<i32, PartitionTime>,
    emitted: Timestamp,
    idle: bool,
    now: i64,
}

impl PartitionWatermarks {
    /// Timestamps up to `bound` out of order within a partition.
    pub fn bounded(bound: Duration) -> Self {
        PartitionWatermarks {
            bound: bound.as_millis().min(i64::MAX as u128) as i64,
            idle_after: None,
            event_time: None,
            partitions: BTreeMap::new(),
            emitted: Timestamp::MIN,
            idle: false,
            now: i64::MIN,
        }
    }

    /// A partition without records for `timeout` stops holding event time
    /// back until it receives one again.
    pub fn idle_after(mut self, timeout: Duration) -> Self {
        self.idle_after = Some(timeout.as_millis().min(i64::MAX as u128) as i64);
        self
    }

    /// The partitions this instance reads, known before their first record
    /// (a source with [`assign`](super::KafkaSource::assign), or a
    /// `PartitionTask` (in `streamwork::scaleout`)): each holds the
    /// watermark back until it shows a record or goes idle, so that a
    /// partition read late does not find its window closed by the others.
    /// Without this a partition counts from its first record.
    pub fn partitions(mut self, partitions: impl IntoIterator<Item = i32>) -> Self {
        for id in partitions {
            self.partitions.entry(id).or_insert(PartitionTime {
                max_seen: i64::MIN,
                active: false,
                last_active: i64::MIN,
                idle: false,
            });
        }
        self
    }

    /// Event time from the payload rather than the record's timestamp
    /// (which is the default; a record without one has event time 0).
    pub fn event_time(
        mut self,
        event_time: impl Fn(&KafkaRecord) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        self.event_time = Some(Arc::new(event_time));
        self
    }

    /// The watermark the partitions imply: `None` while every known
    /// partition is idle, or none is known.
    fn current(&self) -> Option<Timestamp> {
        self.partitions
            .values()
            .filter(|p| !p.idle)
            .map(|p| p.max_seen.saturating_sub(self.bound))
            .min()
            .map(Timestamp::from_millis)
    }

    fn advance(&mut self, out: &mut Collector<KafkaRecord>) {
        match self.current() {
            // A watermark also makes an idle instance active again, even
            // one that does not advance.
            Some(watermark) if watermark > self.emitted || self.idle => {
                self.emitted = self.emitted.max(watermark);
                self.idle = false;
                // A failed send is recorded by the collector and reported by the runtime.
                let _ = Outputs::control(out, &Control::Watermark(self.emitted));
            }
            None if !self.idle && !self.partitions.is_empty() => {
                self.idle = true;
                let _ = Outputs::control(out, &Control::Idle);
            }
            _ => {}
        }
    }
}

impl Operator for PartitionWatermarks {
    type In = KafkaRecord;
    type Key = NoKey;
    type Out = Collector<KafkaRecord>;
    type Time = AssignsWatermarks;

    fn statefulness(&self) -> Statefulness {
        // The event time reached, per partition.
        Statefulness::Checkpointed
    }

    fn open(&mut self, _ctx: &InstanceContext) {}

    #[inline]
    fn on_record(&mut self, record: KafkaRecord, ctx: &mut Context<'_, NoKey, Self::Out>) {
        let time = match &self.event_time {
            Some(event_time) => event_time(&record),
            None => Timestamp::from_millis(record.timestamp.unwrap_or(0)),
        };
        let now = self.now;
        let partition = self
            .partitions
            .entry(record.partition)
            .or_insert(PartitionTime {
                max_seen: i64::MIN,
                active: true,
                last_active: now,
                idle: false,
            });
        partition.max_seen = partition.max_seen.max(time.millis());
        partition.active = true;
        partition.idle = false;
        ctx.emit_at(record, time);
    }

    fn on_batch_end(&mut self, out: &mut Collector<KafkaRecord>) {
        self.advance(out);
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Collector<KafkaRecord>) {
        self.now = now.millis();
        let Some(timeout) = self.idle_after else {
            return;
        };
        for partition in self.partitions.values_mut() {
            if partition.active || partition.last_active == i64::MIN {
                partition.active = false;
                partition.last_active = now.millis();
            } else if now.millis().saturating_sub(partition.last_active) >= timeout {
                partition.idle = true;
            }
        }
        self.advance(out);
    }

    /// Each partition's largest timestamp and the emitted watermark, so that
    /// a restored job does not move event time back.
    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let mut bytes = Vec::with_capacity(8 + self.partitions.len() * 12);
        bytes.extend_from_slice(&self.emitted.millis().to_le_bytes());
        for (&id, partition) in &self.partitions {
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&partition.max_seen.to_le_bytes());
        }
        Ok(Some(StateBytes::new(SCHEMA, bytes)))
    }

    /// Takes every old instance's partitions (a partition belongs to one
    /// instance at a time, so they do not overlap); the emitted watermark
    /// is the earliest any had reached.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let mut emitted: Option<i64> = None;
        for part in &restore.parts {
            let well_formed = part.schema == SCHEMA
                && part.bytes.len() >= 8
                && (part.bytes.len() - 8).is_multiple_of(12);
            if !well_formed {
                return Err(TaskError::Restore(format!(
                    "`{}`: partition watermarks of schema {} and {} bytes (this version reads schema {SCHEMA}: 8 bytes, then 12 a partition)",
                    restore.component,
                    part.schema,
                    part.bytes.len()
                )));
            }
            let (head, entries) = part.bytes.split_at(8);
            let head = i64::from_le_bytes(head.try_into().unwrap_or_default());
            emitted = Some(emitted.map_or(head, |e| e.min(head)));
            for entry in entries.chunks_exact(12) {
                let (id, max_seen) = entry.split_at(4);
                self.partitions.insert(
                    i32::from_le_bytes(id.try_into().unwrap_or_default()),
                    PartitionTime {
                        max_seen: i64::from_le_bytes(max_seen.try_into().unwrap_or_default()),
                        active: false,
                        last_active: i64::MIN,
                        idle: false,
                    },
                );
            }
        }
        if let Some(emitted) = emitted {
            self.emitted = Timestamp::from_millis(emitted);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use streamwork_core::testkit::Harness;

    use super::*;

    fn record(partition: i32, timestamp: i64) -> KafkaRecord {
        KafkaRecord {
            partition,
            offset: 0,
            key: None,
            value: Vec::new(),
            timestamp: Some(timestamp),
            origin: None,
        }
    }

    fn emitted(h: &Harness<PartitionWatermarks>) -> i64 {
        h.operator().emitted.millis()
    }

    #[test]
    fn the_watermark_is_the_slowest_partitions() {
        let mut h = Harness::new(PartitionWatermarks::bounded(Duration::from_millis(10)));
        h.record((), record(1, 500), None);
        h.record((), record(0, 1_000), None);
        assert_eq!(emitted(&h), 490);
        h.record((), record(0, 2_000), None);
        assert_eq!(emitted(&h), 490, "partition 1 holds it back");
        h.record((), record(1, 1_500), None);
        assert_eq!(emitted(&h), 1_490);
    }

    #[test]
    fn an_idle_partition_does_not_hold_event_time_back() {
        let mut h = Harness::new(
            PartitionWatermarks::bounded(Duration::ZERO).idle_after(Duration::from_millis(100)),
        );
        h.processing_time(0);
        h.record((), record(1, 100), None);
        h.record((), record(0, 1_000), None);
        assert_eq!(emitted(&h), 100);
        // Partition 0 keeps receiving, partition 1 falls silent.
        for tick in 1..=4 {
            h.record((), record(0, 1_000 + tick * 100), None);
            h.processing_time(tick * 60);
        }
        assert_eq!(emitted(&h), 1_400, "partition 1 is idle");
        // When it speaks again it counts again; the watermark never goes back.
        h.record((), record(1, 200), None);
        h.record((), record(0, 1_500), None);
        assert_eq!(emitted(&h), 1_400);
        h.record((), record(1, 1_600), None);
        assert_eq!(emitted(&h), 1_500);
        // Every partition idle: the instance is idle.
        for tick in 5..=8 {
            h.processing_time(tick * 60);
        }
        assert!(h.operator().idle);
    }

    #[test]
    fn a_named_partition_holds_event_time_back_until_it_speaks_or_idles() {
        let mut h = Harness::new(
            PartitionWatermarks::bounded(Duration::ZERO)
                .partitions([0, 1])
                .idle_after(Duration::from_millis(100)),
        );
        h.processing_time(0);
        h.record((), record(0, 1_000), None);
        assert_eq!(
            emitted(&h),
            Timestamp::MIN.millis(),
            "partition 1 has not spoken"
        );
        h.record((), record(1, 400), None);
        assert_eq!(emitted(&h), 400);

        let mut silent = Harness::new(
            PartitionWatermarks::bounded(Duration::ZERO)
                .partitions([0, 1])
                .idle_after(Duration::from_millis(100)),
        );
        silent.processing_time(0);
        for tick in 1..=4 {
            silent.record((), record(0, tick * 100), None);
            silent.processing_time(tick * 60);
        }
        assert_eq!(emitted(&silent), 400, "partition 1 never spoke: idle");
    }

    #[test]
    fn event_time_survives_a_restore() {
        let mut h = Harness::new(PartitionWatermarks::bounded(Duration::ZERO));
        h.record((), record(3, 700), None);
        h.record((), record(5, 900), None);
        let snapshot = h.snapshot().unwrap();
        let mut restored = Harness::restored(
            PartitionWatermarks::bounded(Duration::ZERO),
            streamwork_core::CheckpointId::new(1),
            Some(&snapshot),
        )
        .unwrap();
        assert_eq!(emitted(&restored), 700);
        restored.record((), record(5, 1_000), None);
        assert_eq!(emitted(&restored), 700, "partition 3 is remembered at 700");
        restored.record((), record(3, 800), None);
        assert_eq!(emitted(&restored), 800);
        let torn = StateBytes::new(SCHEMA, vec![0; 9]);
        assert!(
            Harness::restored(
                PartitionWatermarks::bounded(Duration::ZERO),
                streamwork_core::CheckpointId::new(1),
                Some(&torn),
            )
            .is_err()
        );
    }
}
