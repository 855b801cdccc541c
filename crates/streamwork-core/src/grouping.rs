//! Groupings: how an edge picks the target instance(s) of each record (ch. 3).
//!
//! * **forward**: instance `i` sends to instance `i` of a component of equal
//!   parallelism; such edges are fused into one task (no channel at all);
//! * **shuffle**: round-robin over the target instances, record by record;
//! * **fields** (key): the key's [stable hash](crate::hash) picks one of
//!   [`KeyGroups`] key groups (`(hash * count) >> 64`, the high half of the
//!   128-bit product: uniform, and no division on the hot path), and key groups
//!   are assigned to instances in contiguous ranges, so every record of a key
//!   goes to the same instance;
//! * **broadcast**: every target instance gets a copy;
//! * **global**: everything goes to instance 0;
//! * **custom**: a user function picks the instance.
//!
//! This module names groupings and key groups; the routes that follow them
//! are the engine's (`streamwork::runtime::route`).

use std::fmt;

/// The number of key groups of a job: the unit in which keyed state is
/// partitioned and redistributed on rescaling. It bounds the largest parallelism
/// of a keyed component. Default: [`KeyGroups::DEFAULT`] (128, as Flink's
/// default maximum parallelism).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroups(u32);

impl KeyGroups {
    /// 128 key groups.
    pub const DEFAULT: KeyGroups = KeyGroups(128);

    /// `n` key groups; `None` if `n` is 0.
    pub fn new(n: u32) -> Option<Self> {
        (n > 0).then_some(KeyGroups(n))
    }

    /// How many key groups there are.
    pub fn count(self) -> u32 {
        self.0
    }

    /// The key group of a key with stable hash `hash`: `(hash * count) >> 64`.
    #[inline]
    pub fn key_group(self, hash: u64) -> u32 {
        ((u128::from(hash) * u128::from(self.0)) >> 64) as u32
    }

    /// The instance (of `parallelism`) that owns `key_group`:
    /// `key_group * parallelism / count`, so each instance owns one contiguous range.
    #[inline]
    pub fn instance_of(self, key_group: u32, parallelism: u32) -> u32 {
        ((u64::from(key_group) * u64::from(parallelism)) / u64::from(self.0)) as u32
    }

    /// The instance (of `parallelism`) that receives a key with stable hash `hash`.
    #[inline]
    pub fn route(self, hash: u64, parallelism: u32) -> u32 {
        self.instance_of(self.key_group(hash), parallelism)
    }
}

impl Default for KeyGroups {
    fn default() -> Self {
        KeyGroups::DEFAULT
    }
}

/// The kind of grouping of an edge, as data (for plans, the web view, the docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupingKind {
    /// Same instance index, fused into the upstream task when possible.
    Forward,
    /// Round-robin.
    Shuffle,
    /// By key (fields grouping).
    Key,
    /// Every instance.
    Broadcast,
    /// Instance 0.
    Global,
    /// A user function.
    Custom,
}

impl fmt::Display for GroupingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupingKind::Forward => "forward",
            GroupingKind::Shuffle => "shuffle",
            GroupingKind::Key => "key",
            GroupingKind::Broadcast => "broadcast",
            GroupingKind::Global => "global",
            GroupingKind::Custom => "custom",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_groups_cover_instances_in_contiguous_ranges() {
        let kg = KeyGroups::DEFAULT;
        let owners: Vec<u32> = (0..kg.count()).map(|g| kg.instance_of(g, 3)).collect();
        assert_eq!(owners.first(), Some(&0));
        assert_eq!(owners.last(), Some(&2));
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn key_groups_are_the_high_half_of_the_product() {
        let kg = KeyGroups::DEFAULT;
        assert_eq!(kg.key_group(0), 0);
        assert_eq!(kg.key_group(u64::MAX), 127);
        assert_eq!(kg.key_group(1 << 63), 64);
    }

    proptest! {
        #[test]
        fn key_route_is_in_range_and_deterministic(hash in any::<u64>(), parallelism in 1u32..=128) {
            let kg = KeyGroups::DEFAULT;
            let a = kg.route(hash, parallelism);
            prop_assert!(a < parallelism);
            prop_assert_eq!(a, kg.route(hash, parallelism));
        }
    }
}
