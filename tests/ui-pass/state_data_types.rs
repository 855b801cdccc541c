//! `#[state_data]` makes a user struct or enum `StateData` (with its layout
//! fingerprint), with no rkyv dependency of the crate's own, generic ones
//! and fields of the standard library's archivable types included.

use streamwork::state_data;
use streamwork::state::StateData;

#[state_data]
#[derive(Clone, Debug, Default, PartialEq)]
struct Spend {
    total: u64,
    last_seen: i64,
}

#[state_data]
#[derive(Clone, Debug)]
enum Tier {
    Plain,
    Gold { since: i64 },
}

#[state_data]
#[derive(Clone, Debug)]
struct Tagged<T> {
    value: T,
    name: Box<str>,
    parts: Box<[u32]>,
    shared: std::sync::Arc<String>,
    after: std::time::Duration,
    marker: std::marker::PhantomData<u8>,
    seen: std::collections::BTreeMap<u64, std::collections::HashSet<u32>>,
}

fn archivable<T: StateData>() {}

fn main() {
    archivable::<Spend>();
    archivable::<Tier>();
    archivable::<Vec<(String, Spend)>>();
    archivable::<Tagged<Tier>>();
}
