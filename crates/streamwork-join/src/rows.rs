//! The per-key rows the interval and unwindowed joins keep, and their
//! checkpointing: both sides' rows with their times, the watermark, and the
//! cleanup timers registered again on restore.

use streamwork_core::SnapshotContext;
use streamwork_core::hash::stable_hash;
use streamwork_core::{Key, Restore, StateBytes, TaskError};
use streamwork_state::{CowMap, KeyedCheckpoint};

/// Both sides' rows of one key, with their times.
pub(crate) type Rows<L, R> = (Vec<(i64, L)>, Vec<(i64, R)>);

/// Every key's rows, in a [`CowMap`]: a snapshot freezes them, and the
/// coordinator archives them off the task thread.
///
/// The table keeps each key's rows behind an `Arc` (they own memory), so
/// that a shard it copies after a freeze (its first write while the
/// checkpoint still reads it) copies a pointer per key, not every row; a
/// key's own rows are copied only when that key is written while the
/// checkpoint still reads them (copy-on-write per key, as Flink's
/// `CopyOnWriteStateMap` does per entry).
#[derive(Clone)]
pub(crate) struct RowMap<K, L, R>(CowMap<K, Rows<L, R>>);

impl<K: Key, L: Clone, R: Clone> RowMap<K, L, R> {
    pub(crate) fn new() -> Self {
        RowMap(CowMap::new())
    }

    /// Every key's rows.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Rows<L, R>> {
        self.0.iter().map(|(_, rows)| rows)
    }

    /// The rows of `key`, created empty if it has none.
    pub(crate) fn rows_of(&mut self, key: &K) -> &mut Rows<L, R> {
        self.0
            .get_or_insert_with(stable_hash(key), key, || (Vec::new(), Vec::new()))
    }

    /// The rows of `key`, if it has any.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut Rows<L, R>> {
        self.0.get_mut(stable_hash(key), key)
    }

    /// Forgets `key`'s rows.
    pub(crate) fn remove(&mut self, key: &K) {
        self.0.remove(stable_hash(key), key);
    }
}

/// The snapshot of every key's rows and the watermark (`None` if the join
/// was built `.transient()`): the rows are frozen, and archived beside the
/// snapshot off the task thread, only the keys whose rows changed once a
/// checkpoint of this run is complete.
pub(crate) fn snapshot_rows<K, L, R>(
    ctx: &SnapshotContext,
    checkpoint: &mut KeyedCheckpoint<i64, K, Rows<L, R>>,
    watermark: i64,
    rows: &mut RowMap<K, L, R>,
) -> Result<Option<StateBytes>, TaskError>
where
    K: Key,
    L: Clone + Send + Sync + 'static,
    R: Clone + Send + Sync + 'static,
{
    checkpoint.snapshot_map_borrowed(ctx, watermark, &mut rows.0, |rows| rows)
}

/// Restores the rows of the keys this instance owns and the watermark;
/// `timer(key, is_left, time)` is called for every row, to register its
/// cleanup again.
pub(crate) fn restore_rows<K: Key, L: Clone, R: Clone>(
    checkpoint: &mut KeyedCheckpoint<i64, K, Rows<L, R>>,
    restore: &Restore<'_>,
    watermark: &mut i64,
    rows: &mut RowMap<K, L, R>,
    mut timer: impl FnMut(&K, bool, i64),
) -> Result<(), TaskError> {
    let Some(entries) = checkpoint.restore_raising(restore, watermark)? else {
        return Ok(());
    };
    for (key, key_rows) in entries {
        for &(t, _) in &key_rows.0 {
            timer(&key, true, t);
        }
        for &(t, _) in &key_rows.1 {
            timer(&key, false, t);
        }
        rows.0.insert(stable_hash(&key), key, key_rows);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_after_a_freeze_copies_that_keys_rows_alone() {
        let mut rows: RowMap<u64, String, String> = RowMap::new();
        // Keys enough that every shard holds several.
        for key in 0..2_000u64 {
            rows.rows_of(&key).0.push((1, format!("left {key}")));
        }
        let frozen = rows.0.freeze();
        rows.rows_of(&7).1.push((2, "right 7".to_string()));
        let frozen_of = |key: u64| frozen.iter().find(|(k, _)| **k == key).unwrap().1;
        // The checkpoint reads key 7 as it was when frozen.
        assert_eq!(frozen_of(7).1.len(), 0);
        assert_eq!(rows.0.get(stable_hash(&7), &7).unwrap().1.len(), 1);
        // Every other key's rows are shared, not copied, though the write
        // took key 7's shard back from the checkpoint.
        for key in (0..2_000u64).filter(|&k| k != 7) {
            let live = rows.0.get(stable_hash(&key), &key).unwrap();
            assert!(std::ptr::eq(live, frozen_of(key)), "key {key} was copied");
        }
        assert!(!std::ptr::eq(
            rows.0.get(stable_hash(&7), &7).unwrap(),
            frozen_of(7)
        ));
    }
}
