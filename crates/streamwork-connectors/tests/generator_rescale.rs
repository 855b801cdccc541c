//! The generator at any parallelism: read partly by `P1` instances,
//! checkpointed, restored by `P2` (and again by `P3`), every sequence
//! number is generated exactly once.

mod support;

use proptest::prelude::*;
use streamwork_connectors::GeneratorSource;
use streamwork_core::{Source, StateBytes};
use support::{context, read, restore};

/// One generation: `parallelism` instances restored from `parts` (if any),
/// each reading `limits[i]` numbers (all, for `usize::MAX`); their parts.
fn generation(
    n: u64,
    parts: &[StateBytes],
    parallelism: u32,
    limits: &[usize],
    got: &mut Vec<u64>,
) -> Vec<StateBytes> {
    let mut next = Vec::new();
    for instance in 0..parallelism {
        let mut source = GeneratorSource::new(|i| i).take(n);
        if !parts.is_empty() {
            source
                .restore(&restore(1, instance, parallelism, parts))
                .unwrap();
        }
        source.open(&context(instance, parallelism)).unwrap();
        got.extend(read(&mut source, limits[instance as usize % limits.len()]));
        next.push(source.snapshot().unwrap());
    }
    next
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_number_once_across_rescales(
        n in 0u64..20_000,
        (p1, p2, p3) in (1u32..5, 1u32..5, 1u32..5),
        first in prop::collection::vec(0usize..6_000, 4),
        second in prop::collection::vec(0usize..6_000, 4),
    ) {
        let mut got = Vec::new();
        let parts = generation(n, &[], p1, &first, &mut got);
        let parts = generation(n, &parts, p2, &second, &mut got);
        generation(n, &parts, p3, &[usize::MAX], &mut got);
        got.sort_unstable();
        prop_assert_eq!(got, (0..n).collect::<Vec<u64>>());
    }
}
