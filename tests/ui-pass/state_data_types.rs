//! `#[state_data]` makes a user struct or enum `StateData`, with no rkyv
//! dependency of the crate's own.

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

fn archivable<T: StateData>() {}

fn main() {
    archivable::<Spend>();
    archivable::<Tier>();
    archivable::<Vec<(String, Spend)>>();
}
