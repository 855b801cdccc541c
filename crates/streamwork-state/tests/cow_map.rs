//! The keyed table against a plain `HashMap`: any sequence of writes,
//! removals, retains, selective updates and freezes leaves the table equal to
//! the model, and every frozen view equal to the model as it was when frozen,
//! however the table changed after; whether an entry keeps its hash
//! (`CowMap`, windows' and joins' table) or its key is hashed again
//! (`StableHash`, `KeyedState`'s).

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use streamwork_core::hash::stable_hash;
use streamwork_core::table::{EntryHash, FrozenTable, KeyedTable, StableHash};

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Add(u16, u32),
    Remove(u16),
    RetainBelow(u32),
    HalveAbove(u32),
    Freeze,
    DropOldestFrozen,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..300, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (0u16..300, 0u32..1000).prop_map(|(k, v)| Op::Add(k, v)),
        2 => (0u16..300).prop_map(Op::Remove),
        1 => any::<u32>().prop_map(Op::RetainBelow),
        1 => (0u32..2000).prop_map(Op::HalveAbove),
        2 => Just(Op::Freeze),
        1 => Just(Op::DropOldestFrozen),
        1 => Just(Op::Clear),
    ]
}

fn sorted<'a>(entries: impl Iterator<Item = (&'a u16, &'a u32)>) -> BTreeMap<u16, u32> {
    entries.map(|(k, v)| (*k, *v)).collect()
}

/// Frozen views, each with the model as it was when frozen.
type Views<H> = Vec<(FrozenTable<u16, u32, H>, BTreeMap<u16, u32>)>;

/// Runs `ops` on a table whose entries find their hash again by `H`.
fn check<H: EntryHash<u16>>(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut map: KeyedTable<u16, u32, H> = KeyedTable::new();
    let mut model: HashMap<u16, u32> = HashMap::new();
    let mut frozen: Views<H> = Vec::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                prop_assert_eq!(map.insert(stable_hash(&k), k, v), model.insert(k, v));
            }
            Op::Add(k, v) => {
                *map.get_or_insert_with(stable_hash(&k), &k, || 0) += v;
                *model.entry(k).or_insert(0) += v;
            }
            Op::Remove(k) => {
                prop_assert_eq!(map.remove(stable_hash(&k), &k), model.remove(&k));
            }
            Op::RetainBelow(limit) => {
                map.retain(|_, v| *v < limit);
                model.retain(|_, v| *v < limit);
            }
            Op::HalveAbove(limit) => {
                // Halved, and removed once zero.
                map.update_where(
                    |_, v| *v > limit,
                    |_, v| {
                        *v /= 2;
                        *v != 0
                    },
                );
                model.retain(|_, v| {
                    if *v > limit {
                        *v /= 2;
                        *v != 0
                    } else {
                        true
                    }
                });
            }
            Op::Freeze => {
                let view = map.freeze();
                prop_assert_eq!(view.len(), model.len());
                frozen.push((view, sorted(model.iter())));
            }
            Op::DropOldestFrozen => {
                if !frozen.is_empty() {
                    frozen.remove(0);
                }
            }
            Op::Clear => {
                map.clear();
                model.clear();
            }
        }
        prop_assert_eq!(map.len(), model.len());
    }
    prop_assert_eq!(sorted(map.iter()), sorted(model.iter()));
    for k in 0..300u16 {
        prop_assert_eq!(map.get(stable_hash(&k), &k), model.get(&k));
    }
    for (view, then) in &frozen {
        prop_assert_eq!(&sorted(view.iter()), then);
    }
    let drained: BTreeMap<u16, u32> = map.drain().collect();
    prop_assert_eq!(drained, sorted(model.iter()));
    prop_assert!(map.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_table_keeping_hashes_behaves_as_a_map_and_its_frozen_views_never_change(
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        check::<u64>(ops)?;
    }

    #[test]
    fn a_table_hashing_keys_again_behaves_as_a_map_and_its_frozen_views_never_change(
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        check::<StableHash>(ops)?;
    }
}
