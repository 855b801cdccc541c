//! An operator with three input ports of three types, added with
//! `JobBuilder::operator_with_ports` or with `job!`'s `port(... => ...)`:
//! keyed alike, each port's records reach the instance that owns their key,
//! as the operator's input type, and each port's end is told to every
//! instance once.

use streamwork::core::{ByKey, KeyedState};
use streamwork::prelude::*;
use streamwork::runtime::{InputPort, JobBuilder};

/// A record of one of the three ports.
#[derive(Clone, Debug)]
enum Reading {
    Count(u64),
    Name(String),
    Pair((u64, u64)),
}

/// Per key, how many records of any port it has seen: emits `key:count`
/// after each, and `end P` when port `P` ends.
#[derive(Clone, Default)]
struct CountAcross {
    seen: KeyedState<u64, u64>,
}

impl Operator for CountAcross {
    type In = Reading;
    type Key = ByKey<u64>;
    type Out = Collector<String>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("a test operator run without checkpoints")
    }

    fn on_record(&mut self, value: Reading, ctx: &mut Context<'_, ByKey<u64>, Collector<String>>) {
        let key = ctx.key();
        let seen = self.seen.get_or_default(key);
        *seen += 1;
        let line = format!("{}:{}:{}", *key, *seen, kind(&value, *key));
        ctx.emit(line);
    }

    fn on_input_end(&mut self, port: u32, out: &mut Collector<String>) {
        out.emit(format!("end {port}"));
    }
}

/// The port a record came through, if its own value says the key it was
/// given (`wrong key` otherwise).
fn kind(reading: &Reading, key: u64) -> &'static str {
    let (kind, own) = match reading {
        Reading::Count(c) => ("count", c % 30),
        Reading::Name(n) => ("name", n.parse::<u64>().unwrap_or(u64::MAX)),
        Reading::Pair((a, _)) => ("pair", a % 30),
    };
    if own == key { kind } else { "wrong key" }
}

/// What a run of the three-port job printed, checked: per key, three
/// counts, a name and two pairs, counted by one instance; each port's end
/// once per instance.
fn check(lines: Vec<String>) {
    let mut ends: Vec<&String> = lines.iter().filter(|l| l.starts_with("end")).collect();
    ends.sort();
    assert_eq!(
        ends,
        ["end 0", "end 0", "end 1", "end 1", "end 2", "end 2"],
        "each port's end, once per instance"
    );
    // Every key of 0..30 has 3 counts, 1 name and 2 pairs, all counted by
    // the one instance that owns the key.
    for key in 0..30u64 {
        let of_key: Vec<(u64, &str)> = lines
            .iter()
            .filter_map(|l| {
                let mut parts = l.split(':');
                let k: u64 = parts.next()?.parse().ok()?;
                let n: u64 = parts.next()?.parse().ok()?;
                (k == key).then_some((n, parts.next()?))
            })
            .collect();
        let mut counted: Vec<u64> = of_key.iter().map(|(n, _)| *n).collect();
        counted.sort();
        assert_eq!(
            counted,
            (1..=6).collect::<Vec<_>>(),
            "key {key}: {of_key:?}"
        );
        let kinds = |k: &str| of_key.iter().filter(|(_, kind)| *kind == k).count();
        assert_eq!((kinds("count"), kinds("name"), kinds("pair")), (3, 1, 2));
    }
}

#[test]
fn three_ports_of_three_types_meet_by_key() {
    let out = CollectSink::new();
    let mut job = JobBuilder::new("three-ports");
    let counts = job.source("counts", 2, VecSource::new((0..90u64).collect()));
    let names = job.source(
        "names",
        1,
        VecSource::new((0..30u64).map(|k| format!("{k}")).collect()),
    );
    let pairs = job.source(
        "pairs",
        3,
        VecSource::new((0..60u64).map(|k| (k, k)).collect()),
    );
    let seen = job.operator_with_ports(
        "seen",
        2,
        CountAcross::default(),
        vec![
            InputPort::new("counts", counts.key_by(|c: &u64| *c % 30), Reading::Count),
            InputPort::new(
                "names",
                names.key_by(|n: &String| n.parse::<u64>().unwrap_or(0)),
                Reading::Name,
            ),
            InputPort::new(
                "pairs",
                pairs.key_by(|p: &(u64, u64)| p.0 % 30),
                Reading::Pair,
            ),
        ],
    );
    job.sink("out", 1, out.clone(), seen);
    let graph = job.build().unwrap();
    let ports = port_names(&graph, "seen");
    assert_eq!(ports, ["counts", "names", "pairs"]);
    graph.run().unwrap();
    check(out.values());
}

/// The names of the input ports of component `name`.
fn port_names<'g>(graph: &'g JobGraph, name: &str) -> Vec<&'g str> {
    graph
        .nodes()
        .iter()
        .find(|n| n.name() == name)
        .expect("the component")
        .ports()
        .iter()
        .map(|p| p.name)
        .collect()
}

#[test]
fn job_declares_typed_ports_with_port() {
    let out = CollectSink::new();
    let graph = job! {
        name "three-ports";
        source counts[2] = VecSource::new((0..90u64).collect());
        source names = VecSource::new((0..30u64).map(|k| format!("{k}")).collect());
        source pairs[3] = VecSource::new((0..60u64).map(|k| (k, k)).collect());
        operator seen[2] = CountAcross::default()
            <- port(counts.key(|c: &u64| *c % 30) => Reading::Count),
               port(names.key(|n: &String| n.parse::<u64>().unwrap_or(0)) => Reading::Name),
               port(pairs.key(|p: &(u64, u64)| p.0 % 30) => Reading::Pair);
        sink printed = out.clone() <- seen;
    }
    .unwrap();
    let ports = port_names(&graph, "seen");
    assert_eq!(ports, ["Reading::Count", "Reading::Name", "Reading::Pair"]);
    graph.run().unwrap();
    check(out.values());
}
