//! Each join's output equals a nested-loop batch join over the same events.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use streamwork::join::WindowJoin;
use streamwork::prelude::*;

type Row = (u8, i64, u16);

fn at(r: &Row) -> Timestamp {
    Timestamp::from_millis(r.1)
}

/// In time order (no late rows), random keys and gaps.
fn rows() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec((0u8..4, 0i64..7), 0..60).prop_map(|raw| {
        let mut t = 0;
        raw.into_iter()
            .enumerate()
            .map(|(i, (key, step))| {
                t += step;
                (key, t, i as u16)
            })
            .collect()
    })
}

type Out = Vec<(u8, Option<u16>, Option<u16>)>;
/// Both sides' rows of one key in one window.
type Sides<'a> = (Vec<&'a Row>, Vec<&'a Row>);

fn run_window(
    join: WindowJoin<Row, Row, u8>,
    lefts: Vec<Row>,
    rights: Vec<Row>,
    parallelism: u32,
) -> Out {
    let sink = CollectSink::new();
    let graph = job! {
        source l = VecSource::new(lefts);
        source r = VecSource::new(rights);
        operator tl = Watermarks::monotonic().timestamps(at) <- l;
        operator tr = Watermarks::monotonic().timestamps(at) <- r;
        operator joined[parallelism] = join <- left(tl.key(|x: &Row| x.0)), right(tr.key(|x: &Row| x.0));
        sink o = sink.clone() <- joined;
    }
    .unwrap();
    graph.run().unwrap();
    let mut out: Out = sink
        .values()
        .into_iter()
        .map(|r: JoinRow<u8, Row, Row>| (r.key, r.left.map(|l| l.2), r.right.map(|r| r.2)))
        .collect();
    out.sort();
    out
}

fn nested_loop_window(
    lefts: &[Row],
    rights: &[Row],
    size: i64,
    keep_left: bool,
    keep_right: bool,
) -> Out {
    let mut out = Vec::new();
    let window = |r: &Row| r.1.div_euclid(size);
    let mut windows: BTreeMap<(i64, u8), Sides<'_>> = BTreeMap::new();
    for l in lefts {
        windows.entry((window(l), l.0)).or_default().0.push(l);
    }
    for r in rights {
        windows.entry((window(r), r.0)).or_default().1.push(r);
    }
    for ((_, key), (ls, rs)) in windows {
        for l in &ls {
            for r in &rs {
                out.push((key, Some(l.2), Some(r.2)));
            }
        }
        if rs.is_empty() && keep_left {
            out.extend(ls.iter().map(|l| (key, Some(l.2), None)));
        }
        if ls.is_empty() && keep_right {
            out.extend(rs.iter().map(|r| (key, None, Some(r.2))));
        }
    }
    out.sort();
    out
}

fn run_interval(
    lefts: Vec<Row>,
    rights: Vec<Row>,
    lower: i64,
    upper: i64,
    parallelism: u32,
) -> Out {
    let sink = CollectSink::new();
    let graph = job! {
        source l = VecSource::new(lefts);
        source r = VecSource::new(rights);
        // Generous bound: no row is ever late, so every pair must come out.
        operator tl = Watermarks::bounded(Duration::from_secs(3600)).timestamps(at) <- l;
        operator tr = Watermarks::bounded(Duration::from_secs(3600)).timestamps(at) <- r;
        operator joined[parallelism] = Join::inner().interval(lower, upper) <- left(tl.key(|x: &Row| x.0)), right(tr.key(|x: &Row| x.0));
        sink o = sink.clone() <- joined;
    }
    .unwrap();
    graph.run().unwrap();
    let mut out: Out = sink
        .values()
        .into_iter()
        .map(|r: JoinRow<u8, Row, Row>| (r.key, r.left.map(|l| l.2), r.right.map(|r| r.2)))
        .collect();
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn window_joins_match_a_nested_loop(lefts in rows(), rights in rows(), size in 1i64..20, parallelism in 1u32..4) {
        let d = Duration::from_millis(size as u64);
        prop_assert_eq!(run_window(Join::inner().tumbling(d), lefts.clone(), rights.clone(), parallelism), nested_loop_window(&lefts, &rights, size, false, false));
        prop_assert_eq!(run_window(Join::left().tumbling(d), lefts.clone(), rights.clone(), parallelism), nested_loop_window(&lefts, &rights, size, true, false));
        prop_assert_eq!(run_window(Join::right().tumbling(d), lefts.clone(), rights.clone(), parallelism), nested_loop_window(&lefts, &rights, size, false, true));
        prop_assert_eq!(run_window(Join::full().tumbling(d), lefts.clone(), rights.clone(), parallelism), nested_loop_window(&lefts, &rights, size, true, true));
    }

    #[test]
    fn interval_joins_match_a_nested_loop(lefts in rows(), rights in rows(), lower in -10i64..5, width in 0i64..10, parallelism in 1u32..4) {
        let upper = lower + width;
        let mut expected: Out = Vec::new();
        for l in &lefts {
            for r in &rights {
                if l.0 == r.0 && l.1 + lower <= r.1 && r.1 <= l.1 + upper {
                    expected.push((l.0, Some(l.2), Some(r.2)));
                }
            }
        }
        expected.sort();
        prop_assert_eq!(run_interval(lefts, rights, lower, upper, parallelism), expected);
    }
}
