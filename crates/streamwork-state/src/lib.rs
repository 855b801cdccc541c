//! Streamwork's checkpoint storage (chapter 10): the checkpoint log.
//!
//! A checkpoint directory holds append-only segment files. Each instance's
//! snapshot is one record, an rkyv archive framed with its length, checksum,
//! checkpoint id, operator id, part (instance index or key-group range) and
//! schema version; once every snapshot of a checkpoint is written and
//! flushed, a commit record makes the checkpoint complete. Loading maps the
//! segments with memmap2, checks every frame and checksum, and reads the
//! archives in place; a torn or damaged tail costs only the checkpoints it
//! touched, and the newest complete one is used. Old checkpoints are reclaimed
//! a segment at a time.
//!
//! The keyed state kinds (value, list, map, reducing, aggregating) live here
//! too, with their snapshots partitioned by key group so that a job restored
//! at another parallelism gives each instance the keys it now owns, and the
//! state the framework owns ([`OperatorState`], what `#[derive(State)]`
//! implements): an operator's fields checkpointed and restored without user
//! code.
//!
//! [`GuardedStore`] passes a store's writes through a [`WriteGuard`]
//! first (a fence); [`testkit`] has one whose writes a test makes fail or
//! hang.
//!
//! Not here: the barriers and the coordinator that decide *when* a snapshot
//! is taken; this crate decides what it holds and how it is stored and read
//! back safely.
//!
//! ```
//! # fn main() -> Result<(), streamwork::state::StateError> {
//! use streamwork::core::{InstanceIdx, OperatorId};
//! use streamwork::state::{CheckpointLog, LogOptions, archive, load_latest};
//!
//! let dir = std::env::temp_dir().join(format!("swlog-crate-doc-{}", std::process::id()));
//! let mut log = CheckpointLog::open(&dir, LogOptions::default())?;
//! let id = log.next_checkpoint_id()?;
//! // Two instances of operator 7 snapshot their (key, count) pairs.
//! let counter = OperatorId(7);
//! log.append_snapshot(id, counter, InstanceIdx(0), 1, &archive(&vec![(1u64, 10u64)])?)?;
//! log.append_snapshot(id, counter, InstanceIdx(1), 1, &archive(&vec![(2u64, 20u64)])?)?;
//! log.commit(id, 2)?;
//!
//! let checkpoint = load_latest(&dir)?;
//! let counts: Vec<(u64, u64)> = checkpoint.snapshot(counter, InstanceIdx(1)).unwrap().deserialize()?;
//! assert_eq!(counts, vec![(2, 20)]);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod chain;
mod codec;
mod cow;
mod error;
mod fold;
mod frames;
mod guarded;
mod keyed;
mod layout;
mod lent;
mod log;
mod managed;
mod memory;
mod mirror;
mod operator_macros;
mod ordered;
mod reclaim;
mod record;
#[cfg(feature = "s3")]
mod s3;
mod snapshot;
mod state_data;
mod store;
pub mod testkit;
mod values;
mod version;

/// The rkyv this crate archives with, for deriving `Archive`, `Serialize`
/// and `Deserialize` on state types with the same version.
pub use rkyv;

pub use chain::{ChainManifest, DeltaGroup, KeyedDelta};
pub use codec::{
    ChangesSince, FrozenChanges, KEYED_PARTS_SCHEMA, KeyedCheckpoint, KeyedCodec, KeyedParts,
    LAYOUT_STREAM, LendChanges, LendEntries, Planned, RestoredEntries, TimerCodec,
};
pub use cow::{CowCell, CowMap, FrozenMap};
pub use error::StateError;
pub use fold::{Fold, Reduce, fold, reduce};
pub use guarded::{GuardedStore, WriteGuard};
pub use keyed::{
    Aggregate, AggregatingState, ArchivedKeyedSnapshot, KeyGroupEntries, KeyedSnapshot, ListState,
    MapState, ReducingState, ValueState, restore_keyed, restore_keyed_from, snapshot_keyed,
};
pub use layout::{StateLayout, archive_format, kept_layout, layout_mix, layout_of};
pub use log::{CheckpointLog, LogOptions, RecordAt, load_checkpoint, load_latest};
pub use managed::{
    FieldKind, FieldRestore, FieldSnapshot, FieldsReader, FieldsWriter, InstanceState,
    MANAGED_STATE_SCHEMA, OperatorState, StateField,
};
pub use memory::unsettled_bytes;
pub use mirror::{CheckpointStore, DirectoryStore, Mirror};
#[cfg(feature = "s3")]
pub use s3::ObjectStoreCheckpoints;
pub use snapshot::{Checkpoint, Snapshot, archive};
pub use state_data::StateData;
pub use store::{Expiring, ExpiringState, StoreOptions, StoredState, Ttl, TtlTime};
pub use streamwork_core::table::SHARDS;
pub use values::KeyedValues;
pub use version::{Migration, VersionedState, operator_id, side_operator_id};
