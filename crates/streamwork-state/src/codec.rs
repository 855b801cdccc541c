//! Checkpointing the keyed state that library operators keep in structures of
//! their own (window slices, join buffers, timers): a [`KeyedCodec`] turns an
//! instance's entries, plus a little instance-wide metadata such as the event
//! time it has reached, into a snapshot grouped by key group, and gives a
//! restored instance the entries of the key groups it now owns.
//!
//! The codec is built where the types are known to be archivable (a window's
//! `.checkpointed()`), and kept as two function pointers, so the operator's
//! own code carries no rkyv bounds and an operator whose state cannot be
//! archived still runs in jobs without checkpoints.
//!
//! ```
//! use streamwork::core::{CheckpointId, InstanceIdx, KeyGroups};
//! use streamwork::core::checkpoint::{Restore, RestoredPart};
//! use streamwork::state::KeyedCodec;
//!
//! let codec = KeyedCodec::<i64, String, u64>::new();
//! let groups = KeyGroups::DEFAULT;
//! let snapshot = codec
//!     .snapshot(42, vec![("a".to_string(), 1), ("b".to_string(), 2)], groups)
//!     .unwrap();
//! let restore = Restore {
//!     records: None,
//!     component: "counts",
//!     checkpoint: CheckpointId::new(1),
//!     is_final: false,
//!     ended: Vec::new(),
//!     instance: InstanceIdx(0),
//!     parallelism: 1,
//!     key_groups: groups,
//!     parts: vec![RestoredPart { part: InstanceIdx(0), schema: snapshot.schema, bytes: &snapshot.bytes }],
//! };
//! let restored = codec.restore(&restore).unwrap();
//! assert_eq!(restored.metas, vec![42]);
//! assert_eq!(restored.entries.len(), 2);
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use rkyv::rancor;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::grouping::KeyGroups;
use streamwork_core::state::Key;
use streamwork_core::{
    DeferredBytes, InstanceContext, InstanceIdx, Restore, SharedBytes, SideCheck, SideRecord,
    SnapshotContext, StateBytes, Statefulness, TaskError,
};

use streamwork_core::chain::{ChainPlan as Plan, SnapshotChain as Chain};

use crate::chain::{
    ArchivedChainManifest, ChainManifest, KeyedDelta, THIS_CHECKPOINT, chain_ids, group_delta,
};
use crate::cow::{CowMap, FrozenMap};
use crate::error::StateError;
use crate::keyed::KeyGroupEntries;
use crate::lent::Lent;
use crate::state_data::StateData;
use crate::version::operator_id;

/// The layout a [`KeyedCodec`] writes: the instance's metadata and its
/// entries by key group.
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedParts<M, K, V> {
    /// Instance-wide metadata (event time reached, say).
    pub meta: M,
    /// The job's number of key groups when it was written.
    pub key_groups: u32,
    /// The entries of each key group the instance held.
    pub groups: Vec<KeyGroupEntries<K, V>>,
}

/// What a restored instance gets back.
#[derive(Debug)]
pub struct RestoredEntries<M, K, V> {
    /// The metadata of every snapshot read, in instance order (one when the
    /// parallelism has not changed).
    pub metas: Vec<M>,
    /// The entries of the key groups this instance now owns.
    pub entries: Vec<(K, V)>,
}

impl<M: Copy + Ord, K, V> RestoredEntries<M, K, V> {
    /// Raises `time` (an operator's watermark or clock, the metadata of its
    /// snapshots) to the furthest any old instance had reached: with aligned
    /// barriers, they had all reached the same.
    pub fn raise(&self, time: &mut M) {
        if let Some(&furthest) = self.metas.iter().max() {
            *time = (*time).max(furthest);
        }
    }
}

type SaveFn<M, K, V> = fn(M, Vec<(K, V)>, KeyGroups) -> Result<AlignedVec, StateError>;
/// [`SaveFn`] archiving lent entries straight into a writer.
type StreamFn<M, K, V> =
    fn(&M, Vec<(&K, &V)>, KeyGroups, &mut dyn std::io::Write) -> Result<(), StateError>;
/// Archives a delta of lent entries and removed keys straight into a
/// writer.
type StreamDeltaFn<K, V> =
    fn(Vec<(&K, &V)>, Vec<&K>, KeyGroups, &mut dyn std::io::Write) -> Result<(), StateError>;
type SaveManifestFn<M> = fn(M, Vec<u64>, KeyGroups) -> Result<AlignedVec, StateError>;
type LoadFn<M, K, V> =
    fn(&Restore<'_>, &[(InstanceIdx, Held<'_>)]) -> Result<RestoredEntries<M, K, V>, StateError>;

/// One old instance's snapshot, as a restore holds it, and whether its
/// records are written as frames.
pub(crate) enum Held<'a> {
    /// Its whole entries ([`KeyedParts`]).
    Whole(PartBytes<'a>, bool),
    /// The manifest of a chain ([`ChainManifest`]), whose records the load
    /// reads from the checkpoint log.
    Chain(&'a [u8], bool),
}

/// Snapshots and restores keyed entries `(K, V)` with metadata `M`, by key
/// group. Copy: a few function pointers.
pub struct KeyedCodec<M, K, V> {
    save: SaveFn<M, K, V>,
    stream: StreamFn<M, K, V>,
    stream_delta: StreamDeltaFn<K, V>,
    save_manifest: SaveManifestFn<M>,
    load: LoadFn<M, K, V>,
    /// The version of the operator's entry layout (`M`, `K`, `V`): bumped
    /// whenever an operator changes what it keeps, so that a snapshot of
    /// another layout is refused by name instead of misread.
    layout: u32,
    /// The fingerprint of `M`, `K` and `V`'s layouts
    /// ([`StateLayout`](crate::StateLayout)), kept beside each snapshot
    /// ([`LAYOUT_STREAM`]) and compared on restore: what the user's types
    /// in an operator's state are, which the operator's `layout` cannot
    /// know.
    fingerprint: u64,
}

impl<M, K, V> Clone for KeyedCodec<M, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M, K, V> Copy for KeyedCodec<M, K, V> {}

impl<M, K, V> fmt::Debug for KeyedCodec<M, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCodec")
            .field("layout", &std::any::type_name::<KeyedParts<M, K, V>>())
            .finish()
    }
}

/// The version of the container a [`KeyedCodec`] writes and reads (the
/// low byte of a snapshot's schema; the operator's entry layout is above
/// it: `schema = KEYED_PARTS_SCHEMA + (layout - 1) * 256`, so layout 1 is
/// schema 1, as before layouts were versioned).
pub const KEYED_PARTS_SCHEMA: u32 = 1;

/// The container of a snapshot whose [`KeyedParts`] are archived off the
/// task thread ([`KeyedCodec::snapshot_beside`]): the snapshot's own bytes
/// are empty, and the parts are its side record `BESIDE_STREAM`.
pub const KEYED_PARTS_BESIDE_SCHEMA: u32 = 2;

/// The container of a delta snapshot ([`KeyedCheckpoint::snapshot_map`]):
/// its bytes are a [`ChainManifest`], and its side record `BESIDE_STREAM`
/// a [`KeyedDelta`] on the records the manifest names before it.
pub const KEYED_DELTA_SCHEMA: u32 = 3;

/// [`KEYED_PARTS_BESIDE_SCHEMA`] with the side record written as frames
/// (see `crate::frames`), each [`KeyedParts`] with part of the entries
/// (and the metadata, read from the first): state of any size (one rkyv
/// archive spans at most 2 GiB).
pub const KEYED_PARTS_FRAMED_SCHEMA: u32 = 4;

/// [`KEYED_DELTA_SCHEMA`] with every record of the chain written as
/// frames: a whole record's of [`KeyedParts`], a delta's of
/// [`KeyedDelta`]s.
pub const KEYED_DELTA_FRAMED_SCHEMA: u32 = 5;

/// The side stream that holds the parts of a snapshot taken beside.
pub const BESIDE_STREAM: u32 = 0;

/// The side stream that holds a snapshot's layout fingerprint (8 bytes,
/// little-endian), written beside every snapshot a [`KeyedCodec`] takes; a
/// snapshot without one was written before they were kept, and is read
/// unchecked.
pub const LAYOUT_STREAM: u32 = 1;

/// The fingerprint a [`KeyedCodec`] of `M`, `K` and `V` keeps.
const fn codec_fingerprint<M: StateData, K: StateData, V: StateData>() -> u64 {
    use crate::layout::{layout_mix, layout_of};
    layout_mix(
        layout_mix(layout_mix(layout_of("KeyedParts"), M::LAYOUT), K::LAYOUT),
        V::LAYOUT,
    )
}

/// A snapshot's layout fingerprint, written beside it.
#[derive(Debug)]
struct LayoutBytes(u64);

impl DeferredBytes for LayoutBytes {
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        out.write_all(&self.0.to_le_bytes())
            .map_err(|e| TaskError::Snapshot(format!("writing the layout fingerprint: {e}")))
    }
}

/// The schema of a keyed snapshot with entry layout `layout`.
fn keyed_schema(layout: u32) -> u32 {
    KEYED_PARTS_SCHEMA + (layout.max(1) - 1) * 256
}

/// The schema of a keyed snapshot taken beside, with entry layout `layout`.
fn beside_schema(layout: u32) -> u32 {
    KEYED_PARTS_BESIDE_SCHEMA + (layout.max(1) - 1) * 256
}

/// The schema of a delta snapshot, with entry layout `layout`.
fn delta_schema(layout: u32) -> u32 {
    KEYED_DELTA_SCHEMA + (layout.max(1) - 1) * 256
}

/// The schema of a keyed snapshot taken beside as frames, with entry
/// layout `layout`.
fn framed_schema(layout: u32) -> u32 {
    KEYED_PARTS_FRAMED_SCHEMA + (layout.max(1) - 1) * 256
}

/// The schema of a delta snapshot written as frames, with entry layout
/// `layout`.
fn framed_delta_schema(layout: u32) -> u32 {
    KEYED_DELTA_FRAMED_SCHEMA + (layout.max(1) - 1) * 256
}

/// The bytes of one restored part: in the snapshot, in a side record mapped
/// from the log, or copied where the record is not aligned for rkyv.
pub(crate) enum PartBytes<'a> {
    Inline(&'a [u8]),
    Shared(SharedBytes),
    Copied(AlignedVec),
}

impl PartBytes<'_> {
    /// A side record's bytes, copied if the log did not place them on a
    /// 16-byte boundary (rkyv reads archives in place).
    pub(crate) fn aligned(record: SharedBytes) -> Self {
        if (record.bytes().as_ptr() as usize).is_multiple_of(16) {
            PartBytes::Shared(record)
        } else {
            let mut copy = AlignedVec::with_capacity(record.bytes().len());
            copy.extend_from_slice(record.bytes());
            PartBytes::Copied(copy)
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            PartBytes::Inline(bytes) => bytes,
            PartBytes::Shared(shared) => shared.bytes(),
            PartBytes::Copied(copy) => copy,
        }
    }

    /// The archives it holds: its frames if `framed` (see
    /// `crate::frames`), else itself; an error says what is wrong.
    pub(crate) fn archives(&self, framed: bool) -> Result<Vec<&[u8]>, crate::frames::FrameError> {
        if framed {
            crate::frames::frames(self.bytes())
        } else {
            Ok(vec![self.bytes()])
        }
    }
}

/// Lends every entry of a snapshot to be archived (a closure's entries, or
/// frozen state's own).
type LendAll<K, V> =
    Box<dyn Fn(&mut LendEntries<'_, K, V>) -> Result<(), StateError> + Send + Sync>;

/// Entries frozen on the task thread, archived when the coordinator asks.
struct BesideEntries<M, K, V> {
    stream: StreamFn<M, K, V>,
    meta: M,
    lend: LendAll<K, V>,
    key_groups: KeyGroups,
}

impl<M, K, V> fmt::Debug for BesideEntries<M, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BesideEntries")
            .field("type", &std::any::type_name::<KeyedParts<M, K, V>>())
            .finish()
    }
}

impl<M: Send + Sync, K, V> DeferredBytes for BesideEntries<M, K, V> {
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        (self.lend)(&mut |entries| (self.stream)(&self.meta, entries, self.key_groups, out))
            .map_err(|e| TaskError::Snapshot(format!("writing the archived entries: {e}")))
    }
}

/// What [`FrozenChanges::changes_since`] gives: the entries written, and
/// the keys removed.
pub type ChangesSince<K, V> = (Vec<(K, V)>, Vec<K>);

/// State frozen for an incremental snapshot: every entry as archived, and
/// what changed since an earlier freeze. Gathered off the task thread.
pub trait FrozenChanges<K, V>: Send + Sync + 'static {
    /// The epoch it was frozen in.
    fn epoch(&self) -> u32;
    /// Whether a snapshot building on the freeze of `epoch` should be whole
    /// instead: everything went at once since, or more keys went than are
    /// left (`streamwork_core::chain::whole_is_smaller`).
    fn whole_since(&self, epoch: u32) -> bool;
    /// Every entry (an error from a view that holds only what changed).
    fn entries(&self) -> Result<Vec<(K, V)>, StateError>;
    /// The entries written and the keys removed after the freeze of
    /// `epoch` (an error from a view that holds the changes since another
    /// epoch).
    fn changes_since(&self, epoch: u32) -> Result<ChangesSince<K, V>, StateError>;

    /// Every entry, lent to `write` (which archives it): by default those
    /// [`entries`](Self::entries) makes; state that keeps its entries as
    /// they are archived lends its own, and nothing is copied.
    fn lend_entries(&self, write: &mut LendEntries<'_, K, V>) -> Result<(), StateError> {
        let entries = self.entries()?;
        write(entries.iter().map(|(k, v)| (k, v)).collect())
    }

    /// [`changes_since`](Self::changes_since), lent to `write` as
    /// [`lend_entries`](Self::lend_entries) lends every entry.
    fn lend_changes_since(
        &self,
        epoch: u32,
        write: &mut LendChanges<'_, K, V>,
    ) -> Result<(), StateError> {
        let (entries, removed) = self.changes_since(epoch)?;
        write(
            entries.iter().map(|(k, v)| (k, v)).collect(),
            removed.iter().collect(),
        )
    }
}

/// What [`FrozenChanges::lend_entries`] lends entries to.
pub type LendEntries<'w, K, V> = dyn FnMut(Vec<(&K, &V)>) -> Result<(), StateError> + 'w;

/// What [`FrozenChanges::lend_changes_since`] lends the written entries
/// and the removed keys to.
pub type LendChanges<'w, K, V> = dyn FnMut(Vec<(&K, &V)>, Vec<&K>) -> Result<(), StateError> + 'w;

/// What [`KeyedCheckpoint::plan_snapshot`] decided for the next snapshot.
#[derive(Debug)]
pub struct Planned {
    plan: Plan,
    forget: Option<u32>,
    entries: usize,
}

impl Planned {
    /// The epoch up to which the state may forget its removals, before it
    /// freezes.
    pub fn forget_through(&self) -> Option<u32> {
        self.forget
    }
}

/// How an entry of a frozen [`CowMap`] gives its archived value.
trait ArchivedValue<MV, V>: Send + Sync + 'static {
    /// The archived value of `value`: lent where the entry holds it, made
    /// otherwise.
    fn of<'a>(&self, value: &'a MV) -> Cow<'a, V>
    where
        V: Clone;
}

/// The archived value made by a function ([`KeyedCheckpoint::snapshot_map`]).
struct Made<F>(F);

impl<MV, V, F> ArchivedValue<MV, V> for Made<F>
where
    F: Fn(&MV) -> V + Send + Sync + 'static,
{
    fn of<'a>(&self, value: &'a MV) -> Cow<'a, V>
    where
        V: Clone,
    {
        Cow::Owned((self.0)(value))
    }
}

/// The archived value found in the entry
/// ([`KeyedCheckpoint::snapshot_map_borrowed`]).
struct Found<F>(F);

impl<MV, V, F> ArchivedValue<MV, V> for Found<F>
where
    F: for<'a> Fn(&'a MV) -> &'a V + Send + Sync + 'static,
{
    fn of<'a>(&self, value: &'a MV) -> Cow<'a, V>
    where
        V: Clone,
    {
        Cow::Borrowed((self.0)(value))
    }
}

/// A frozen [`CowMap`], or what changed in it copied at the freeze, and
/// how its entries give their archived values: keys are always lent,
/// values lent where the entries hold them.
struct MapChanges<K, MV, A> {
    frozen: MapFreeze<K, MV>,
    value: A,
}

/// What [`KeyedCheckpoint::snapshot_map`] froze of a map.
enum MapFreeze<K, MV> {
    /// Every shard: for a whole snapshot, or a delta when the map cannot
    /// tell its changes without walking every entry.
    Table(FrozenMap<K, MV>),
    /// The entries written since the freeze a delta builds on, decided
    /// before freezing (no whole snapshot is made of them).
    Changes(MapChangesCopied<K, MV>),
}

type MapChangesCopied<K, MV> = streamwork_core::table::FrozenChanges<K, MV>;

impl<K, MV> MapFreeze<K, MV> {
    fn epochs(&self) -> &streamwork_core::chain::FrozenEpochs<K> {
        match self {
            MapFreeze::Table(frozen) => frozen.epochs(),
            MapFreeze::Changes(copied) => copied.epochs(),
        }
    }

    /// Every entry, of a frozen table: the changes copied for a delta are
    /// not every entry, and asking them is refused rather than answered
    /// with part of the state (a whole snapshot is decided before such a
    /// copy is made, so this is a bug of the framework's).
    fn every_entry(&self) -> Result<&FrozenMap<K, MV>, StateError> {
        match self {
            MapFreeze::Table(frozen) => Ok(frozen),
            MapFreeze::Changes(copied) => Err(StateError::Serialize {
                type_name: std::any::type_name::<K>(),
                reason: format!(
                    "a whole snapshot was asked of the changes copied since epoch {} (a bug in streamwork); the checkpoint is not written",
                    copied.since()
                ),
            }),
        }
    }

    /// Checks that changes copied at the freeze are those since `epoch`.
    fn copied_since(copied: &MapChangesCopied<K, MV>, epoch: u32) -> Result<(), StateError> {
        if copied.since() == epoch {
            return Ok(());
        }
        Err(StateError::Serialize {
            type_name: std::any::type_name::<K>(),
            reason: format!(
                "the changes since epoch {epoch} were asked of a copy of those since {} (a bug in streamwork); the checkpoint is not written",
                copied.since()
            ),
        })
    }
}

impl<K, MV, A> MapChanges<K, MV, A> {
    /// `entries`, each with its archived value, lent to `write`.
    fn lend<'m, V: Clone>(
        &self,
        entries: impl Iterator<Item = (&'m K, &'m MV)>,
        write: impl FnOnce(Vec<(&K, &V)>) -> Result<(), StateError>,
    ) -> Result<(), StateError>
    where
        K: 'm,
        MV: 'm,
        A: ArchivedValue<MV, V>,
    {
        let values: Vec<(&K, Cow<'_, V>)> = entries.map(|(k, v)| (k, self.value.of(v))).collect();
        write(values.iter().map(|(k, v)| (*k, v.as_ref())).collect())
    }
}

impl<K, V, MV, A> FrozenChanges<K, V> for MapChanges<K, MV, A>
where
    K: Clone + Send + Sync + 'static,
    V: Clone,
    MV: Send + Sync + 'static,
    A: ArchivedValue<MV, V>,
{
    fn epoch(&self) -> u32 {
        self.frozen.epochs().epoch()
    }

    fn whole_since(&self, epoch: u32) -> bool {
        match &self.frozen {
            MapFreeze::Table(frozen) => frozen.epochs().whole_since(epoch, frozen.len()),
            // Decided before the changes were copied.
            MapFreeze::Changes(_) => false,
        }
    }

    fn entries(&self) -> Result<Vec<(K, V)>, StateError> {
        Ok(self
            .frozen
            .every_entry()?
            .iter()
            .map(|(k, v)| (k.clone(), self.value.of(v).into_owned()))
            .collect())
    }

    fn changes_since(&self, epoch: u32) -> Result<ChangesSince<K, V>, StateError> {
        let owned = |(k, v): (&K, &MV)| (k.clone(), self.value.of(v).into_owned());
        let written = match &self.frozen {
            MapFreeze::Table(frozen) => frozen.changed_since(epoch).map(owned).collect(),
            MapFreeze::Changes(copied) => {
                MapFreeze::copied_since(copied, epoch)?;
                copied.changed().map(owned).collect()
            }
        };
        Ok((
            written,
            self.frozen.epochs().removed_since(epoch).cloned().collect(),
        ))
    }

    fn lend_entries(&self, write: &mut LendEntries<'_, K, V>) -> Result<(), StateError> {
        self.lend(self.frozen.every_entry()?.iter(), write)
    }

    fn lend_changes_since(
        &self,
        epoch: u32,
        write: &mut LendChanges<'_, K, V>,
    ) -> Result<(), StateError> {
        let removed = self.frozen.epochs().removed_since(epoch).collect();
        match &self.frozen {
            MapFreeze::Table(frozen) => self.lend(frozen.changed_since(epoch), |written| {
                write(written, removed)
            }),
            MapFreeze::Changes(copied) => {
                MapFreeze::copied_since(copied, epoch)?;
                self.lend(copied.changed(), |written| write(written, removed))
            }
        }
    }
}

/// What changed in frozen state since an earlier freeze, archived when the
/// coordinator asks.
struct DeltaEntries<K, V, Z> {
    stream_delta: StreamDeltaFn<K, V>,
    frozen: Z,
    since: u32,
    key_groups: KeyGroups,
}

impl<K, V, Z> fmt::Debug for DeltaEntries<K, V, Z> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaEntries")
            .field("type", &std::any::type_name::<KeyedDelta<K, V>>())
            .field("since", &self.since)
            .finish()
    }
}

impl<K, V, Z> DeferredBytes for DeltaEntries<K, V, Z>
where
    Z: FrozenChanges<K, V>,
{
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        self.frozen
            .lend_changes_since(self.since, &mut |entries, removed| {
                (self.stream_delta)(entries, removed, self.key_groups, out)
            })
            .map_err(|e| TaskError::Snapshot(format!("writing the archived changes: {e}")))
    }
}

impl<M, K, V> KeyedCodec<M, K, V>
where
    M: StateData + Send,
    K: Key + StateData,
    V: StateData + Send,
{
    /// The codec for these types, entry layout 1.
    pub fn new() -> Self {
        Self::with_layout(1)
    }

    /// The codec for these types, entry layout `layout` (from 1).
    pub fn with_layout(layout: u32) -> Self {
        KeyedCodec {
            save: save::<M, K, V>,
            stream: stream::<M, K, V>,
            stream_delta: stream_delta::<K, V>,
            save_manifest: save_manifest::<M>,
            load: load::<M, K, V>,
            layout: layout.max(1),
            fingerprint: crate::layout::kept_layout(codec_fingerprint::<M, K, V>()),
        }
    }
}

impl<M, K, V> Default for KeyedCodec<M, K, V>
where
    M: StateData + Send,
    K: Key + StateData,
    V: StateData + Send,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<M, K, V> KeyedCodec<M, K, V> {
    /// Archives `meta` and `entries`, grouped by key group.
    pub fn snapshot(
        &self,
        meta: M,
        entries: Vec<(K, V)>,
        key_groups: KeyGroups,
    ) -> Result<StateBytes, StateError> {
        let bytes = (self.save)(meta, entries, key_groups)?;
        let mut state = StateBytes::new(keyed_schema(self.layout), bytes.into_vec());
        state.side.push(self.layout_record());
        Ok(state)
    }

    /// The record of this codec's layout fingerprint, beside a snapshot.
    fn layout_record(&self) -> SideRecord {
        SideRecord {
            stream: LAYOUT_STREAM,
            schema: 1,
            check: SideCheck::OnLoad,
            payload: Arc::new(LayoutBytes(self.fingerprint)),
            written: Arc::default(),
        }
    }

    /// Refuses the parts of `restore` whose layout fingerprint, beside
    /// them, is not this codec's.
    fn check_layouts(&self, restore: &Restore<'_>) -> Result<(), StateError> {
        for part in &restore.parts {
            let Some(record) = restore.side_record(restore.checkpoint, LAYOUT_STREAM, part.part)
            else {
                continue;
            };
            let type_name = std::any::type_name::<KeyedParts<M, K, V>>();
            let Ok(found) = <[u8; 8]>::try_from(record.bytes()).map(u64::from_le_bytes) else {
                return Err(StateError::InvalidArchive {
                    checkpoint: restore.checkpoint,
                    operator: operator_id(restore.component),
                    part: part.part,
                    type_name,
                    reason: format!(
                        "the layout fingerprint beside it is {} bytes, not 8: the checkpoint is damaged; restore from an earlier one",
                        record.bytes().len()
                    ),
                });
            };
            if found != self.fingerprint {
                return Err(StateError::LayoutChanged {
                    operator: operator_id(restore.component),
                    part: part.part,
                    type_name,
                    found,
                    expected: self.fingerprint,
                });
            }
        }
        Ok(())
    }

    /// A snapshot whose entries are archived off the task thread: `entries`
    /// is called when the checkpoint is written (it reads state the
    /// operator froze, copy-on-write, so that the task thread only pauses to
    /// freeze it), and the archive is written beside the snapshot, as its
    /// side record `BESIDE_STREAM`. [`restore`](Self::restore) reads both
    /// kinds.
    pub fn snapshot_beside<F>(&self, meta: M, entries: F, key_groups: KeyGroups) -> StateBytes
    where
        M: Clone + Send + Sync + 'static,
        K: 'static,
        V: 'static,
        F: Fn() -> Vec<(K, V)> + Send + Sync + 'static,
    {
        let lend: LendAll<K, V> = Box::new(move |write| {
            let entries = entries();
            write(entries.iter().map(|(k, v)| (k, v)).collect())
        });
        self.beside(meta, lend, key_groups, Default::default())
    }

    /// A snapshot whose parts, the entries `lend` lends, are archived
    /// beside it.
    fn beside(
        &self,
        meta: M,
        lend: LendAll<K, V>,
        key_groups: KeyGroups,
        written: Arc<OnceLock<SharedBytes>>,
    ) -> StateBytes
    where
        M: Send + Sync + 'static,
        K: 'static,
        V: 'static,
    {
        let payload = Arc::new(BesideEntries {
            stream: self.stream,
            meta,
            lend,
            key_groups,
        });
        StateBytes {
            schema: framed_schema(self.layout),
            bytes: Vec::new(),
            side: vec![
                SideRecord {
                    stream: BESIDE_STREAM,
                    schema: framed_schema(self.layout),
                    check: SideCheck::OnLoad,
                    payload,
                    written,
                },
                self.layout_record(),
            ],
            builds_on: Vec::new(),
        }
    }

    /// Every old instance's metadata, and the entries of the key groups the
    /// restoring instance now owns. A snapshot of another entry layout is
    /// refused, naming both.
    pub fn restore(&self, restore: &Restore<'_>) -> Result<RestoredEntries<M, K, V>, StateError> {
        let (inline, beside, delta) = (
            keyed_schema(self.layout),
            beside_schema(self.layout),
            delta_schema(self.layout),
        );
        let (framed, framed_delta) = (framed_schema(self.layout), framed_delta_schema(self.layout));
        let known = |schema: u32| [inline, beside, delta, framed, framed_delta].contains(&schema);
        let operator = operator_id(restore.component);
        let type_name = std::any::type_name::<KeyedParts<M, K, V>>();
        if let Some(part) = restore.parts.iter().find(|p| !known(p.schema)) {
            let container = part.schema % 256;
            if !(KEYED_PARTS_SCHEMA..=KEYED_DELTA_FRAMED_SCHEMA).contains(&container) {
                return Err(StateError::IncompatibleSchema {
                    operator,
                    part: part.part,
                    type_name,
                    found: part.schema,
                    supported: inline,
                    reason: "the snapshot was not written by this operator's codec",
                });
            }
            let written = part.schema / 256 + 1;
            return Err(StateError::IncompatibleSchema {
                operator,
                part: part.part,
                type_name,
                found: written,
                supported: self.layout,
                reason: if written > self.layout {
                    "its state was written by a newer version of the operator: run that version, or restore from an older checkpoint"
                } else {
                    "its state was written by an older version of the operator, whose layout this version does not read: finish the job with that version (a drain), then start this one without restoring"
                },
            });
        }
        self.check_layouts(restore)?;
        let mut held = Vec::with_capacity(restore.parts.len());
        for part in &restore.parts {
            if part.schema == inline {
                held.push((part.part, Held::Whole(PartBytes::Inline(part.bytes), false)));
                continue;
            }
            if part.schema == delta || part.schema == framed_delta {
                held.push((
                    part.part,
                    Held::Chain(part.bytes, part.schema == framed_delta),
                ));
                continue;
            }
            let Some(record) = restore.side_record(restore.checkpoint, BESIDE_STREAM, part.part)
            else {
                return Err(StateError::InvalidArchive {
                    checkpoint: restore.checkpoint,
                    operator,
                    part: part.part,
                    type_name,
                    reason: "its entries, archived in a record beside the snapshot, are not in the checkpoint: restore from an earlier checkpoint".into(),
                });
            };
            held.push((
                part.part,
                Held::Whole(PartBytes::aligned(record), part.schema == framed),
            ));
        }
        (self.load)(restore, &held)
    }
}

fn save<M, K, V>(
    meta: M,
    entries: Vec<(K, V)>,
    key_groups: KeyGroups,
) -> Result<AlignedVec, StateError>
where
    M: StateData,
    K: Key + StateData,
    V: StateData,
{
    let parts = KeyedParts {
        meta,
        key_groups: key_groups.count(),
        groups: crate::keyed::group_entries(entries.into_iter(), key_groups),
    };
    crate::archive(&parts)
}

/// Lent entries straight into `out`, as frames of [`KeyedParts`] (see
/// `crate::frames`), each with the metadata; the first frame holds it even
/// when there is no entry.
fn stream<M, K, V>(
    meta: &M,
    entries: Vec<(&K, &V)>,
    key_groups: KeyGroups,
    out: &mut dyn std::io::Write,
) -> Result<(), StateError>
where
    M: StateData,
    K: Key + StateData,
    V: StateData,
{
    let lent = entries.into_iter().map(|(k, v)| (Lent(k), Lent(v)));
    let groups = crate::keyed::group_entries(lent, key_groups);
    let mut frames = crate::frames::FrameWriter::new(out);
    let frame = |groups| KeyedParts {
        meta: Lent(meta),
        key_groups: key_groups.count(),
        groups,
    };
    if groups.is_empty() {
        return frames.write(&frame(Vec::new()), 0);
    }
    for KeyGroupEntries { group, entries } in groups {
        frames.write_chunks(entries, |entries| {
            frame(vec![KeyGroupEntries { group, entries }])
        })?;
    }
    Ok(())
}

/// A delta of lent entries and removed keys, archived straight into
/// `out`.
fn stream_delta<K, V>(
    entries: Vec<(&K, &V)>,
    removed: Vec<&K>,
    key_groups: KeyGroups,
    out: &mut dyn std::io::Write,
) -> Result<(), StateError>
where
    K: Key + StateData,
    V: StateData,
{
    let groups = group_delta(
        entries.into_iter().map(|(k, v)| (Lent(k), Lent(v))),
        removed.into_iter().map(Lent),
        key_groups,
    );
    crate::chain::write_delta_frames(groups, key_groups.count(), out)
}

fn save_manifest<M: StateData>(
    meta: M,
    chain: Vec<u64>,
    key_groups: KeyGroups,
) -> Result<AlignedVec, StateError> {
    let manifest = ChainManifest {
        meta,
        key_groups: key_groups.count(),
        chain,
    };
    crate::archive(&manifest)
}

/// The entries of one old instance's chain that the restoring instance
/// owns, in a deterministic order: the whole record's, then each delta's
/// removals and writes applied in turn.
struct Applied<K, V> {
    entries: Vec<Option<(K, V)>>,
    at: std::collections::HashMap<K, usize>,
}

impl<K: Key, V> Applied<K, V> {
    fn remove(&mut self, key: &K) {
        if let Some(i) = self.at.remove(key) {
            self.entries[i] = None;
        }
    }

    fn write(&mut self, key: K, value: V) {
        match self.at.get(&key) {
            Some(&i) => self.entries[i] = Some((key, value)),
            None => {
                self.at.insert(key.clone(), self.entries.len());
                self.entries.push(Some((key, value)));
            }
        }
    }
}

fn load<M, K, V>(
    restore: &Restore<'_>,
    parts: &[(InstanceIdx, Held<'_>)],
) -> Result<RestoredEntries<M, K, V>, StateError>
where
    M: StateData + Send,
    K: Key + StateData,
    V: StateData + Send,
{
    let operator = operator_id(restore.component);
    let type_name = std::any::type_name::<KeyedParts<M, K, V>>();
    let mut restored = RestoredEntries {
        metas: Vec::with_capacity(restore.parts.len()),
        entries: Vec::new(),
    };
    let mut parts: Vec<&(InstanceIdx, Held<'_>)> = parts.iter().collect();
    parts.sort_by_key(|(part, _)| *part);
    let owns = |group: u32| {
        restore.key_groups.instance_of(group, restore.parallelism) == restore.instance.0
    };
    for (part, held) in parts {
        let part = *part;
        let invalid = |e: rancor::Error| StateError::InvalidArchive {
            checkpoint: restore.checkpoint,
            operator,
            part,
            type_name,
            reason: e.to_string(),
        };
        let groups_changed = |written_with: u32| StateError::KeyGroupsChanged {
            operator,
            found: written_with,
            expected: restore.key_groups.count(),
        };
        let manifest_copy: AlignedVec;
        let (whole, deltas, framed) = match held {
            Held::Whole(bytes, framed) => (PartBytes::Inline(bytes.bytes()), Vec::new(), *framed),
            Held::Chain(bytes, framed) => {
                manifest_copy = {
                    let mut copy = AlignedVec::with_capacity(bytes.len());
                    copy.extend_from_slice(bytes);
                    copy
                };
                let manifest =
                    rkyv::access::<ArchivedChainManifest<M>, rancor::Error>(&manifest_copy)
                        .map_err(invalid)?;
                let written_with = manifest.key_groups.to_native();
                if written_with != restore.key_groups.count() {
                    return Err(groups_changed(written_with));
                }
                restored
                    .metas
                    .push(rkyv::deserialize::<M, rancor::Error>(&manifest.meta).map_err(invalid)?);
                let mut records = Vec::with_capacity(manifest.chain.len());
                for id in manifest.chain.iter() {
                    let id = match id.to_native() {
                        THIS_CHECKPOINT => restore.checkpoint,
                        id => streamwork_core::CheckpointId::new(id),
                    };
                    let record = restore
                        .side_record(id, BESIDE_STREAM, part)
                        .ok_or_else(|| StateError::InvalidArchive {
                            checkpoint: restore.checkpoint,
                            operator,
                            part,
                            type_name,
                            reason: format!(
                                "its entries build on a record of checkpoint {id} that is not in the checkpoint log: restore from an earlier checkpoint"
                            ),
                        })?;
                    records.push(PartBytes::aligned(record));
                }
                if records.is_empty() {
                    return Err(StateError::InvalidArchive {
                        checkpoint: restore.checkpoint,
                        operator,
                        part,
                        type_name,
                        reason: "its manifest names no record".into(),
                    });
                }
                let whole = records.remove(0);
                (whole, records, *framed)
            }
        };
        let unreadable = |e: crate::frames::FrameError| StateError::InvalidArchive {
            checkpoint: restore.checkpoint,
            operator,
            part,
            type_name,
            reason: e.to_string(),
        };
        let mut applied = Applied {
            entries: Vec::new(),
            at: std::collections::HashMap::new(),
        };
        // Frames are decoded on a thread per core when the part is large,
        // and applied in their order.
        let whole = whole.archives(framed).map_err(unreadable)?;
        let delta_archives = deltas
            .iter()
            .map(|delta| delta.archives(framed).map_err(unreadable))
            .collect::<Result<Vec<_>, _>>()?;
        let delta_archives: Vec<&[u8]> = delta_archives.into_iter().flatten().collect();
        let bytes = whole.iter().chain(&delta_archives).map(|b| b.len()).sum();
        let threads = crate::ordered::decoding_threads(bytes);
        let panicked = |what: &str| StateError::InvalidArchive {
            checkpoint: restore.checkpoint,
            operator,
            part,
            type_name,
            reason: format!("deserializing its {what} panicked"),
        };
        let first_meta = matches!(held, Held::Whole(..));
        crate::ordered::decode_in_order(
            whole.len(),
            threads,
            |at| {
                let archived =
                    rkyv::access::<ArchivedKeyedParts<M, K, V>, rancor::Error>(whole[at])
                        .map_err(invalid)?;
                let written_with = archived.key_groups.to_native();
                if written_with != restore.key_groups.count() {
                    return Err(groups_changed(written_with));
                }
                let meta = (at == 0 && first_meta)
                    .then(|| rkyv::deserialize::<M, rancor::Error>(&archived.meta))
                    .transpose()
                    .map_err(invalid)?;
                let groups = archived
                    .groups
                    .iter()
                    .filter(|group| owns(group.group.to_native()))
                    .map(|group| {
                        rkyv::deserialize::<Vec<(K, V)>, rancor::Error>(&group.entries)
                            .map_err(invalid)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((meta, groups))
            },
            |(meta, groups)| {
                restored.metas.extend(meta);
                for entries in groups {
                    if deltas.is_empty() {
                        restored.entries.extend(entries);
                    } else {
                        for (k, v) in entries {
                            applied.write(k, v);
                        }
                    }
                }
                Ok(())
            },
            |_| panicked("entries"),
        )?;
        crate::ordered::decode_in_order(
            delta_archives.len(),
            threads,
            |at| {
                crate::chain::owned_changes::<K, V>(
                    delta_archives[at],
                    restore.key_groups,
                    operator,
                    owns,
                    invalid,
                )
            },
            |changes| {
                for (removed, entries) in changes {
                    for key in removed {
                        applied.remove(&key);
                    }
                    for (k, v) in entries {
                        applied.write(k, v);
                    }
                }
                Ok(())
            },
            |_| panicked("changes"),
        )?;
        restored
            .entries
            .extend(applied.entries.into_iter().flatten());
    }
    Ok(restored)
}

/// What an operator that keeps keyed state in structures of its own needs
/// to checkpoint them: the codec, once the operator is built to checkpoint
/// (`.checkpointed()` on windows and joins), and the job's key groups.
/// Disabled by default, when the operator answers
/// `Operator::checkpoints_state` (in `streamwork::core`) with
/// [`is_enabled`](Self::is_enabled)'s `false`.
pub struct KeyedCheckpoint<M, K, V> {
    codec: Option<KeyedCodec<M, K, V>>,
    key_groups: KeyGroups,
    /// The snapshots of this run that the next one may build on
    /// ([`snapshot_map`](Self::snapshot_map)).
    chain: Chain,
}

/// A clone is another instance's: it builds on no snapshot of this one.
impl<M, K, V> Clone for KeyedCheckpoint<M, K, V> {
    fn clone(&self) -> Self {
        KeyedCheckpoint {
            codec: self.codec,
            key_groups: self.key_groups,
            chain: Chain::default(),
        }
    }
}

impl<M, K, V> Default for KeyedCheckpoint<M, K, V> {
    fn default() -> Self {
        KeyedCheckpoint {
            codec: None,
            key_groups: KeyGroups::DEFAULT,
            chain: Chain::default(),
        }
    }
}

impl<M, K, V> fmt::Debug for KeyedCheckpoint<M, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCheckpoint")
            .field("enabled", &self.codec.is_some())
            .field("key_groups", &self.key_groups)
            .finish()
    }
}

impl<M, K, V> KeyedCheckpoint<M, K, V>
where
    M: StateData + Send,
    K: Key + StateData,
    V: StateData + Send,
{
    /// Checkpointing enabled, for archivable types, entry layout 1.
    pub fn enabled() -> Self {
        Self::enabled_at_layout(1)
    }

    /// Checkpointing enabled, entry layout `layout`: bump it whenever the
    /// operator changes what it keeps (a snapshot of another layout is
    /// then refused by name, never misread).
    pub fn enabled_at_layout(layout: u32) -> Self {
        KeyedCheckpoint {
            codec: Some(KeyedCodec::with_layout(layout)),
            key_groups: KeyGroups::DEFAULT,
            chain: Chain::default(),
        }
    }
}

impl<M, K, V> KeyedCheckpoint<M, K, V> {
    /// Whether the operator's state goes into checkpoints.
    pub fn is_enabled(&self) -> bool {
        self.codec.is_some()
    }

    /// Takes the job's key groups, from the operator's `open`.
    pub fn open(&mut self, ctx: &InstanceContext) {
        self.key_groups = ctx.key_groups();
    }

    /// What the operator declares it keeps: checkpointed state once
    /// enabled; otherwise state its checkpoints leave out, and `fix` says
    /// how to enable it.
    pub fn statefulness(&self, fix: &'static str) -> Statefulness {
        if self.is_enabled() {
            Statefulness::Checkpointed
        } else {
            Statefulness::Unchecked(fix)
        }
    }

    /// The snapshot of `entries` (built only if enabled) with `meta`, for
    /// the operator's `snapshot`: `None` when disabled. State that cannot be
    /// archived (a length beyond what the archive format describes) is an
    /// error naming `what`: a checkpoint never silently leaves state out.
    pub fn snapshot(
        &self,
        ctx: &SnapshotContext,
        what: &str,
        meta: M,
        entries: impl FnOnce() -> Vec<(K, V)>,
    ) -> Result<Option<StateBytes>, TaskError> {
        let Some(codec) = self.codec else {
            return Ok(None);
        };
        codec
            .snapshot(meta, entries(), ctx.key_groups)
            .map(Some)
            .map_err(|e| TaskError::Snapshot(format!("{what}: {e}")))
    }

    /// Like [`snapshot`](Self::snapshot), but the entries are gathered and
    /// archived off the task thread, when the checkpoint is written:
    /// `entries` reads state the operator froze (shared copy-on-write), so
    /// that taking the snapshot costs the task thread only the freeze.
    pub fn snapshot_beside<F>(
        &self,
        ctx: &SnapshotContext,
        meta: M,
        entries: F,
    ) -> Option<StateBytes>
    where
        M: Clone + Send + Sync + 'static,
        K: 'static,
        V: 'static,
        F: Fn() -> Vec<(K, V)> + Send + Sync + 'static,
    {
        let codec = self.codec?;
        Some(codec.snapshot_beside(meta, entries, ctx.key_groups))
    }

    /// The first step of an incremental snapshot of state holding
    /// `entries` (`None` when disabled): what it writes, and the epoch up to
    /// which the state may forget its removals before it freezes.
    /// [`snapshot_frozen`](Self::snapshot_frozen) takes it with the frozen
    /// state; [`snapshot_map`](Self::snapshot_map) does both for a
    /// [`CowMap`].
    pub fn plan_snapshot(&mut self, ctx: &SnapshotContext, entries: usize) -> Option<Planned> {
        self.codec?;
        let (plan, forget) = self.chain.plan(ctx.completed, entries);
        Some(Planned {
            plan,
            forget,
            entries,
        })
    }

    /// The snapshot of `frozen` and `meta`, as `planned` said: every entry,
    /// or what changed since the snapshot it builds on (both gathered and
    /// archived off the task thread, when the checkpoint is written).
    pub fn snapshot_frozen<Z>(
        &mut self,
        ctx: &SnapshotContext,
        planned: Planned,
        meta: M,
        frozen: Z,
    ) -> Result<Option<StateBytes>, TaskError>
    where
        M: Clone + Send + Sync + 'static,
        K: 'static,
        V: 'static,
        Z: FrozenChanges<K, V>,
    {
        let Some(codec) = self.codec else {
            return Ok(None);
        };
        let Planned { plan, entries, .. } = planned;
        let plan = plan.or_whole_if(|since| frozen.whole_since(since));
        let epoch = frozen.epoch();
        let written = Arc::new(OnceLock::new());
        let state = match &plan {
            Plan::Whole => codec.beside(
                meta,
                Box::new(move |write| frozen.lend_entries(write)),
                ctx.key_groups,
                written.clone(),
            ),
            Plan::Delta { since, before, .. } => {
                let manifest = (codec.save_manifest)(meta, chain_ids(before), ctx.key_groups)
                    .map_err(|e| TaskError::Snapshot(e.to_string()))?;
                let payload = DeltaEntries {
                    stream_delta: codec.stream_delta,
                    frozen,
                    since: *since,
                    key_groups: ctx.key_groups,
                };
                StateBytes {
                    schema: framed_delta_schema(codec.layout),
                    bytes: manifest.into_vec(),
                    side: vec![
                        SideRecord {
                            stream: BESIDE_STREAM,
                            schema: framed_delta_schema(codec.layout),
                            check: SideCheck::OnLoad,
                            payload: Arc::new(payload),
                            written: written.clone(),
                        },
                        codec.layout_record(),
                    ],
                    builds_on: before.clone(),
                }
            }
        };
        self.chain
            .taken(ctx.checkpoint, epoch, entries, plan, written);
        Ok(Some(state))
    }

    /// The snapshot of an operator's keyed `map` and `meta` (`None` when
    /// disabled), incremental: the task thread only freezes the map, and
    /// the coordinator archives, off it, either every entry or, when this
    /// run has a complete snapshot to build on, only the entries written
    /// and the keys removed since (see `streamwork_core::chain`). `value`
    /// makes the archived value of an entry's.
    ///
    /// ```
    /// use streamwork::core::hash::stable_hash;
    /// use streamwork::core::{CheckpointId, SnapshotContext};
    /// use streamwork::state::{CowMap, KeyedCheckpoint};
    ///
    /// let mut checkpoint = KeyedCheckpoint::<i64, String, u64>::enabled();
    /// let mut counts: CowMap<String, u64> = CowMap::new();
    /// counts.insert(stable_hash("a"), "a".to_string(), 1);
    /// let ctx = SnapshotContext::single(CheckpointId::new(1));
    /// let snapshot = checkpoint.snapshot_map(&ctx, 0, &mut counts, |v| *v).unwrap();
    /// // Nothing complete to build on yet: every entry, archived beside.
    /// assert_eq!(snapshot.unwrap().side.len(), 2); // the entries, and their layout's fingerprint
    /// ```
    pub fn snapshot_map<MV, F>(
        &mut self,
        ctx: &SnapshotContext,
        meta: M,
        map: &mut CowMap<K, MV>,
        value: F,
    ) -> Result<Option<StateBytes>, TaskError>
    where
        M: Clone + Send + Sync + 'static,
        K: Clone + Eq + Send + Sync + 'static,
        V: Clone + 'static,
        MV: Clone + Send + Sync + 'static,
        F: Fn(&MV) -> V + Send + Sync + 'static,
    {
        self.snapshot_cow_map(ctx, meta, map, Made(value))
    }

    /// [`snapshot_map`](Self::snapshot_map) of a map whose values hold
    /// their archived value (`stored` finds it: the value itself, or what
    /// it points to): entries are archived where they are, with no copy
    /// made to archive them.
    ///
    /// ```
    /// use streamwork::core::hash::stable_hash;
    /// use streamwork::core::{CheckpointId, SnapshotContext};
    /// use streamwork::state::{CowMap, KeyedCheckpoint};
    ///
    /// let mut checkpoint = KeyedCheckpoint::<i64, String, Vec<u64>>::enabled();
    /// let mut rows: CowMap<String, Vec<u64>> = CowMap::new();
    /// rows.insert(stable_hash("a"), "a".to_string(), vec![1, 2]);
    /// let ctx = SnapshotContext::single(CheckpointId::new(1));
    /// // Each key's rows archived where the frozen map holds them.
    /// let snapshot = checkpoint.snapshot_map_borrowed(&ctx, 0, &mut rows, |r| r).unwrap();
    /// assert_eq!(snapshot.unwrap().side.len(), 2); // the entries, and their layout's fingerprint
    /// ```
    pub fn snapshot_map_borrowed<MV, F>(
        &mut self,
        ctx: &SnapshotContext,
        meta: M,
        map: &mut CowMap<K, MV>,
        stored: F,
    ) -> Result<Option<StateBytes>, TaskError>
    where
        M: Clone + Send + Sync + 'static,
        K: Clone + Eq + Send + Sync + 'static,
        V: Clone + 'static,
        MV: Clone + Send + Sync + 'static,
        F: for<'a> Fn(&'a MV) -> &'a V + Send + Sync + 'static,
    {
        self.snapshot_cow_map(ctx, meta, map, Found(stored))
    }

    /// [`snapshot_map`](Self::snapshot_map) and
    /// [`snapshot_map_borrowed`](Self::snapshot_map_borrowed): `value`
    /// says how an entry gives its archived value.
    fn snapshot_cow_map<MV, A>(
        &mut self,
        ctx: &SnapshotContext,
        meta: M,
        map: &mut CowMap<K, MV>,
        value: A,
    ) -> Result<Option<StateBytes>, TaskError>
    where
        M: Clone + Send + Sync + 'static,
        K: Clone + Eq + Send + Sync + 'static,
        V: Clone + 'static,
        MV: Clone + Send + Sync + 'static,
        A: ArchivedValue<MV, V>,
    {
        let Some(planned) = self.plan_snapshot(ctx, map.len()) else {
            return Ok(None);
        };
        if let Some(epoch) = planned.forget_through() {
            map.forget_removed_through(epoch);
        }
        // A delta copies what changed, if the map can tell it, and shares
        // no shard; a whole snapshot shares every shard.
        let mut planned = planned;
        planned.plan = planned.plan.or_whole_if(|since| map.whole_since(since));
        let copied = match &planned.plan {
            Plan::Delta { since, .. } => map.freeze_changes(*since),
            Plan::Whole => None,
        };
        let frozen = MapChanges {
            frozen: match copied {
                Some(copied) => MapFreeze::Changes(copied),
                None => MapFreeze::Table(map.freeze()),
            },
            value,
        };
        self.snapshot_frozen(ctx, planned, meta, frozen)
    }

    /// What the operator's `restore` restores from: every old instance's
    /// metadata and this instance's entries; `None` when disabled. The next
    /// snapshot is whole.
    pub fn restore(
        &mut self,
        restore: &Restore<'_>,
    ) -> Result<Option<RestoredEntries<M, K, V>>, TaskError> {
        let Some(codec) = self.codec else {
            return Ok(None);
        };
        let restored = codec
            .restore(restore)
            .map_err(|e| TaskError::Restore(e.to_string()))?;
        self.key_groups = restore.key_groups;
        self.chain = Chain::default();
        Ok(Some(restored))
    }

    /// [`restore`](Self::restore) for an operator whose metadata is a time
    /// (its watermark or clock): `time` is raised to the furthest any old
    /// instance had reached ([`RestoredEntries::raise`]), and the entries
    /// are returned; `None` when disabled.
    pub fn restore_raising(
        &mut self,
        restore: &Restore<'_>,
        time: &mut M,
    ) -> Result<Option<Vec<(K, V)>>, TaskError>
    where
        M: Copy + Ord,
    {
        Ok(self.restore(restore)?.map(|restored| {
            restored.raise(time);
            restored.entries
        }))
    }
}

/// Checkpoints an operator's `Timers` (`streamwork::core::timer`) by
/// key group, so that a restored instance (at any parallelism) gets the
/// timers of the keys it now owns.
///
/// ```
/// use streamwork::core::timer::Timers;
/// use streamwork::core::{CheckpointId, InstanceIdx, KeyGroups, Timestamp};
/// use streamwork::core::checkpoint::{Restore, RestoredPart};
/// use streamwork::state::TimerCodec;
///
/// let codec = TimerCodec::<u64>::new();
/// let mut timers = Timers::new();
/// timers.register_event(Timestamp::from_millis(30), 7);
/// timers.register_processing(Timestamp::from_millis(99), 8);
/// let snapshot = codec.snapshot(&timers, KeyGroups::DEFAULT).unwrap();
/// let restore = Restore {
///     records: None,
///     component: "alerts",
///     checkpoint: CheckpointId::new(1),
///     is_final: false,
///     ended: Vec::new(),
///     instance: InstanceIdx(0),
///     parallelism: 1,
///     key_groups: KeyGroups::DEFAULT,
///     parts: vec![RestoredPart { part: InstanceIdx(0), schema: snapshot.schema, bytes: &snapshot.bytes }],
/// };
/// let restored = codec.restore(&restore).unwrap();
/// assert_eq!(restored.len(), 2);
/// assert_eq!(restored.next_event(), Some(Timestamp::from_millis(30)));
/// ```
pub struct TimerCodec<K>(KeyedCodec<(), K, Vec<(bool, i64)>>);

impl<K> Clone for TimerCodec<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for TimerCodec<K> {}

impl<K> fmt::Debug for TimerCodec<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TimerCodec").field(&self.0).finish()
    }
}

impl<K: Key + StateData> TimerCodec<K> {
    /// The codec for timers keyed by `K`.
    pub fn new() -> Self {
        TimerCodec(KeyedCodec::new())
    }
}

impl<K: Key + StateData> Default for TimerCodec<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key> TimerCodec<K> {
    /// Archives every pending timer, grouped by its key's key group.
    pub fn snapshot(
        &self,
        timers: &streamwork_core::timer::Timers<K>,
        key_groups: KeyGroups,
    ) -> Result<StateBytes, StateError> {
        let mut by_key: std::collections::HashMap<K, Vec<(bool, i64)>> = Default::default();
        for (domain, time, key) in timers.iter() {
            let event = domain == streamwork_core::timer::TimeDomain::Event;
            by_key
                .entry(key.clone())
                .or_default()
                .push((event, time.millis()));
        }
        self.0
            .snapshot((), by_key.into_iter().collect(), key_groups)
    }

    /// The timers of the keys the restoring instance now owns.
    pub fn restore(
        &self,
        restore: &Restore<'_>,
    ) -> Result<streamwork_core::timer::Timers<K>, StateError> {
        use streamwork_core::timer::{TimeDomain, Timers};
        let mut timers = Timers::new();
        for (key, times) in self.0.restore(restore)?.entries {
            for (event, millis) in times {
                let domain = if event {
                    TimeDomain::Event
                } else {
                    TimeDomain::Processing
                };
                timers.register(
                    domain,
                    streamwork_core::Timestamp::from_millis(millis),
                    key.clone(),
                );
            }
        }
        Ok(timers)
    }
}

#[cfg(test)]
mod tests {
    use streamwork_core::checkpoint::RestoredPart;

    use streamwork_core::hash::stable_hash;

    use super::*;

    fn restore_at<'a>(parts: &'a [StateBytes], instance: u32, parallelism: u32) -> Restore<'a> {
        Restore {
            records: None,
            component: "windows",
            checkpoint: streamwork_core::CheckpointId::new(7),
            is_final: false,
            ended: Vec::new(),
            instance: streamwork_core::InstanceIdx(instance),
            parallelism,
            key_groups: KeyGroups::DEFAULT,
            parts: parts
                .iter()
                .enumerate()
                .map(|(i, s)| RestoredPart {
                    part: streamwork_core::InstanceIdx(i as u32),
                    schema: s.schema,
                    bytes: &s.bytes,
                })
                .collect(),
        }
    }

    /// Copies `bytes` to a 16-byte boundary, as the log's records are.
    fn aligned(bytes: &[u8]) -> AlignedVec {
        let mut copy = AlignedVec::with_capacity(bytes.len());
        copy.extend_from_slice(bytes);
        copy
    }

    type Entry = (String, (Vec<u8>, u64));

    #[test]
    fn lent_entries_streamed_as_frames_are_the_archive_made_in_memory_cut_up() {
        // Snapshots archived off the task thread stream into the log as
        // frames (one rkyv archive spans at most 2 GiB); read frame by
        // frame, they hold what an in-memory archive of the copied entries
        // (older logs' layout) holds, in the same order.
        let entries: Vec<(String, (Vec<u8>, u64))> = (0..20_000u64)
            .map(|i| (format!("key-{i}"), (vec![i as u8; (i % 37) as usize], i)))
            .collect();
        let key_groups = KeyGroups::DEFAULT;
        let whole = save::<i64, String, (Vec<u8>, u64)>(-3, entries.clone(), key_groups).unwrap();
        let whole =
            rkyv::access::<ArchivedKeyedParts<i64, String, (Vec<u8>, u64)>, rancor::Error>(&whole)
                .unwrap();
        let expected: Vec<(u32, Vec<Entry>)> = whole
            .groups
            .iter()
            .map(|g| {
                let entries = rkyv::deserialize::<_, rancor::Error>(&g.entries).unwrap();
                (g.group.to_native(), entries)
            })
            .collect();
        // Streamed from lent entries (archived where the state holds them).
        let lent: Vec<_> = entries.iter().map(|(k, v)| (k, v)).collect();
        let mut streamed = Vec::new();
        stream::<i64, String, (Vec<u8>, u64)>(&-3, lent.clone(), key_groups, &mut streamed)
            .unwrap();
        let streamed = aligned(&streamed);
        let frames = crate::frames::frames(&streamed).unwrap();
        assert!(frames.len() > expected.len(), "a key group is cut up");
        let mut read: Vec<(u32, Vec<Entry>)> = Vec::new();
        for frame in frames {
            let frame = rkyv::access::<
                ArchivedKeyedParts<i64, String, (Vec<u8>, u64)>,
                rancor::Error,
            >(frame)
            .unwrap();
            assert_eq!(frame.meta.to_native(), -3);
            for g in frame.groups.iter() {
                let entries: Vec<(String, (Vec<u8>, u64))> =
                    rkyv::deserialize::<_, rancor::Error>(&g.entries).unwrap();
                match read.last_mut() {
                    Some((group, held)) if *group == g.group.to_native() => held.extend(entries),
                    _ => read.push((g.group.to_native(), entries)),
                }
            }
        }
        assert_eq!(read, expected);
        // A delta: each key group's removals, then its entries.
        let removed: Vec<String> = (0..50).map(|i| format!("gone-{i}")).collect();
        let mut streamed = Vec::new();
        stream_delta::<String, (Vec<u8>, u64)>(
            lent,
            removed.iter().collect(),
            key_groups,
            &mut streamed,
        )
        .unwrap();
        let streamed = aligned(&streamed);
        let (mut gone, mut written) = (Vec::new(), Vec::new());
        for frame in crate::frames::frames(&streamed).unwrap() {
            let frame = rkyv::access::<
                crate::chain::ArchivedKeyedDelta<String, (Vec<u8>, u64)>,
                rancor::Error,
            >(frame)
            .unwrap();
            for g in frame.groups.iter() {
                let removed: Vec<String> =
                    rkyv::deserialize::<_, rancor::Error>(&g.removed).unwrap();
                let entries: Vec<(String, (Vec<u8>, u64))> =
                    rkyv::deserialize::<_, rancor::Error>(&g.entries).unwrap();
                gone.extend(removed);
                written.extend(entries);
            }
        }
        gone.sort();
        let mut all_removed = removed.clone();
        all_removed.sort();
        assert_eq!(gone, all_removed);
        written.sort();
        let mut all = entries.clone();
        all.sort();
        assert_eq!(written, all);
    }

    #[test]
    fn an_empty_snapshot_streamed_as_frames_keeps_its_metadata() {
        let mut streamed = Vec::new();
        stream::<i64, u64, u64>(&42, Vec::new(), KeyGroups::DEFAULT, &mut streamed).unwrap();
        let streamed = aligned(&streamed);
        let frames = crate::frames::frames(&streamed).unwrap();
        assert_eq!(frames.len(), 1);
        let frame =
            rkyv::access::<ArchivedKeyedParts<i64, u64, u64>, rancor::Error>(frames[0]).unwrap();
        assert_eq!(frame.meta.to_native(), 42);
        assert!(frame.groups.is_empty());
    }

    #[test]
    fn a_snapshot_of_another_entry_layout_is_refused_by_name() {
        let groups = KeyGroups::DEFAULT;
        let v1 = KeyedCodec::<i64, u64, u64>::new();
        let v2 = KeyedCodec::<i64, u64, u64>::with_layout(2);
        let old = [v1.snapshot(0, vec![(1, 1)], groups).unwrap()];
        let new = [v2.snapshot(0, vec![(1, 1)], groups).unwrap()];
        assert_eq!((old[0].schema, new[0].schema), (1, 257));
        let error = v2
            .restore(&restore_at(&old, 0, 1))
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("schema version 1, the type reads version 2"),
            "{error}"
        );
        assert!(error.contains("older version of the operator"), "{error}");
        let error = v1
            .restore(&restore_at(&new, 0, 1))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("newer version of the operator"), "{error}");
        assert_eq!(
            v2.restore(&restore_at(&new, 0, 1)).unwrap().entries,
            [(1, 1)]
        );
    }

    /// A checkpoint that offers one layout record, `layout`, beside every
    /// part.
    struct LayoutOnly(Vec<u8>);

    impl streamwork_core::checkpoint::RestoreSource for LayoutOnly {
        fn checkpoint(&self) -> streamwork_core::CheckpointId {
            streamwork_core::CheckpointId::new(7)
        }
        fn is_final(&self) -> bool {
            false
        }
        fn parts(&self, _: &str) -> Vec<RestoredPart<'_>> {
            Vec::new()
        }
        fn ended(&self, _: &str) -> Vec<streamwork_core::InstanceIdx> {
            Vec::new()
        }
        fn side_record(
            &self,
            key: streamwork_core::checkpoint::SideRecordKey<'_>,
        ) -> Option<streamwork_core::checkpoint::SharedBytes> {
            let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(self.0.clone());
            (key.stream == LAYOUT_STREAM)
                .then(|| streamwork_core::checkpoint::SharedBytes::new(owner, 0..self.0.len()))
                .flatten()
        }
    }

    #[test]
    fn a_changed_or_damaged_layout_fingerprint_is_refused() {
        let groups = KeyGroups::DEFAULT;
        let codec = KeyedCodec::<i64, u64, u64>::new();
        let parts = [codec.snapshot(0, vec![(1, 1)], groups).unwrap()];
        let restore =
            |fingerprint: Vec<u8>,
             check: &dyn Fn(Result<RestoredEntries<i64, u64, u64>, StateError>)| {
                let source = LayoutOnly(fingerprint);
                let mut at = restore_at(&parts, 0, 1);
                at.records = Some(&source);
                check(codec.restore(&at));
            };
        restore(codec.fingerprint.to_le_bytes().to_vec(), &|r| {
            assert_eq!(r.unwrap().entries, [(1, 1)]);
        });
        // Written by a codec whose values were `i64`.
        let other = KeyedCodec::<i64, u64, i64>::new().fingerprint;
        assert_ne!(other, codec.fingerprint);
        restore(other.to_le_bytes().to_vec(), &|r| {
            assert!(matches!(r, Err(StateError::LayoutChanged { found, .. }) if found == other));
        });
        restore(vec![1, 2, 3], &|r| {
            let error = r.err().unwrap();
            assert!(
                matches!(error, StateError::InvalidArchive { .. }),
                "{error}"
            );
            assert!(error.to_string().contains("is 3 bytes, not 8"), "{error}");
        });
    }

    #[test]
    fn rescaling_hands_every_key_to_exactly_one_instance() {
        let codec = KeyedCodec::<i64, u64, Vec<(i64, u64)>>::new();
        let groups = KeyGroups::DEFAULT;
        // Two old instances, each with half of the keys.
        let parts: Vec<StateBytes> = (0..2u64)
            .map(|w| {
                let entries = (0..1000u64)
                    .filter(|k| k % 2 == w)
                    .map(|k| (k, vec![(k as i64, k * 10)]))
                    .collect();
                codec.snapshot(w as i64 + 100, entries, groups).unwrap()
            })
            .collect();
        let mut seen = Vec::new();
        for instance in 0..3 {
            let restored = codec.restore(&restore_at(&parts, instance, 3)).unwrap();
            assert_eq!(restored.metas, vec![100, 101]);
            for (k, v) in restored.entries {
                assert_eq!(
                    groups.instance_of(groups.key_group(stable_hash(&k)), 3),
                    instance
                );
                assert_eq!(v, vec![(k as i64, k * 10)]);
                seen.push(k);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn timers_restored_at_another_parallelism_follow_their_keys() {
        use streamwork_core::Timestamp;
        use streamwork_core::timer::{TimeDomain, Timers};
        let codec = TimerCodec::<u64>::new();
        let groups = KeyGroups::DEFAULT;
        let mut timers = Timers::new();
        for key in 0..200u64 {
            timers.register_event(Timestamp::from_millis(key as i64), key);
            if key % 3 == 0 {
                timers.register_processing(Timestamp::from_millis(1000 + key as i64), key);
            }
        }
        let parts = vec![codec.snapshot(&timers, groups).unwrap()];
        let mut restored: Vec<(TimeDomain, i64, u64)> = Vec::new();
        for instance in 0..3 {
            let t = codec.restore(&restore_at(&parts, instance, 3)).unwrap();
            for (domain, time, key) in t.iter() {
                assert_eq!(
                    groups.instance_of(groups.key_group(stable_hash(key)), 3),
                    instance
                );
                restored.push((domain, time.millis(), *key));
            }
        }
        let mut all: Vec<(TimeDomain, i64, u64)> = timers
            .iter()
            .map(|(domain, time, key)| (domain, time.millis(), *key))
            .collect();
        let order = |v: &mut Vec<(TimeDomain, i64, u64)>| {
            v.sort_by_key(|&(d, t, k)| (d == TimeDomain::Processing, t, k))
        };
        order(&mut all);
        order(&mut restored);
        assert_eq!(restored, all);
    }

    #[test]
    fn a_foreign_or_corrupt_snapshot_is_an_error() {
        let codec = KeyedCodec::<i64, u64, u64>::new();
        let mut good = codec.snapshot(1, vec![(1, 1)], KeyGroups::DEFAULT).unwrap();
        let other = StateBytes::new(9, good.bytes.clone());
        let err = codec.restore(&restore_at(&[other], 0, 1)).unwrap_err();
        assert!(
            matches!(err, StateError::IncompatibleSchema { found: 9, .. }),
            "{err}"
        );
        let len = good.bytes.len();
        good.bytes.truncate(len / 2);
        let err = codec.restore(&restore_at(&[good], 0, 1)).unwrap_err();
        assert!(matches!(err, StateError::InvalidArchive { .. }), "{err}");
    }

    /// The changes copied for a delta are not every entry: a whole
    /// snapshot or a delta since another epoch asked of them is an error,
    /// never part of the state written as if it were all of it.
    #[test]
    fn copied_changes_refuse_to_stand_for_every_entry_or_another_delta() {
        let mut map: CowMap<u64, u64> = CowMap::new();
        for k in 0..1_000u64 {
            map.insert(stable_hash(&k), k, k);
        }
        let first = map.freeze().epochs().epoch();
        map.insert(stable_hash(&7u64), 7, 70);
        let copied = map
            .freeze_changes(first)
            .expect("the writes since are listed");
        let changes = MapChanges {
            frozen: MapFreeze::Changes(copied),
            value: Made(|v: &u64| *v),
        };
        assert!(matches!(
            FrozenChanges::<u64, u64>::entries(&changes),
            Err(StateError::Serialize { .. })
        ));
        let mut whole = |_: Vec<(&u64, &u64)>| -> Result<(), StateError> {
            panic!("no entry is lent for a whole snapshot")
        };
        assert!(FrozenChanges::<u64, u64>::lend_entries(&changes, &mut whole).is_err());
        let mut delta =
            |written: Vec<(&u64, &u64)>, removed: Vec<&u64>| -> Result<(), StateError> {
                assert_eq!((written, removed.len()), (vec![(&7, &70)], 0));
                Ok(())
            };
        FrozenChanges::<u64, u64>::lend_changes_since(&changes, first, &mut delta).unwrap();
        assert!(
            FrozenChanges::<u64, u64>::lend_changes_since(&changes, first + 1, &mut delta).is_err()
        );
        assert_eq!(
            FrozenChanges::<u64, u64>::changes_since(&changes, first).unwrap(),
            (vec![(7, 70)], vec![])
        );
        assert!(matches!(
            FrozenChanges::<u64, u64>::changes_since(&changes, first + 1),
            Err(StateError::Serialize { .. })
        ));
    }
}
