//! A loaded checkpoint and its snapshots, read in place from the mapped
//! segments.

use std::sync::Arc;

use memmap2::Mmap;
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Portable, Serialize};
use streamwork_core::checkpoint::SharedBytes;
use streamwork_core::{CheckpointId, InstanceIdx, OperatorId};

use crate::error::StateError;

/// Where one snapshot's payload lies.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) checkpoint: u64,
    pub(crate) operator: u64,
    pub(crate) part: u32,
    pub(crate) schema: u32,
    pub(crate) segment: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) crc: u32,
    /// Checked by its reader, a part at a time, not whole on load.
    pub(crate) checked_by_reader: bool,
}

/// A complete checkpoint, its segments mapped: snapshots are read in place,
/// without copying.
pub struct Checkpoint {
    id: u64,
    maps: Vec<Arc<Mmap>>,
    snapshots: Vec<Entry>,
    /// The records of the checkpoints it builds on.
    earlier: Vec<Entry>,
    skipped: Vec<String>,
}

impl Checkpoint {
    pub(crate) fn new(
        id: u64,
        maps: Vec<Arc<Mmap>>,
        snapshots: Vec<Entry>,
        earlier: Vec<Entry>,
        skipped: Vec<String>,
    ) -> Self {
        Checkpoint {
            id,
            maps,
            snapshots,
            earlier,
            skipped,
        }
    }

    /// The record of `operator`'s `part` in `checkpoint` (this checkpoint or
    /// one it builds on), shared in place: it stays mapped for as long as
    /// the value lives, after the `Checkpoint` is dropped.
    pub fn shared(
        &self,
        checkpoint: CheckpointId,
        operator: OperatorId,
        part: InstanceIdx,
    ) -> Option<SharedBytes> {
        let entries = if checkpoint.get() == self.id {
            &self.snapshots
        } else {
            &self.earlier
        };
        let e = entries.iter().find(|e| {
            e.checkpoint == checkpoint.get() && e.operator == operator.0 && e.part == part.0
        })?;
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.maps[e.segment].clone();
        SharedBytes::new(owner, e.offset..e.offset + e.len)
    }

    /// The checkpoint's id.
    pub fn id(&self) -> CheckpointId {
        CheckpointId::new(self.id)
    }

    /// Every snapshot of the checkpoint, by operator id then part.
    pub fn snapshots(&self) -> impl Iterator<Item = Snapshot<'_>> {
        self.snapshots.iter().map(|e| self.view(e))
    }

    /// The snapshot of `operator`'s `part`, if the checkpoint has one.
    pub fn snapshot(&self, operator: OperatorId, part: InstanceIdx) -> Option<Snapshot<'_>> {
        self.snapshots
            .iter()
            .find(|e| e.operator == operator.0 && e.part == part.0)
            .map(|e| self.view(e))
    }

    /// What was found in the log and not used (torn tails, damaged records,
    /// newer checkpoints that were incomplete), one line each.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    fn view<'a>(&'a self, e: &Entry) -> Snapshot<'a> {
        Snapshot {
            checkpoint: self.id,
            operator: OperatorId(e.operator),
            part: InstanceIdx(e.part),
            schema: e.schema,
            bytes: &self.maps[e.segment][e.offset..e.offset + e.len],
        }
    }
}

/// One snapshot: the bytes one instance (or key-group range) of one operator
/// wrote, checksum-verified, in place in the mapped log.
#[derive(Copy, Clone, Debug)]
pub struct Snapshot<'a> {
    checkpoint: u64,
    operator: OperatorId,
    part: InstanceIdx,
    schema: u32,
    bytes: &'a [u8],
}

impl<'a> Snapshot<'a> {
    /// The part `part` of what an operator's `restore` is offered, as a
    /// snapshot: to read in place ([`access`](Self::access)), whole
    /// ([`deserialize`](Self::deserialize)), or through the migrations of
    /// a [`VersionedState`](crate::VersionedState)
    /// ([`restore`](Self::restore)), from any operator's `restore`.
    ///
    /// ```
    /// use streamwork::core::{Restore, TaskError};
    /// use streamwork::state::{Snapshot, VersionedState};
    /// # #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    /// # struct Counts(Vec<(u64, u64)>);
    /// # impl VersionedState for Counts { const SCHEMA: u32 = 2; }
    /// fn restore(restore: &Restore<'_>) -> Result<Option<Counts>, TaskError> {
    ///     let Some(own) = restore.own() else { return Ok(None) };
    ///     let counts = Snapshot::of_part(restore, own)
    ///         .restore::<Counts>()
    ///         .map_err(|e| TaskError::Restore(e.to_string()))?;
    ///     Ok(Some(counts))
    /// }
    /// ```
    pub fn of_part(
        restore: &streamwork_core::Restore<'a>,
        part: streamwork_core::checkpoint::RestoredPart<'a>,
    ) -> Self {
        Snapshot {
            checkpoint: restore.checkpoint.get(),
            operator: crate::operator_id(restore.component),
            part: part.part,
            schema: part.schema,
            bytes: part.bytes,
        }
    }

    /// The operator's id.
    pub fn operator(&self) -> OperatorId {
        self.operator
    }

    /// The instance index or first key group.
    pub fn part(&self) -> InstanceIdx {
        self.part
    }

    /// The schema version the operator wrote it with.
    pub fn schema(&self) -> u32 {
        self.schema
    }

    /// The payload, in place.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The payload as an archived `T`, validated by rkyv and read in place.
    pub fn access<T>(&self) -> Result<&'a T::Archived, StateError>
    where
        T: Archive,
        T::Archived: Portable + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>,
    {
        rkyv::access::<T::Archived, rancor::Error>(self.bytes).map_err(|e| self.invalid::<T>(e))
    }

    /// The payload validated and deserialized into a `T`.
    pub fn deserialize<T>(&self) -> Result<T, StateError>
    where
        T: Archive,
        T::Archived: Portable
            + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>
            + Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        let archived = self.access::<T>()?;
        rkyv::deserialize::<T, rancor::Error>(archived).map_err(|e| self.invalid::<T>(e))
    }

    fn invalid<T>(&self, e: rancor::Error) -> StateError {
        StateError::InvalidArchive {
            checkpoint: CheckpointId::new(self.checkpoint),
            operator: self.operator,
            part: self.part,
            type_name: std::any::type_name::<T>(),
            reason: e.to_string(),
        }
    }
}

/// Archives `value` with rkyv, ready for
/// [`CheckpointLog::append_snapshot`](crate::CheckpointLog::append_snapshot).
pub fn archive<T>(value: &T) -> Result<AlignedVec, StateError>
where
    T: for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
{
    guard_archive::<T, _>(|| {
        rkyv::to_bytes::<rancor::Error>(value).map_err(|e| StateError::Serialize {
            type_name: std::any::type_name::<T>(),
            reason: e.to_string(),
        })
    })
}

/// Runs `archive`, an rkyv serialization of a `T`, with its panics made an
/// error: rkyv's relative pointers are 32-bit, and it panics (rather than
/// failing) when one archive spans more than 2 GiB. A checkpoint must fail
/// with a cause, not take its thread down.
pub(crate) fn guard_archive<T, R>(
    archive: impl FnOnce() -> Result<R, StateError>,
) -> Result<R, StateError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(archive)).unwrap_or_else(|panic| {
        let said = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(StateError::Serialize {
            type_name: std::any::type_name::<T>(),
            reason: format!(
                "rkyv gave up ({said}): one archive holds at most 2 GiB (its offsets are 32-bit); keep a value this large in keyed state, split by key, or in `StoredState`"
            ),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkyv::Place;
    use rkyv::rancor::Fallible;

    /// Archives as rkyv does past 2 GiB: by panicking as it resolves.
    struct Overflowing;

    impl rkyv::Archive for Overflowing {
        type Archived = rkyv::Archived<u64>;
        type Resolver = ();

        fn resolve(&self, (): (), _: Place<Self::Archived>) {
            panic!("out of range integral type conversion attempted");
        }
    }

    impl<S: Fallible + ?Sized> Serialize<S> for Overflowing {
        fn serialize(&self, _: &mut S) -> Result<(), S::Error> {
            Ok(())
        }
    }

    #[test]
    fn an_archive_rkyv_gives_up_on_is_an_error_that_names_the_limit() {
        let in_memory = archive(&Overflowing).expect_err("rkyv panics");
        let mut out = Vec::new();
        let streamed = crate::lent::archive_into(&Overflowing, &mut out).expect_err("rkyv panics");
        for error in [in_memory, streamed] {
            let text = error.to_string();
            assert!(
                matches!(error, StateError::Serialize { .. })
                    && text.contains("out of range")
                    && text.contains("2 GiB"),
                "{text}"
            );
        }
    }
}
