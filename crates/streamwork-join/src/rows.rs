//! The per-key rows the interval and unwindowed joins keep, and their
//! checkpointing: both sides' rows with their times, the watermark, and the
//! cleanup timers registered again on restore.

use streamwork_core::SnapshotContext;
use streamwork_core::hash::FastHashMap;
use streamwork_core::{Key, Restore, StateBytes, TaskError};
use streamwork_state::KeyedCheckpoint;

/// Both sides' rows of one key, with their times.
pub(crate) type Rows<L, R> = (Vec<(i64, L)>, Vec<(i64, R)>);

/// The rows of `key`, created empty if it has none.
pub(crate) fn rows_of<'a, K: Key, L, R>(
    rows: &'a mut FastHashMap<K, Rows<L, R>>,
    key: &K,
) -> &'a mut Rows<L, R> {
    if !rows.contains_key(key) {
        rows.insert(key.clone(), (Vec::new(), Vec::new()));
    }
    rows.get_mut(key)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

/// The snapshot of every key's rows and the watermark (`None` unless the
/// join was built `.transient()`).
pub(crate) fn snapshot_rows<K: Key, L: Clone, R: Clone>(
    ctx: &SnapshotContext,
    checkpoint: &KeyedCheckpoint<i64, K, Rows<L, R>>,
    what: &str,
    watermark: i64,
    rows: &FastHashMap<K, Rows<L, R>>,
) -> Result<Option<StateBytes>, TaskError> {
    checkpoint.snapshot(ctx, what, watermark, || {
        rows.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    })
}

/// Restores the rows of the keys this instance owns and the watermark;
/// `timer(key, is_left, time)` is called for every row, to register its
/// cleanup again.
pub(crate) fn restore_rows<K: Key, L, R>(
    checkpoint: &mut KeyedCheckpoint<i64, K, Rows<L, R>>,
    restore: &Restore<'_>,
    watermark: &mut i64,
    rows: &mut FastHashMap<K, Rows<L, R>>,
    mut timer: impl FnMut(&K, bool, i64),
) -> Result<(), TaskError> {
    let Some(restored) = checkpoint.restore(restore)? else {
        return Ok(());
    };
    if let Some(restored) = restored.metas.iter().copied().max() {
        *watermark = (*watermark).max(restored);
    }
    for (key, key_rows) in restored.entries {
        for &(t, _) in &key_rows.0 {
            timer(&key, true, t);
        }
        for &(t, _) in &key_rows.1 {
            timer(&key, false, t);
        }
        rows.insert(key, key_rows);
    }
    Ok(())
}
