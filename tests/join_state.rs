//! Join state is released as event time passes it, driven by hand with the
//! testkit harness: interval joins drop rows no future row can match,
//! temporal joins drop superseded table versions.

use streamwork::core::testkit::CoHarness;
use streamwork::join::{Change, IntervalJoin, JoinRow, TemporalTableJoin};
use streamwork::prelude::*;

#[test]
fn interval_join_state_is_released_by_the_watermark() {
    let mut join: CoHarness<IntervalJoin<&str, &str, u32>> =
        CoHarness::new(Join::inner().transient().interval(-5, 10));
    join.left(1, "a", Some(100));
    join.right(7, "b", Some(200));
    assert_eq!(join.operator().buffered(), 2);
    // A right row at >= 110 can no longer come once W = 111: "a" goes.
    join.watermark(111);
    assert_eq!(join.operator().buffered(), 1);
    // "b" (200) could match lefts up to 205: it goes once W passes 205.
    join.watermark(205);
    assert_eq!(join.operator().buffered(), 1);
    join.watermark(206);
    assert_eq!(join.operator().buffered(), 0);
    // And a row behind the watermark is late: not kept, not joined.
    join.right(1, "late", Some(100));
    assert_eq!(join.operator().buffered(), 0);
    let out: Vec<JoinRow<u32, &str, &str>> = join
        .take(|out| out.take_buffered())
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert!(out.is_empty());
}

#[test]
fn a_long_interval_join_run_keeps_its_state_flat() {
    let mut join: CoHarness<IntervalJoin<u64, u64, u64>> =
        CoHarness::new(Join::inner().transient().interval(0, 10));
    let mut peak = 0;
    for t in 0..100_000i64 {
        let key = (t % 50) as u64;
        join.left(key, t as u64, Some(t));
        join.right(key, t as u64, Some(t + 3));
        join.watermark(t);
        peak = peak.max(join.operator().buffered());
    }
    // About (interval + lateness of a row) * rate rows: bounded, whatever the run length.
    assert!(peak < 100, "peak state {peak} rows");
}

#[test]
fn temporal_join_drops_superseded_versions() {
    let mut join: CoHarness<TemporalTableJoin<&str, &str, u32>> =
        CoHarness::new(Join::left().transient().stream_table().temporal_transient());
    for (t, v) in [(10, "v10"), (20, "v20"), (30, "v30")] {
        join.right(1, Change::Upsert { key: 1, value: v }, Some(t));
    }
    assert_eq!(join.operator().versions(), 3);
    join.watermark(25);
    // v10 is superseded by v20 at or before the watermark; v20 is in force.
    assert_eq!(join.operator().versions(), 2);
    join.left(1, "at 27", Some(27));
    join.watermark(40);
    let out: Vec<_> = join
        .take(|out| out.take_buffered())
        .into_iter()
        .map(|r| (r.value.left, r.value.right))
        .collect();
    assert_eq!(out, vec![(Some("at 27"), Some("v20"))]);
    assert_eq!(join.operator().versions(), 1);
}

/// Every kind of interval join does what its kind says: pairs as soon as
/// both rows are known; a left (right) row that matched nothing is
/// emitted alone once event time passes its interval; a semi join emits a
/// left row once, at its first match.
#[test]
fn outer_and_semi_interval_joins_emit_what_their_kind_says() {
    type Row = (Option<&'static str>, Option<&'static str>);
    fn run(join: IntervalJoin<&'static str, &'static str, u32>) -> Vec<(Row, i64)> {
        let mut join = CoHarness::new(join);
        // Interval [-5, 10]: "a" at 100 matches rights in [95, 110].
        join.left(1, "a", Some(100));
        join.left(1, "a2", Some(100));
        join.right(2, "lonely right", Some(150));
        join.right(1, "b", Some(105));
        join.right(1, "c", Some(108));
        join.watermark(1_000);
        let mut rows: Vec<(Row, i64)> = join
            .take(|out| out.take_buffered())
            .into_iter()
            .map(|r| ((r.value.left, r.value.right), r.time.unwrap().millis()))
            .collect();
        rows.sort();
        rows
    }
    let pairs = vec![
        ((Some("a"), Some("b")), 105),
        ((Some("a"), Some("c")), 108),
        ((Some("a2"), Some("b")), 105),
        ((Some("a2"), Some("c")), 108),
    ];
    assert_eq!(run(Join::inner().transient().interval(-5, 10)), pairs);
    // Only the key-2 right row matches nothing: right and full emit it.
    let mut right = pairs.clone();
    right.insert(0, ((None, Some("lonely right")), 155));
    assert_eq!(run(Join::right().transient().interval(-5, 10)), right);
    assert_eq!(run(Join::full().transient().interval(-5, 10)), right);
    assert_eq!(run(Join::left().transient().interval(-5, 10)), pairs);
    assert_eq!(
        run(Join::semi().transient().interval(-5, 10)),
        vec![((Some("a"), None), 105), ((Some("a2"), None), 105)]
    );
    // A left row with no right row in its interval.
    let mut join = CoHarness::new(Join::left().transient().interval::<&str, &str, u32>(0, 10));
    join.left(3, "alone", Some(50));
    join.right(3, "too late for it", Some(61));
    join.watermark(60);
    assert!(
        join.take(|out| out.take_buffered()).is_empty(),
        "W = 60: it may still match"
    );
    join.watermark(61);
    let out: Vec<_> = join
        .take(|out| out.take_buffered())
        .into_iter()
        .map(|r| (r.value.left, r.value.right, r.time.map(Timestamp::millis)))
        .collect();
    assert_eq!(out, [(Some("alone"), None, Some(60))]);
}
