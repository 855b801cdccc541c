//! The typed builder without the macro: source → map → keyed count → sink.

use streamwork::prelude::*;

#[derive(Clone)]
struct Triple;
impl Operator for Triple {
    type In = u64;
    type Key = NoKey;
    type Out = Collector<u64>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }
    fn on_record(&mut self, v: u64, ctx: &mut Context<'_, NoKey, Collector<u64>>) {
        ctx.emit(v * 3);
    }
}

#[derive(Clone, Default)]
struct CountByKey {
    counts: KeyedState<u64, u64>,
}
impl Operator for CountByKey {
    type In = u64;
    type Key = ByKey<u64>;
    type Out = Collector<(u64, u64)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("this test runs at most once")
    }
    fn on_record(&mut self, _v: u64, ctx: &mut Context<'_, ByKey<u64>, Collector<(u64, u64)>>) {
        let key = ctx.key();
        *self.counts.get_or_default(key) += 1;
    }
    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        for (k, c) in self.counts.iter() {
            out.emit((*k, *c));
        }
    }
}

#[test]
fn source_map_keyed_count_sink() {
    let mut job = JobBuilder::new("smoke");
    let nums = job.source("nums", 2, GeneratorSource::new(|i| i).take(10_000));
    let tripled = job.operator("triple", 2, Triple, nums);
    let counts = job.operator(
        "count",
        3,
        CountByKey::default(),
        tripled.key_by(|v: &u64| v % 7),
    );
    let sink = CollectSink::new();
    job.sink("sink", 1, sink.clone(), counts);
    let report = job.build().unwrap().run().unwrap();
    let mut got = sink.values();
    got.sort();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..10_000u64 {
        *want.entry((i * 3) % 7).or_insert(0u64) += 1;
    }
    assert_eq!(got, want.into_iter().collect::<Vec<_>>());
    assert_eq!(report.component("triple").unwrap().records_in(), 10_000);
}
