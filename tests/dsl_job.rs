//! `job!`, `#[operator]` and `#[derive(Outputs)]` end to end.

use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

#[derive(Outputs)]
struct Parity {
    even: Collector<u64>,
    odd: Collector<String>,
}

#[operator]
fn split_parity(value: u64, out: &mut Parity) {
    if value.is_multiple_of(2) {
        out.even.emit(value);
    } else {
        out.odd.emit(format!("odd {value}"));
    }
}

#[derive(Clone, Default, State)]
struct Counter {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl Counter {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _value: u64,
        out: &mut Collector<(u64, u64)>,
    ) {
        let count = self.counts.get_or_default(key);
        *count += 1;
        out.emit((*key, *count));
    }
}

#[derive(Clone)]
struct Tag;
impl Operator for Tag {
    type Key = NoKey;
    type In = Either<u64, String>;
    type Out = Collector<String>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }
    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, NoKey, Collector<String>>) {
        match record {
            Either::Left(value) => {
                ctx.emit(format!("L{value}"));
            }
            Either::Right(value) => {
                ctx.emit(format!("R{value}"));
            }
        }
    }
}

#[test]
fn a_job_with_channels_fan_in_keyed_state_and_two_inputs() {
    let counted = CollectSink::new();
    let tagged = CollectSink::new();
    let graph = job! {
        name "dsl";
        batch_size 7;
        source numbers[2] = VecSource::new((0..100u64).collect());
        operator doubled[2] = Double <- numbers;
        operator parity { even, odd } = SplitParity <- numbers.shuffle();
        operator counts[3] = Counter::default() <- (doubled, parity.even).key(|v: &u64| v % 10);
        operator tags = Tag <- left(doubled.global()), right(parity.odd);
        sink counted_out = counted.clone() <- counts;
        sink tagged_out = tagged.clone() <- tags;
    }
    .unwrap();
    let plan = graph.plan();
    assert_eq!(plan.components.len(), 7);
    assert!(plan.to_mermaid().contains("even: key"));
    let report = graph.run().unwrap();
    // 100 doubled + 50 even values.
    assert_eq!(report.component("counts").unwrap().records_in(), 150);
    let finals: std::collections::BTreeMap<u64, u64> =
        counted
            .values()
            .into_iter()
            .fold(Default::default(), |mut m, (k, c)| {
                let e = m.entry(k).or_insert(0);
                *e = (*e).max(c);
                m
            });
    let mut expected = std::collections::BTreeMap::new();
    for v in (0..100u64)
        .map(|v| v * 2)
        .chain((0..100u64).filter(|v| v.is_multiple_of(2)))
    {
        *expected.entry(v % 10).or_insert(0) += 1;
    }
    assert_eq!(finals, expected);
    assert_eq!(tagged.values().len(), 150);
}

#[test]
fn dropped_channels_discard_their_records() {
    let evens = CollectSink::new();
    let graph = job! {
        source numbers = VecSource::new((0..10u64).collect());
        operator parity { even, odd } = SplitParity <- numbers;
        sink out = evens.clone() <- parity.even;
        drop parity.odd;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(evens.values(), vec![0, 2, 4, 6, 8]);
}

/// A job built by a generic helper: its name computed, its operator given.
fn doubling_job<O>(name: String, op: O, out: CollectSink<u64>) -> Result<JobGraph, GraphError>
where
    O: Operator<In = u64, Key = NoKey, Out = Collector<u64>, Time = AnyTime>,
{
    job! {
        name name;
        source numbers = VecSource::new(vec![1u64, 2, 3]);
        operator doubled = op <- numbers;
        sink out = out <- doubled;
    }
}

#[test]
fn a_job_name_may_be_computed() {
    let out = CollectSink::new();
    let graph = doubling_job(format!("doubling-{}", 7), Double, out.clone()).unwrap();
    assert_eq!(graph.name(), "doubling-7");
    graph.run().unwrap();
    assert_eq!(out.values(), vec![2, 4, 6]);
}

/// A declarative macro that writes the head of a job (a source split into
/// channels, named by the caller) and leaves the rest to its caller, as a
/// suite of jobs of one shape would.
macro_rules! parity_job {
    ($numbers:ident, $parity:ident; $($rest:tt)*) => {
        job! {
            source $numbers = VecSource::new((0..10u64).collect());
            operator $parity { even, odd } = SplitParity <- $numbers;
            $($rest)*
        }
    };
}

#[test]
fn a_job_may_be_written_through_a_declarative_macro() {
    // The macro's lines and its caller's meet in one `job!`: a fan-in
    // keyed by one function, and channels, on both sides.
    let (counted, evens) = (CollectSink::new(), CollectSink::new());
    let graph = parity_job! {
        numbers, parity;
        operator counts = Counter::default() <- (parity.even, doubled).key(|v: &u64| v % 2);
        operator doubled = Double <- numbers;
        drop parity.odd;
        operator halves { even, odd } = SplitParity <- doubled;
        sink counted_out = counted.clone() <- counts;
        sink evens_out = evens.clone() <- halves.even;
        drop halves.odd;
    }
    .unwrap();
    graph.run().unwrap();
    let mut finals = counted.values();
    finals.sort_unstable();
    // Five even numbers and ten doubled ones, all of key 0.
    assert_eq!(finals.last(), Some(&(0, 15)));
    assert_eq!(evens.values(), (0..10).map(|v| v * 2).collect::<Vec<u64>>());
}

/// A keyed two-input operator written with `#[operator]`: its input is an
/// `Either` of its ports' records, its state checkpointed by key.
#[derive(Clone, Default, State)]
struct LatestName {
    names: KeyedState<u64, String>,
}

#[operator]
impl LatestName {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        record: Either<u64, (u64, String)>,
        out: &mut Collector<String>,
    ) {
        match record {
            Either::Left(id) => {
                let name = self.names.get(key).map_or("?", String::as_str);
                out.emit(format!("{id}={name}"));
            }
            Either::Right((_, name)) => {
                self.names.insert(key, name);
            }
        }
    }
}

#[test]
fn a_two_input_operator_written_with_the_operator_attribute() {
    let out = CollectSink::new();
    assert_eq!(
        LatestName::default().statefulness(),
        Statefulness::Checkpointed
    );
    let graph = job! {
        source ids = VecSource::new(vec![1u64, 2]);
        source names = VecSource::new(vec![(1u64, "one".to_string()), (2, "two".to_string())]);
        operator named[2] = LatestName::default()
            <- left(ids.key(|id: &u64| *id)), right(names.key(|n: &(u64, String)| n.0));
        sink out = out.clone() <- named;
    }
    .unwrap();
    assert_eq!(
        graph
            .plan()
            .components
            .iter()
            .find(|c| c.name == "named")
            .map(|c| c.parallelism),
        Some(2)
    );
    graph.run().unwrap();
    let mut lines = out.values();
    lines.sort();
    // Each id is read once, before or after its name: either way, one line.
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("1=") || l.starts_with("2="))
    );
}
