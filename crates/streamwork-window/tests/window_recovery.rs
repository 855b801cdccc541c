//! Windows recover from a checkpoint: with a failure injected before any
//! record or during any checkpoint, the committed results equal those of a
//! run without failure (the testkit's exactly-once oracle).

use std::time::Duration;

use proptest::prelude::*;
use streamwork_core::testkit::{Fault, Script, Step, assert_recovers, run_script};
use streamwork_core::{ByKey, Operator};
use streamwork_window::{WindowOutputs, Windows};

/// Every fault a script can take: before each record, in each checkpoint.
fn every_fault(script: &Script<u32, u64>) -> Vec<Fault> {
    let records = script
        .iter()
        .filter(|s| matches!(s, Step::Record { .. }))
        .count();
    let checkpoints = script
        .iter()
        .filter(|s| matches!(s, Step::Checkpoint))
        .count();
    (0..records)
        .map(Fault::BeforeRecord)
        .chain((1..=checkpoints).map(Fault::InCheckpoint))
        .collect()
}

/// Records of keys `0..keys` at increasing times with watermarks trailing
/// by `lag`, a checkpoint every `every` records, some events out of order.
fn scripted(events: u64, keys: u32, lag: i64, every: u64) -> Script<u32, u64> {
    let mut script = Vec::new();
    for i in 0..events {
        // Every seventh event is 40 ms behind.
        let time = (i * 17) as i64 - if i % 7 == 3 { 40 } else { 0 };
        script.push(Step::Record {
            key: (i % keys as u64) as u32,
            value: i,
            time: Some(time),
        });
        script.push(Step::Watermark((i * 17) as i64 - lag));
        if i % every == every - 1 {
            script.push(Step::Checkpoint);
        }
    }
    script
}

fn assert_window_recovers<O>(windows: O, script: &Script<u32, u64>)
where
    O: Operator<In = u64, Key = ByKey<u32>>,
    O::Out: DrainWindows,
{
    let clean = run_script(windows.clone(), script, None, |o| o.drain_all()).unwrap();
    assert!(!clean.output.is_empty(), "the script fires no window");
    assert_recovers(windows, script, every_fault(script), |o| o.drain_all());
}

/// Outputs of a window operator, drained to something comparable: the
/// results of each step, sorted.
trait DrainWindows {
    fn drain_all(&mut self) -> Vec<String>;
}

impl<R, T> DrainWindows for WindowOutputs<R, T>
where
    R: streamwork_core::Data + std::fmt::Debug,
    T: streamwork_core::Data + std::fmt::Debug,
{
    fn drain_all(&mut self) -> Vec<String> {
        let results = self
            .results
            .take_buffered()
            .into_iter()
            .map(|r| format!("{:?}", r.value));
        let late = self
            .late
            .take_buffered()
            .into_iter()
            .map(|r| format!("late {:?}", r.value));
        // One firing emits its keys in no particular order (hash table
        // order, which a restore rebuilds differently): compare them sorted.
        let mut drained: Vec<String> = results.chain(late).collect();
        drained.sort();
        drained
    }
}

#[test]
fn tumbling_windows_recover_from_every_fault() {
    let windows = Windows::tumbling(Duration::from_millis(100)).count::<u64, u32>();
    assert_window_recovers(windows, &scripted(60, 3, 0, 7));
}

#[test]
fn sliding_windows_with_lateness_recover_from_every_fault() {
    let windows = Windows::sliding(Duration::from_millis(100), Duration::from_millis(30))
        .allowed_lateness(Duration::from_millis(20))
        .sum::<u64, u32, _>(|v: &u64| *v);
    // Watermarks trail by 10 ms, so the 40 ms stragglers are late: some
    // within the lateness (updates), some beyond it (the late channel).
    assert_window_recovers(windows, &scripted(60, 4, 10, 5));
}

#[test]
fn session_windows_recover_from_every_fault() {
    let windows = Windows::session(Duration::from_millis(30))
        .allowed_lateness(Duration::from_millis(50))
        .count::<u64, u32>();
    // Keys 0..5 at 17 ms steps: each key is seen every 85 ms, so sessions
    // close and open; the late events merge into or update them.
    assert_window_recovers(windows, &scripted(60, 5, 0, 6));
}

#[test]
fn count_windows_recover_from_every_fault() {
    let windows = Windows::sliding_count(4, 2).sum::<u64, u32, _>(|v: &u64| *v);
    assert_window_recovers(windows, &scripted(50, 3, 0, 4));
}

/// A user's accumulator, archivable through `#[state_data]` alone.
#[streamwork::state_data]
#[derive(Clone, Debug, Default)]
struct Spread {
    low: Option<u64>,
    high: u64,
    seen: u32,
}

/// The spread (highest minus lowest) and count of a window's values.
#[derive(Clone, Copy)]
struct SpreadOf;

impl streamwork_window::Aggregate<u64> for SpreadOf {
    type Acc = Spread;
    type Out = (u64, u32);
    fn create(&self) -> Spread {
        Spread::default()
    }
    fn add(&self, acc: &mut Spread, value: &u64) {
        acc.low = Some(acc.low.map_or(*value, |low| low.min(*value)));
        acc.high = acc.high.max(*value);
        acc.seen += 1;
    }
    fn merge(&self, into: &mut Spread, other: &Spread) {
        if let Some(low) = other.low {
            self.add(into, &low);
            into.seen -= 1;
        }
        into.high = into.high.max(other.high);
        into.seen += other.seen;
    }
    fn result(&self, acc: &Spread) -> (u64, u32) {
        (acc.high - acc.low.unwrap_or(acc.high), acc.seen)
    }
}

#[test]
fn a_user_accumulator_marked_state_data_recovers_from_every_fault() {
    let sliding = Windows::sliding(Duration::from_millis(100), Duration::from_millis(30))
        .aggregate::<u64, u32, _>(SpreadOf);
    assert_window_recovers(sliding, &scripted(60, 4, 10, 5));
    let sessions = Windows::session(Duration::from_millis(30)).aggregate::<u64, u32, _>(SpreadOf);
    assert_window_recovers(sessions, &scripted(60, 5, 0, 6));
}

#[test]
fn a_transient_window_loses_its_state_in_a_recovery() {
    // The oracle is not vacuous: a window that leaves its state out of the
    // checkpoint commits different results after a failure.
    let windows = Windows::tumbling(Duration::from_millis(100))
        .transient()
        .count::<u64, u32>();
    let script = scripted(60, 3, 0, 7);
    let clean = run_script(windows.clone(), &script, None, |o| o.drain_all()).unwrap();
    let faulty = run_script(windows, &script, Some(Fault::BeforeRecord(30)), |o| {
        o.drain_all()
    })
    .unwrap();
    assert_eq!(faulty.restarts, 1);
    assert_ne!(faulty.output, clean.output);
}

/// A script from generated steps: checkpoints, watermarks advancing, and
/// records up to 100 ms behind the watermark (some late).
fn script_of(steps: Vec<(u8, u32, i64)>) -> Script<u32, u64> {
    let mut script = Vec::new();
    let mut watermark = 0i64;
    for (i, (kind, key, time)) in steps.into_iter().enumerate() {
        match kind {
            0 => script.push(Step::Checkpoint),
            1 => {
                watermark += time / 8;
                script.push(Step::Watermark(watermark));
            }
            _ => script.push(Step::Record {
                key,
                value: i as u64,
                time: Some(watermark + time - 100),
            }),
        }
    }
    script
}

/// One of the script's faults, chosen by `at`, in a checkpoint or not.
fn pick_fault(script: &Script<u32, u64>, at: usize, in_checkpoint: bool) -> Option<Fault> {
    let faults = every_fault(script);
    let wanted: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|f| matches!(f, Fault::InCheckpoint(_)) == in_checkpoint)
        .collect();
    let pool = if wanted.is_empty() { faults } else { wanted };
    (!pool.is_empty()).then(|| pool[at % pool.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any script of records (any order), watermarks and checkpoints, and
    /// any fault: sliding windows commit what they commit without it.
    #[test]
    fn sliding_windows_recover_from_any_fault(
        steps in proptest::collection::vec((0u8..10, 0u32..4, 0i64..400), 1..120),
        at in 0usize..200,
        in_checkpoint in any::<bool>(),
    ) {
        let script = script_of(steps);
        let Some(fault) = pick_fault(&script, at, in_checkpoint) else { return Ok(()) };
        let windows = Windows::sliding(Duration::from_millis(60), Duration::from_millis(20))
            .allowed_lateness(Duration::from_millis(30))
            .sum::<u64, u32, _>(|v: &u64| *v);
        assert_recovers(windows, &script, [fault], |o| o.drain_all());
    }

    /// The same for session windows, whose timers are rebuilt on restore.
    #[test]
    fn session_windows_recover_from_any_fault(
        steps in proptest::collection::vec((0u8..10, 0u32..4, 0i64..400), 1..120),
        at in 0usize..200,
        in_checkpoint in any::<bool>(),
    ) {
        let script = script_of(steps);
        let Some(fault) = pick_fault(&script, at, in_checkpoint) else { return Ok(()) };
        let windows = Windows::session(Duration::from_millis(25))
            .allowed_lateness(Duration::from_millis(30))
            .count::<u64, u32>();
        assert_recovers(windows, &script, [fault], |o| o.drain_all());
    }
}
