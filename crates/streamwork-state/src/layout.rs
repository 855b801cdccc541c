//! What a checkpoint records of a state type's archived layout, so that a
//! build whose types changed does not read an older build's bytes as its
//! own: [`StateLayout`].
//!
//! rkyv validates that archived bytes are well formed for a type, not that
//! they were written by that type: a field added where the old layout had
//! padding, two fields of one type swapped, or `u64` become `i64` all read
//! back without error, as different values. A layout fingerprint is kept
//! with each managed field's snapshot and compared on restore; a field
//! whose fingerprint differs is refused by name.
//!
//! ```
//! use streamwork::state::{StateLayout, layout_of, layout_mix};
//!
//! assert_eq!(<Vec<u64> as StateLayout>::LAYOUT, layout_mix(layout_of("Vec"), layout_of("u64")));
//! assert_ne!(<(u64, i64) as StateLayout>::LAYOUT, <(i64, u64) as StateLayout>::LAYOUT);
//! ```

/// A fingerprint of a type's archived layout: the same in every build
/// whose type has the same structure (names of fields and variants, in
/// order, and their types' layouts), different (but for a collision of
/// 64-bit hashes) when it changes. `#[streamwork::state_data]` implements
/// it; a type that implements rkyv's traits by hand implements it by hand,
/// from the layout its archive has.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no layout fingerprint for checkpoints",
    label = "a checkpoint could not tell whether it was written with this layout",
    note = "mark the type `#[streamwork::state_data]` (it derives rkyv's traits and the fingerprint), or implement `StateLayout` with `layout_of` and `layout_mix`"
)]
pub trait StateLayout {
    /// The fingerprint. Part of the checkpoint format: a change in how it is
    /// computed makes every older checkpoint's state refused.
    const LAYOUT: u64;
}

/// The fingerprint of a name (FNV-1a, 64 bits): a leaf of a layout.
pub const fn layout_of(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The fingerprint of `inner` inside `outer`, order mattering.
pub const fn layout_mix(outer: u64, inner: u64) -> u64 {
    let mut k = (outer.rotate_left(23) ^ inner).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 33)
}

/// The archive format rkyv's features chose for this build, as a tag: the
/// width of archived lengths and relative pointers (rkyv's
/// `pointer_width_*`), their alignment (`unaligned`) and byte order
/// (`big_endian`). `0` for rkyv's defaults (32 bits, aligned, little
/// endian), the format every checkpoint was written in before the tag was
/// kept. A dependency that turns one of these features on (Cargo unifies
/// features) changes every archive without changing a type: a checkpoint
/// keeps each fingerprint in its build's format ([`kept_layout`]), so that
/// another build's is refused rather than read as other values.
pub fn archive_format() -> u64 {
    static FORMAT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *FORMAT.get_or_init(|| {
        use rkyv::primitive::{ArchivedU32, ArchivedUsize};
        let width = std::mem::size_of::<ArchivedUsize>() as u64;
        let unaligned = std::mem::align_of::<ArchivedU32>() == 1;
        let big_endian = rkyv::to_bytes::<rkyv::rancor::Error>(&1u32)
            .is_ok_and(|bytes| bytes.first() == Some(&0));
        format_tag(width, unaligned, big_endian)
    })
}

/// The tag of a format: `0` for rkyv's defaults.
const fn format_tag(width: u64, unaligned: bool, big_endian: bool) -> u64 {
    if width == 4 && !unaligned && !big_endian {
        0
    } else {
        width | (unaligned as u64) << 8 | (big_endian as u64) << 9
    }
}

/// `layout` in the archive format `format`: unchanged in the default one.
const fn in_format(layout: u64, format: u64) -> u64 {
    if format == 0 {
        layout
    } else {
        layout_mix(layout, format)
    }
}

/// The fingerprint a checkpoint keeps of a type of layout `layout`: the
/// layout in this build's [`archive_format`].
pub fn kept_layout(layout: u64) -> u64 {
    in_format(layout, archive_format())
}

macro_rules! leaf_layouts {
    ($($ty:ty),* $(,)?) => {$(
        impl StateLayout for $ty {
            const LAYOUT: u64 = layout_of(stringify!($ty));
        }
    )*};
}

leaf_layouts!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    std::num::NonZeroU8,
    std::num::NonZeroU16,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::time::Duration,
);

impl StateLayout for String {
    const LAYOUT: u64 = layout_of("String");
}

/// Archived as a `String` is.
impl StateLayout for str {
    const LAYOUT: u64 = layout_of("String");
}

impl<T: StateLayout> StateLayout for [T] {
    const LAYOUT: u64 = layout_mix(layout_of("Slice"), T::LAYOUT);
}

impl<T: StateLayout + ?Sized> StateLayout for Box<T> {
    const LAYOUT: u64 = layout_mix(layout_of("Box"), T::LAYOUT);
}

impl<T: StateLayout + ?Sized> StateLayout for std::sync::Arc<T> {
    const LAYOUT: u64 = layout_mix(layout_of("Shared"), T::LAYOUT);
}

impl<T: StateLayout + ?Sized> StateLayout for std::rc::Rc<T> {
    const LAYOUT: u64 = layout_mix(layout_of("Shared"), T::LAYOUT);
}

/// Nothing archived.
impl<T: ?Sized> StateLayout for std::marker::PhantomData<T> {
    const LAYOUT: u64 = layout_of("PhantomData");
}

macro_rules! wrapper_layouts {
    ($($name:literal => $ty:ident<$($p:ident),*>),* $(,)?) => {$(
        impl<$($p: StateLayout),*> StateLayout for $ty<$($p),*> {
            const LAYOUT: u64 = {
                let mut layout = layout_of($name);
                $(layout = layout_mix(layout, $p::LAYOUT);)*
                layout
            };
        }
    )*};
}

use std::collections::{BTreeMap, BTreeSet, VecDeque};

wrapper_layouts!(
    "Vec" => Vec<T>,
    "VecDeque" => VecDeque<T>,
    "Option" => Option<T>,
    "BTreeMap" => BTreeMap<K, V>,
    "BTreeSet" => BTreeSet<T>,
);

impl<K: StateLayout, V: StateLayout, S> StateLayout for std::collections::HashMap<K, V, S> {
    const LAYOUT: u64 = layout_mix(layout_mix(layout_of("HashMap"), K::LAYOUT), V::LAYOUT);
}

impl<T: StateLayout, S> StateLayout for std::collections::HashSet<T, S> {
    const LAYOUT: u64 = layout_mix(layout_of("HashSet"), T::LAYOUT);
}

impl<T: StateLayout, const N: usize> StateLayout for [T; N] {
    const LAYOUT: u64 = layout_mix(layout_mix(layout_of("Array"), T::LAYOUT), N as u64);
}

macro_rules! tuple_layouts {
    ($(($($p:ident),+)),* $(,)?) => {$(
        impl<$($p: StateLayout),+> StateLayout for ($($p,)+) {
            const LAYOUT: u64 = {
                let mut layout = layout_of("Tuple");
                $(layout = layout_mix(layout, $p::LAYOUT);)+
                layout
            };
        }
    )*};
}

tuple_layouts!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H),
    (A, B, C, D, E, F, G, H, I),
    (A, B, C, D, E, F, G, H, I, J),
    (A, B, C, D, E, F, G, H, I, J, K),
    (A, B, C, D, E, F, G, H, I, J, K, L),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_values_never_change() {
        // The compatibility contract: a change here refuses every
        // checkpoint written before.
        assert_eq!(layout_of("u64"), 0x4d35_d319_3e8d_66f2);
        assert_eq!(
            <Vec<(u64, String)> as StateLayout>::LAYOUT,
            0x60ca_0e65_875e_6861
        );
    }

    #[test]
    fn the_archive_format_is_rkyvs_default_and_another_changes_the_fingerprint() {
        // This build archives in rkyv's default format, the one the pinned
        // values above (and the kept fixtures) were written in.
        assert_eq!(archive_format(), 0);
        assert_eq!(format_tag(4, false, false), 0);
        let layout = <Vec<u64> as StateLayout>::LAYOUT;
        assert_eq!(kept_layout(layout), layout);
        // 64-bit pointers, unaligned, big endian: each its own fingerprint.
        let others = [
            format_tag(8, false, false),
            format_tag(4, true, false),
            format_tag(4, false, true),
            format_tag(2, false, false),
        ]
        .map(|format| in_format(layout, format));
        for (i, a) in others.iter().enumerate() {
            assert_ne!(*a, layout);
            assert!(others[i + 1..].iter().all(|b| b != a), "{others:x?}");
        }
    }

    #[test]
    fn structure_changes_the_fingerprint() {
        let layouts = [
            <u64 as StateLayout>::LAYOUT,
            <i64 as StateLayout>::LAYOUT,
            <Vec<u64> as StateLayout>::LAYOUT,
            <Option<u64> as StateLayout>::LAYOUT,
            <Box<u64> as StateLayout>::LAYOUT,
            <(u64, i64) as StateLayout>::LAYOUT,
            <(i64, u64) as StateLayout>::LAYOUT,
            <(u64, i64, u64) as StateLayout>::LAYOUT,
            <[u64; 3] as StateLayout>::LAYOUT,
            <[u64; 4] as StateLayout>::LAYOUT,
            <std::collections::HashMap<u64, String> as StateLayout>::LAYOUT,
            <std::collections::HashMap<String, u64> as StateLayout>::LAYOUT,
        ];
        for (i, a) in layouts.iter().enumerate() {
            for b in &layouts[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
