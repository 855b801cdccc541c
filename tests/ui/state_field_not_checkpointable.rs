use std::collections::HashMap;

use streamwork::prelude::*;

/// A plain map is state the framework cannot split by key group.
#[derive(Clone, Default, State)]
struct Totals {
    totals: HashMap<String, u64>,
}

fn main() {}
