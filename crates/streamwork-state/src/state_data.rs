//! What can go into a checkpoint: [`StateData`], the types rkyv can
//! archive, validate and read back.

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};

use crate::layout::StateLayout;

/// A type rkyv can archive into a checkpoint, validate and read back, with
/// a fingerprint of its layout ([`StateLayout`]): the primitives, `String`,
/// `Vec`, `Option`, tuples, maps, and the structs and enums marked
/// `#[streamwork::state_data]` (which derives rkyv's `Archive`, `Serialize`
/// and `Deserialize` through [`rkyv`](crate::rkyv), and the fingerprint).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be archived into a checkpoint",
    label = "state the framework checkpoints must be archivable",
    note = "mark the type `#[streamwork::state_data]` (it derives rkyv's `Archive`, `Serialize` and `Deserialize` through `streamwork::state::rkyv`), or leave the state out of checkpoints on purpose (`.transient()` on a window or join)"
)]
pub trait StateData:
    Archive<
        Archived: Deserialize<Self, HighDeserializer<rancor::Error>>
                      + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>,
    > + for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
    + for<'a, 'w> Serialize<HighSerializer<StreamWriter<'w>, ArenaHandle<'a>, rancor::Error>>
    + StateLayout
    + Sized
{
}

/// Where a snapshot archived off the task thread is written as it is
/// archived: through a small buffer into the checkpoint log's record, with
/// no buffer the size of the archive (the same bytes `rkyv::to_bytes`
/// would make).
pub type StreamWriter<'w> =
    rkyv::ser::writer::IoWriter<std::io::BufWriter<&'w mut dyn std::io::Write>>;

impl<T> StateData for T where
    T: Archive<
            Archived: Deserialize<T, HighDeserializer<rancor::Error>>
                          + for<'v> CheckBytes<HighValidator<'v, rancor::Error>>,
        > + for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
        + for<'a, 'w> Serialize<HighSerializer<StreamWriter<'w>, ArenaHandle<'a>, rancor::Error>>
        + StateLayout
{
}
