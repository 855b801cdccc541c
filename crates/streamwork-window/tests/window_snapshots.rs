//! Windows snapshot copy-on-write: taking a snapshot only freezes their
//! state (slices, sessions, chunks: the task thread's pause), the entries are gathered and
//! archived later, when the checkpoint is written, and whatever the
//! operator does in between (records into the frozen slices, early
//! firings, slices purged) never reaches the snapshot. Snapshots written
//! inline by earlier versions still restore.

use std::time::Duration;

use proptest::prelude::*;
use streamwork_core::testkit::Harness;
use streamwork_core::{CheckpointId, KeyGroups, Operator};
use streamwork_state::KeyedCodec;
use streamwork_window::{WindowOutputs, Windows};

/// One step of a generated run.
#[derive(Clone, Debug)]
enum Step {
    Record { key: u32, value: u64, time: i64 },
    Watermark(i64),
    ProcessingTime(i64),
}

fn steps_of(raw: Vec<(u8, u32, i64)>) -> Vec<Step> {
    let (mut watermark, mut clock) = (0i64, 0i64);
    raw.into_iter()
        .enumerate()
        .map(|(i, (kind, key, time))| match kind {
            0 => {
                watermark += time / 8;
                Step::Watermark(watermark)
            }
            1 => {
                clock += time;
                Step::ProcessingTime(clock)
            }
            _ => Step::Record {
                key,
                value: i as u64,
                // Up to 100 ms behind the watermark: some late.
                time: watermark + time - 100,
            },
        })
        .collect()
}

fn drive<O>(harness: &mut Harness<O>, steps: &[Step])
where
    O: Operator<In = u64, Key = streamwork_core::ByKey<u32>>,
{
    for step in steps {
        match *step {
            Step::Record { key, value, time } => harness.record(key, value, Some(time)),
            Step::Watermark(t) => harness.watermark(t),
            Step::ProcessingTime(t) => harness.processing_time(t),
        }
    }
}

/// Everything emitted so far, sorted (one firing emits its keys in hash
/// table order, which a restore rebuilds differently).
fn drained<R, T>(out: &mut WindowOutputs<R, T>) -> Vec<String>
where
    R: streamwork_core::Data + std::fmt::Debug,
    T: streamwork_core::Data + std::fmt::Debug,
{
    let results = out.results.take_buffered().into_iter();
    let late = out.late.take_buffered().into_iter();
    let mut all: Vec<String> = results
        .map(|r| format!("{:?}", r.value))
        .chain(late.map(|r| format!("late {:?}", r.value)))
        .collect();
    all.sort();
    all
}

/// Takes a snapshot of `windows` after `steps[..cut]`, lets the original
/// run on to the end, and only then archives the snapshot and restores it:
/// the restored run must emit what the original emitted after the cut.
fn assert_snapshot_holds<O, R>(windows: O, steps: &[Step], cut: usize) -> Result<(), TestCaseError>
where
    O: Operator<In = u64, Key = streamwork_core::ByKey<u32>, Out = WindowOutputs<R, u64>>,
    R: streamwork_core::Data + std::fmt::Debug,
{
    let cut = cut.min(steps.len());
    let mut original = Harness::new(windows.clone());
    drive(&mut original, &steps[..cut]);
    original.take(drained);
    let snapshot = original
        .snapshot()
        .expect("checkpointed windows take a snapshot");
    // The task thread only froze its state: the entries are a side
    // record, archived when the checkpoint is written (beside the layout
    // fingerprint of their types).
    prop_assert!(snapshot.bytes.is_empty());
    prop_assert_eq!(snapshot.side.len(), 2);
    drive(&mut original, &steps[cut..]);
    original.end();
    let after = original.take(drained);

    // Archived only now, after the original changed its state.
    let mut restored = Harness::restored(windows, CheckpointId::new(1), Some(&snapshot)).unwrap();
    drive(&mut restored, &steps[cut..]);
    restored.end();
    prop_assert_eq!(restored.take(drained), after);
    Ok(())
}

fn raw_steps() -> impl Strategy<Value = Vec<(u8, u32, i64)>> {
    proptest::collection::vec((0u8..10, 0u32..4, 0i64..400), 1..150)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Sliding windows: records into the frozen slices, early firings by
    /// count, slices purged, none of it reaches the snapshot.
    #[test]
    fn a_sliced_snapshot_holds_the_windows_as_they_were_when_it_was_taken(
        raw in raw_steps(),
        cut in 0usize..150,
    ) {
        let windows = Windows::sliding(Duration::from_millis(60), Duration::from_millis(20))
            .allowed_lateness(Duration::from_millis(30))
            .early_every(3)
            .sum::<u64, u32, _>(|v: &u64| *v);
        assert_snapshot_holds(windows, &steps_of(raw), cut)?;
    }

    /// Session windows: sessions merged, fired and forgotten after the
    /// snapshot, none of it reaches it.
    #[test]
    fn a_session_snapshot_holds_the_sessions_as_they_were_when_it_was_taken(
        raw in raw_steps(),
        cut in 0usize..150,
    ) {
        let windows = Windows::session(Duration::from_millis(25))
            .allowed_lateness(Duration::from_millis(30))
            .sum::<u64, u32, _>(|v: &u64| *v);
        assert_snapshot_holds(windows, &steps_of(raw), cut)?;
    }

    /// Count windows: chunks filled and dropped after the snapshot.
    #[test]
    fn a_count_snapshot_holds_the_chunks_as_they_were_when_it_was_taken(
        raw in raw_steps(),
        cut in 0usize..150,
    ) {
        let windows = Windows::sliding_count(4, 2).sum::<u64, u32, _>(|v: &u64| *v);
        assert_snapshot_holds(windows, &steps_of(raw), cut)?;
    }
}

#[test]
fn a_snapshot_written_inline_by_an_earlier_version_restores() {
    // Before snapshots were archived beside, a window wrote its entries in
    // the snapshot itself: (slice index, accumulator, events) per key.
    let codec = KeyedCodec::<i64, u32, Vec<(i64, u64, u64)>>::new();
    let mut inline = codec
        .snapshot(
            150,
            vec![(7, vec![(1, 5, 2)]), (8, vec![(1, 1, 1), (2, 4, 1)])],
            KeyGroups::DEFAULT,
        )
        .unwrap();
    // Nor did it keep its types' layout fingerprint beside it.
    inline
        .side
        .retain(|record| record.stream != streamwork_state::LAYOUT_STREAM);
    assert!(!inline.bytes.is_empty() && inline.side.is_empty());
    let windows = Windows::tumbling(Duration::from_millis(100)).sum::<u64, u32, _>(|v: &u64| *v);
    let mut restored = Harness::restored(windows, CheckpointId::new(3), Some(&inline)).unwrap();
    restored.record(7, 10, Some(199));
    restored.end();
    assert_eq!(
        restored.take(drained),
        vec![
            "WindowResult { key: 7, window: Window { start: Timestamp(100), end: Timestamp(200) }, value: 15, firing: Final }",
            "WindowResult { key: 8, window: Window { start: Timestamp(100), end: Timestamp(200) }, value: 1, firing: Final }",
            "WindowResult { key: 8, window: Window { start: Timestamp(200), end: Timestamp(300) }, value: 4, firing: Final }"
        ]
    );
}

#[test]
fn a_snapshot_whose_side_record_is_lost_is_refused() {
    let windows = Windows::tumbling(Duration::from_millis(100)).count::<u64, u32>();
    let mut original = Harness::new(windows.clone());
    original.record(1, 1, Some(10));
    let mut snapshot = original.snapshot().unwrap();
    snapshot.side.clear();
    let Err(error) = Harness::restored(windows, CheckpointId::new(1), Some(&snapshot)) else {
        panic!("a restore without the archived entries must be refused");
    };
    let message = error.to_string();
    assert!(
        message.contains("not in the checkpoint"),
        "the refusal names what is missing: {message}"
    );
}
