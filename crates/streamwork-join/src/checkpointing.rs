//! What every join does to checkpoint its state: `open` and
//! `statefulness` over its `checkpoint` field, a keyed table (the
//! stream-table and table-table joins) frozen into a snapshot and
//! restored from one, and the changes of an incremental snapshot.

use streamwork_core::hash::{FastHashMap, stable_hash};
use streamwork_core::state::Key;
use streamwork_core::{Restore, SnapshotContext, StateBytes, TaskError};
use streamwork_state::{CowMap, KeyedCheckpoint};

/// What a join built with `.transient()` says of its state.
pub(crate) const TRANSIENT: &str = "its state is left out of checkpoints: build it without `.transient()` (its key and row types must then be archivable: primitives, `String`, `Vec`, tuples, or types marked `#[streamwork::state_data]`)";

/// The snapshot of a keyed `table`: frozen on the task thread (the pause),
/// its entries (or, once a checkpoint of this run is complete, those that
/// changed since) gathered and archived off it, when the checkpoint is
/// written; `None` when checkpointing is off.
pub(crate) fn snapshot_table<K, V>(
    checkpoint: &mut KeyedCheckpoint<(), K, V>,
    ctx: &SnapshotContext,
    table: &mut CowMap<K, V>,
) -> Result<Option<StateBytes>, TaskError>
where
    K: Key + Sync,
    V: Clone + Send + Sync + 'static,
{
    checkpoint.snapshot_map_borrowed(ctx, (), table, |v| v)
}

/// Fills `table` with this instance's entries of the restored snapshot.
pub(crate) fn restore_table<K, V>(
    checkpoint: &mut KeyedCheckpoint<(), K, V>,
    restore: &Restore<'_>,
    table: &mut CowMap<K, V>,
) -> Result<(), TaskError>
where
    K: Key,
    V: Clone,
{
    let Some(restored) = checkpoint.restore(restore)? else {
        return Ok(());
    };
    table.extend(
        restored
            .entries
            .into_iter()
            .map(|(key, value)| (stable_hash(&key), key, value)),
    );
    Ok(())
}

/// What an incremental snapshot writes of the keys that `changed`: each
/// with its state in `per_key` (gathered for those keys), and those
/// without as removed.
pub(crate) fn written_and_removed<K: Key, V>(
    changed: FastHashMap<&K, ()>,
    mut per_key: FastHashMap<K, V>,
) -> (Vec<(K, V)>, Vec<K>) {
    let mut removed = Vec::new();
    let mut written = Vec::with_capacity(per_key.len());
    for key in changed.into_keys() {
        match per_key.remove(key) {
            Some(state) => written.push((key.clone(), state)),
            None => removed.push(key.clone()),
        }
    }
    (written, removed)
}
