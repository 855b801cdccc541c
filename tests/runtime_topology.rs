//! Fan-out, fan-in, split, merge and two-input operators.

use streamwork::prelude::*;

#[operator]
fn add_thousand(value: u64, out: &mut Collector<u64>) {
    out.emit(value + 1000);
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn fan_out_gives_every_downstream_every_event() {
    let a = CollectSink::new();
    let b = CollectSink::new();
    let graph = job! {
        source numbers[2] = VecSource::new((0..500u64).collect());
        sink first[3] = a.clone() <- numbers.shuffle();
        sink second = b.clone() <- numbers.global();
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(sorted(a.values()), (0..500).collect::<Vec<_>>());
    assert_eq!(sorted(b.values()), (0..500).collect::<Vec<_>>());
}

#[test]
fn fan_in_merges_streams_of_one_type() {
    let out = CollectSink::new();
    let graph = job! {
        source low = VecSource::new((0..100u64).collect());
        source high[3] = VecSource::new((100..200u64).collect());
        operator plus[2] = AddThousand <- low.shuffle(), high.key(|v| *v);
        sink all = out.clone() <- plus;
    }
    .unwrap();
    let report = graph.run().unwrap();
    assert_eq!(sorted(out.values()), (1000..1200).collect::<Vec<_>>());
    assert_eq!(report.component("plus").unwrap().records_in(), 200);
}

#[derive(Outputs)]
struct SizeChannels {
    small: Collector<u64>,
    large: Collector<String>,
}

#[operator]
fn by_size(value: u64, out: &mut SizeChannels) {
    if value < 10 {
        out.small.emit(value);
    } else {
        out.large.emit(format!("large {value}"));
    }
}

#[test]
fn split_sends_each_record_to_its_channel() {
    let small = CollectSink::new();
    let large = CollectSink::new();
    let graph = job! {
        source numbers = VecSource::new((0..20u64).collect());
        operator split { small, large } = BySize <- numbers;
        sink smalls = small.clone() <- split.small;
        sink larges[2] = large.clone() <- split.large;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(sorted(small.values()), (0..10).collect::<Vec<_>>());
    assert_eq!(large.values().len(), 10);
    assert!(large.values().contains(&"large 19".to_string()));
}

#[test]
fn merge_unions_streams() {
    let mut job = JobBuilder::new("merge");
    let a = job.source("a", 1, VecSource::new(vec![1u64, 2]));
    let b = job.source("b", 2, VecSource::new(vec![3u64, 4, 5]));
    let merged = job.merge("merged", 2, [a.shuffle(), b.forward()]);
    let out = CollectSink::new();
    job.sink("out", 1, out.clone(), merged);
    job.build().unwrap().run().unwrap();
    assert_eq!(sorted(out.values()), vec![1, 2, 3, 4, 5]);
}

/// Joins numbers with their names as soon as both sides are known.
#[derive(Clone, Default)]
struct NameNumbers {
    names: std::collections::HashMap<u64, String>,
    pending: Vec<u64>,
}

impl Operator for NameNumbers {
    type In = Either<u64, (u64, String)>;
    type Key = NoKey;
    type Out = Collector<String>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("this test runs at most once")
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, NoKey, Collector<String>>) {
        match record {
            Either::Left(value) => match self.names.get(&value) {
                Some(name) => ctx.emit(format!("{value}={name}")),
                None => self.pending.push(value),
            },
            Either::Right((n, name)) => {
                for value in self.pending.iter().filter(|v| **v == n) {
                    ctx.emit(format!("{value}={name}"));
                }
                self.pending.retain(|v| *v != n);
                self.names.insert(n, name);
            }
        }
    }

    fn on_end(&mut self, out: &mut Collector<String>) {
        for value in self.pending.drain(..) {
            out.emit(format!("{value}=?"));
        }
    }
}

#[test]
fn two_input_operator_with_distinct_types() {
    let out = CollectSink::new();
    let names = vec![(1u64, "one".to_string()), (2, "two".to_string())];
    let graph = job! {
        source numbers = VecSource::new(vec![1u64, 2, 3, 1]);
        source names = VecSource::new(names);
        operator named[2] = NameNumbers::default() <- left(numbers.key(|v| *v)), right(names.key(|(n, _)| *n));
        sink all = out.clone() <- named;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(sorted(out.values()), vec!["1=one", "1=one", "2=two", "3=?"]);
}

/// The same two-input operator through the builder: the same promise.
#[test]
fn two_input_operator_through_the_builder() {
    let out = CollectSink::new();
    let mut job = JobBuilder::new("builder");
    let numbers = job.source("numbers", 1, VecSource::new(vec![1u64, 2, 3, 1]));
    let names = job.source(
        "names",
        1,
        VecSource::new(vec![(1u64, "one".to_string()), (2, "two".to_string())]),
    );
    let named = job.two_input_operator(
        "named",
        2,
        NameNumbers::default(),
        numbers.key_by(|v: &u64| *v),
        names.key_by(|(n, _): &(u64, String)| *n),
    );
    job.sink("all", 1, out.clone(), named);
    job.build().unwrap().run().unwrap();
    assert_eq!(sorted(out.values()), vec!["1=one", "1=one", "2=two", "3=?"]);
}

#[test]
fn plan_lists_components_edges_and_renders() {
    let graph = job! {
        name "shape";
        source numbers[2] = VecSource::new(vec![1u64]);
        operator split { small, large } = BySize <- numbers.shuffle();
        sink smalls = CollectSink::new() <- split.small;
        drop split.large;
    }
    .unwrap();
    let plan = graph.plan();
    assert_eq!(plan.name, "shape");
    let names: Vec<_> = plan
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.parallelism))
        .collect();
    assert_eq!(names, vec![("numbers", 2), ("split", 1), ("smalls", 1)]);
    assert_eq!(plan.components[1].channels.len(), 2);
    assert_eq!(plan.edges.len(), 2);
    assert_eq!(plan.edges[0].grouping, GroupingKind::Shuffle);
    assert!(plan.to_mermaid().contains("small: forward"));
    assert!(plan.to_dot().starts_with("digraph \"shape\""));
}
