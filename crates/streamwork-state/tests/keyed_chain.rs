//! Incremental snapshots of a keyed map (`KeyedCheckpoint::snapshot_map`)
//! against a model: any sequence of writes, removals, retains, clears and
//! checkpoints, some completing late or never, restored from any complete
//! checkpoint at parallelism 1 to 3, gives every key its value as of that
//! checkpoint, exactly once; and a snapshot after a complete one writes
//! only what changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use streamwork_core::checkpoint::{RestoreSource, RestoredPart};
use streamwork_core::hash::stable_hash;
use streamwork_core::state::Key;
use streamwork_core::{
    CheckpointId, InstanceIdx, KeyGroups, Restore, SharedBytes, SnapshotContext, StateBytes,
};
use streamwork_state::{CowMap, KeyedCheckpoint, StateData};

/// What a coordinator does with a checkpoint's parts, in memory: the
/// inline bytes, and the side record produced off the "task thread".
#[derive(Default)]
struct Log {
    parts: HashMap<u64, (StateBytes, Option<SharedBytes>)>,
}

impl Log {
    /// Writes checkpoint `id`'s part and marks it complete, as the
    /// coordinator does once it is durable.
    fn complete(&mut self, id: u64, state: StateBytes) -> usize {
        let side = state.side.first().map(|side| {
            let mut bytes = Vec::new();
            side.payload.produce(&mut bytes).unwrap();
            // Aligned as the log aligns its records.
            let mut aligned = streamwork_state::rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(&bytes);
            let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(AlignedBytes(aligned));
            let len = bytes.len();
            let shared = SharedBytes::new(owner, 0..len).unwrap();
            side.written.set(shared.clone()).unwrap();
            shared
        });
        let written = side.as_ref().map_or(0, |s| s.bytes().len());
        self.parts.insert(id, (state, side));
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
    fn side_record(
        &self,
        checkpoint: CheckpointId,
        _: &str,
        stream: u32,
        part: InstanceIdx,
    ) -> Option<SharedBytes> {
        if stream != 0 || part != InstanceIdx(0) {
            return None;
        }
        self.parts.get(&checkpoint.get())?.1.clone()
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
    V: StateData,
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_complete_checkpoint_restores_the_map_as_it_was(
        ops in proptest::collection::vec(op(), 0..400),
        parallelism in 1u32..4,
    ) {
        let mut map: CowMap<u16, u32> = CowMap::new();
        let mut model: HashMap<u16, u32> = HashMap::new();
        let mut checkpoint = KeyedCheckpoint::<(), u16, u32>::enabled();
        let mut log = Log::default();
        let mut late: Option<(u64, StateBytes)> = None;
        let mut completed = 0u64;
        let mut expected: Vec<(u64, BTreeMap<u16, u32>)> = Vec::new();
        let mut next = 1u64;
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    map.insert(stable_hash(&k), k, v);
                    model.insert(k, v);
                }
                Op::Add(k, v) => {
                    *map.get_or_insert_with(stable_hash(&k), &k, || 0) += v;
                    *model.entry(k).or_insert(0) += v;
                }
                Op::Remove(k) => {
                    prop_assert_eq!(map.remove(stable_hash(&k), &k), model.remove(&k));
                }
                Op::RetainBelow(limit) => {
                    map.retain(|_, v| *v < limit);
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
                    let state = checkpoint
                        .snapshot_map(&ctx, (), &mut map, |v| *v)
                        .unwrap()
                        .unwrap();
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
            prop_assert_eq!(&restored::<u16, u32>(&log, *id, parallelism), then, "checkpoint {}", id);
        }
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
