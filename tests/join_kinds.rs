//! Every join kind on small scripted inputs, one record per batch so that
//! event time advances after each record.

use std::collections::BTreeSet;
use std::time::Duration;

use streamwork::prelude::*;

/// A record's label: a `&'static str` that a keyed exchange can carry
/// (decoded by leaking the text: scripted tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Name(&'static str);

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Name(Box::leak(text.into_boxed_str())))
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

type Left = (u32, i64, Name);
type Right = (u32, i64, Name);
/// A table update of the scripted tests.
type Update = Change<u32, Name>;

fn at(r: &(u32, i64, Name)) -> Timestamp {
    Timestamp::from_millis(r.1)
}

fn rows(
    sink: &CollectSink<JoinRow<u32, Left, Right>>,
) -> BTreeSet<(u32, Option<&'static str>, Option<&'static str>)> {
    sink.values()
        .into_iter()
        .map(|r| (r.key, r.left.map(|l| l.2.0), r.right.map(|r| r.2.0)))
        .collect()
}

fn window_join(
    join: streamwork::join::WindowJoin<Left, Right, u32>,
    lefts: Vec<Left>,
    rights: Vec<Right>,
) -> CollectSink<JoinRow<u32, Left, Right>> {
    let out = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source l = VecSource::new(lefts);
        source r = VecSource::new(rights);
        operator tl = Watermarks::monotonic().timestamps(at) <- l;
        operator tr = Watermarks::monotonic().timestamps(at) <- r;
        operator joined[2] = join <- left(tl.key(|x: &Left| x.0)), right(tr.key(|x: &Right| x.0));
        sink o = out.clone() <- joined;
    }
    .unwrap();
    graph.run().unwrap();
    out
}

fn inputs() -> (Vec<Left>, Vec<Right>) {
    // Window [0, 10): key 1 on both sides, key 2 left only, key 3 right only.
    // Window [10, 20): key 1 left only.
    let lefts = vec![(1, 1, Name("a1")), (2, 2, Name("a2")), (1, 12, Name("a3"))];
    let rights = vec![(1, 3, Name("b1")), (3, 4, Name("b3")), (1, 5, Name("b2"))];
    (lefts, rights)
}

#[test]
fn windowed_inner_and_outer_joins_emit_unmatched_rows_at_window_close() {
    let ten = Duration::from_millis(10);
    let (l, r) = inputs();
    let inner = rows(&window_join(
        Join::inner().transient().tumbling(ten),
        l.clone(),
        r.clone(),
    ));
    assert_eq!(
        inner,
        [(1, Some("a1"), Some("b1")), (1, Some("a1"), Some("b2"))].into()
    );
    let left = rows(&window_join(
        Join::left().transient().tumbling(ten),
        l.clone(),
        r.clone(),
    ));
    assert_eq!(
        left,
        [
            (1, Some("a1"), Some("b1")),
            (1, Some("a1"), Some("b2")),
            (2, Some("a2"), None),
            (1, Some("a3"), None)
        ]
        .into()
    );
    let right = rows(&window_join(
        Join::right().transient().tumbling(ten),
        l.clone(),
        r.clone(),
    ));
    assert_eq!(
        right,
        [
            (1, Some("a1"), Some("b1")),
            (1, Some("a1"), Some("b2")),
            (3, None, Some("b3"))
        ]
        .into()
    );
    let full = rows(&window_join(
        Join::full().transient().tumbling(ten),
        l.clone(),
        r.clone(),
    ));
    assert_eq!(full.len(), 5);
    assert!(full.contains(&(3, None, Some("b3"))) && full.contains(&(2, Some("a2"), None)));
    let semi = window_join(Join::semi().transient().tumbling(ten), l, r);
    assert_eq!(rows(&semi), [(1, Some("a1"), None)].into());
    assert_eq!(semi.values().len(), 1, "a semi join emits a left row once");
}

#[test]
fn windowed_join_drops_and_counts_late_rows_on_either_side() {
    // Across its two inputs a join sees records in arrival order, which the
    // engine does not fix between ports: the interleaving is scripted here.
    use streamwork::core::testkit::CoHarness;
    let late = LateCounter::new();
    let join: streamwork::join::WindowJoin<Left, Right, u32> = Join::full()
        .transient()
        .tumbling(Duration::from_millis(10))
        .count_late_in(late.clone());
    let mut harness = CoHarness::new(join);
    harness.left(1, (1, 1, Name("a1")), Some(1));
    harness.right(1, (1, 2, Name("b1")), Some(2));
    harness.left(1, (1, 30, Name("a2")), Some(30));
    // Window [0, 10) closes at W = 30: both of these are late.
    harness.watermark(30);
    harness.right(1, (1, 3, Name("late-right")), Some(3));
    harness.left(1, (1, 4, Name("late-left")), Some(4));
    harness.right(1, (1, 31, Name("b2")), Some(31));
    harness.end();
    let got: BTreeSet<_> = harness
        .take(|out| out.take_buffered())
        .into_iter()
        .map(|r| {
            (
                r.value.key,
                r.value.left.map(|l| l.2.0),
                r.value.right.map(|r| r.2.0),
            )
        })
        .collect();
    assert_eq!(
        got,
        [(1, Some("a1"), Some("b1")), (1, Some("a2"), Some("b2"))].into()
    );
    assert_eq!(late.get(), 2);
}

#[test]
fn interval_bounds_are_inclusive_at_both_ends() {
    let lefts: Vec<Left> = vec![(1, 100, Name("a"))];
    let rights: Vec<Right> = vec![
        (1, 94, Name("too early")),
        (1, 95, Name("lower bound")),
        (1, 110, Name("upper bound")),
        (1, 111, Name("too late")),
    ];
    let out = CollectSink::new();
    let graph = job! {
        source l = VecSource::new(lefts);
        source r = VecSource::new(rights);
        operator tl = Watermarks::bounded(Duration::from_millis(50)).timestamps(at) <- l;
        operator tr = Watermarks::bounded(Duration::from_millis(50)).timestamps(at) <- r;
        operator joined = Join::inner().transient().interval(-5, 10) <- left(tl.key(|x: &Left| x.0)), right(tr.key(|x: &Right| x.0));
        sink o = out.clone() <- joined;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(
        rows(&out),
        [
            (1, Some("a"), Some("lower bound")),
            (1, Some("a"), Some("upper bound"))
        ]
        .into()
    );
}

type Reading = (u32, i64, Name);

#[test]
fn stream_table_join_sees_updates_and_deletes_as_they_arrive() {
    // Across its two inputs a join sees records in arrival order, which the
    // engine does not fix between ports: the interleaving is scripted here.
    use streamwork::core::testkit::CoHarness;
    use streamwork::join::StreamTableJoin;
    for (join, expected) in [
        (
            Join::inner().transient().stream_table(),
            vec![("with v1", Some("v1")), ("with v2", Some("v2"))],
        ),
        (
            Join::left().transient().stream_table(),
            vec![
                ("before any row", None),
                ("with v1", Some("v1")),
                ("with v2", Some("v2")),
                ("after delete", None),
            ],
        ),
    ] {
        let mut harness: CoHarness<StreamTableJoin<Reading, Name, u32>> = CoHarness::new(join);
        harness.left(1, (1, 0, Name("before any row")), None);
        harness.right(
            1,
            Change::Upsert {
                key: 1,
                value: Name("v1"),
            },
            None,
        );
        harness.left(1, (1, 0, Name("with v1")), None);
        harness.right(
            1,
            Change::Upsert {
                key: 1,
                value: Name("v2"),
            },
            None,
        );
        harness.left(2, (2, 0, Name("another key")), None);
        harness.left(1, (1, 0, Name("with v2")), None);
        harness.right(1, Change::Delete { key: 1 }, None);
        harness.left(1, (1, 0, Name("after delete")), None);
        let got: Vec<_> = harness
            .take(|out| out.take_buffered())
            .into_iter()
            .map(|r| (r.value.left.unwrap().2.0, r.value.right.map(|n| n.0)))
            .filter(|(name, _)| *name != "another key")
            .collect();
        assert_eq!(got, expected);
        assert_eq!(harness.operator().rows(), 0, "the deleted row is gone");
    }
}

#[test]
fn temporal_join_uses_the_row_as_of_the_event_time() {
    type Update = (u32, i64, Change<u32, Name>);
    let events: Vec<Reading> = vec![
        (1, 5, Name("at 5")),
        (1, 15, Name("at 15")),
        (1, 25, Name("at 25")),
        (1, 40, Name("at 40")),
    ];
    let updates: Vec<Update> = vec![
        (
            1,
            10,
            Change::Upsert {
                key: 1,
                value: Name("from 10"),
            },
        ),
        (
            1,
            20,
            Change::Upsert {
                key: 1,
                value: Name("from 20"),
            },
        ),
        (1, 30, Change::Delete { key: 1 }),
        (
            1,
            50,
            Change::Upsert {
                key: 1,
                value: Name("from 50"),
            },
        ),
    ];
    let out = CollectSink::new();
    let graph = job! {
        source e = VecSource::new(events);
        source u = VecSource::new(updates);
        operator te = Watermarks::monotonic().timestamps(at) <- e;
        operator tu = Watermarks::monotonic().timestamps(|u: &Update| Timestamp::from_millis(u.1)) <- u;
        operator changes = TakeChange <- tu;
        operator enriched = Join::left().transient().stream_table().temporal_transient()
            <- left(te.key(|e: &Reading| e.0)), right(changes.key(|c: &Change<u32, Name>| *c.key()));
        sink o = out.clone() <- enriched;
    }
    .unwrap();
    graph.run().unwrap();
    let mut got: Vec<_> = out
        .values()
        .into_iter()
        .map(|r: JoinRow<u32, Reading, Name>| (r.left.unwrap().2.0, r.right.map(|n| n.0)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("at 15", Some("from 10")),
            ("at 25", Some("from 20")),
            ("at 40", None),
            ("at 5", None)
        ]
    );
}

#[operator]
fn take_change(update: (u32, i64, Change<u32, Name>), out: &mut Collector<Update>) {
    out.emit(update.2);
}

#[test]
fn table_table_join_retracts_what_an_update_or_delete_invalidates() {
    use streamwork::core::testkit::CoHarness;
    use streamwork::join::TableTableJoin;
    let mut harness: CoHarness<TableTableJoin<Name, Name, u32>> =
        CoHarness::new(Join::inner().transient().tables());
    harness.left(
        1,
        Change::Upsert {
            key: 1,
            value: Name("l1"),
        },
        None,
    );
    harness.right(
        1,
        Change::Upsert {
            key: 1,
            value: Name("r1"),
        },
        None,
    );
    harness.left(
        1,
        Change::Upsert {
            key: 1,
            value: Name("l2"),
        },
        None,
    );
    harness.right(
        1,
        Change::Upsert {
            key: 1,
            value: Name("r2"),
        },
        None,
    );
    harness.right(1, Change::Delete { key: 1 }, None);
    harness.left(1, Change::Delete { key: 1 }, None);
    let got: Vec<String> = harness
        .take(|out| out.take_buffered())
        .into_iter()
        .map(|d| match d.value {
            Delta::Insert(r) => format!("+{}{}", r.left.unwrap(), r.right.unwrap()),
            Delta::Retract(r) => format!("-{}{}", r.left.unwrap(), r.right.unwrap()),
        })
        .collect();
    assert_eq!(
        got,
        vec!["+l1r1", "-l1r1", "+l2r1", "-l2r1", "+l2r2", "-l2r2"]
    );
}

#[test]
fn unwindowed_join_emits_as_soon_as_both_sides_are_known() {
    let lefts: Vec<Left> = vec![(1, 1, Name("a1")), (2, 2, Name("a2"))];
    let rights: Vec<Right> = vec![(1, 3, Name("b1")), (1, 4, Name("b2")), (3, 5, Name("b3"))];
    let out = CollectSink::new();
    let graph = job! {
        source l = VecSource::new(lefts);
        source r = VecSource::new(rights);
        operator joined[3] = Join::inner().transient().unwindowed() <- left(l.key(|x: &Left| x.0)), right(r.key(|x: &Right| x.0));
        sink o = out.clone() <- joined;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(
        rows(&out),
        [(1, Some("a1"), Some("b1")), (1, Some("a1"), Some("b2"))].into()
    );
}
