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

/// The `open` and `statefulness` of a join's `CoOperator` impl, over the
/// join's `checkpoint` field.
macro_rules! checkpointed_join {
    () => {
        fn open(&mut self, ctx: &streamwork_core::InstanceContext) {
            self.checkpoint.open(ctx);
        }

        fn statefulness(&self) -> streamwork_core::Statefulness {
            self.checkpoint
                .statefulness(crate::checkpointing::TRANSIENT)
        }
    };
}
pub(crate) use checkpointed_join;

/// A join's `checkpointed()` builder: what it puts in the checkpoints
/// (`$what`), the types that must then be archivable, and the layout of its
/// entries (bumped whenever the join changes what it keeps).
macro_rules! checkpointed_builder {
    ($what:literal, [$($data:ident),+] $(, layout $layout:literal)?) => {
        #[doc = concat!(
            "Puts ", $what, " in the job's checkpoints, by key group, so that a restored job (at ",
            "any parallelism) joins as if it had not failed. Needed in a job that promises ",
            "at-least-once or exactly-once delivery."
        )]
        pub fn checkpointed(mut self) -> Self
        where
            $($data: streamwork_state::StateData,)+
        {
            self.checkpoint = streamwork_state::KeyedCheckpoint::enabled_at_layout(
                crate::checkpointing::checkpointed_builder!(@layout $($layout)?),
            );
            self
        }
    };
    (@layout) => { 1 };
    (@layout $layout:literal) => { $layout };
}
pub(crate) use checkpointed_builder;

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
    checkpoint.snapshot_map(ctx, (), table, Clone::clone)
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
