//! Watermark strategies: where records get their event time and event time
//! starts to advance.
//!
//! A watermark `W` means: no record with a timestamp below `W` will follow;
//! one that does is late. A strategy runs as an operator right after the
//! source (fused into its task): it stamps each record with its timestamp,
//! tracks the largest seen, and after each batch emits the watermark if it
//! advanced (watermarks are coalesced per batch, never per record):
//!
//! * **monotonic**: `W = max seen` (timestamps never go back);
//! * **bounded out-of-orderness** `B`: `W = max seen - B`;
//! * **custom**: a function of each record proposes watermarks (punctuations).
//!
//! With an idleness timeout, an instance that receives nothing for that long
//! declares itself idle, so that it does not hold back event time downstream
//! (the minimum over inputs skips idle ones) until it receives records again.
//! A strategy can also drop and count records that are late when read, which
//! makes lateness independent of timing and parallelism (the Nexmark rule).
//!
//! **Alignment** (opt-in, [`WatermarkSpec::align`]): parallel source instances
//! progress at the whim of the scheduler, and one that runs ahead in event
//! time makes every downstream window hold state from the slowest instance's
//! watermark up to its own. An aligned strategy shares its instances'
//! watermarks; while an instance is more than `max_drift` ahead of the
//! slowest one, the engine does not poll the source it is fused into (it
//! gates the source's polls: the instance itself never waits, which on a
//! worker would hold up the worker's other tasks, perhaps the very one it
//! waits for), so window state stays bounded by the drift. Checkpoint
//! barriers still flow while a source is held back. An idle or ended
//! instance does not hold the others back; a member that stops advancing
//! without being idle does (declare idleness with
//! [`idle_after`](WatermarkSpec::idle_after)). A strategy not fused into a
//! source cannot hold one back: it is not aligned.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use streamwork_core::Control;
use streamwork_core::{
    AssignsWatermarks, Collector, Context, Data, InstanceContext, NoKey, Operator, Outputs, Record,
    Restore, StateBytes, TaskError, Timestamp,
};
use streamwork_core::{SnapshotContext, Statefulness};

use crate::LateCounter;

type Propose<T> = Arc<dyn Fn(&T, Timestamp) -> Option<Timestamp> + Send + Sync>;

/// How the watermark follows the timestamps.
/// The layout version of a watermark assigner's snapshot.
const WATERMARK_SCHEMA: u32 = 1;

enum Generator<T> {
    Monotonic,
    Bounded(i64),
    Custom(Propose<T>),
}

impl<T> Clone for Generator<T> {
    fn clone(&self) -> Self {
        match self {
            Generator::Monotonic => Generator::Monotonic,
            Generator::Bounded(bound) => Generator::Bounded(*bound),
            Generator::Custom(propose) => Generator::Custom(propose.clone()),
        }
    }
}

/// Entry points of watermark strategies.
///
/// ```
/// use std::time::Duration;
/// use streamwork::core::Timestamp;
/// use streamwork::window::Watermarks;
/// let strategy = Watermarks::bounded(Duration::from_secs(4))
///     .idle_after(Duration::from_secs(10))
///     .timestamps(|reading: &(u64, i64)| Timestamp::from_millis(reading.1));
/// # let _ = strategy;
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct Watermarks;

/// Instances of watermark strategies kept within a drift of each other: every
/// instance of one strategy with [`WatermarkSpec::align`], or of several
/// strategies sharing a group with [`WatermarkSpec::align_in`] (the two inputs
/// of a join, say).
///
/// ```
/// use std::time::Duration;
/// use streamwork::window::watermark::AlignmentGroup;
/// let group = AlignmentGroup::new(Duration::from_secs(30));
/// # let _ = group;
/// ```
#[derive(Clone, Debug)]
pub struct AlignmentGroup(Arc<Alignment>);

#[derive(Debug)]
struct Alignment {
    max_drift: i64,
    /// One slot per instance of every member strategy, as soon as one of
    /// its instances opens (an instance that has not opened yet holds the
    /// others back, at `i64::MIN`).
    watermarks: Mutex<Vec<i64>>,
    /// Which slot is which instance of which component.
    members: Mutex<Vec<(String, u32)>>,
    /// The largest lead of a published watermark over the slowest
    /// published one (instances that have not published yet, have ended or
    /// are idle left out).
    lead: std::sync::atomic::AtomicI64,
}

impl AlignmentGroup {
    /// A group whose members stay within `max_drift` of the slowest.
    pub fn new(max_drift: Duration) -> Self {
        AlignmentGroup(Arc::new(Alignment {
            max_drift: i64::try_from(max_drift.as_millis()).unwrap_or(i64::MAX),
            watermarks: Mutex::new(Vec::new()),
            members: Mutex::new(Vec::new()),
            lead: std::sync::atomic::AtomicI64::new(0),
        }))
    }

    /// The largest lead any member's watermark has had over the slowest
    /// member's so far: at most the drift plus the event time one batch
    /// spans, as the source of a member is held back between polls.
    pub fn largest_lead(&self) -> Duration {
        let lead = self.0.lead.load(std::sync::atomic::Ordering::Relaxed);
        Duration::from_millis(lead.max(0) as u64)
    }

    /// The slot of `component`'s instance `instance` of `parallelism`; the
    /// first instance of a component to open makes the slots of all its
    /// instances, so that one whose task has not started yet already holds
    /// the others back.
    fn join(&self, component: &str, instance: u32, parallelism: u32) -> usize {
        let mut members = self.0.members.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.0.watermarks.lock().unwrap_or_else(|p| p.into_inner());
        if !members.iter().any(|(c, _)| c == component) {
            for i in 0..parallelism.max(1) {
                members.push((component.to_string(), i));
                all.push(i64::MIN);
            }
        }
        members
            .iter()
            .position(|(c, i)| c == component && *i == instance)
            .unwrap_or_else(|| {
                members.push((component.to_string(), instance));
                all.push(i64::MIN);
                all.len() - 1
            })
    }

    /// Whether slot `slot` is more than the drift ahead of the slowest.
    fn is_ahead(&self, slot: usize) -> bool {
        let all = self.0.watermarks.lock().unwrap_or_else(|p| p.into_inner());
        let minimum = all.iter().copied().min().unwrap_or(i64::MIN);
        all.get(slot)
            .is_some_and(|own| own.saturating_sub(minimum) > self.0.max_drift)
    }

    /// Publishes `watermark` for slot `slot`; returns the minimum over all.
    fn publish(&self, slot: usize, watermark: i64) -> i64 {
        let mut all = self.0.watermarks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(own) = all.get_mut(slot) {
            *own = watermark;
        }
        let live = || {
            all.iter()
                .copied()
                .filter(|w| *w != i64::MIN && *w != i64::MAX)
        };
        if let (Some(low), Some(high)) = (live().min(), live().max()) {
            self.0.lead.fetch_max(
                high.saturating_sub(low),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        all.iter().copied().min().unwrap_or(watermark)
    }
}

/// A watermark strategy being described, for records of type `T`.
pub struct WatermarkSpec<T> {
    generator: Generator<T>,
    idle_after: Option<i64>,
    drop_late: Option<LateCounter>,
    alignment: Option<AlignmentGroup>,
}

impl Watermarks {
    /// Timestamps never go back: `W = max seen`.
    pub fn monotonic<T>() -> WatermarkSpec<T> {
        WatermarkSpec {
            generator: Generator::Monotonic,
            idle_after: None,
            drop_late: None,
            alignment: None,
        }
    }

    /// Records are at most `bound` out of order: `W = max seen - bound`.
    pub fn bounded<T>(bound: Duration) -> WatermarkSpec<T> {
        WatermarkSpec {
            generator: Generator::Bounded(i64::try_from(bound.as_millis()).unwrap_or(i64::MAX)),
            idle_after: None,
            drop_late: None,
            alignment: None,
        }
    }

    /// `propose(record, timestamp)` may return a new watermark after any record.
    pub fn custom<T>(
        propose: impl Fn(&T, Timestamp) -> Option<Timestamp> + Send + Sync + 'static,
    ) -> WatermarkSpec<T> {
        WatermarkSpec {
            generator: Generator::Custom(Arc::new(propose)),
            idle_after: None,
            drop_late: None,
            alignment: None,
        }
    }
}

impl<T> WatermarkSpec<T> {
    /// Declares an instance idle after `timeout` without records.
    pub fn idle_after(mut self, timeout: Duration) -> Self {
        self.idle_after = Some(
            i64::try_from(timeout.as_millis())
                .unwrap_or(i64::MAX)
                .max(1),
        );
        self
    }

    /// Drops records whose timestamp is below the watermark when they are read,
    /// counting them into `counter`.
    pub fn drop_late(mut self, counter: LateCounter) -> Self {
        self.drop_late = Some(counter);
        self
    }

    /// Aligns the instances of this strategy: none gets more than `max_drift`
    /// ahead of the slowest (see the module docs).
    pub fn align(mut self, max_drift: Duration) -> Self {
        self.alignment = Some(AlignmentGroup::new(max_drift));
        self
    }

    /// Aligns the instances of this strategy with every other member of `group`.
    ///
    /// A member joins the group when its source task starts; the engine
    /// polls no aligned source until every source task of the job has
    /// started, so a member slow to start (restoring, or waiting for its
    /// worker's turn) is not left behind by the others.
    pub fn align_in(mut self, group: &AlignmentGroup) -> Self {
        self.alignment = Some(group.clone());
        self
    }

    /// Takes each record's event time from `timestamp`: the strategy's operator.
    pub fn timestamps<F: Fn(&T) -> Timestamp + Clone + Send + 'static>(
        self,
        timestamp: F,
    ) -> AssignWatermarks<T, F> {
        AssignWatermarks {
            generator: self.generator,
            timestamp,
            idle_after: self.idle_after,
            drop_late: self.drop_late,
            max_seen: None,
            proposed: Timestamp::MIN,
            emitted: Timestamp::MIN,
            active: false,
            idle: false,
            last_active: 0,
            alignment: self.alignment,
            slot: 0,
        }
    }
}

/// The operator of a watermark strategy: stamps records, emits watermarks.
/// Its output stream is watermarked, so event-time operators accept it.
pub struct AssignWatermarks<T, F> {
    generator: Generator<T>,
    timestamp: F,
    idle_after: Option<i64>,
    drop_late: Option<LateCounter>,
    max_seen: Option<i64>,
    proposed: Timestamp,
    emitted: Timestamp,
    active: bool,
    idle: bool,
    last_active: i64,
    alignment: Option<AlignmentGroup>,
    /// This instance's slot in its alignment group, once opened.
    slot: usize,
}

impl<T, F: Clone> Clone for AssignWatermarks<T, F> {
    fn clone(&self) -> Self {
        AssignWatermarks {
            generator: self.generator.clone(),
            timestamp: self.timestamp.clone(),
            idle_after: self.idle_after,
            drop_late: self.drop_late.clone(),
            max_seen: self.max_seen,
            proposed: self.proposed,
            emitted: self.emitted,
            active: self.active,
            idle: self.idle,
            last_active: self.last_active,
            alignment: self.alignment.clone(),
            slot: self.slot,
        }
    }
}

impl<T, F> AssignWatermarks<T, F> {
    /// The watermark implied by what has been read so far.
    fn current(&self) -> Timestamp {
        match (&self.generator, self.max_seen) {
            (Generator::Monotonic, Some(max)) => Timestamp::from_millis(max),
            (Generator::Bounded(bound), Some(max)) => {
                Timestamp::from_millis(max.saturating_sub(*bound))
            }
            (Generator::Custom(_), _) => self.proposed,
            (_, None) => Timestamp::MIN,
        }
    }

    /// Reads the timestamp of one record and moves event time along: `None`
    /// if the record is late and late records are dropped (it is counted).
    #[inline]
    fn stamp(&mut self, value: &T) -> Option<Timestamp>
    where
        F: Fn(&T) -> Timestamp,
    {
        let time = (self.timestamp)(value);
        if let Some(late) = &self.drop_late
            && time < self.current()
        {
            late.add(1);
            return None;
        }
        if let Generator::Custom(propose) = &self.generator
            && let Some(proposed) = propose(value, time)
        {
            self.proposed = self.proposed.max(proposed);
        }
        self.max_seen = Some(
            self.max_seen
                .map_or(time.millis(), |m| m.max(time.millis())),
        );
        self.active = true;
        Some(time)
    }
}

impl<T: Data, F: Fn(&T) -> Timestamp + Clone + Send + 'static> Operator for AssignWatermarks<T, F> {
    type In = T;
    type Key = NoKey;
    type Out = Collector<T>;
    type Time = AssignsWatermarks;

    fn statefulness(&self) -> Statefulness {
        // The event time it reached, so that a restored job does not move
        // event time back.
        Statefulness::Checkpointed
    }

    fn open(&mut self, ctx: &InstanceContext) {
        if let Some(group) = self.alignment.take() {
            let slot = group.join(ctx.component(), ctx.instance().0, ctx.parallelism());
            // The engine holds the source back while this instance is ahead.
            let gate = {
                let group = group.clone();
                Arc::new(move || !group.is_ahead(slot))
            };
            if ctx.gate_source(gate) {
                self.slot = slot;
                self.alignment = Some(group);
            } else {
                // Not fused into a source: not aligned, and not holding the
                // others back either.
                group.publish(slot, i64::MAX);
            }
        }
    }

    #[inline]
    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<T>>) {
        if let Some(time) = self.stamp(&value) {
            ctx.emit_at(value, time);
        }
    }

    /// Stamps the batch in place: each record gets its timestamp, late ones
    /// are dropped if asked; no record is copied.
    fn on_batch_in_place(&mut self, records: &mut Vec<Record<T>>) -> bool {
        records.retain_mut(|record| match self.stamp(&record.value) {
            Some(time) => {
                record.time = Some(time);
                true
            }
            None => false,
        });
        true
    }

    fn on_batch_end(&mut self, out: &mut Collector<T>) {
        let watermark = self.current();
        if watermark > self.emitted {
            self.emitted = watermark;
            self.idle = false;
            // A failed send is recorded by the collector and reported by the runtime.
            let _ = Outputs::control(out, &Control::Watermark(watermark));
        }
        if let Some(alignment) = &self.alignment {
            alignment.publish(self.slot, watermark.millis());
        }
    }

    /// The event time reached: the largest timestamp seen, the proposed and
    /// the emitted watermark, so that a restored job does not move event
    /// time back.
    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let mut bytes = Vec::with_capacity(24);
        for value in [
            self.max_seen.unwrap_or(i64::MIN),
            self.proposed.millis(),
            self.emitted.millis(),
        ] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        Ok(Some(StateBytes::new(WATERMARK_SCHEMA, bytes)))
    }

    /// At another parallelism, every instance takes the earliest time any
    /// old instance had reached: event time never goes past what every
    /// input had seen.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let mut earliest: Option<[i64; 3]> = None;
        for part in &restore.parts {
            let fields: Option<Vec<i64>> =
                (part.schema == WATERMARK_SCHEMA && part.bytes.len() == 24).then(|| {
                    part.bytes
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect()
                });
            let Some(fields) = fields else {
                return Err(TaskError::Restore(format!(
                    "`{}`: a watermark snapshot of schema {} and {} bytes (this version reads schema {WATERMARK_SCHEMA}, 24 bytes)",
                    restore.component,
                    part.schema,
                    part.bytes.len()
                )));
            };
            let fields = [fields[0], fields[1], fields[2]];
            earliest = Some(match earliest {
                None => fields,
                Some(e) => [
                    e[0].min(fields[0]),
                    e[1].min(fields[1]),
                    e[2].min(fields[2]),
                ],
            });
        }
        if let Some([max_seen, proposed, emitted]) = earliest {
            self.max_seen = (max_seen != i64::MIN).then_some(max_seen);
            self.proposed = Timestamp::from_millis(proposed);
            self.emitted = Timestamp::from_millis(emitted);
        }
        Ok(())
    }

    fn on_end(&mut self, _out: &mut Collector<T>) {
        if let Some(alignment) = &self.alignment {
            // An ended instance no longer holds the others back.
            alignment.publish(self.slot, i64::MAX);
        }
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Collector<T>) {
        if self.active {
            self.active = false;
            self.idle = false;
            self.last_active = now.millis();
        } else if let Some(timeout) = self.idle_after
            && !self.idle
            && now.millis().saturating_sub(self.last_active) >= timeout
        {
            self.idle = true;
            if let Some(alignment) = &self.alignment {
                // An idle instance does not hold the others back either.
                alignment.publish(self.slot, i64::MAX);
            }
            let _ = Outputs::control(out, &Control::Idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use streamwork_core::checkpoint::RestoredPart;
    use streamwork_core::testkit::Harness;
    use streamwork_core::{CheckpointId, InstanceIdx, KeyGroups, Operator, Restore, Timestamp};

    use super::Watermarks;

    #[test]
    fn a_restored_assigner_keeps_the_event_time_it_had_reached() {
        let assigner = || {
            Watermarks::bounded(std::time::Duration::from_millis(10))
                .timestamps(|t: &i64| Timestamp::from_millis(*t))
        };
        let mut harness = Harness::new(assigner());
        for t in [5, 50, 30] {
            harness.record((), t, None);
        }
        let snapshots: Vec<_> = (0..2)
            .map(|_| harness.snapshot().expect("a snapshot"))
            .collect();
        assert_eq!(harness.operator().emitted, Timestamp::from_millis(40));
        // Two old instances, one behind: the restored one starts at the earlier.
        let mut behind = Harness::new(assigner());
        behind.record((), 20, None);
        let behind = behind.snapshot().expect("a snapshot");
        let parts = [&snapshots[0], &behind];
        let restore = Restore {
            records: None,
            component: "timed",
            checkpoint: CheckpointId::new(3),
            is_final: false,
            ended: Vec::new(),
            instance: InstanceIdx(0),
            parallelism: 1,
            key_groups: KeyGroups::DEFAULT,
            parts: parts
                .iter()
                .enumerate()
                .map(|(i, s)| RestoredPart {
                    part: InstanceIdx(i as u32),
                    schema: s.schema,
                    bytes: &s.bytes,
                })
                .collect(),
        };
        let mut restored = assigner();
        restored.restore(&restore).unwrap();
        assert_eq!(restored.emitted, Timestamp::from_millis(10));
        assert_eq!(restored.max_seen, Some(20));
        // At the same parallelism, exactly where it was.
        let restored =
            Harness::restored(assigner(), CheckpointId::new(3), Some(&snapshots[1])).unwrap();
        assert_eq!(restored.operator().emitted, Timestamp::from_millis(40));
        assert_eq!(restored.operator().max_seen, Some(50));
    }
}
