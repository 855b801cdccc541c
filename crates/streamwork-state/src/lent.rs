//! Archiving state where it is: [`Lent`], a reference archived as the value
//! it points to, and [`archive_into`], which streams an archive into a
//! writer. Together they archive frozen state (shared copy-on-write with
//! the task) with no copy of it made to be archived, and no buffer as large
//! as the archive.

use std::hash::{Hash, Hasher};

use rkyv::rancor::{self, Fallible};
use rkyv::{Archive, Place, Serialize};

use crate::error::StateError;

/// `&T`, archived as `T` is: the same bytes, which read back as `T`. A
/// container of `Lent` values (`KeyedParts<Lent<M>, Lent<K>, Lent<V>>`)
/// archives as the container of the values would, since rkyv's archived
/// types are `repr(C)` and the fields' archived types are the same.
pub(crate) struct Lent<'a, T>(pub(crate) &'a T);

impl<T: Archive> Archive for Lent<'_, T> {
    type Archived = T::Archived;
    type Resolver = T::Resolver;

    #[inline]
    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        self.0.resolve(resolver, out);
    }
}

impl<T: Serialize<S>, S: Fallible + ?Sized> Serialize<S> for Lent<'_, T> {
    #[inline]
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Hashes as `T` does: a lent key falls in its own key group.
impl<T: Hash> Hash for Lent<'_, T> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Archives `value` into `out` as it goes: the bytes `rkyv::to_bytes`
/// would make, written through a buffer of its own, never held whole in
/// memory (a snapshot can be as large as the state).
pub(crate) fn archive_into<T>(value: &T, out: &mut dyn std::io::Write) -> Result<(), StateError>
where
    T: for<'a, 'w> Serialize<
        rkyv::api::high::HighSerializer<
            crate::state_data::StreamWriter<'w>,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rancor::Error,
        >,
    >,
{
    // rkyv writes a field at a time: a buffer of its own here makes those
    // small writes copies, not calls through `dyn Write` (and the log's
    // checksum) each.
    crate::snapshot::guard_archive::<T, _>(|| {
        let buffered = std::io::BufWriter::with_capacity(1 << 16, out);
        let serialize = |e: rancor::Error| StateError::Serialize {
            type_name: std::any::type_name::<T>(),
            reason: e.to_string(),
        };
        let writer = rkyv::api::high::to_bytes_in::<_, rancor::Error>(
            value,
            rkyv::ser::writer::IoWriter::new(buffered),
        )
        .map_err(serialize)?;
        std::io::Write::flush(&mut writer.into_inner()).map_err(|e| StateError::Serialize {
            type_name: std::any::type_name::<T>(),
            reason: format!("writing the archive: {e}"),
        })
    })
}
