//! Session windows whose sessions merge: a merged window fires once it
//! ends, and merging one session away keeps the timers the key's other
//! sessions wait for (a timer is a time and a key, which two sessions of
//! one key can share).

use std::time::Duration;

use streamwork_core::testkit::Harness;
use streamwork_window::{Firing, WindowOutputs, WindowResult, Windows};

type Results = Vec<(i64, i64, u64, Firing)>;

/// The results emitted so far: start, end, sum and firing.
fn results(out: &mut WindowOutputs<WindowResult<u32, u64>, u64>) -> Results {
    out.results
        .take_buffered()
        .into_iter()
        .map(|r| {
            let r = r.value;
            (
                r.window.start.millis(),
                r.window.end.millis(),
                r.value,
                r.firing,
            )
        })
        .collect()
}

/// Sessions of 10 ms gaps, kept 30 ms after they fire, summing values.
fn sessions() -> Harness<
    impl streamwork_core::Operator<
        In = u64,
        Key = streamwork_core::ByKey<u32>,
        Out = WindowOutputs<WindowResult<u32, u64>, u64>,
    >,
> {
    Harness::new(
        Windows::session(Duration::from_millis(10))
            .allowed_lateness(Duration::from_millis(30))
            .sum::<u64, u32, _>(|v: &u64| *v),
    )
}

#[test]
fn a_late_record_that_extends_a_fired_session_past_the_watermark_fires_at_the_new_end() {
    let mut windows = sessions();
    windows.record(7, 1, Some(0));
    windows.watermark(10);
    assert_eq!(windows.take(results), [(0, 10, 1, Firing::Final)]);
    // Late, within the lateness, and merged into a session that now ends
    // after the watermark: a window not emitted yet.
    windows.record(7, 2, Some(5));
    assert_eq!(windows.take(results), []);
    windows.watermark(100);
    assert_eq!(windows.take(results), [(0, 15, 3, Firing::Final)]);
}

#[test]
fn merging_a_session_away_keeps_the_timer_another_session_of_its_key_waits_for() {
    let mut windows = sessions();
    windows.record(7, 1, Some(0));
    windows.watermark(10);
    assert_eq!(windows.take(results), [(0, 10, 1, Firing::Final)]);
    // A session ending at 40, when the fired one is forgotten (10 + 30):
    // one timer for both. Merged away, it must not take that timer along.
    windows.record(7, 2, Some(30));
    windows.record(7, 4, Some(38));
    windows.watermark(41);
    assert_eq!(windows.take(results), []);
    // The fired session was forgotten at 40: a late record at 9 is a
    // session of its own, not an update of it.
    windows.record(7, 8, Some(9));
    assert_eq!(windows.take(results), [(9, 19, 8, Firing::Final)]);
    windows.watermark(100);
    assert_eq!(windows.take(results), [(30, 48, 6, Firing::Final)]);
}
