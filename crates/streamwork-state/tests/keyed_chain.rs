//! Incremental snapshots of a keyed map (`KeyedCheckpoint::snapshot_map`)
//! and of a `KeyedState` field (`StateField`) against a model: any sequence
//! of writes, removals, retains, clears and checkpoints, some completing
//! late or never, restored from any complete checkpoint at parallelism 1 to
//! 3, gives every key its value as of that checkpoint, exactly once; and a
//! snapshot after a complete one writes only what changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use streamwork_core::checkpoint::{RestoreSource, RestoredPart, SideRecordKey};
use streamwork_core::hash::stable_hash;
use streamwork_core::state::Key;
use streamwork_core::state::{CurrentKey, KeyedState};
use streamwork_core::{
    CheckpointId, InstanceIdx, KeyGroups, Restore, SharedBytes, SnapshotContext, StateBytes,
};
use streamwork_state::{CowMap, FieldsReader, FieldsWriter, KeyedCheckpoint, StateData};

/// What a coordinator does with a checkpoint's parts, in memory: the
/// inline bytes, and the side record produced off the "task thread".
#[derive(Default)]
struct Log {
    parts: HashMap<u64, (StateBytes, HashMap<u32, SharedBytes>)>,
}

impl Log {
    /// Writes checkpoint `id`'s part and marks it complete, as the
    /// coordinator does once it is durable; the bytes of its side records.
    fn complete(&mut self, id: u64, state: StateBytes) -> usize {
        let mut sides = HashMap::new();
        let mut written = 0;
        for side in &state.side {
            let mut bytes = Vec::new();
            side.payload.produce(&mut bytes).unwrap();
            // Aligned as the log aligns its records.
            let mut aligned = streamwork_state::rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(&bytes);
            let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(AlignedBytes(aligned));
            let len = bytes.len();
            let shared = SharedBytes::new(owner, 0..len).unwrap();
            side.written.set(shared.clone()).unwrap();
            written += len;
            sides.insert(side.stream, shared);
        }
        self.parts.insert(id, (state, sides));
        written
    }

    fn restore(&self, id: u64, instance: u32, parallelism: u32) -> Restore<'_> {
        let (state, _) = &self.parts[&id];
        Restore {
            records: Some(self),
            component: "join",
            checkpoint: CheckpointId::new(id),
            is_final: false,
            ended: Vec::new(),
            instance: InstanceIdx(instance),
            parallelism,
            key_groups: KeyGroups::DEFAULT,
            parts: vec![RestoredPart {
                part: InstanceIdx(0),
                schema: state.schema,
                bytes: &state.bytes,
            }],
        }
    }
}

struct AlignedBytes(streamwork_state::rkyv::util::AlignedVec<16>);

impl AsRef<[u8]> for AlignedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl RestoreSource for Log {
    fn checkpoint(&self) -> CheckpointId {
        CheckpointId::NONE
    }
    fn is_final(&self) -> bool {
        false
    }
    fn parts(&self, _: &str) -> Vec<RestoredPart<'_>> {
        Vec::new()
    }
    fn ended(&self, _: &str) -> Vec<InstanceIdx> {
        Vec::new()
    }
    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes> {
        if key.part != InstanceIdx(0) {
            return None;
        }
        let (_, records) = self.parts.get(&key.checkpoint.get())?;
        records.get(&key.stream).cloned()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Add(u16, u32),
    Remove(u16),
    RetainBelow(u32),
    Clear,
    /// A snapshot; `completes` says whether its checkpoint completes
    /// before the next one is taken, later, or never (the run goes on).
    Checkpoint(Completion),
}

#[derive(Clone, Copy, Debug)]
enum Completion {
    AtOnce,
    Late,
    Never,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u16..400, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        6 => (0u16..400, 0u32..1000).prop_map(|(k, v)| Op::Add(k, v)),
        3 => (0u16..400).prop_map(Op::Remove),
        1 => any::<u32>().prop_map(Op::RetainBelow),
        1 => Just(Op::Clear),
        2 => Just(Op::Checkpoint(Completion::AtOnce)),
        1 => Just(Op::Checkpoint(Completion::Late)),
        1 => Just(Op::Checkpoint(Completion::Never)),
    ]
}

fn restored<K, V>(log: &Log, id: u64, parallelism: u32) -> BTreeMap<K, V>
where
    K: Key + StateData + Ord,
    V: StateData + Send,
{
    let mut all = BTreeMap::new();
    for instance in 0..parallelism {
        // A restored instance is a new one (the operator's prototype cloned).
        let mut checkpoint = KeyedCheckpoint::<(), K, V>::enabled();
        let entries = checkpoint
            .restore(&log.restore(id, instance, parallelism))
            .unwrap()
            .unwrap()
            .entries;
        for (k, v) in entries {
            let groups = KeyGroups::DEFAULT;
            assert_eq!(
                groups.instance_of(groups.key_group(stable_hash(&k)), parallelism),
                instance,
                "key {k:?} restored by an instance that does not own it"
            );
            let shown = format!("{k:?}");
            assert!(all.insert(k, v).is_none(), "key {shown} restored twice");
        }
    }
    all
}

/// What the property drives: a keyed map of one kind, snapshotted
/// incrementally and restored.
trait Subject: Default {
    fn insert(&mut self, k: u16, v: u32);
    fn add(&mut self, k: u16, v: u32);
    fn remove(&mut self, k: u16) -> Option<u32>;
    fn retain_below(&mut self, limit: u32);
    fn clear(&mut self);
    fn snapshot(&mut self, ctx: &SnapshotContext) -> StateBytes;
    fn restored(log: &Log, id: u64, parallelism: u32) -> BTreeMap<u16, u32>;
}

/// A `CowMap` under `KeyedCheckpoint::snapshot_map`.
#[derive(Default)]
struct Map {
    map: CowMap<u16, u32>,
    checkpoint: Option<KeyedCheckpoint<(), u16, u32>>,
}

impl Subject for Map {
    fn insert(&mut self, k: u16, v: u32) {
        self.map.insert(stable_hash(&k), k, v);
    }
    fn add(&mut self, k: u16, v: u32) {
        *self.map.get_or_insert_with(stable_hash(&k), &k, || 0) += v;
    }
    fn remove(&mut self, k: u16) -> Option<u32> {
        self.map.remove(stable_hash(&k), &k)
    }
    fn retain_below(&mut self, limit: u32) {
        self.map.retain(|_, v| *v < limit);
    }
    fn clear(&mut self) {
        self.map.clear();
    }
    fn snapshot(&mut self, ctx: &SnapshotContext) -> StateBytes {
        self.checkpoint
            .get_or_insert_with(KeyedCheckpoint::enabled)
            .snapshot_map(ctx, (), &mut self.map, |v| *v)
            .unwrap()
            .unwrap()
    }
    fn restored(log: &Log, id: u64, parallelism: u32) -> BTreeMap<u16, u32> {
        restored::<u16, u32>(log, id, parallelism)
    }
}

/// A `KeyedState` field, snapshotted as `#[derive(State)]` does.
#[derive(Default)]
struct Field {
    state: KeyedState<u16, u32>,
}

impl Subject for Field {
    fn insert(&mut self, k: u16, v: u32) {
        self.state.insert(CurrentKey::for_testing(&k), v);
    }
    fn add(&mut self, k: u16, v: u32) {
        *self.state.get_or_default(CurrentKey::for_testing(&k)) += v;
    }
    fn remove(&mut self, k: u16) -> Option<u32> {
        self.state.remove_held(&k)
    }
    fn retain_below(&mut self, limit: u32) {
        let gone: Vec<u16> = self
            .state
            .iter()
            .filter(|(_, v)| **v >= limit)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            self.state.remove_held(&k);
        }
    }
    fn clear(&mut self) {
        self.state.drain().for_each(drop);
    }
    fn snapshot(&mut self, ctx: &SnapshotContext) -> StateBytes {
        let mut fields = FieldsWriter::new();
        fields.snapshot("counts", &mut self.state, ctx).unwrap();
        fields.finish()
    }
    fn restored(log: &Log, id: u64, parallelism: u32) -> BTreeMap<u16, u32> {
        let mut all = BTreeMap::new();
        for instance in 0..parallelism {
            let restore = log.restore(id, instance, parallelism);
            let fields = FieldsReader::read(&restore).unwrap();
            let mut state: KeyedState<u16, u32> = KeyedState::new();
            assert!(fields.contains("counts"));
            fields.restore("counts", &mut state).unwrap();
            for (k, v) in state.iter() {
                let groups = KeyGroups::DEFAULT;
                assert_eq!(
                    groups.instance_of(groups.key_group(stable_hash(k)), parallelism),
                    instance
                );
                assert!(all.insert(*k, *v).is_none(), "key {k} restored twice");
            }
        }
        all
    }
}

fn any_complete_checkpoint_restores<S: Subject>(
    ops: Vec<Op>,
    parallelism: u32,
) -> Result<(), TestCaseError> {
    let mut map = S::default();
    let mut model: HashMap<u16, u32> = HashMap::new();
    let mut log = Log::default();
    let mut late: Option<(u64, StateBytes)> = None;
    let mut completed = 0u64;
    let mut expected: Vec<(u64, BTreeMap<u16, u32>)> = Vec::new();
    let mut next = 1u64;
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                map.insert(k, v);
                model.insert(k, v);
            }
            Op::Add(k, v) => {
                map.add(k, v);
                *model.entry(k).or_insert(0) += v;
            }
            Op::Remove(k) => {
                prop_assert_eq!(map.remove(k), model.remove(&k));
            }
            Op::RetainBelow(limit) => {
                map.retain_below(limit);
                model.retain(|_, v| *v < limit);
            }
            Op::Clear => {
                map.clear();
                model.clear();
            }
            Op::Checkpoint(completion) => {
                let id = next;
                next += 1;
                let mut ctx = SnapshotContext::single(CheckpointId::new(id));
                ctx.completed = CheckpointId::new(completed);
                let state = map.snapshot(&ctx);
                // An in-flight checkpoint completes before a later one
                // (the coordinator completes them in order).
                if let Some((late_id, late_state)) = late.take() {
                    log.complete(late_id, late_state);
                    completed = late_id;
                }
                let then: BTreeMap<u16, u32> = model.iter().map(|(k, v)| (*k, *v)).collect();
                match completion {
                    Completion::AtOnce => {
                        log.complete(id, state);
                        completed = id;
                        expected.push((id, then));
                    }
                    Completion::Late => {
                        late = Some((id, state));
                        expected.push((id, then));
                    }
                    Completion::Never => {}
                }
            }
        }
    }
    if let Some((late_id, late_state)) = late.take() {
        log.complete(late_id, late_state);
    }
    for (id, then) in &expected {
        prop_assert_eq!(
            &S::restored(&log, *id, parallelism),
            then,
            "checkpoint {}",
            id
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_complete_checkpoint_restores_a_keyed_state_field_as_it_was(
        ops in proptest::collection::vec(op(), 0..400),
        parallelism in 1u32..4,
    ) {
        any_complete_checkpoint_restores::<Field>(ops, parallelism)?;
    }

    #[test]
    fn any_complete_checkpoint_restores_the_map_as_it_was(
        ops in proptest::collection::vec(op(), 0..400),
        parallelism in 1u32..4,
    ) {
        any_complete_checkpoint_restores::<Map>(ops, parallelism)?;
    }
}

#[test]
fn after_a_complete_checkpoint_a_snapshot_writes_only_what_changed() {
    let mut map: CowMap<u64, u64> = CowMap::new();
    let mut checkpoint = KeyedCheckpoint::<(), u64, u64>::enabled();
    let mut log = Log::default();
    for k in 0..100_000u64 {
        map.insert(stable_hash(&k), k, k);
    }
    let take = |checkpoint: &mut KeyedCheckpoint<(), u64, u64>,
                map: &mut CowMap<u64, u64>,
                id: u64,
                completed: u64| {
        let mut ctx = SnapshotContext::single(CheckpointId::new(id));
        ctx.completed = CheckpointId::new(completed);
        checkpoint
            .snapshot_map(&ctx, (), map, |v| *v)
            .unwrap()
            .unwrap()
    };
    let whole = log.complete(1, take(&mut checkpoint, &mut map, 1, 0));
    // 100 keys written, 10 removed.
    for k in 0..100u64 {
        *map.get_mut(stable_hash(&k), &k).unwrap() += 1;
    }
    for k in 500..510u64 {
        map.remove(stable_hash(&k), &k);
    }
    let state = take(&mut checkpoint, &mut map, 2, 1);
    assert_eq!(state.builds_on, vec![CheckpointId::new(1)]);
    let delta = log.complete(2, state);
    assert!(
        delta * 100 < whole,
        "a delta of 110 keys in 100,000 took {delta} bytes against {whole}"
    );
    let back: BTreeMap<u64, u64> = restored(&log, 2, 1);
    assert_eq!(back.len(), 100_000 - 10);
    assert_eq!(back[&7], 8);
    assert_eq!(back[&700], 700);
    assert!(!back.contains_key(&505));
    // Nothing written: a delta of nothing, on both records.
    let state = take(&mut checkpoint, &mut map, 3, 2);
    assert_eq!(
        state.builds_on,
        vec![CheckpointId::new(1), CheckpointId::new(2)]
    );
    assert!(log.complete(3, state) < 64);
    assert_eq!(restored(&log, 3, 2), back);
}

/// A keyed field is written as frames of entries (one rkyv archive spans at
/// most 2 GiB): whole records and deltas whose key groups are cut across
/// frames (the first frame of a record holds 64 entries) restore as they
/// were, at any parallelism.
#[test]
fn a_keyed_field_cut_into_frames_restores_whole_and_from_deltas() {
    let mut ops: Vec<Op> = (0..30_000u16)
        .map(|k| Op::Insert(k, u32::from(k)))
        .collect();
    ops.push(Op::Checkpoint(Completion::AtOnce));
    // Removals cut across frames, then entries.
    ops.extend((0..10_000u16).map(Op::Remove));
    ops.extend((20_000..30_000u16).map(|k| Op::Insert(k, 7)));
    ops.push(Op::Checkpoint(Completion::AtOnce));
    // Entries alone cut across frames.
    ops.extend((10_000..30_000u16).map(|k| Op::Add(k, 1)));
    ops.push(Op::Checkpoint(Completion::AtOnce));
    // Nothing changed: a delta of no frames.
    ops.push(Op::Checkpoint(Completion::AtOnce));
    for parallelism in 1..=3 {
        any_complete_checkpoint_restores::<Field>(ops.clone(), parallelism).unwrap();
    }
}

/// A keyed field past 32 MiB is decoded on several threads when restored,
/// its whole record and its delta alike: what comes back is what was
/// written, at any parallelism.
#[test]
fn a_keyed_field_large_enough_to_restore_on_several_threads_restores_as_it_was() {
    const VALUE: usize = 8 << 10;
    let value = |k: u32, round: u8| vec![(k as u8).wrapping_add(round); VALUE];
    let mut state: KeyedState<u32, Vec<u8>> = KeyedState::new();
    let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for k in 0..5_000u32 {
        state.insert(CurrentKey::for_testing(&k), value(k, 0));
        model.insert(k, value(k, 0));
    }
    let mut log = Log::default();
    let snapshot = |state: &mut KeyedState<u32, Vec<u8>>, id: u64| {
        let mut ctx = SnapshotContext::single(CheckpointId::new(id));
        ctx.completed = CheckpointId::new(id - 1);
        let mut fields = FieldsWriter::new();
        fields.snapshot("values", state, &ctx).unwrap();
        fields.finish()
    };
    let whole = log.complete(1, snapshot(&mut state, 1));
    assert!(whole > 32 << 20, "the whole record is {whole} bytes");
    let first = model.clone();
    // 34 MiB of changes and 100 removals: a delta, itself past 32 MiB.
    for k in 0..4_200u32 {
        *state.get_or_default(CurrentKey::for_testing(&k)) = value(k, 1);
        model.insert(k, value(k, 1));
    }
    for k in 4_900..5_000u32 {
        state.remove_held(&k);
        model.remove(&k);
    }
    let state2 = snapshot(&mut state, 2);
    assert_eq!(state2.builds_on, vec![CheckpointId::new(1)], "a delta");
    let delta = log.complete(2, state2);
    assert!(delta > 32 << 20, "the delta is {delta} bytes");
    for parallelism in 1..=2 {
        for (id, expected) in [(1, &first), (2, &model)] {
            let mut back = BTreeMap::new();
            for instance in 0..parallelism {
                let restore = log.restore(id, instance, parallelism);
                let fields = FieldsReader::read(&restore).unwrap();
                let mut restored: KeyedState<u32, Vec<u8>> = KeyedState::new();
                assert!(fields.contains("values"));
                fields.restore("values", &mut restored).unwrap();
                back.extend(restored.iter().map(|(k, v)| (*k, v.clone())));
            }
            assert!(
                back == *expected,
                "checkpoint {id} at parallelism {parallelism}: {} keys back, {} expected",
                back.len(),
                expected.len()
            );
        }
    }
}

/// The same for the entries of a window's or a join's structures
/// (`KeyedCheckpoint::snapshot_map`): a whole record and a delta each past
/// 32 MiB come back as written, at any parallelism.
#[test]
fn a_keyed_map_large_enough_to_restore_on_several_threads_restores_as_it_was() {
    const VALUE: usize = 8 << 10;
    let value = |k: u32, round: u8| vec![(k as u8).wrapping_add(round); VALUE];
    let mut map: CowMap<u32, Vec<u8>> = CowMap::new();
    let mut checkpoint = KeyedCheckpoint::<(), u32, Vec<u8>>::enabled();
    let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for k in 0..5_000u32 {
        map.insert(stable_hash(&k), k, value(k, 0));
        model.insert(k, value(k, 0));
    }
    let mut log = Log::default();
    let mut take = |map: &mut CowMap<u32, Vec<u8>>, id: u64| {
        let mut ctx = SnapshotContext::single(CheckpointId::new(id));
        ctx.completed = CheckpointId::new(id - 1);
        checkpoint
            .snapshot_map(&ctx, (), map, Vec::clone)
            .unwrap()
            .unwrap()
    };
    let whole = log.complete(1, take(&mut map, 1));
    assert!(whole > 32 << 20, "the whole record is {whole} bytes");
    let first = model.clone();
    for k in 0..4_200u32 {
        *map.get_mut(stable_hash(&k), &k).unwrap() = value(k, 1);
        model.insert(k, value(k, 1));
    }
    for k in 4_900..5_000u32 {
        map.remove(stable_hash(&k), &k);
        model.remove(&k);
    }
    let state = take(&mut map, 2);
    assert_eq!(state.builds_on, vec![CheckpointId::new(1)], "a delta");
    let delta = log.complete(2, state);
    assert!(delta > 32 << 20, "the delta is {delta} bytes");
    for parallelism in 1..=2 {
        for (id, expected) in [(1, &first), (2, &model)] {
            let back: BTreeMap<u32, Vec<u8>> = restored(&log, id, parallelism);
            assert!(
                back == *expected,
                "checkpoint {id} at parallelism {parallelism}: {} keys back, {} expected",
                back.len(),
                expected.len()
            );
        }
    }
}
