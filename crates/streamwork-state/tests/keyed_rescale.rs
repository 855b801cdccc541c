//! Every keyed state kind survives a checkpoint and a restore at another
//! parallelism: each new instance gets exactly the keys the router now sends
//! it, with their values.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use streamwork_core::grouping::KeyGroups;
use streamwork_core::hash::stable_hash;
use streamwork_core::state::{CurrentKey, KeyedState};
use streamwork_core::{CheckpointId, InstanceIdx, OperatorId};
use streamwork_state::{
    Aggregate, AggregatingState, CheckpointLog, ListState, LogOptions, MapState, ReducingState,
    StateError, ValueState, load_latest, operator_id, restore_keyed, snapshot_keyed,
};

const GROUPS: KeyGroups = KeyGroups::DEFAULT;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("swstate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn owner<K: std::hash::Hash>(key: &K, parallelism: u32) -> u32 {
    GROUPS.route(stable_hash(key), parallelism)
}

/// Checkpoints one keyed state per instance (`states[i]` for instance `i`),
/// then restores it at every parallelism in `1..=4` and checks that each
/// instance holds exactly its keys and that together they hold everything.
fn round_trip<K, V>(name: &str, states: Vec<KeyedState<K, V>>)
where
    K: streamwork_core::state::Key + Ord + streamwork_state::StateData,
    V: Clone + PartialEq + std::fmt::Debug + Send + streamwork_state::StateData,
{
    let dir = Dir::new(name);
    let operator = operator_id(name);
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    let id = log.next_checkpoint_id().unwrap();
    for (instance, state) in states.iter().enumerate() {
        let bytes = snapshot_keyed(state, GROUPS).unwrap();
        log.append_snapshot(id, operator, InstanceIdx(instance as u32), 1, &bytes)
            .unwrap();
    }
    log.commit(id, states.len() as u32).unwrap();
    let everything: BTreeMap<K, V> = states
        .iter()
        .flat_map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    let checkpoint = load_latest(&dir.0).unwrap();
    for parallelism in 1..=4 {
        let mut seen = BTreeMap::new();
        for instance in 0..parallelism {
            let restored: KeyedState<K, V> = restore_keyed(
                &checkpoint,
                operator,
                GROUPS,
                InstanceIdx(instance),
                parallelism,
            )
            .unwrap();
            for (k, v) in restored.iter() {
                assert_eq!(
                    owner(k, parallelism),
                    instance,
                    "{name}: a key restored to the wrong instance"
                );
                assert!(
                    seen.insert(k.clone(), v.clone()).is_none(),
                    "{name}: a key restored twice"
                );
            }
        }
        assert_eq!(seen, everything, "{name} at parallelism {parallelism}");
    }
}

/// Fills one state per instance of `parallelism` through the routed keys.
fn partitioned<K: streamwork_core::state::Key, S: Default>(
    keys: impl Iterator<Item = K>,
    parallelism: u32,
    mut add: impl FnMut(&mut S, CurrentKey<'_, K>, &K),
) -> Vec<S> {
    let mut states: Vec<S> = (0..parallelism).map(|_| S::default()).collect();
    for key in keys {
        let instance = owner(&key, parallelism) as usize;
        add(&mut states[instance], CurrentKey::for_testing(&key), &key);
    }
    states
}

#[test]
fn value_state_rescales() {
    let states = partitioned::<u64, ValueState<u64, u64>>(0..2_000, 2, |s, key, k| {
        s.insert(key, k * 3);
    });
    round_trip("value", states);
}

#[test]
fn list_state_rescales() {
    let states = partitioned::<u64, ListState<u64, u32>>(0..1_000, 3, |s, key, k| {
        for i in 0..(k % 5) as u32 {
            s.add(key, i);
        }
    });
    round_trip(
        "list",
        states.into_iter().map(|s| s.as_keyed().clone()).collect(),
    );
}

#[test]
fn map_state_rescales() {
    let states = partitioned::<String, MapState<String, u32, u64>>(
        (0..500).map(|i| format!("user-{i}")),
        2,
        |s, key, k| {
            s.insert(key, k.len() as u32, 1);
            s.insert(key, 99, 7);
        },
    );
    round_trip(
        "map",
        states
            .into_iter()
            .map(|s| s.as_keyed().clone())
            .collect::<Vec<KeyedState<String, HashMap<u32, u64>>>>(),
    );
}

#[test]
fn reducing_state_rescales() {
    let max = |a: &mut u64, b: u64| *a = (*a).max(b);
    let mut states: Vec<ReducingState<u64, u64, _>> =
        (0..2).map(|_| ReducingState::new(max)).collect();
    for event in 0..5_000u64 {
        let key = event % 300;
        states[owner(&key, 2) as usize].add(CurrentKey::for_testing(&key), event);
    }
    round_trip(
        "reducing",
        states.iter().map(|s| s.as_keyed().clone()).collect(),
    );
}

/// The average of the inputs.
#[derive(Clone)]
struct Average;

impl Aggregate for Average {
    type In = u64;
    type Acc = (u64, u64);
    type Out = f64;
    fn add(&self, acc: &mut (u64, u64), input: u64) {
        acc.0 += input;
        acc.1 += 1;
    }
    fn result(&self, acc: &(u64, u64)) -> f64 {
        acc.0 as f64 / acc.1 as f64
    }
}

#[test]
fn aggregating_state_rescales_and_keeps_its_results() {
    let mut states: Vec<AggregatingState<u64, Average>> =
        (0..3).map(|_| AggregatingState::new(Average)).collect();
    for event in 0..3_000u64 {
        let key = event % 100;
        states[owner(&key, 3) as usize].add(CurrentKey::for_testing(&key), event);
    }
    round_trip(
        "aggregating",
        states.iter().map(|s| s.as_keyed().clone()).collect(),
    );
    // Restored into one instance, the averages are the same.
    let dir = Dir::new("aggregating-results");
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    for (i, s) in states.iter().enumerate() {
        log.append_snapshot(
            CheckpointId::new(1),
            OperatorId(5),
            InstanceIdx(i as u32),
            1,
            &snapshot_keyed(s.as_keyed(), GROUPS).unwrap(),
        )
        .unwrap();
    }
    log.commit(CheckpointId::new(1), 3).unwrap();
    let checkpoint = load_latest(&dir.0).unwrap();
    let one = AggregatingState::from_keyed(
        restore_keyed(&checkpoint, OperatorId(5), GROUPS, InstanceIdx(0), 1).unwrap(),
        Average,
    );
    let key = 7u64;
    let expected = (0..30u64).map(|i| i * 100 + 7).sum::<u64>() as f64 / 30.0;
    assert_eq!(one.get(CurrentKey::for_testing(&key)), Some(expected));
}

#[test]
fn a_changed_number_of_key_groups_is_refused() {
    let dir = Dir::new("groups");
    let state: KeyedState<u64, u64> = (0..10u64).map(|k| (k, k)).collect();
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    log.append_snapshot(
        CheckpointId::new(1),
        OperatorId(9),
        InstanceIdx(0),
        1,
        &snapshot_keyed(&state, GROUPS).unwrap(),
    )
    .unwrap();
    log.commit(CheckpointId::new(1), 1).unwrap();
    let checkpoint = load_latest(&dir.0).unwrap();
    let other = KeyGroups::new(256).unwrap();
    let error = restore_keyed::<u64, u64>(&checkpoint, OperatorId(9), other, InstanceIdx(0), 1)
        .err()
        .unwrap();
    assert!(
        matches!(
            error,
            StateError::KeyGroupsChanged {
                found: 128,
                expected: 256,
                ..
            }
        ),
        "{error}"
    );
}
