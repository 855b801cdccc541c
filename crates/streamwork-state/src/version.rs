//! Backward-compatible loading (chapter 10): state written by an older
//! version of an operator loads into the newer one through a migration the
//! state type declares; a version it cannot read is refused by name.

use rkyv::api::high::{HighDeserializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::{Archive, Deserialize, Portable, rancor};
use streamwork_core::OperatorId;

use crate::error::StateError;
use crate::snapshot::Snapshot;

/// State whose archived layout has a version, bumped whenever the layout
/// changes, with a migration from the versions before it.
///
/// ```
/// use rkyv::{Archive, Deserialize, Serialize};
/// use streamwork::state::{Migration, Snapshot, StateError, VersionedState};
///
/// /// Version 1 kept counts as u32.
/// #[derive(Archive, Serialize, Deserialize)]
/// struct CountsV1 { counts: Vec<(u64, u32)> }
///
/// /// Version 2 widened them and keeps a total.
/// #[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
/// struct Counts { counts: Vec<(u64, u64)>, total: u64 }
///
/// impl VersionedState for Counts {
///     const SCHEMA: u32 = 2;
///     fn migrate(from: u32, snapshot: &Snapshot<'_>) -> Result<Self, Migration> {
///         match from {
///             1 => {
///                 let old = snapshot.access::<CountsV1>().map_err(Migration::Failed)?;
///                 let counts: Vec<(u64, u64)> =
///                     old.counts.iter().map(|p| (p.0.to_native(), p.1.to_native() as u64)).collect();
///                 let total = counts.iter().map(|c| c.1).sum();
///                 Ok(Counts { counts, total })
///             }
///             _ => Err(Migration::Unsupported),
///         }
///     }
/// }
/// ```
pub trait VersionedState: Archive + Sized
where
    Self::Archived: Portable
        + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>
        + Deserialize<Self, HighDeserializer<rancor::Error>>,
{
    /// The version of the layout this type writes.
    const SCHEMA: u32;

    /// Builds the state from a snapshot written with the older version
    /// `from`. The default knows no older version.
    fn migrate(from: u32, snapshot: &Snapshot<'_>) -> Result<Self, Migration> {
        let _ = (from, snapshot);
        Err(Migration::Unsupported)
    }
}

/// Why a migration did not produce the state.
#[derive(Debug)]
#[non_exhaustive]
pub enum Migration {
    /// The type has no migration from that version.
    Unsupported,
    /// The old snapshot could not be read as the old layout.
    Failed(StateError),
}

impl<'a> Snapshot<'a> {
    /// Restores a `T` from this snapshot: directly when it was written with
    /// `T::SCHEMA`, through `T::migrate` when written with an older version;
    /// a newer version, or an older one `T` cannot migrate, is refused with
    /// an error naming the operator and both versions.
    pub fn restore<T>(&self) -> Result<T, StateError>
    where
        T: VersionedState,
        T::Archived: Portable
            + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>
            + Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        let found = self.schema();
        let refuse = |reason: &'static str| StateError::IncompatibleSchema {
            operator: self.operator(),
            part: self.part(),
            type_name: std::any::type_name::<T>(),
            found,
            supported: T::SCHEMA,
            reason,
        };
        if found == T::SCHEMA {
            self.deserialize::<T>()
        } else if found > T::SCHEMA {
            Err(refuse(
                "it was written by a newer version of the operator: run that version, or restore from an older checkpoint",
            ))
        } else {
            match T::migrate(found, self) {
                Ok(state) => Ok(state),
                Err(Migration::Unsupported) => Err(refuse(
                    "the operator declares no migration from that version: add one to its `VersionedState::migrate`",
                )),
                Err(Migration::Failed(e)) => Err(e),
            }
        }
    }
}

/// The stable id of an operator named `name` in its job: the same name gives
/// the same id in every version of the program and on every platform, so a
/// changed job restores the state of the operators it kept (FNV-1a, 64 bits).
pub fn operator_id(name: &str) -> OperatorId {
    OperatorId(name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    }))
}

/// The id under which side record `stream` of component `name` is
/// written (state kept in the log, beside the component's part): distinct
/// from every operator's own id, fixed forever like it.
pub fn side_operator_id(name: &str, stream: u32) -> OperatorId {
    operator_id(&format!("{name}\u{1f}side\u{1f}{stream}"))
}

#[cfg(test)]
mod tests {
    use super::operator_id;
    use streamwork_core::OperatorId;

    #[test]
    fn operator_ids_are_fixed_forever() {
        // Changing these breaks every checkpoint ever written.
        assert_eq!(operator_id(""), OperatorId(0xcbf2_9ce4_8422_2325));
        assert_eq!(operator_id("a"), OperatorId(0xaf63_dc4c_8601_ec8c));
        assert_ne!(operator_id("counter"), operator_id("counters"));
    }
}
