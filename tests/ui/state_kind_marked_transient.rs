use streamwork::prelude::*;

/// Counts per key, but the counts are marked transient: left out of
/// checkpoints, they would start empty after a restore.
#[derive(Clone, Default, State)]
struct Counts {
    #[state(transient)]
    counts: KeyedState<String, u64>,
    #[state(transient)]
    scratch: Vec<u8>,
}

fn main() {}
