//! `KeyedValues`: the same operations on a `KeyedState` and a `StoredState`
//! read the same as a `BTreeMap`, so code written against the trait may
//! switch between them.

use std::collections::BTreeMap;

use proptest::prelude::*;
use streamwork_core::state::{CurrentKey, KeyedState};
use streamwork_state::{KeyedValues, StoredState};

#[derive(Clone, Debug)]
enum Op {
    Set(u16, i64),
    Add(u16, i64),
    Double(u16),
    Delete(u16),
    Get(u16),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u16..50;
    prop_oneof![
        (key.clone(), any::<i64>()).prop_map(|(k, v)| Op::Set(k, v)),
        (key.clone(), -100i64..100).prop_map(|(k, d)| Op::Add(k, d)),
        key.clone().prop_map(Op::Double),
        key.clone().prop_map(Op::Delete),
        key.prop_map(Op::Get),
    ]
}

/// Applies `op` to `state` and `model`; what `state` reads must be what
/// `model` holds.
fn apply(
    state: &mut impl KeyedValues<u16, i64>,
    model: &mut BTreeMap<u16, i64>,
    op: &Op,
) -> Result<(), TestCaseError> {
    fn at(k: &u16) -> CurrentKey<'_, u16> {
        CurrentKey::for_testing(k)
    }
    match *op {
        Op::Set(k, v) => {
            state.set(at(&k), v);
            model.insert(k, v);
        }
        Op::Add(k, d) => {
            let v = state.get_or_default(at(&k));
            *v = v.wrapping_add(d);
            let m = model.entry(k).or_default();
            *m = m.wrapping_add(d);
        }
        Op::Double(k) => {
            if let Some(v) = state.get_mut(at(&k)) {
                *v = v.wrapping_mul(2);
            }
            if let Some(m) = model.get_mut(&k) {
                *m = m.wrapping_mul(2);
            }
        }
        Op::Delete(k) => {
            state.delete(at(&k));
            model.remove(&k);
        }
        Op::Get(k) => {
            prop_assert_eq!(state.get(at(&k)).copied(), model.get(&k).copied());
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn both_kinds_of_keyed_state_read_as_the_model(ops in prop::collection::vec(op(), 0..200)) {
        let mut small: KeyedState<u16, i64> = KeyedState::new();
        let mut large: StoredState<u16, i64> = StoredState::default();
        let (mut small_model, mut large_model) = (BTreeMap::new(), BTreeMap::new());
        for op in &ops {
            apply(&mut small, &mut small_model, op)?;
            apply(&mut large, &mut large_model, op)?;
        }
        for k in 0..50u16 {
            let at = CurrentKey::for_testing(&k);
            prop_assert_eq!(KeyedValues::get(&mut small, at).copied(), small_model.get(&k).copied());
            prop_assert_eq!(KeyedValues::get(&mut large, at).copied(), large_model.get(&k).copied());
        }
    }
}
