//! For random DAG shapes, parallelisms and groupings, the multiset of outputs
//! equals a plain sequential computation of the same job, whether the job
//! runs one thread per task or on a few workers.

use proptest::prelude::*;
use streamwork::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Add(u64),
    KeepIfNot { modulus: u64, rest: u64 },
    Duplicate,
    CountPerKey { modulus: u64 },
}

#[derive(Clone, Debug)]
enum Group {
    Auto,
    Shuffle,
    Key,
    Broadcast,
    Global,
}

#[derive(Clone, Debug)]
struct Stage {
    op: Op,
    parallelism: u32,
    /// Upstream nodes (0 is the source, `i + 1` is stage `i`) and groupings.
    inputs: Vec<(usize, Group)>,
}

#[derive(Clone)]
struct Apply(Op);

impl Operator for Apply {
    type In = u64;
    type Key = NoKey;
    type Out = Collector<u64>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }
    fn on_record(&mut self, v: u64, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
        match self.0 {
            Op::Add(k) => ctx.emit(v.wrapping_add(k)),
            Op::KeepIfNot { modulus, rest } => {
                if v % modulus != rest {
                    ctx.emit(v)
                }
            }
            Op::Duplicate => {
                ctx.emit(v);
                ctx.emit(v.wrapping_add(1));
            }
            Op::CountPerKey { .. } => unreachable!("keyed stages use CountPerKey"),
        }
    }
}

#[derive(Clone, Default)]
struct CountPerKey {
    counts: KeyedState<u64, u64>,
}

impl Operator for CountPerKey {
    type In = u64;
    type Key = ByKey<u64>;
    type Out = Collector<u64>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("this test runs at most once")
    }
    fn on_record(&mut self, _: u64, ctx: &mut Context<'_, ByKey<u64>, Collector<u64>>) {
        let key = ctx.key();
        let count = self.counts.get_or_default(key);
        *count += 1;
        let out = *key * 1_000_000 + *count;
        ctx.emit(out);
    }
}

fn sequential(source: &[u64], stages: &[Stage]) -> Vec<u64> {
    let mut outputs: Vec<Vec<u64>> = vec![source.to_vec()];
    for stage in stages {
        let mut input = Vec::new();
        for (from, group) in &stage.inputs {
            // Keyed stages always receive a key grouping; others honour theirs.
            let keyed = matches!(stage.op, Op::CountPerKey { .. });
            let copies = if matches!(group, Group::Broadcast) && !keyed {
                stage.parallelism
            } else {
                1
            };
            for _ in 0..copies {
                input.extend(outputs[*from].iter().copied());
            }
        }
        let mut out = Vec::new();
        match stage.op {
            Op::Add(k) => out.extend(input.iter().map(|v| v.wrapping_add(k))),
            Op::KeepIfNot { modulus, rest } => {
                out.extend(input.iter().filter(|v| *v % modulus != rest))
            }
            Op::Duplicate => input
                .iter()
                .for_each(|v| out.extend([*v, v.wrapping_add(1)])),
            Op::CountPerKey { modulus } => {
                let mut counts = std::collections::HashMap::new();
                for v in input {
                    let key = v % modulus;
                    let count = counts.entry(key).or_insert(0u64);
                    *count += 1;
                    out.push(key * 1_000_000 + *count);
                }
            }
        }
        outputs.push(out);
    }
    let mut last = outputs.pop().unwrap_or_default();
    last.sort_unstable();
    last
}

fn run(
    source: &[u64],
    source_parallelism: u32,
    stages: &[Stage],
    batch_size: usize,
    workers: u32,
) -> Vec<u64> {
    let mut job = JobBuilder::new("random");
    job.batch_size(batch_size).workers(workers);
    let mut streams = vec![job.source(
        "source",
        source_parallelism,
        VecSource::new(source.to_vec()),
    )];
    let mut parallelism = vec![source_parallelism];
    for (i, stage) in stages.iter().enumerate() {
        let name = format!("stage{i}");
        let stream = match stage.op {
            Op::CountPerKey { modulus } => {
                let inputs: Vec<_> = stage
                    .inputs
                    .iter()
                    .map(|(from, _)| streams[*from].key_by(move |v: &u64| v % modulus))
                    .collect();
                job.operator(&name, stage.parallelism, CountPerKey::default(), inputs)
            }
            ref op => {
                let inputs: Vec<Input<u64>> = stage
                    .inputs
                    .iter()
                    .map(|(from, group)| {
                        let s = streams[*from];
                        match group {
                            Group::Auto if parallelism[*from] == stage.parallelism => s.forward(),
                            Group::Auto | Group::Shuffle => s.shuffle(),
                            Group::Key => s.key_by(|v: &u64| v % 5).as_input(),
                            Group::Broadcast => s.broadcast(),
                            Group::Global => s.global(),
                        }
                    })
                    .collect();
                job.operator(&name, stage.parallelism, Apply(op.clone()), inputs)
            }
        };
        streams.push(stream);
        parallelism.push(stage.parallelism);
    }
    let sink = CollectSink::new();
    let last = *streams.last().unwrap();
    job.sink("sink", 2, sink.clone(), last.shuffle());
    // A stage no later stage reads is left unread on purpose.
    for (i, stream) in streams[..streams.len() - 1].iter().enumerate() {
        if !stages
            .iter()
            .any(|s| s.inputs.iter().any(|(from, _)| *from == i))
        {
            job.discard(*stream);
        }
    }
    job.build().unwrap().run().unwrap();
    let mut values = sink.values();
    values.sort_unstable();
    values
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..100).prop_map(Op::Add),
        (2u64..5, 0u64..2).prop_map(|(modulus, rest)| Op::KeepIfNot { modulus, rest }),
        Just(Op::Duplicate),
        (1u64..7).prop_map(|modulus| Op::CountPerKey { modulus }),
    ]
}

fn group() -> impl Strategy<Value = Group> {
    prop_oneof![
        3 => Just(Group::Auto),
        2 => Just(Group::Shuffle),
        2 => Just(Group::Key),
        1 => Just(Group::Broadcast),
        1 => Just(Group::Global),
    ]
}

fn stages() -> impl Strategy<Value = Vec<Stage>> {
    prop::collection::vec(
        (
            op(),
            1u32..4,
            any::<prop::sample::Index>(),
            prop::option::of((any::<prop::sample::Index>(), group())),
            group(),
        ),
        1..5,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (op, parallelism, first, second, first_group))| {
                let mut inputs = vec![(first.index(i + 1), first_group)];
                if let Some((second, group)) = second {
                    inputs.push((second.index(i + 1), group));
                }
                Stage {
                    op,
                    parallelism,
                    inputs,
                }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn outputs_equal_a_sequential_computation(
        source in prop::collection::vec(0u64..1000, 0..300),
        source_parallelism in 1u32..4,
        stages in stages(),
        batch_size in prop_oneof![Just(1usize), Just(7), Just(1024)],
        workers in 0u32..4,
    ) {
        prop_assert_eq!(
            run(&source, source_parallelism, &stages, batch_size, workers),
            sequential(&source, &stages)
        );
    }
}
