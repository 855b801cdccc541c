//! The state store against a model: `StoredState` under random writes,
//! removals, checkpoints (written to a real checkpoint log as the
//! coordinator writes them: side records produced off the instance,
//! dependencies, commit, runs mapped back), crashes that restore the last
//! complete checkpoint at another parallelism, and the merges its policy
//! makes, always reads what a `BTreeMap` holds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use streamwork_core::checkpoint::{
    CheckpointView, Restore, RestoreSource, RestoredPart, SharedBytes, SideRecordKey,
    SnapshotContext,
};
use streamwork_core::grouping::KeyGroups;
use streamwork_core::hash::stable_hash;
use streamwork_core::state::CurrentKey;
use streamwork_core::time::Timestamp;
use streamwork_core::{CheckpointId, InstanceContext, InstanceIdx};
use streamwork_state::{
    Checkpoint, CheckpointLog, ExpiringState, FieldsReader, FieldsWriter, LogOptions, StateError,
    StateField, StoreOptions, StoredState, Ttl, load_latest, operator_id, side_operator_id,
};

const GROUPS: KeyGroups = KeyGroups::DEFAULT;
const COMPONENT: &str = "sums";
const FIELD: &str = "totals";

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "swstore-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loaded checkpoint offered as the runtime offers it; `flip`: a byte of
/// every side record to damage (a copy is handed out).
struct Source {
    checkpoint: Checkpoint,
    flip: Option<usize>,
}

impl RestoreSource for Source {
    fn checkpoint(&self) -> CheckpointId {
        self.checkpoint.id()
    }
    fn is_final(&self) -> bool {
        false
    }
    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>> {
        let id = operator_id(component);
        self.checkpoint
            .snapshots()
            .filter(|s| s.operator() == id)
            .map(|s| RestoredPart {
                part: s.part(),
                schema: s.schema(),
                bytes: s.bytes(),
            })
            .collect()
    }
    fn ended(&self, _: &str) -> Vec<InstanceIdx> {
        Vec::new()
    }
    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes> {
        let shared = self.checkpoint.shared(
            key.checkpoint,
            side_operator_id(key.component, key.stream),
            key.part,
        )?;
        let Some(at) = self.flip else {
            return Some(shared);
        };
        let mut damaged = rkyv::util::AlignedVec::<16>::new();
        damaged.extend_from_slice(shared.bytes());
        damaged[at] ^= 0x40;
        let len = damaged.len();
        SharedBytes::new(std::sync::Arc::new(damaged), 0..len)
    }
}

/// One job's instances of a stored field, and the log they checkpoint to.
struct Job<S> {
    dir: Dir,
    log: CheckpointLog,
    completed: CheckpointId,
    /// What the instances see of the job's checkpoints: the last complete one.
    view: Arc<AtomicU64>,
    instances: Vec<S>,
    fresh: fn() -> S,
    /// Bytes each checkpoint wrote.
    written: Vec<u64>,
}

fn options() -> StoreOptions {
    // A tiny cache, so that reads go to the runs.
    StoreOptions {
        cache_entries: 4,
        ..StoreOptions::default()
    }
}

fn stored() -> StoredState<u64, i64> {
    StoredState::with_options(options())
}

impl<S: StateField> Job<S> {
    fn new(parallelism: u32, fresh: fn() -> S) -> Self {
        let dir = Dir::new("job");
        let log = CheckpointLog::open(
            &dir.0,
            LogOptions {
                segment_bytes: 4096,
                retain: 2,
            },
        )
        .unwrap();
        let mut job = Job {
            dir,
            log,
            completed: CheckpointId::NONE,
            view: Arc::new(AtomicU64::new(0)),
            instances: (0..parallelism).map(|_| fresh()).collect(),
            fresh,
            written: Vec::new(),
        };
        job.open();
        job
    }

    /// Opens every instance as its operator does, in a job whose last
    /// complete checkpoint it reads from `view`.
    fn open(&mut self) {
        let parallelism = self.parallelism();
        for (i, state) in self.instances.iter_mut().enumerate() {
            let view = CheckpointView::new(self.view.clone(), None);
            let ctx = InstanceContext::new(COMPONENT, InstanceIdx(i as u32), parallelism, GROUPS)
                .with_checkpoints(view);
            state.open_field(&ctx);
        }
    }

    fn parallelism(&self) -> u32 {
        self.instances.len() as u32
    }

    fn owner(&mut self, key: u64) -> &mut S {
        let p = self.parallelism();
        &mut self.instances[GROUPS.route(stable_hash(&key), p) as usize]
    }

    /// A checkpoint, written as the coordinator writes it.
    fn checkpoint(&mut self) {
        let id = self.log.next_checkpoint_id().unwrap();
        let parallelism = self.parallelism();
        let mut records = 0;
        let mut bytes = 0u64;
        let mut mapped = Vec::new();
        let mut builds_on = Vec::new();
        for (i, state) in self.instances.iter_mut().enumerate() {
            let ctx = SnapshotContext {
                checkpoint: id,
                key_groups: GROUPS,
                instance: InstanceIdx(i as u32),
                parallelism,
                completed: self.completed,
            };
            let mut writer = FieldsWriter::new();
            writer.snapshot(FIELD, state, &ctx).unwrap();
            let part = writer.finish();
            self.log
                .append_snapshot(
                    id,
                    operator_id(COMPONENT),
                    InstanceIdx(i as u32),
                    part.schema,
                    &part.bytes,
                )
                .unwrap();
            records += 1;
            for side in &part.side {
                let at = self
                    .log
                    .append_streamed(
                        id,
                        side_operator_id(COMPONENT, side.stream),
                        InstanceIdx(i as u32),
                        side.schema,
                        side.check,
                        |out| {
                            side.payload
                                .produce(out)
                                .map_err(|e| panic!("producing a run: {e}"))
                        },
                    )
                    .unwrap();
                bytes += at.len() as u64;
                records += 1;
                mapped.push((at, side.written.clone()));
            }
            builds_on.extend(part.builds_on);
        }
        builds_on.sort_unstable();
        builds_on.dedup();
        for on in builds_on {
            self.log.append_dependency(id, on).unwrap();
        }
        self.log.commit(id, records).unwrap();
        for (at, slot) in mapped {
            slot.set(self.log.map_written(&at).unwrap()).unwrap();
        }
        self.completed = id;
        self.view.store(id.get(), Ordering::Release);
        self.written.push(bytes);
    }

    /// A crash, and a restore of the last complete checkpoint at
    /// `parallelism` (from nothing if there is none).
    fn crash_and_restore(&mut self, parallelism: u32) {
        let fresh = self.fresh;
        if self.completed == CheckpointId::NONE {
            self.instances = (0..parallelism).map(|_| fresh()).collect();
            self.open();
            return;
        }
        let source = Source {
            checkpoint: load_latest(&self.dir.0).unwrap(),
            flip: None,
        };
        assert_eq!(source.checkpoint(), self.completed);
        self.instances = (0..parallelism)
            .map(|i| restored(&source, InstanceIdx(i), parallelism, fresh()))
            .collect();
        self.open();
    }
}

/// `state` restored from `source` as instance `instance` of `parallelism`.
fn restored<S: StateField>(
    source: &Source,
    instance: InstanceIdx,
    parallelism: u32,
    mut state: S,
) -> S {
    let restore = Restore {
        component: COMPONENT,
        checkpoint: source.checkpoint(),
        is_final: false,
        ended: Vec::new(),
        instance,
        parallelism,
        key_groups: GROUPS,
        parts: source.parts(COMPONENT),
        records: Some(source),
    };
    let fields = FieldsReader::read(&restore).unwrap();
    assert!(fields.contains(FIELD), "the field was checkpointed");
    fields.restore(FIELD, &mut state).unwrap();
    state
}

#[derive(Clone, Debug)]
enum Op {
    Put(u64, i64),
    Add(u64, i64),
    Remove(u64),
    Get(u64),
    Checkpoint,
    Crash(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u64..40;
    prop_oneof![
        4 => (key.clone(), any::<i64>()).prop_map(|(k, v)| Op::Put(k, v)),
        4 => (key.clone(), -1000i64..1000).prop_map(|(k, d)| Op::Add(k, d)),
        2 => key.clone().prop_map(Op::Remove),
        4 => key.prop_map(Op::Get),
        2 => Just(Op::Checkpoint),
        1 => (1u32..4).prop_map(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_store_reads_what_the_model_holds(start in 1u32..4, ops in prop::collection::vec(op(), 1..160)) {
        let mut job = Job::new(start, stored);
        let mut model: BTreeMap<u64, i64> = BTreeMap::new();
        let mut committed = model.clone();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    job.owner(k).insert(CurrentKey::for_testing(&k), v);
                    model.insert(k, v);
                }
                Op::Add(k, d) => {
                    let v = job.owner(k).get_or_default(CurrentKey::for_testing(&k));
                    *v = v.wrapping_add(d);
                    let m = model.entry(k).or_default();
                    *m = m.wrapping_add(d);
                }
                Op::Remove(k) => {
                    job.owner(k).remove(CurrentKey::for_testing(&k));
                    model.remove(&k);
                }
                Op::Get(k) => {
                    let got = job.owner(k).get(CurrentKey::for_testing(&k)).copied();
                    prop_assert_eq!(got, model.get(&k).copied(), "key {}", k);
                }
                Op::Checkpoint => {
                    job.checkpoint();
                    committed = model.clone();
                }
                Op::Crash(p) => {
                    job.crash_and_restore(p);
                    model = committed.clone();
                }
            }
        }
        // Every instance holds exactly the model's keys it owns.
        let p = job.parallelism();
        let mut all = BTreeMap::new();
        for (i, state) in job.instances.iter_mut().enumerate() {
            for (k, v) in state.entries().unwrap() {
                prop_assert_eq!(GROUPS.route(stable_hash(&k), p), i as u32);
                all.insert(k, v);
            }
        }
        prop_assert_eq!(all, model);
    }
}

/// A layer of writes frozen by a checkpoint is let go as soon as a newer
/// one is durable, at the writes that follow, not at the next snapshot:
/// memory holds the newest durable layer (a cache) and what is written
/// since, never two checkpoints' worth.
#[test]
fn a_durable_layer_is_let_go_before_the_next_snapshot() {
    let mut job = Job::new(1, stored);
    let write = |job: &mut Job<StoredState<u64, i64>>, keys: std::ops::Range<u64>| {
        for k in keys {
            job.owner(k).insert(CurrentKey::for_testing(&k), k as i64);
        }
    };
    write(&mut job, 0..10_000);
    job.checkpoint();
    write(&mut job, 10_000..20_000);
    job.checkpoint();
    // The first layer is the newest durable one; the second is frozen,
    // and its checkpoint has just completed.
    assert!(job.instances[0].in_memory() >= 20_000);
    write(&mut job, 20_000..20_010);
    let held = job.instances[0].in_memory();
    assert!(
        held <= 10_000 + 10 + 4,
        "{held} entries in memory: the first layer is held past the second's completion"
    );
    for k in [0, 15_000, 20_005] {
        assert_eq!(
            job.owner(k).get(CurrentKey::for_testing(&k)),
            Some(&(k as i64))
        );
    }
}

/// A checkpoint writes what changed since the last one, and merging keeps
/// the runs few: over many checkpoints that each change 1% of the keys,
/// the bytes written average a small share of the whole state's.
#[test]
fn checkpoints_write_what_changed_and_merges_stay_bounded() {
    let keys = 20_000u64;
    let mut job = Job::new(1, stored);
    for k in 0..keys {
        job.owner(k).insert(CurrentKey::for_testing(&k), k as i64);
    }
    job.checkpoint();
    let full = job.written[0];
    for round in 0..40u64 {
        for k in 0..keys / 100 {
            let key = (k * 97 + round * 31) % keys;
            *job.owner(key).get_or_default(CurrentKey::for_testing(&key)) += 1;
        }
        job.checkpoint();
    }
    let increments = &job.written[1..];
    let average = increments.iter().sum::<u64>() as f64 / increments.len() as f64;
    assert!(
        average < 0.05 * full as f64,
        "average {average:.0} bytes a checkpoint against {full} for the whole state: {increments:?}"
    );
    assert!(
        job.instances[0].runs() <= 13,
        "{} runs",
        job.instances[0].runs()
    );
    // And what was written reads back whole after a restore.
    job.crash_and_restore(1);
    let state = &mut job.instances[0];
    assert_eq!(state.in_memory(), 0, "a restore reads the log in place");
    assert_eq!(state.entries().unwrap().len(), keys as usize);
}

#[derive(Clone, Debug)]
enum TtlOp {
    Add(u64, i64),
    Remove(u64),
    Get(u64),
    Advance(i64),
    Checkpoint,
    Crash(u32),
}

fn ttl_op() -> impl Strategy<Value = TtlOp> {
    let key = 0u64..24;
    prop_oneof![
        5 => (key.clone(), -100i64..100).prop_map(|(k, d)| TtlOp::Add(k, d)),
        1 => key.clone().prop_map(TtlOp::Remove),
        4 => key.prop_map(TtlOp::Get),
        3 => (0i64..40).prop_map(TtlOp::Advance),
        2 => Just(TtlOp::Checkpoint),
        1 => (1u32..4).prop_map(TtlOp::Crash),
    ]
}

const TTL_MS: i64 = 50;

/// The model's value of `k` at `now`, unless expired.
fn live(model: &BTreeMap<u64, (i64, i64)>, k: u64, now: i64) -> Option<i64> {
    model
        .get(&k)
        .filter(|(written, _)| *written >= now - TTL_MS)
        .map(|(_, v)| *v)
}

fn expiring() -> ExpiringState<u64, i64> {
    ExpiringState::with_options(
        Ttl::event(std::time::Duration::from_millis(TTL_MS as u64)),
        options(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// With a time-to-live in event time: a value read more than the TTL
    /// after its last write is gone, before and after checkpoints, crashes
    /// and rescales, as in a model that drops it.
    #[test]
    fn expired_values_are_gone_as_in_the_model(start in 1u32..4, ops in prop::collection::vec(ttl_op(), 1..160)) {
        let mut job = Job::new(start, expiring);
        let mut now = 0i64;
        // Key → (last written, value).
        let mut model: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
        let mut committed = (model.clone(), now);
        let advance = |job: &mut Job<ExpiringState<u64, i64>>, now: i64| {
            for state in &mut job.instances {
                state.advance(Timestamp::from_millis(now));
            }
        };
        advance(&mut job, now);
        for op in ops {
            match op {
                TtlOp::Add(k, d) => {
                    *job.owner(k).get_or_default(CurrentKey::for_testing(&k)) += d;
                    let base = live(&model, k, now).unwrap_or_default();
                    model.insert(k, (now, base + d));
                }
                TtlOp::Remove(k) => {
                    job.owner(k).remove(CurrentKey::for_testing(&k));
                    model.remove(&k);
                }
                TtlOp::Get(k) => {
                    let got = job.owner(k).get(CurrentKey::for_testing(&k)).copied();
                    prop_assert_eq!(got, live(&model, k, now), "key {} at {}", k, now);
                }
                TtlOp::Advance(dt) => {
                    now += dt;
                    advance(&mut job, now);
                }
                TtlOp::Checkpoint => {
                    job.checkpoint();
                    committed = (model.clone(), now);
                }
                TtlOp::Crash(p) => {
                    job.crash_and_restore(p);
                    (model, now) = committed.clone();
                    // Event time comes back with the replayed records.
                    advance(&mut job, now);
                }
            }
        }
        let p = job.parallelism();
        let mut all = BTreeMap::new();
        for (i, state) in job.instances.iter_mut().enumerate() {
            for (k, v) in state.entries().unwrap() {
                prop_assert_eq!(GROUPS.route(stable_hash(&k), p), i as u32);
                all.insert(k, v);
            }
        }
        let expected: BTreeMap<u64, i64> = model
            .keys()
            .filter_map(|&k| live(&model, k, now).map(|v| (k, v)))
            .collect();
        prop_assert_eq!(all, expected);
    }
}

/// Expired values are left out of the runs written after they expired.
#[test]
fn expired_values_leave_the_checkpoints() {
    let mut job = Job::new(1, expiring);
    job.instances[0].advance(Timestamp::from_millis(0));
    for k in 0..1_000u64 {
        job.owner(k).insert(CurrentKey::for_testing(&k), 1);
    }
    job.checkpoint();
    let full = job.written[0];
    // Everything expires; one key is written again.
    job.instances[0].advance(Timestamp::from_millis(10 * TTL_MS));
    let k = 5u64;
    job.owner(k).insert(CurrentKey::for_testing(&k), 2);
    // Two checkpoints: the second merges the first run away.
    job.checkpoint();
    job.checkpoint();
    job.crash_and_restore(1);
    job.instances[0].advance(Timestamp::from_millis(10 * TTL_MS));
    assert_eq!(job.instances[0].entries().unwrap(), vec![(5, 2)]);
    let last = *job.written.last().unwrap();
    assert!(
        last < full / 10,
        "the last checkpoint wrote {last} bytes, the first {full}: the expired values are still in it"
    );
}

/// A run damaged in the log is never misread: the key it holds reads as
/// absent until the next checkpoint, which fails naming the damage, so no
/// checkpoint records a value computed from the damage.
#[test]
fn a_damaged_run_fails_the_next_checkpoint_rather_than_being_misread() {
    let mut job = Job::new(1, stored);
    for k in 0..2_000u64 {
        job.owner(k).insert(CurrentKey::for_testing(&k), k as i64);
    }
    job.checkpoint();
    // The run's first bytes are the archive of key group 0.
    let source = Source {
        checkpoint: load_latest(&job.dir.0).unwrap(),
        flip: Some(2),
    };
    let mut state = restored(&source, InstanceIdx(0), 1, stored());
    let k = (0..2_000u64)
        .find(|k| GROUPS.key_group(stable_hash(k)) == 0)
        .expect("a key of group 0");
    assert_eq!(state.get(CurrentKey::for_testing(&k)), None);
    let ctx = SnapshotContext {
        checkpoint: CheckpointId::new(99),
        key_groups: GROUPS,
        instance: InstanceIdx(0),
        parallelism: 1,
        completed: job.completed,
    };
    let error = state
        .snapshot_field(&ctx)
        .expect_err("the damage is reported");
    assert!(matches!(error, StateError::RunUnreadable { .. }), "{error}");
    assert!(error.to_string().contains("checksum"), "{error}");
}
