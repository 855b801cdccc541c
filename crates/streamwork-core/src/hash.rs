//! The stable key hash used by fields grouping and keyed state.
//!
//! Fields grouping must send a key to the same instance in every run, on every
//! build and on every platform, so that checkpointed keyed state can be restored
//! into the instance that will receive that key. Rust's default `SipHash` is
//! randomly seeded per process, so Streamwork uses its own hasher, fixed here:
//!
//! * integers are mixed as their value widened to `u64` (independent of
//!   endianness and of the width of `usize`);
//! * byte strings are consumed in little-endian 8-byte words, the tail padded
//!   with zeros and mixed with its length;
//! * each word is combined as `h = (h.rotl(5) ^ word) * 0x51_7c_c1_b7_27_22_0a_95`
//!   (the FxHash step), and `finish` applies MurmurHash3's `fmix64` finalizer
//!   so that every input bit affects the low bits used for key groups.
//!
//! Types feed the hasher through their `std::hash::Hash` implementation: for
//! integers, `str`/`String` (bytes then `0xff`), tuples and derived structs this
//! is a fixed sequence of calls. This algorithm is part of Streamwork's
//! compatibility contract and changes only with a new checkpoint format version.

use std::hash::{BuildHasherDefault, Hash, Hasher};

const SEED: u64 = 0;
const MULTIPLIER: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// Streamwork's stable, fast, non-cryptographic hasher. See the module docs for
/// the exact algorithm.
///
/// ```
/// use streamwork::core::hash::stable_hash;
/// // Stable across runs and builds: this value is part of the contract.
/// assert_eq!(stable_hash(&42u64), stable_hash(&42u64));
/// assert_ne!(stable_hash(&"car"), stable_hash(&"truck"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StableHasher {
    state: u64,
}

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher { state: SEED }
    }
}

impl StableHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(MULTIPLIER);
    }
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// `Hasher` methods that mix one integer widened to 64 bits (a signed one
/// sign-extended, through `i64`).
macro_rules! mix_widened {
    ($($method:ident($ty:ty) as $wide:ty),* $(,)?) => {$(
        #[inline]
        fn $method(&mut self, i: $ty) {
            self.mix(i as $wide as u64);
        }
    )*};
}

impl Hasher for StableHasher {
    #[inline]
    fn finish(&self) -> u64 {
        fmix64(self.state)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }

    mix_widened! {
        write_u8(u8) as u64,
        write_u16(u16) as u64,
        write_u32(u32) as u64,
        write_u64(u64) as u64,
        write_usize(usize) as u64,
        write_i8(i8) as i64,
        write_i16(i16) as i64,
        write_i32(i32) as i64,
        write_i64(i64) as i64,
        write_isize(isize) as i64,
    }
}

/// `BuildHasher` for hash maps keyed by stream keys (keyed state, per-key tables).
pub type BuildStableHasher = BuildHasherDefault<StableHasher>;

/// A `HashMap` using [`StableHasher`]: fast for the small keys of stream jobs.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, BuildStableHasher>;

/// The stable hash of `value`.
#[inline]
pub fn stable_hash<K: Hash + ?Sized>(value: &K) -> u64 {
    let mut hasher = StableHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_values_never_change() {
        // These values are the compatibility contract: a change here moves keys
        // between instances and breaks restoring older checkpoints.
        assert_eq!(stable_hash(&0u64), fmix64(0));
        let mut h = StableHasher::default();
        h.write_u64(7);
        assert_eq!(h.finish(), fmix64(7u64.wrapping_mul(MULTIPLIER)));
        assert_eq!(stable_hash(&7u32), stable_hash(&7u64));
        assert_eq!(stable_hash(&7usize), stable_hash(&7u64));
        // Every width, signed ones sign-extended.
        let pinned = [
            stable_hash(&200u8),
            stable_hash(&60_000u16),
            stable_hash(&-1i8),
            stable_hash(&-300i16),
            stable_hash(&-70_000i32),
            stable_hash(&i64::MIN),
            stable_hash(&-5isize),
            stable_hash(&(u128::MAX - 3)),
        ];
        assert_eq!(
            pinned,
            [
                14546707425991130063,
                18063740495822246965,
                10590618499855609741,
                16228445585052950273,
                321266905580355260,
                10338021812380738707,
                12293644047148362245,
                11823812421465990299,
            ]
        );
        assert_eq!(stable_hash(&-1i8), stable_hash(&-1i64));
    }

    #[test]
    fn strings_differ_by_content_and_length() {
        assert_ne!(stable_hash("a"), stable_hash("a\0"));
        assert_ne!(stable_hash("abcdefgh"), stable_hash("abcdefgh\0"));
        assert_eq!(stable_hash("bus"), stable_hash(&String::from("bus")));
    }
}
