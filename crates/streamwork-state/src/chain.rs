//! The records of incremental keyed snapshots: a delta ([`KeyedDelta`],
//! what changed by key group) and the manifest naming the chain a restore
//! reads ([`ChainManifest`]). Which snapshot is whole and which a delta,
//! and what a delta builds on, is `streamwork_core::chain`'s
//! `SnapshotChain`.

use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::grouping::KeyGroups;
use streamwork_core::hash::stable_hash;

/// In a chain's list of checkpoints, the checkpoint the list is written in
/// (a final part stands for its instance in later checkpoints, whose ids it
/// cannot know).
pub(crate) const THIS_CHECKPOINT: u64 = 0;

/// The checkpoints a delta's snapshot names: those of the records before
/// it, then its own ([`THIS_CHECKPOINT`]).
pub(crate) fn chain_ids(before: &[streamwork_core::CheckpointId]) -> Vec<u64> {
    before
        .iter()
        .map(|c| c.get())
        .chain([THIS_CHECKPOINT])
        .collect()
}

/// The inline part of a delta snapshot: the instance's metadata and the
/// checkpoints whose records a restore reads, whole one first.
#[derive(Archive, Serialize, Deserialize)]
pub struct ChainManifest<M> {
    /// Instance-wide metadata (event time reached, say).
    pub meta: M,
    /// The job's number of key groups when it was written.
    pub key_groups: u32,
    /// The checkpoints holding the chain's records, in order
    /// (`0`: the checkpoint the manifest is in).
    pub chain: Vec<u64>,
}

/// A delta record: per key group, the keys removed and the entries
/// written since the snapshot it follows.
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedDelta<K, V> {
    /// The job's number of key groups when it was written.
    pub key_groups: u32,
    /// What changed, by key group.
    pub groups: Vec<DeltaGroup<K, V>>,
}

/// What changed in one key group: removals apply before the entries (a key
/// removed and written again is written).
#[derive(Archive, Serialize, Deserialize)]
pub struct DeltaGroup<K, V> {
    /// The key group.
    pub group: u32,
    /// Keys removed.
    pub removed: Vec<K>,
    /// Keys written, with their values now.
    pub entries: Vec<(K, V)>,
}

/// One frame of a delta, per key group an instance owns (`owns`): the keys
/// removed, then the entries written. A frame rkyv does not validate is
/// `invalid`'s error; one written with another number of key groups than
/// `key_groups`, `StateError::KeyGroupsChanged` for `operator`.
#[expect(
    clippy::type_complexity,
    reason = "a key group's removed keys and written entries, as the delta holds them"
)]
pub(crate) fn owned_changes<K, V>(
    archive: &[u8],
    key_groups: KeyGroups,
    operator: streamwork_core::OperatorId,
    owns: impl Fn(u32) -> bool,
    invalid: impl Fn(rkyv::rancor::Error) -> crate::StateError,
) -> Result<Vec<(Vec<K>, Vec<(K, V)>)>, crate::StateError>
where
    K: crate::StateData,
    V: crate::StateData,
{
    let archived =
        rkyv::access::<ArchivedKeyedDelta<K, V>, rkyv::rancor::Error>(archive).map_err(&invalid)?;
    let written_with = archived.key_groups.to_native();
    if written_with != key_groups.count() {
        return Err(crate::StateError::KeyGroupsChanged {
            operator,
            found: written_with,
            expected: key_groups.count(),
        });
    }
    archived
        .groups
        .iter()
        .filter(|group| owns(group.group.to_native()))
        .map(|group| {
            let removed = rkyv::deserialize::<Vec<K>, rkyv::rancor::Error>(&group.removed)
                .map_err(&invalid)?;
            let entries = rkyv::deserialize::<Vec<(K, V)>, rkyv::rancor::Error>(&group.entries)
                .map_err(&invalid)?;
            Ok((removed, entries))
        })
        .collect()
}

/// Writes `groups` into `out` as frames (see `crate::frames`), each a
/// [`KeyedDelta`] of part of one key group's removals or entries, the
/// removals first: a delta of any size, applied frame by frame as the
/// single archive would be.
pub(crate) fn write_delta_frames<K, V>(
    groups: Vec<DeltaGroup<K, V>>,
    key_groups: u32,
    out: &mut dyn std::io::Write,
) -> Result<(), crate::StateError>
where
    KeyedDelta<K, V>: for<'a, 'w> Serialize<
        rkyv::api::high::HighSerializer<
            crate::state_data::StreamWriter<'w>,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rkyv::rancor::Error,
        >,
    >,
{
    let mut frames = crate::frames::FrameWriter::new(out);
    let frame = |part: DeltaGroup<K, V>| KeyedDelta {
        key_groups,
        groups: vec![part],
    };
    for DeltaGroup {
        group,
        removed,
        entries,
    } in groups
    {
        frames.write_chunks(removed, |removed| {
            frame(DeltaGroup {
                group,
                removed,
                entries: Vec::new(),
            })
        })?;
        frames.write_chunks(entries, |entries| {
            frame(DeltaGroup {
                group,
                removed: Vec::new(),
                entries,
            })
        })?;
    }
    Ok(())
}

/// `entries` and `removed` grouped by key group, in group order, without
/// empty groups.
pub(crate) fn group_delta<K: std::hash::Hash, V>(
    entries: impl IntoIterator<Item = (K, V)>,
    removed: impl IntoIterator<Item = K>,
    key_groups: KeyGroups,
) -> Vec<DeltaGroup<K, V>> {
    let mut groups: Vec<DeltaGroup<K, V>> = (0..key_groups.count())
        .map(|group| DeltaGroup {
            group,
            removed: Vec::new(),
            entries: Vec::new(),
        })
        .collect();
    for key in removed {
        groups[key_groups.key_group(stable_hash(&key)) as usize]
            .removed
            .push(key);
    }
    for (key, value) in entries {
        groups[key_groups.key_group(stable_hash(&key)) as usize]
            .entries
            .push((key, value));
    }
    groups.retain(|g| !g.removed.is_empty() || !g.entries.is_empty());
    groups
}
