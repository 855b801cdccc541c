//! Joins recover from a checkpoint: with a failure injected before any
//! record or during any checkpoint, the committed output equals that of a
//! run without failure (the testkit's exactly-once oracle), for every join.

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use streamwork_core::ports::Either;
use streamwork_core::testkit::{CoScript, CoStep, Fault, assert_co_recovers, run_co_script};
use streamwork_core::{ByKey, Collector, Data, Operator};
use streamwork_join::{Change, Join};

/// Records on both sides for keys `0..4`, times up to 100 ms behind the
/// watermark, watermarks and checkpoints, from generated triples.
fn script_of<L: Clone, R: Clone>(
    steps: &[(u8, u32, i64)],
    left: impl Fn(usize) -> L,
    right: impl Fn(usize) -> R,
) -> CoScript<u32, L, R> {
    let mut script = Vec::new();
    let mut watermark = 0i64;
    for (i, &(kind, key, time)) in steps.iter().enumerate() {
        match kind {
            0 => script.push(CoStep::Checkpoint),
            1 => {
                watermark += time / 4;
                script.push(CoStep::Watermark(watermark));
            }
            2..=5 => script.push(CoStep::Left {
                key,
                value: left(i),
                time: Some(watermark + time - 100),
            }),
            _ => script.push(CoStep::Right {
                key,
                value: right(i),
                time: Some(watermark + time - 100),
            }),
        }
    }
    script
}

/// Every fault the script can take.
fn every_fault<L, R>(script: &CoScript<u32, L, R>) -> Vec<Fault> {
    let records = script
        .iter()
        .filter(|s| matches!(s, CoStep::Left { .. } | CoStep::Right { .. }))
        .count();
    let checkpoints = script
        .iter()
        .filter(|s| matches!(s, CoStep::Checkpoint))
        .count();
    (0..records)
        .map(Fault::BeforeRecord)
        .chain((1..=checkpoints).map(Fault::InCheckpoint))
        .collect()
}

/// One step's output, sorted: rows emitted together (a window closing for
/// several keys) come in no set order.
fn sorted<T: Data + Debug>(out: &mut Collector<T>) -> Vec<String> {
    let mut rows: Vec<String> = out
        .take_buffered()
        .into_iter()
        .map(|r| format!("{:?}", r.value))
        .collect();
    rows.sort();
    rows
}

fn check<C, L, R, T>(join: C, script: &CoScript<u32, L, R>, fault_at: usize)
where
    C: Operator<In = Either<L, R>, Key = ByKey<u32>, Out = Collector<T>>,
    L: Clone,
    R: Clone,
    T: Data + Debug,
{
    let faults = every_fault(script);
    if faults.is_empty() {
        return;
    }
    let fault = faults[fault_at % faults.len()];
    assert_co_recovers(join, script, [fault], sorted);
}

fn steps() -> impl Strategy<Value = Vec<(u8, u32, i64)>> {
    proptest::collection::vec((0u8..10, 0u32..4, 0i64..200), 1..100)
}

/// A changelog's key is the record's key.
fn keyed_changes(
    script: CoScript<u32, u64, Change<u32, u64>>,
) -> CoScript<u32, u64, Change<u32, u64>> {
    script
        .into_iter()
        .map(|step| match step {
            CoStep::Right { value, time, .. } => CoStep::Right {
                key: *value.key(),
                value,
                time,
            },
            other => other,
        })
        .collect()
}

fn change(i: usize) -> Change<u32, u64> {
    let key = (i % 4) as u32;
    if i.is_multiple_of(5) {
        Change::Delete { key }
    } else {
        Change::Upsert {
            key,
            value: i as u64,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn window_joins_recover(steps in steps(), at in 0usize..500) {
        let script = script_of(&steps, |i| i as u64, |i| i as u64 * 10);
        let size = Duration::from_millis(40);
        check(Join::full().tumbling::<u64, u64, u32>(size), &script, at);
        check(
            Join::left()
                .sliding::<u64, u64, u32>(size, Duration::from_millis(20)),
            &script,
            at,
        );
    }

    #[test]
    fn interval_and_unwindowed_joins_recover(steps in steps(), at in 0usize..500) {
        let script = script_of(&steps, |i| i as u64, |i| i as u64 * 10);
        check(Join::inner().interval::<u64, u64, u32>(-30, 30), &script, at);
        check(
            Join::inner()
                .unwindowed::<u64, u64, u32>()
                .retention(Duration::from_millis(60)),
            &script,
            at,
        );
    }

    #[test]
    fn table_joins_recover(steps in steps(), at in 0usize..500) {
        let script = keyed_changes(script_of(&steps, |i| i as u64, change));
        check(Join::left().stream_table::<u64, u64, u32>(), &script, at);
        check(
            Join::left().stream_table::<u64, u64, u32>().temporal(),
            &script,
            at,
        );
        let tables: CoScript<u32, Change<u32, u64>, Change<u32, u64>> = script
            .into_iter()
            .map(|step| match step {
                CoStep::Left { key, value, time } => CoStep::Left {
                    key,
                    value: Change::Upsert { key, value },
                    time,
                },
                CoStep::Right { key, value, time } => CoStep::Right { key, value, time },
                CoStep::Watermark(w) => CoStep::Watermark(w),
                CoStep::ProcessingTime(t) => CoStep::ProcessingTime(t),
                CoStep::Checkpoint => CoStep::Checkpoint,
            })
            .collect();
        check(Join::inner().tables::<u64, u64, u32>(), &tables, at);
    }
}

#[test]
fn a_join_left_out_of_checkpoints_loses_its_rows_in_a_recovery() {
    // The oracle is not vacuous: built `transient()`, a recovered window
    // join has forgotten the rows it buffered before the checkpoint.
    let script: CoScript<u32, u64, u64> = vec![
        CoStep::Left {
            key: 1,
            value: 7,
            time: Some(5),
        },
        CoStep::Checkpoint,
        CoStep::Right {
            key: 1,
            value: 70,
            time: Some(6),
        },
        CoStep::Watermark(100),
    ];
    let join = || Join::inner().tumbling::<u64, u64, u32>(Duration::from_millis(10));
    let transient = || {
        Join::inner()
            .transient()
            .tumbling::<u64, u64, u32>(Duration::from_millis(10))
    };
    let clean = run_co_script(join(), &script, None, sorted).unwrap();
    assert_eq!(clean.output.len(), 1);
    let forgetful =
        run_co_script(transient(), &script, Some(Fault::BeforeRecord(1)), sorted).unwrap();
    assert!(forgetful.output.is_empty());
    let kept = run_co_script(join(), &script, Some(Fault::BeforeRecord(1)), sorted).unwrap();
    assert_eq!(kept.output, clean.output);
}
