//! Keyed state kinds (value, list, map, reducing, aggregating), scoped to the
//! current key, and their snapshots partitioned by key group, so that a job
//! restored at another parallelism gives each instance the keys it now owns.

use std::collections::HashMap;
use std::hash::Hash;

use rkyv::rancor;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::grouping::KeyGroups;
use streamwork_core::hash::stable_hash;
use streamwork_core::state::{CurrentKey, Key, KeyedState};
use streamwork_core::{CheckpointId, InstanceIdx, OperatorId, Restore};

use crate::error::StateError;
use crate::lent::Lent;
use crate::snapshot::Checkpoint;
use crate::state_data::StateData;
use crate::version::operator_id;

/// A value per key: core's [`KeyedState`].
pub type ValueState<K, V> = KeyedState<K, V>;

/// A list per key.
///
/// ```
/// use streamwork::core::state::CurrentKey;
/// use streamwork::state::ListState;
/// let mut readings: ListState<String, f64> = ListState::default();
/// let key = "sensor-1".to_string();
/// readings.add(CurrentKey::for_testing(&key), 20.5);
/// readings.add(CurrentKey::for_testing(&key), 21.0);
/// assert_eq!(readings.get(CurrentKey::for_testing(&key)), &[20.5, 21.0]);
/// ```
#[derive(Clone, Debug)]
pub struct ListState<K: Key, V>(KeyedState<K, Vec<V>>);

impl<K: Key, V> Default for ListState<K, V> {
    fn default() -> Self {
        ListState(KeyedState::new())
    }
}

impl<K: Key, V: Clone> ListState<K, V> {
    /// Appends to the current key's list.
    pub fn add(&mut self, key: CurrentKey<'_, K>, value: V) {
        self.0.get_or_default(key).push(value);
    }

    /// The current key's list (empty if none).
    pub fn get(&self, key: CurrentKey<'_, K>) -> &[V] {
        self.0.get(key).map_or(&[], Vec::as_slice)
    }

    /// Removes and returns the current key's list.
    pub fn take(&mut self, key: CurrentKey<'_, K>) -> Vec<V> {
        self.0.remove(key).unwrap_or_default()
    }

    /// The state as one list per key, for snapshots.
    pub fn as_keyed(&self) -> &KeyedState<K, Vec<V>> {
        &self.0
    }

    pub(crate) fn keyed_mut(&mut self) -> &mut KeyedState<K, Vec<V>> {
        &mut self.0
    }

    /// Lists per key, from a restore.
    pub fn from_keyed(state: KeyedState<K, Vec<V>>) -> Self {
        ListState(state)
    }
}

/// A map per key.
#[derive(Clone, Debug)]
pub struct MapState<K: Key, MK, MV>(KeyedState<K, HashMap<MK, MV>>);

impl<K: Key, MK, MV> Default for MapState<K, MK, MV> {
    fn default() -> Self {
        MapState(KeyedState::new())
    }
}

impl<K: Key, MK: Hash + Eq, MV> MapState<K, MK, MV>
where
    HashMap<MK, MV>: Clone,
{
    /// Sets `entry` in the current key's map, returning the previous value.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, entry: MK, value: MV) -> Option<MV> {
        self.0.get_or_default(key).insert(entry, value)
    }

    /// A value of the current key's map.
    pub fn get(&self, key: CurrentKey<'_, K>, entry: &MK) -> Option<&MV> {
        self.0.get(key).and_then(|m| m.get(entry))
    }

    /// Removes a value of the current key's map (and the map once empty).
    pub fn remove(&mut self, key: CurrentKey<'_, K>, entry: &MK) -> Option<MV> {
        let map = self.0.get_mut(key)?;
        let removed = map.remove(entry);
        if map.is_empty() {
            self.0.remove(key);
        }
        removed
    }

    /// The current key's map, if it has one.
    pub fn entries(&self, key: CurrentKey<'_, K>) -> Option<&HashMap<MK, MV>> {
        self.0.get(key)
    }

    /// The state as one map per key, for snapshots.
    pub fn as_keyed(&self) -> &KeyedState<K, HashMap<MK, MV>> {
        &self.0
    }

    pub(crate) fn keyed_mut(&mut self) -> &mut KeyedState<K, HashMap<MK, MV>> {
        &mut self.0
    }

    /// Maps per key, from a restore.
    pub fn from_keyed(state: KeyedState<K, HashMap<MK, MV>>) -> Self {
        MapState(state)
    }
}

/// A value per key, folded with a reduce function as values are added.
///
/// ```
/// use streamwork::core::state::CurrentKey;
/// use streamwork::state::ReducingState;
/// let mut max = ReducingState::new(|a: &mut u64, b: u64| *a = (*a).max(b));
/// let key = 7u32;
/// for v in [3, 9, 4] {
///     max.add(CurrentKey::for_testing(&key), v);
/// }
/// assert_eq!(max.get(CurrentKey::for_testing(&key)), Some(&9));
/// ```
#[derive(Clone)]
pub struct ReducingState<K: Key, V, F> {
    state: KeyedState<K, V>,
    reduce: F,
}

impl<K: Key, V, F> ReducingState<K, V, F> {
    /// The state, to restore it in place.
    pub(crate) fn keyed_mut(&mut self) -> &mut KeyedState<K, V> {
        &mut self.state
    }
}

impl<K: Key, V: Clone, F: Fn(&mut V, V)> ReducingState<K, V, F> {
    /// Empty state folding with `reduce(accumulated, new)`.
    pub fn new(reduce: F) -> Self {
        ReducingState {
            state: KeyedState::new(),
            reduce,
        }
    }

    /// Folds `value` into the current key's value.
    pub fn add(&mut self, key: CurrentKey<'_, K>, value: V) {
        match self.state.get_mut(key) {
            Some(current) => (self.reduce)(current, value),
            None => {
                self.state.insert(key, value);
            }
        }
    }

    /// The current key's folded value.
    pub fn get(&self, key: CurrentKey<'_, K>) -> Option<&V> {
        self.state.get(key)
    }

    /// Clears the current key's value.
    pub fn clear(&mut self, key: CurrentKey<'_, K>) -> Option<V> {
        self.state.remove(key)
    }

    /// The state as one value per key, for snapshots.
    pub fn as_keyed(&self) -> &KeyedState<K, V> {
        &self.state
    }

    /// Values per key from a restore, folded with `reduce` from then on.
    pub fn from_keyed(state: KeyedState<K, V>, reduce: F) -> Self {
        ReducingState { state, reduce }
    }
}

/// An aggregate per key: inputs are added to an accumulator, and the result
/// is computed from it on demand (an average from a sum and a count).
pub trait Aggregate {
    /// What is added.
    type In;
    /// What is kept per key.
    type Acc: Default + Clone;
    /// What is read.
    type Out;
    /// Adds one input.
    fn add(&self, acc: &mut Self::Acc, input: Self::In);
    /// The result of an accumulator.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// An accumulator per key, for an [`Aggregate`].
#[derive(Clone)]
pub struct AggregatingState<K: Key, A: Aggregate> {
    state: KeyedState<K, A::Acc>,
    aggregate: A,
}

impl<K: Key, A: Aggregate> AggregatingState<K, A> {
    /// The state, to restore it in place.
    pub(crate) fn keyed_mut(&mut self) -> &mut KeyedState<K, A::Acc> {
        &mut self.state
    }

    /// Empty state for `aggregate`.
    pub fn new(aggregate: A) -> Self {
        AggregatingState {
            state: KeyedState::new(),
            aggregate,
        }
    }

    /// Adds `input` to the current key's accumulator.
    pub fn add(&mut self, key: CurrentKey<'_, K>, input: A::In) {
        self.aggregate.add(self.state.get_or_default(key), input);
    }

    /// The current key's result, if anything was added.
    pub fn get(&self, key: CurrentKey<'_, K>) -> Option<A::Out> {
        self.state.get(key).map(|acc| self.aggregate.result(acc))
    }

    /// The state as one accumulator per key, for snapshots.
    pub fn as_keyed(&self) -> &KeyedState<K, A::Acc> {
        &self.state
    }

    /// Accumulators per key from a restore.
    pub fn from_keyed(state: KeyedState<K, A::Acc>, aggregate: A) -> Self {
        AggregatingState { state, aggregate }
    }
}

/// One instance's keyed state as archived: its entries grouped by key group
/// (the layout [`snapshot_keyed`] writes and [`restore_keyed`] reads).
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedSnapshot<K, V> {
    /// The job's number of key groups (fixed for the life of a job).
    pub key_groups: u32,
    /// The entries of each key group the instance held.
    pub groups: Vec<KeyGroupEntries<K, V>>,
}

/// The entries of one key group.
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyGroupEntries<K, V> {
    /// The key group.
    pub group: u32,
    /// Its keys and values.
    pub entries: Vec<(K, V)>,
}

/// `entries` grouped by key group, in group order, without empty groups.
pub(crate) fn group_entries<K: Hash, V>(
    entries: impl Iterator<Item = (K, V)>,
    key_groups: KeyGroups,
) -> Vec<KeyGroupEntries<K, V>> {
    let mut by_group: Vec<Vec<(K, V)>> = (0..key_groups.count()).map(|_| Vec::new()).collect();
    for (k, v) in entries {
        let group = key_groups.key_group(stable_hash(&k)) as usize;
        by_group[group].push((k, v));
    }
    by_group
        .into_iter()
        .enumerate()
        .filter(|(_, entries)| !entries.is_empty())
        .map(|(group, entries)| KeyGroupEntries {
            group: group as u32,
            entries,
        })
        .collect()
}

/// Writes `groups` into `out` as frames (see `crate::frames`), each a
/// [`KeyedSnapshot`] of part of one key group's entries: a snapshot of any
/// size, read back frame by frame as the single archive would be.
pub(crate) fn write_snapshot_frames<K, V>(
    groups: Vec<KeyGroupEntries<K, V>>,
    key_groups: u32,
    out: &mut dyn std::io::Write,
) -> Result<(), StateError>
where
    KeyedSnapshot<K, V>: for<'a, 'w> rkyv::Serialize<
            rkyv::api::high::HighSerializer<
                crate::state_data::StreamWriter<'w>,
                rkyv::ser::allocator::ArenaHandle<'a>,
                rancor::Error,
            >,
        >,
{
    let mut frames = crate::frames::FrameWriter::new(out);
    for KeyGroupEntries { group, entries } in groups {
        frames.write_chunks(entries, |entries| KeyedSnapshot {
            key_groups,
            groups: vec![KeyGroupEntries { group, entries }],
        })?;
    }
    Ok(())
}

/// Archives `state` grouped by key group, ready for
/// [`CheckpointLog::append_snapshot`](crate::CheckpointLog::append_snapshot).
pub fn snapshot_keyed<K, V>(
    state: &KeyedState<K, V>,
    key_groups: KeyGroups,
) -> Result<AlignedVec, StateError>
where
    K: Key + StateData,
    V: Clone + StateData,
{
    let snapshot = KeyedSnapshot {
        key_groups: key_groups.count(),
        groups: group_entries(state.iter().map(|(k, v)| (Lent(k), Lent(v))), key_groups),
    };
    crate::archive(&snapshot)
}

/// Restores the keyed state of `instance` (of `parallelism`) of `operator`
/// from every snapshot the operator wrote, whatever the parallelism it ran
/// at: the instance takes the key groups it now owns, reading only those
/// groups' entries out of the mapped archives. Past 32 MiB of archives,
/// they are validated and deserialized on a thread per core (so `V` is
/// `Send`), and entered in order: the state is the one one thread builds.
pub fn restore_keyed<K, V>(
    checkpoint: &Checkpoint,
    operator: OperatorId,
    key_groups: KeyGroups,
    instance: InstanceIdx,
    parallelism: u32,
) -> Result<KeyedState<K, V>, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send,
{
    let parts = checkpoint
        .snapshots()
        .filter(|s| s.operator() == operator)
        .map(|s| (s.part(), s.bytes()));
    let target = Target {
        checkpoint: checkpoint.id(),
        operator,
        key_groups,
        instance: instance.0,
        parallelism,
    };
    restore_parts(parts, &target)
}

/// Restores an operator's keyed state inside
/// `Operator::restore` (in `streamwork::core`): the parts every
/// old instance wrote with [`snapshot_keyed`], filtered to the key groups this
/// instance now owns, read in place (on a thread per core past 32 MiB, as
/// [`restore_keyed`]).
///
/// ```
/// use streamwork::core::{KeyedState, Restore, TaskError};
/// fn restore(counts: &mut KeyedState<u64, u64>, restore: &Restore<'_>) -> Result<(), TaskError> {
///     *counts = streamwork::state::restore_keyed_from(restore)
///         .map_err(|e| TaskError::Restore(e.to_string()))?;
///     Ok(())
/// }
/// ```
pub fn restore_keyed_from<K, V>(restore: &Restore<'_>) -> Result<KeyedState<K, V>, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send,
{
    let target = Target {
        checkpoint: restore.checkpoint,
        operator: operator_id(restore.component),
        key_groups: restore.key_groups,
        instance: restore.instance.0,
        parallelism: restore.parallelism,
    };
    restore_parts(restore.parts.iter().map(|p| (p.part, p.bytes)), &target)
}

/// Whose keyed state is restored, and for which instance.
struct Target {
    checkpoint: CheckpointId,
    operator: OperatorId,
    key_groups: KeyGroups,
    instance: u32,
    parallelism: u32,
}

fn restore_parts<'a, K, V>(
    parts: impl Iterator<Item = (InstanceIdx, &'a [u8])>,
    target: &Target,
) -> Result<KeyedState<K, V>, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send,
{
    let parts: Vec<(InstanceIdx, &[u8])> = parts.collect();
    let bytes = parts.iter().map(|(_, bytes)| bytes.len()).sum();
    restore_parts_on(&parts, target, crate::ordered::decoding_threads(bytes))
}

/// Restores from `parts` (whole snapshots, or frames of one), decoded on
/// `threads` threads and entered in their order.
fn restore_parts_on<K, V>(
    parts: &[(InstanceIdx, &[u8])],
    target: &Target,
    threads: usize,
) -> Result<KeyedState<K, V>, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send,
{
    let mut state = KeyedState::new();
    crate::ordered::decode_in_order(
        parts.len(),
        threads,
        |at| owned_entries(parts[at].0, parts[at].1, target),
        |groups| {
            groups.into_iter().for_each(|entries| state.extend(entries));
            Ok(())
        },
        |at| StateError::InvalidArchive {
            checkpoint: target.checkpoint,
            operator: target.operator,
            part: parts[at].0,
            type_name: std::any::type_name::<KeyedSnapshot<K, V>>(),
            reason: "deserializing it panicked".to_string(),
        },
    )?;
    Ok(state)
}

/// The entries of the key groups `target` owns in one archived snapshot,
/// a key group's at a time.
fn owned_entries<K, V>(
    part: InstanceIdx,
    bytes: &[u8],
    target: &Target,
) -> Result<Vec<Vec<(K, V)>>, StateError>
where
    K: Key + StateData,
    V: StateData,
{
    let invalid = |type_name: &'static str, e: rancor::Error| StateError::InvalidArchive {
        checkpoint: target.checkpoint,
        operator: target.operator,
        part,
        type_name,
        reason: e.to_string(),
    };
    let key_groups = target.key_groups;
    let archived = rkyv::access::<ArchivedKeyedSnapshot<K, V>, rancor::Error>(bytes)
        .map_err(|e| invalid(std::any::type_name::<KeyedSnapshot<K, V>>(), e))?;
    let written_with = archived.key_groups.to_native();
    if written_with != key_groups.count() {
        return Err(StateError::KeyGroupsChanged {
            operator: target.operator,
            found: written_with,
            expected: key_groups.count(),
        });
    }
    archived
        .groups
        .iter()
        .filter(|group| {
            key_groups.instance_of(group.group.to_native(), target.parallelism) == target.instance
        })
        .map(|group| {
            rkyv::deserialize::<Vec<(K, V)>, rancor::Error>(&group.entries)
                .map_err(|e| invalid(std::any::type_name::<Vec<(K, V)>>(), e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_state_archived_where_it_is_is_the_archive_of_its_copy() {
        // `snapshot_keyed` and a managed field's side record archive lent
        // entries: the bytes must be those of the entries copied, which
        // older logs hold and restores read.
        let mut state: KeyedState<String, Vec<u64>> = KeyedState::new();
        for i in 0..3_000u64 {
            let key = format!("key-{i}");
            state.insert(CurrentKey::for_testing(&key), (0..i % 17).collect());
        }
        let key_groups = KeyGroups::DEFAULT;
        let copied = KeyedSnapshot {
            key_groups: key_groups.count(),
            groups: group_entries(
                state.iter().map(|(k, v)| (k.clone(), v.clone())),
                key_groups,
            ),
        };
        let copied = crate::archive(&copied).unwrap();
        let lent = snapshot_keyed(&state, key_groups).unwrap();
        assert_eq!(lent.as_slice(), copied.as_slice());
    }

    #[test]
    fn a_state_restored_on_several_threads_is_the_one_one_thread_restores() {
        // Parts of disjoint keys (old instances, or frames of one record);
        // a hash table's iteration order follows its inserts, so the order
        // of the state is the check that they are entered in order.
        let parts: Vec<rkyv::util::AlignedVec> = (0..7u64)
            .map(|part| {
                let mut state: KeyedState<u64, String> = KeyedState::new();
                for k in (part * 1_000..part * 1_000 + 900).rev() {
                    state.insert(CurrentKey::for_testing(&k), format!("value {k}"));
                }
                snapshot_keyed(&state, KeyGroups::DEFAULT).unwrap()
            })
            .collect();
        let parts: Vec<(InstanceIdx, &[u8])> = parts
            .iter()
            .enumerate()
            .map(|(at, bytes)| (InstanceIdx(at as u32), bytes.as_slice()))
            .collect();
        for (instance, parallelism) in [(0, 1), (1, 3)] {
            let target = Target {
                checkpoint: CheckpointId::new(1),
                operator: OperatorId(1),
                key_groups: KeyGroups::DEFAULT,
                instance,
                parallelism,
            };
            let order = |threads| {
                let state: KeyedState<u64, String> =
                    restore_parts_on(&parts, &target, threads).unwrap();
                state
                    .iter()
                    .map(|(k, v)| (*k, v.clone()))
                    .collect::<Vec<_>>()
            };
            let one = order(1);
            assert!(one.len() > 1_000);
            for threads in [2, 3, 8] {
                assert_eq!(order(threads), one, "{threads} threads");
            }
        }
    }
}
