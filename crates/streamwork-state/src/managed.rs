//! State the framework owns: an operator struct whose every field is state
//! of a kind the framework can checkpoint (or is declared transient) is
//! snapshotted and restored without user code, at any parallelism.
//!
//! `#[derive(State)]` implements [`OperatorState`] for the struct: each
//! field that is not `#[state(transient)]` must be a [`StateField`]:
//!
//! * the keyed kinds ([`KeyedState`], [`ListState`], [`MapState`],
//!   [`ReducingState`], [`AggregatingState`]): snapshotted by key group, so
//!   that an instance restored at another parallelism takes the keys it now
//!   owns;
//! * [`InstanceState<T>`]: a value of one instance (not partitioned by key),
//!   restored into the same instance at the same parallelism, and refused
//!   (with the reason) at another.
//!
//! A snapshot holds every field by name, each with its kind, layout version
//! and the fingerprint of its types' layouts ([`StateField::LAYOUT`]), so
//! that a field added to the struct starts empty, a field the struct no
//! longer has is refused unless the struct says to forget it
//! (`#[state(forget("name"))]`), and a field whose types changed is refused
//! rather than read as values it does not hold.

use std::ops::{Deref, DerefMut};

use rkyv::util::AlignedVec;
use streamwork_core::chain::ChainPlan;
use streamwork_core::checkpoint::{
    DeferredBytes, Restore, RestoredPart, SideCheck, SideRecord, SnapshotContext, StateBytes,
};
use streamwork_core::state::{FrozenKeyed, FrozenKeyedChanges, Key, KeyedState};
use streamwork_core::{CheckpointId, InstanceContext, InstanceIdx, TaskError};

use crate::codec::PartBytes;
use crate::error::StateError;
use crate::keyed::{
    Aggregate, AggregatingState, ListState, MapState, ReducingState, group_entries,
    restore_keyed_from,
};
use crate::lent::Lent;
use crate::state_data::StateData;

/// The schema version of the container `#[derive(State)]` writes: every
/// field by name, with its kind, version and layout fingerprint.
pub const MANAGED_STATE_SCHEMA: u32 = 0x5357_0002;

/// The container earlier versions wrote: the same without the fields'
/// layout fingerprints (still read; their layouts cannot be checked).
const MANAGED_STATE_SCHEMA_NO_LAYOUT: u32 = 0x5357_0001;

/// The first bytes of a managed-state container.
const MAGIC: &[u8; 4] = b"SWST";

/// An operator's whole state, as the framework checkpoints it: implemented
/// by `#[derive(State)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` keeps state across records, but the framework does not know how to checkpoint it",
    label = "its state would be lost at the first restart",
    note = "add `#[derive(State)]` to the struct: each field a `KeyedState` (or another keyed kind), an `InstanceState<T>`, or `#[state(transient)]`",
    note = "or, if it keeps nothing that matters across records, declare it: `#[operator(stateless)]`"
)]
pub trait OperatorState {
    /// Tells every field where it runs as the instance opens (a
    /// [`StoredState`](crate::StoredState) asks the job's checkpoints for
    /// an early one when it passes its memory budget).
    fn open_state(&mut self, ctx: &InstanceContext) {
        let _ = ctx;
    }

    /// Every field's state, in one snapshot.
    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateBytes, StateError>;

    /// Restores every field from the snapshots a previous run took.
    fn restore_state(&mut self, restore: &Restore<'_>) -> Result<(), StateError>;
}

/// How a field was snapshotted, which decides how it is restored.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FieldKind {
    /// By key group: any parallelism takes its share.
    Keyed = 1,
    /// One instance's value: restored into the same instance, at the same
    /// parallelism only.
    Instance = 2,
    /// A manifest of runs in the checkpoint log ([`StoredState`](crate::StoredState)):
    /// any parallelism reads the key groups it owns.
    Stored = 3,
}

/// One field's snapshot.
#[derive(Debug)]
pub struct FieldSnapshot {
    /// How it was taken.
    pub kind: FieldKind,
    /// The version of its layout.
    pub schema: u32,
    /// Its bytes (an rkyv archive).
    pub bytes: AlignedVec,
    /// A record written beside the operator's part, off the task thread
    /// (its stream is set from the field's name).
    pub side: Option<SideRecord>,
    /// Earlier checkpoints whose records the field reads.
    pub builds_on: Vec<CheckpointId>,
}

impl FieldSnapshot {
    /// A field snapshot of `kind` and `schema` whose state is all in `bytes`.
    pub fn new(kind: FieldKind, schema: u32, bytes: AlignedVec) -> Self {
        FieldSnapshot {
            kind,
            schema,
            bytes,
            side: None,
            builds_on: Vec::new(),
        }
    }
}

/// The layout of a keyed field of `K` and `V` (the keyed kinds are kept as
/// a `KeyedState` of their values: a `ListState<K, V>` as of `Vec<V>`).
const fn keyed_layout<K: crate::StateLayout, V: crate::StateLayout>() -> u64 {
    crate::layout_mix(
        crate::layout_mix(crate::layout_of("KeyedState"), K::LAYOUT),
        V::LAYOUT,
    )
}

/// The side stream of field `name`: the same for the same name in every
/// version of the program.
pub(crate) fn field_stream(name: &str) -> u32 {
    crate::operator_id(name).0 as u32
}

/// One field of state, as the framework checkpoints it.
#[diagnostic::on_unimplemented(
    message = "a field of type `{Self}` is not state the framework can checkpoint",
    label = "the framework would lose this field at a restart",
    note = "use a keyed kind (`KeyedState<K, V>`, `StoredState<K, V>` for state larger than memory, `ListState`, `MapState`, `ReducingState`, `AggregatingState`) or `InstanceState<T>`, with archivable `K`, `V`, `T`",
    note = "or mark the field `#[state(transient)]` if losing it at a restart is right (a cache, a buffer rebuilt on open)"
)]
pub trait StateField {
    /// The fingerprint of what the field archives (its kind's
    /// representation and its types' [`StateLayout`](crate::StateLayout)s),
    /// kept with its snapshot and compared on restore.
    const LAYOUT: u64;

    /// Adds this field's snapshot to `fields` as field `name`, with its
    /// layout fingerprint ([`FieldsWriter::snapshot`]; what
    /// `#[derive(State)]` calls).
    fn snapshot_into(
        &mut self,
        name: &str,
        fields: &mut FieldsWriter,
        ctx: &SnapshotContext,
    ) -> Result<(), StateError>
    where
        Self: Sized,
    {
        fields.snapshot(name, self, ctx)
    }

    /// Restores this field from field `name` of `fields`, its layout
    /// checked first ([`FieldsReader::restore`]; what `#[derive(State)]`
    /// calls).
    fn restore_from(&mut self, name: &str, fields: &FieldsReader<'_>) -> Result<(), StateError>
    where
        Self: Sized,
    {
        fields.restore(name, self)
    }

    /// Tells the field where it runs, as its instance opens.
    fn open_field(&mut self, ctx: &InstanceContext) {
        let _ = ctx;
    }

    /// The field's snapshot.
    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError>;

    /// Restores the field from every old instance's snapshot of it.
    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError>;
}

/// Every old instance's snapshot of one field, offered to one instance.
pub struct FieldRestore<'a> {
    /// The operator's restore, for its component, instance and key groups.
    pub restore: &'a Restore<'a>,
    /// The field's name.
    pub name: &'a str,
    /// Each old instance's part: its index, kind, schema and bytes.
    pub parts: Vec<(InstanceIdx, FieldKind, u32, &'a [u8])>,
    /// Each old instance's layout fingerprint of the field (none in a
    /// container written before they were kept).
    pub layouts: Vec<(InstanceIdx, Option<u64>)>,
}

impl FieldRestore<'_> {
    /// The field's parts as a [`Restore`] of their own (for the keyed
    /// restore, which reads `Restore::parts`).
    fn as_restore(&self) -> Restore<'_> {
        Restore {
            component: self.restore.component,
            checkpoint: self.restore.checkpoint,
            is_final: self.restore.is_final,
            ended: self.restore.ended.clone(),
            instance: self.restore.instance,
            parallelism: self.restore.parallelism,
            key_groups: self.restore.key_groups,
            parts: self
                .parts
                .iter()
                .map(|&(part, _, schema, bytes)| RestoredPart {
                    part,
                    schema,
                    bytes,
                })
                .collect(),
            records: self.restore.records,
        }
    }

    /// The stream of the field's side records.
    pub(crate) fn stream(&self) -> u32 {
        field_stream(self.name)
    }

    /// An error about this field.
    pub(crate) fn refused(&self, reason: String) -> StateError {
        StateError::FieldRefused {
            component: self.restore.component.to_string(),
            field: self.name.to_string(),
            reason,
        }
    }

    /// Checks every part was written by a field of layout `layout`
    /// ([`StateField::LAYOUT`]; a part written before layouts were kept is
    /// taken as it is).
    fn expect_layout(&self, layout: u64, type_name: &str) -> Result<(), StateError> {
        let changed = self.layouts.iter().find_map(|&(part, found)| {
            found
                .filter(|&found| found != layout)
                .map(|found| (part, found))
        });
        match changed {
            None => Ok(()),
            Some((part, found)) => Err(self.refused(format!(
                "instance {part} wrote it with another layout of its types (fingerprint {found:#018x}, this build's `{type_name}` has {layout:#018x}): a field, variant or type in its state changed since, and its bytes would be read as values they do not hold. Resume with the build that wrote the checkpoint, or give the field another name and let the struct drop the old one with `#[state(forget(\"{}\"))]` (the field then starts empty), or start over without restoring",
                self.name,
            ))),
        }
    }

    /// Checks every part was taken as `kind` with layout `schema`.
    pub(crate) fn expect(&self, kind: FieldKind, schema: u32) -> Result<(), StateError> {
        for &(part, found_kind, found_schema, _) in &self.parts {
            if found_kind != kind {
                return Err(self.refused(format!(
                    "instance {part} snapshotted it as {found_kind:?} state, the field is now {kind:?} state: keep its type, or give the new one another name"
                )));
            }
            if found_schema != schema {
                return Err(self.refused(format!(
                    "instance {part} wrote layout version {found_schema}, this build reads version {schema}"
                )));
            }
        }
        Ok(())
    }
}

/// The layout version of keyed fields archived on the task thread (a
/// [`KeyedSnapshot`](crate::KeyedSnapshot) in the part): written by earlier
/// versions, still read.
const KEYED_FIELD_SCHEMA: u32 = 1;
/// The layout version of keyed fields archived off the task thread: the
/// same [`KeyedSnapshot`](crate::KeyedSnapshot), in the field's side record.
const KEYED_BESIDE_FIELD_SCHEMA: u32 = 2;

/// The layout version of keyed fields snapshotted as a delta: the field's
/// bytes are the chain of checkpoints a restore reads (an archived
/// `Vec<u64>`, `0` for the checkpoint it is in), whose first record is a
/// whole [`KeyedSnapshot`](crate::KeyedSnapshot) and the others
/// [`KeyedDelta`](crate::KeyedDelta)s, each the field's side record in its
/// checkpoint.
const KEYED_CHAIN_FIELD_SCHEMA: u32 = 3;

/// [`KEYED_BESIDE_FIELD_SCHEMA`] with the side record written as frames
/// (see `crate::frames`), each a `KeyedSnapshot` of part of the entries:
/// keyed state of any size (one rkyv archive spans at most 2 GiB).
const KEYED_FRAMED_FIELD_SCHEMA: u32 = 4;

/// [`KEYED_CHAIN_FIELD_SCHEMA`] with every record of the chain written as
/// frames: a whole record's of `KeyedSnapshot`s, a delta's of
/// `KeyedDelta`s.
const KEYED_FRAMED_CHAIN_FIELD_SCHEMA: u32 = 5;

/// A keyed field's snapshot, archived by the coordinator beside the part:
/// every entry (its tables frozen, a pause of 128 pointer copies whatever
/// the number of keys), or, once a snapshot of this run is in a complete
/// checkpoint, what changed since (see `streamwork_core::chain`): the
/// entries written since, copied at the freeze from the tables where they
/// are few (up to a bound on the pause) and found in the others, shared;
/// every table shared when the state cannot tell them
/// (`KeyedState::freeze_changes`).
fn snapshot_keyed_field<K, V>(
    state: &mut KeyedState<K, V>,
    ctx: &SnapshotContext,
) -> Result<FieldSnapshot, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    let entries = state.len();
    let (plan, forget) = state.snapshot_chain().plan(ctx.completed, entries);
    if let Some(epoch) = forget {
        state.forget_removed_through(epoch);
    }
    let plan = plan.or_whole_if(|since| state.whole_since(since));
    let written = std::sync::Arc::new(std::sync::OnceLock::new());
    let (snapshot, epoch) = match &plan {
        ChainPlan::Whole => {
            let frozen = state.freeze();
            let epoch = frozen.epochs().epoch();
            (
                FieldSnapshot {
                    kind: FieldKind::Keyed,
                    schema: KEYED_FRAMED_FIELD_SCHEMA,
                    bytes: AlignedVec::new(),
                    side: Some(SideRecord {
                        stream: 0,
                        schema: KEYED_FRAMED_FIELD_SCHEMA,
                        check: SideCheck::OnLoad,
                        payload: std::sync::Arc::new(FrozenFieldEntries {
                            frozen,
                            key_groups: ctx.key_groups,
                        }),
                        written: written.clone(),
                    }),
                    builds_on: Vec::new(),
                },
                epoch,
            )
        }
        ChainPlan::Delta { since, before, .. } => {
            let changed = match state.freeze_changes(*since) {
                Some(copied) => Changed::Copied(copied),
                None => Changed::Frozen {
                    frozen: state.freeze(),
                    since: *since,
                },
            };
            let epoch = changed.epochs().epoch();
            (
                FieldSnapshot {
                    kind: FieldKind::Keyed,
                    schema: KEYED_FRAMED_CHAIN_FIELD_SCHEMA,
                    bytes: crate::archive(&crate::chain::chain_ids(before))?,
                    side: Some(SideRecord {
                        stream: 0,
                        schema: KEYED_FRAMED_CHAIN_FIELD_SCHEMA,
                        check: SideCheck::OnLoad,
                        payload: std::sync::Arc::new(FrozenFieldDelta {
                            changed,
                            key_groups: ctx.key_groups,
                        }),
                        written: written.clone(),
                    }),
                    builds_on: before.clone(),
                },
                epoch,
            )
        }
    };
    state
        .snapshot_chain()
        .taken(ctx.checkpoint, epoch, entries, plan, written);
    Ok(snapshot)
}

/// What changed in a keyed field since an earlier freeze, archived when
/// the coordinator writes the checkpoint.
struct FrozenFieldDelta<K, V> {
    changed: Changed<K, V>,
    key_groups: streamwork_core::KeyGroups,
}

/// The entries a delta writes: copied at the freeze or found in shared
/// tables ([`FrozenKeyedChanges`]), or all found in the frozen tables by
/// the epoch they were written in.
enum Changed<K, V> {
    Copied(FrozenKeyedChanges<K, V>),
    Frozen {
        frozen: FrozenKeyed<K, V>,
        since: u32,
    },
}

impl<K, V> Changed<K, V> {
    fn epochs(&self) -> &streamwork_core::chain::FrozenEpochs<K> {
        match self {
            Changed::Copied(copied) => copied.epochs(),
            Changed::Frozen { frozen, .. } => frozen.epochs(),
        }
    }
}

impl<K, V> std::fmt::Debug for FrozenFieldDelta<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (since, copied) = match &self.changed {
            Changed::Copied(copied) => (copied.since(), true),
            Changed::Frozen { since, .. } => (*since, false),
        };
        f.debug_struct("FrozenFieldDelta")
            .field("since", &since)
            .field("copied", &copied)
            .finish()
    }
}

impl<K, V> DeferredBytes for FrozenFieldDelta<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        // Archived where the freeze left them: nothing copied again.
        let groups = match &self.changed {
            Changed::Copied(copied) => crate::chain::group_delta(
                copied.changed().map(|(k, v)| (Lent(k), Lent(v))),
                copied.epochs().removed_since(copied.since()).map(Lent),
                self.key_groups,
            ),
            Changed::Frozen { frozen, since } => crate::chain::group_delta(
                frozen
                    .changed_since(*since)
                    .map(|(k, v)| (Lent(k), Lent(v))),
                frozen.epochs().removed_since(*since).map(Lent),
                self.key_groups,
            ),
        };
        crate::chain::write_delta_frames(groups, self.key_groups.count(), out)
            .map_err(written_keyed)
    }
}

/// A keyed field's tables as a checkpoint froze them, archived when the
/// coordinator writes the checkpoint.
struct FrozenFieldEntries<K, V> {
    frozen: FrozenKeyed<K, V>,
    key_groups: streamwork_core::KeyGroups,
}

impl<K, V> std::fmt::Debug for FrozenFieldEntries<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrozenFieldEntries")
            .field("keys", &self.frozen.len())
            .finish()
    }
}

impl<K, V> DeferredBytes for FrozenFieldEntries<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        // Archived where the frozen tables hold them: nothing copied.
        let groups = group_entries(
            self.frozen.iter().map(|(k, v)| (Lent(k), Lent(v))),
            self.key_groups,
        );
        crate::keyed::write_snapshot_frames(groups, self.key_groups.count(), out)
            .map_err(written_keyed)
    }
}

/// Why a keyed field's archive beside its snapshot was not written.
fn written_keyed(e: StateError) -> TaskError {
    TaskError::Snapshot(format!("writing keyed state: {e}"))
}

/// Restores a keyed field from any layout: the entries in the parts, beside
/// them, or a chain of a whole record and deltas (each old instance's part
/// in its own layout).
fn restore_keyed_field<K, V>(field: &FieldRestore<'_>) -> Result<KeyedState<K, V>, StateError>
where
    K: Key + StateData,
    V: StateData + Clone + Send,
{
    let inline = field
        .parts
        .first()
        .is_some_and(|&(_, _, schema, _)| schema == KEYED_FIELD_SCHEMA);
    if inline {
        field.expect(FieldKind::Keyed, KEYED_FIELD_SCHEMA)?;
        return restore_keyed_from(&field.as_restore());
    }
    let restore = field.restore;
    let record = |checkpoint: CheckpointId, part: InstanceIdx| {
        restore
            .side_record(checkpoint, field.stream(), part)
            .map(PartBytes::aligned)
            .ok_or_else(|| {
                field.refused(format!(
                    "the entries instance {part} archived beside its snapshot of checkpoint {checkpoint} are not in the checkpoint log: restore from an earlier checkpoint"
                ))
            })
    };
    // Each record, and whether it is written as frames.
    let mut wholes = Vec::with_capacity(field.parts.len());
    let mut deltas = Vec::new();
    for &(part, kind, schema, bytes) in &field.parts {
        let framed = matches!(
            schema,
            KEYED_FRAMED_FIELD_SCHEMA | KEYED_FRAMED_CHAIN_FIELD_SCHEMA
        );
        if kind != FieldKind::Keyed
            || !matches!(
                schema,
                KEYED_BESIDE_FIELD_SCHEMA
                    | KEYED_CHAIN_FIELD_SCHEMA
                    | KEYED_FRAMED_FIELD_SCHEMA
                    | KEYED_FRAMED_CHAIN_FIELD_SCHEMA
            )
        {
            return Err(field.refused(format!(
                "instance {part} snapshotted it as {kind:?} state of layout {schema}; this build reads keyed state of layouts {KEYED_FIELD_SCHEMA} to {KEYED_FRAMED_CHAIN_FIELD_SCHEMA}"
            )));
        }
        if matches!(
            schema,
            KEYED_BESIDE_FIELD_SCHEMA | KEYED_FRAMED_FIELD_SCHEMA
        ) {
            wholes.push((part, record(restore.checkpoint, part)?, framed));
            continue;
        }
        let mut manifest = AlignedVec::<16>::with_capacity(bytes.len());
        manifest.extend_from_slice(bytes);
        let chain = rkyv::from_bytes::<Vec<u64>, rkyv::rancor::Error>(&manifest)
            .map_err(|e| field.refused(format!("instance {part}'s chain does not read: {e}")))?;
        let mut records = chain.into_iter().map(|id| {
            let id = match id {
                crate::chain::THIS_CHECKPOINT => restore.checkpoint,
                id => CheckpointId::new(id),
            };
            record(id, part)
        });
        let Some(whole) = records.next() else {
            return Err(field.refused(format!("instance {part}'s chain names no record")));
        };
        wholes.push((part, whole?, framed));
        for delta in records {
            deltas.push((part, delta?, framed));
        }
    }
    let mut own = field.as_restore();
    own.parts = Vec::with_capacity(wholes.len());
    for (part, bytes, framed) in &wholes {
        let frames = bytes
            .archives(*framed)
            .map_err(|e| field.refused(format!("instance {part}'s record does not read: {e}")))?;
        for archive in frames {
            own.parts.push(RestoredPart {
                part: *part,
                schema: KEYED_BESIDE_FIELD_SCHEMA,
                bytes: archive,
            });
        }
    }
    let mut state: KeyedState<K, V> = restore_keyed_from(&own)?;
    // The changes since, each frame's decoded on the threads of a large
    // restore and applied in order.
    let mut frames = Vec::new();
    for (part, delta, framed) in &deltas {
        let archives = delta
            .archives(*framed)
            .map_err(|e| field.refused(format!("instance {part}'s changes do not read: {e}")))?;
        frames.extend(archives.into_iter().map(|archive| (*part, archive)));
    }
    let bytes = frames.iter().map(|(_, archive)| archive.len()).sum();
    crate::ordered::decode_in_order(
        frames.len(),
        crate::ordered::decoding_threads(bytes),
        |at| {
            let part = frames[at].0;
            crate::chain::owned_changes::<K, V>(
                frames[at].1,
                restore.key_groups,
                crate::operator_id(restore.component),
                |group| {
                    restore.key_groups.instance_of(group, restore.parallelism) == restore.instance.0
                },
                |e| field.refused(format!("instance {part}'s changes do not read: {e}")),
            )
        },
        |changes| {
            for (removed, entries) in changes {
                for key in removed {
                    state.remove_held(&key);
                }
                state.extend(entries);
            }
            Ok(())
        },
        |at| {
            field.refused(format!(
                "instance {}'s changes do not read: deserializing them panicked",
                frames[at].0
            ))
        },
    )?;
    Ok(state)
}
/// The layout version of instance fields (the value's archive).
const INSTANCE_FIELD_SCHEMA: u32 = 1;

impl<K, V> StateField for KeyedState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    const LAYOUT: u64 = keyed_layout::<K, V>();

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        snapshot_keyed_field(self, ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        *self = restore_keyed_field(field)?;
        Ok(())
    }
}

impl<K, V> StateField for ListState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    const LAYOUT: u64 = keyed_layout::<K, Vec<V>>();

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        snapshot_keyed_field(self.keyed_mut(), ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        let mut keyed = KeyedState::new();
        keyed.restore_field(field)?;
        *self = ListState::from_keyed(keyed);
        Ok(())
    }
}

impl<K, MK, MV> StateField for MapState<K, MK, MV>
where
    K: Key + StateData,
    MK: std::hash::Hash + Eq,
    std::collections::HashMap<MK, MV>: StateData + Clone + Send + Sync + 'static,
{
    const LAYOUT: u64 = keyed_layout::<K, std::collections::HashMap<MK, MV>>();

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        snapshot_keyed_field(self.keyed_mut(), ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        let mut keyed = KeyedState::new();
        keyed.restore_field(field)?;
        *self = MapState::from_keyed(keyed);
        Ok(())
    }
}

impl<K, V, F> StateField for ReducingState<K, V, F>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    F: Fn(&mut V, V),
{
    const LAYOUT: u64 = keyed_layout::<K, V>();

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        snapshot_keyed_field(self.keyed_mut(), ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        self.keyed_mut().restore_field(field)
    }
}

impl<K, A> StateField for AggregatingState<K, A>
where
    K: Key + StateData,
    A: Aggregate,
    A::Acc: StateData + Clone + Send + Sync + 'static,
{
    const LAYOUT: u64 = keyed_layout::<K, A::Acc>();

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        snapshot_keyed_field(self.keyed_mut(), ctx)
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        self.keyed_mut().restore_field(field)
    }
}

/// A value that belongs to one instance rather than to a key (a count of
/// everything the instance saw, say): checkpointed with the instance and
/// restored into the same instance. It cannot be split or merged, so a
/// restore at another parallelism is refused, naming the field: keep such
/// state in a keyed kind to rescale it.
///
/// ```
/// use streamwork::state::InstanceState;
/// let mut seen: InstanceState<u64> = InstanceState::default();
/// *seen += 1;
/// assert_eq!(*seen, 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceState<T>(pub T);

impl<T> Deref for InstanceState<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for InstanceState<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: StateData> StateField for InstanceState<T> {
    const LAYOUT: u64 = crate::layout_mix(crate::layout_of("InstanceState"), T::LAYOUT);

    fn snapshot_field(&mut self, _: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        Ok(FieldSnapshot::new(
            FieldKind::Instance,
            INSTANCE_FIELD_SCHEMA,
            crate::archive(&self.0)?,
        ))
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        field.expect(FieldKind::Instance, INSTANCE_FIELD_SCHEMA)?;
        // At the parallelism it was written at, each instance finds its
        // own part and no part of an instance beyond it (a partition of a
        // stage sees its own part only: its checkpoints are its own).
        let parallelism = field.restore.parallelism;
        let own = field
            .parts
            .iter()
            .find(|(part, ..)| *part == field.restore.instance);
        let written_by = field
            .parts
            .iter()
            .map(|(part, ..)| part.0 + 1)
            .max()
            .unwrap_or(0)
            .max(field.parts.len() as u32);
        let Some(&(part, _, _, bytes)) = own.filter(|_| written_by <= parallelism) else {
            return Err(field.refused(format!(
                "it is the state of one instance (InstanceState), written by {written_by} instances, and cannot be split or merged among {parallelism}: restore at parallelism {written_by}, or keep it in a KeyedState to rescale it"
            )));
        };
        let archived = rkyv::access::<T::Archived, rkyv::rancor::Error>(bytes).map_err(|e| {
            StateError::InvalidArchive {
                checkpoint: field.restore.checkpoint,
                operator: crate::operator_id(field.restore.component),
                part,
                type_name: std::any::type_name::<T>(),
                reason: e.to_string(),
            }
        })?;
        self.0 = rkyv::deserialize::<T, rkyv::rancor::Error>(archived).map_err(|e| {
            StateError::InvalidArchive {
                checkpoint: field.restore.checkpoint,
                operator: crate::operator_id(field.restore.component),
                part,
                type_name: std::any::type_name::<T>(),
                reason: e.to_string(),
            }
        })?;
        Ok(())
    }
}

/// Writes the container of an operator's fields (for `#[derive(State)]`).
#[derive(Default)]
pub struct FieldsWriter {
    bytes: Vec<u8>,
    fields: u32,
    side: Vec<SideRecord>,
    builds_on: Vec<CheckpointId>,
}

impl FieldsWriter {
    /// An empty container.
    pub fn new() -> Self {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        FieldsWriter {
            bytes,
            fields: 0,
            side: Vec::new(),
            builds_on: Vec::new(),
        }
    }

    /// Adds the snapshot of `field`, named `name`, with its layout
    /// fingerprint ([`StateField::LAYOUT`]), which
    /// [`FieldsReader::restore`] checks.
    pub fn snapshot<F: StateField>(
        &mut self,
        name: &str,
        field: &mut F,
        ctx: &SnapshotContext,
    ) -> Result<(), StateError> {
        let snapshot = field.snapshot_field(ctx)?;
        self.add(name, crate::layout::kept_layout(F::LAYOUT), snapshot);
        Ok(())
    }

    /// Adds field `name`'s snapshot, taken by a field of layout `layout`.
    fn add(&mut self, name: &str, layout: u64, snapshot: FieldSnapshot) {
        if let Some(mut side) = snapshot.side {
            side.stream = field_stream(name);
            self.side.push(side);
        }
        self.builds_on.extend(snapshot.builds_on);
        let name = name.as_bytes();
        self.bytes
            .extend_from_slice(&(name.len() as u16).to_le_bytes());
        self.bytes.extend_from_slice(name);
        self.bytes.push(snapshot.kind as u8);
        self.bytes.extend_from_slice(&snapshot.schema.to_le_bytes());
        self.bytes.extend_from_slice(&layout.to_le_bytes());
        self.bytes
            .extend_from_slice(&(snapshot.bytes.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(&snapshot.bytes);
        self.fields += 1;
    }

    /// The operator's snapshot.
    pub fn finish(mut self) -> StateBytes {
        self.bytes[4..8].copy_from_slice(&self.fields.to_le_bytes());
        self.builds_on.sort_unstable();
        self.builds_on.dedup();
        StateBytes {
            schema: MANAGED_STATE_SCHEMA,
            bytes: self.bytes,
            side: self.side,
            builds_on: self.builds_on,
        }
    }
}

/// One field of one old instance's container.
struct ReadField {
    part: InstanceIdx,
    name: String,
    kind: FieldKind,
    schema: u32,
    /// Its layout fingerprint, if the container kept it.
    layout: Option<u64>,
    /// Copied, so that the archive is aligned wherever the container was.
    bytes: AlignedVec,
}

/// Reads every old instance's container of an operator's fields (for
/// `#[derive(State)]`).
pub struct FieldsReader<'a> {
    restore: &'a Restore<'a>,
    fields: Vec<ReadField>,
}

impl<'a> FieldsReader<'a> {
    /// Parses every part of `restore`: each must be a container written by
    /// [`FieldsWriter`].
    pub fn read(restore: &'a Restore<'a>) -> Result<Self, StateError> {
        let mut fields = Vec::new();
        for part in &restore.parts {
            let damaged = |what: &str| StateError::FieldRefused {
                component: restore.component.to_string(),
                field: String::new(),
                reason: format!(
                    "the snapshot of instance {} in checkpoint {} {what}",
                    part.part, restore.checkpoint
                ),
            };
            let with_layouts = part.schema == MANAGED_STATE_SCHEMA;
            if !with_layouts && part.schema != MANAGED_STATE_SCHEMA_NO_LAYOUT {
                return Err(damaged(&format!(
                    "has layout {:#x}, not the one #[derive(State)] writes ({MANAGED_STATE_SCHEMA:#x}): was the operator's state written by hand before?",
                    part.schema
                )));
            }
            let mut cursor = Cursor(part.bytes);
            if cursor.take(4) != Some(&MAGIC[..]) {
                return Err(damaged("is not a state container"));
            }
            let count = cursor.u32().ok_or_else(|| damaged("is cut short"))?;
            for _ in 0..count {
                let field = (|| {
                    let name_len = cursor.u16()? as usize;
                    let name = std::str::from_utf8(cursor.take(name_len)?)
                        .ok()?
                        .to_string();
                    let kind = match cursor.u8()? {
                        1 => FieldKind::Keyed,
                        2 => FieldKind::Instance,
                        3 => FieldKind::Stored,
                        _ => return None,
                    };
                    let schema = cursor.u32()?;
                    let layout = if with_layouts {
                        Some(cursor.u64()?)
                    } else {
                        None
                    };
                    let len = usize::try_from(cursor.u64()?).ok()?;
                    let mut bytes = AlignedVec::with_capacity(len);
                    bytes.extend_from_slice(cursor.take(len)?);
                    Some(ReadField {
                        part: part.part,
                        name,
                        kind,
                        schema,
                        layout,
                        bytes,
                    })
                })()
                .ok_or_else(|| damaged("is cut short or damaged"))?;
                fields.push(field);
            }
        }
        Ok(FieldsReader { restore, fields })
    }

    /// Restores `field` from the parts of field `name`, if the snapshot
    /// has it (a field added since starts empty); a part written by a
    /// field of another layout ([`StateField::LAYOUT`]) is refused before
    /// anything is read.
    pub fn restore<F: StateField>(&self, name: &str, field: &mut F) -> Result<(), StateError> {
        let Some(parts) = self.field(name) else {
            return Ok(());
        };
        parts.expect_layout(
            crate::layout::kept_layout(F::LAYOUT),
            std::any::type_name::<F>(),
        )?;
        field.restore_field(&parts)
    }

    /// Whether the snapshot has field `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.fields.iter().any(|f| f.name == name)
    }

    /// Every old instance's part of field `name` (none if the snapshot does
    /// not have it), as written, layouts unchecked: only
    /// [`restore`](Self::restore), which checks them first, reads them.
    fn field<'r>(&'r self, name: &'r str) -> Option<FieldRestore<'r>> {
        let (parts, layouts): (Vec<_>, Vec<_>) = self
            .fields
            .iter()
            .filter(|f| f.name == name)
            .map(|f| {
                (
                    (f.part, f.kind, f.schema, f.bytes.as_slice()),
                    (f.part, f.layout),
                )
            })
            .unzip();
        (!parts.is_empty()).then_some(FieldRestore {
            restore: self.restore,
            name,
            parts,
            layouts,
        })
    }

    /// Refuses fields of the snapshot the struct no longer has, unless it
    /// says to forget them.
    pub fn only(&self, known: &[&str], forget: &[&str]) -> Result<(), StateError> {
        match self
            .fields
            .iter()
            .find(|f| !known.contains(&f.name.as_str()) && !forget.contains(&f.name.as_str()))
        {
            None => Ok(()),
            Some(field) => Err(StateError::FieldRefused {
                component: self.restore.component.to_string(),
                field: field.name.clone(),
                reason: "the checkpoint holds this field, which the operator no longer has: its state would be lost; give the field back, or let the struct drop it with `#[state(forget(\"NAME\"))]`".to_string(),
            }),
        }
    }

    /// The checkpoint read.
    pub fn checkpoint(&self) -> CheckpointId {
        self.restore.checkpoint
    }
}

/// Reads little-endian fields off a byte slice.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
