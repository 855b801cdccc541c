//! The generator at any parallelism: read partly by `P1` instances,
//! checkpointed, restored by `P2` (and again by `P3`), every sequence
//! number is generated exactly once.

use proptest::prelude::*;
use streamwork_connectors::GeneratorSource;
use streamwork_core::checkpoint::RestoredPart;
use streamwork_core::{
    CheckpointId, Collector, InstanceContext, InstanceIdx, KeyGroups, Restore, Source, SourcePoll,
    StateBytes,
};

fn context(instance: u32, parallelism: u32) -> InstanceContext {
    InstanceContext::new(
        "numbers",
        InstanceIdx(instance),
        parallelism,
        KeyGroups::DEFAULT,
    )
}

/// Polls until at least `limit` numbers came out or the source finished.
fn read(source: &mut impl Source<Out = Collector<u64>>, limit: usize) -> Vec<u64> {
    let mut out = Collector::detached();
    let mut got = Vec::new();
    for _ in 0..1_000_000 {
        if got.len() >= limit {
            break;
        }
        let poll = source.poll(&mut out).unwrap();
        got.extend(out.take_buffered().into_iter().map(|r| r.value));
        if poll == SourcePoll::Finished {
            break;
        }
    }
    got
}

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
            let restore = Restore {
                records: None,
                component: "numbers",
                checkpoint: CheckpointId::new(1),
                is_final: false,
                ended: Vec::new(),
                instance: InstanceIdx(instance),
                parallelism,
                key_groups: KeyGroups::DEFAULT,
                parts: parts
                    .iter()
                    .enumerate()
                    .map(|(k, p)| RestoredPart {
                        part: InstanceIdx(k as u32),
                        schema: p.schema,
                        bytes: &p.bytes,
                    })
                    .collect(),
            };
            source.restore(&restore).unwrap();
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
