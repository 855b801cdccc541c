//! Stop is a savepoint, not a drain: a windowed job stopped in the middle
//! of its input keeps its windows open and its event time where it was,
//! and the next run on the same checkpoint directory resumes so that the
//! committed output is exactly that of a run never stopped. A drain is
//! still there when asked for.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::StopHandle;
use support::{assert_same, dir, exactly_once};

/// `(i % 5, i)` for `i` in `0..n`, event time `i` ms, replayable. When it
/// reaches `stop_at` it asks the job to stop and reads nothing more, so
/// that the input cannot run out before the savepoint is taken.
#[derive(Clone)]
struct Events {
    n: u64,
    next: u64,
    stop_at: Option<u64>,
    stop: Arc<Mutex<Option<StopHandle>>>,
}

impl Source for Events {
    type Out = Collector<(u64, u64)>;

    fn replayable(&self) -> bool {
        true
    }

    fn poll(&mut self, out: &mut Collector<(u64, u64)>) -> Result<SourcePoll, ConnectorError> {
        if self.next == self.n {
            return Ok(SourcePoll::Finished);
        }
        if Some(self.next) == self.stop_at {
            // Before the handle is published, wait for it; after, wait to
            // be stopped.
            if let Some(stop) = self.stop.lock().unwrap().as_ref() {
                stop.stop();
            }
            std::thread::sleep(Duration::from_millis(1));
            return Ok(SourcePoll::Idle);
        }
        let end = (self.next + 20).min(self.n);
        let end = match self.stop_at {
            Some(stop) if self.next < stop => end.min(stop),
            _ => end,
        };
        for i in self.next..end {
            out.emit_at((i % 5, i), Timestamp::from_millis(i as i64));
        }
        self.next = end;
        Ok(SourcePoll::Emitted)
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        Some(support::position(self.next))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if let Some(next) = support::restored_position(restore)? {
            self.next = next;
        }
        Ok(())
    }
}

impl streamwork::core::checkpoint::Replayable for Events {}

type Counted = WindowResult<u64, u64>;

fn windows_job(
    events: Events,
    p: u32,
    sink: &CollectSink<Counted>,
    late: &CollectSink<(u64, u64)>,
) -> JobGraph {
    job! {
        delivery exactly_once;
        source events = events;
        operator timed = Watermarks::bounded(Duration::from_millis(5))
            .timestamps(|e: &(u64, u64)| Timestamp::from_millis(e.1 as i64)) <- events;
        operator counts[p] { results, late } = Windows::tumbling(Duration::from_millis(100))
            .count() <- timed.key(|e: &(u64, u64)| e.0);
        sink out = sink.transactional() <- counts.results;
        sink late_out = late.transactional() <- counts.late;
    }
    .unwrap()
}

fn events(n: u64, stop_at: Option<u64>) -> (Events, Arc<Mutex<Option<StopHandle>>>) {
    let stop = Arc::new(Mutex::new(None));
    let events = Events {
        n,
        next: 0,
        stop_at,
        stop: stop.clone(),
    };
    (events, stop)
}

fn key(r: &Counted) -> (u64, i64, u64) {
    (r.key, r.window.start.millis(), r.value)
}

#[test]
fn a_stopped_windowed_job_resumes_as_if_never_stopped() {
    let n = 5_000;
    let expected: Vec<(u64, i64, u64)> = {
        let (sink, late) = (CollectSink::new(), CollectSink::new());
        let (source, _) = events(n, None);
        windows_job(source, 2, &sink, &late)
            .run_with(exactly_once(&dir("savepoint-uninterrupted"), 0))
            .unwrap();
        sink.values().iter().map(key).collect()
    };
    assert_eq!(expected.len(), 5 * 50, "every window of every key");
    for (p_before, p_after) in [(2, 2), (2, 3), (3, 1)] {
        let checkpoints = dir(&format!("savepoint-{p_before}-{p_after}"));
        let (sink, late) = (CollectSink::new(), CollectSink::new());
        let (source, stop) = events(n, Some(n / 2));
        let handle = windows_job(source, p_before, &sink, &late)
            .start_with(exactly_once(&checkpoints, 0))
            .unwrap();
        *stop.lock().unwrap() = Some(handle.stop_handle());
        let report = handle.join().unwrap();
        assert!(report.stopped);
        let savepoint = report.savepoint.expect("the stop took a savepoint");
        let before: Vec<_> = sink.values().iter().map(key).collect();
        // Nothing drained: only windows the watermark had passed fired,
        // each with its full count, and event time did not jump to its end.
        assert!(
            before.len() < expected.len(),
            "{} windows fired at the stop",
            before.len()
        );
        for row in &before {
            assert!(
                expected.contains(row),
                "{row:?} is not a window of an uninterrupted run"
            );
        }
        // The next run resumes from the savepoint.
        let (source, _) = events(n, None);
        let report = windows_job(source, p_after, &sink, &late)
            .run_with(exactly_once(&checkpoints, 0))
            .unwrap();
        assert_eq!(report.recovery.restored_from, Some(savepoint));
        // The restore and every checkpoint's measurements are reported.
        assert!(
            report
                .to_string()
                .contains(&format!("restored from checkpoint {savepoint}")),
            "{report}"
        );
        for checkpoint in &report.checkpoints {
            assert!(checkpoint.longest_alignment <= checkpoint.duration);
            if let Some((component, instance)) = &checkpoint.paused_most {
                assert!(report.component(component).is_some(), "{component}");
                assert!(instance.0 < 3, "{instance:?}");
            }
        }
        let all: Vec<_> = sink.values().iter().map(key).collect();
        assert_same(
            &all,
            &expected,
            &format!("stopped at p={p_before}, resumed at p={p_after}"),
        );
        assert!(
            late.values().is_empty(),
            "no event became late: {:?}",
            late.values().len()
        );
    }
}

#[test]
fn a_drain_still_ends_the_input_and_fires_every_window() {
    let n = 2_000;
    let (sink, late) = (CollectSink::new(), CollectSink::new());
    let (source, stop) = events(n, Some(n / 2));
    let handle = windows_job(source, 2, &sink, &late)
        .start_with(exactly_once(&dir("savepoint-drain"), 0))
        .unwrap();
    let stopper = handle.stop_handle();
    // Ask for a drain where the source would ask for a stop.
    *stop.lock().unwrap() = Some(stopper.clone());
    stopper.drain();
    let report = handle.join().unwrap();
    assert_eq!(report.savepoint, None, "a drain takes the final checkpoint");
    let total: u64 = sink.values().iter().map(|r| r.value).sum();
    assert!(total <= n, "{total}");
    assert!(sink.values().iter().all(|r| r.firing == Firing::Final));
}

/// Without checkpoints there is nothing to resume from: a stop drains.
#[test]
fn without_checkpoints_a_stop_drains() {
    let n = 2_000;
    let sink = CollectSink::new();
    let (source, stop) = events(n, Some(n / 2));
    let graph = job! {
        source events = source;
        operator timed = Watermarks::bounded(Duration::from_millis(5))
            .timestamps(|e: &(u64, u64)| Timestamp::from_millis(e.1 as i64)) <- events;
        operator counts { results, late } = Windows::tumbling(Duration::from_millis(100))
            .count() <- timed.key(|e: &(u64, u64)| e.0);
        sink out = sink.clone() <- counts.results;
        sink late_out = CollectSink::new() <- counts.late;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    *stop.lock().unwrap() = Some(handle.stop_handle());
    let report = handle.join().unwrap();
    assert!(report.stopped);
    assert_eq!(report.savepoint, None);
    let total: u64 = sink.values().iter().map(|r| r.value).sum();
    assert!(total >= n / 2 && total <= n, "{total}");
}

/// Counts what passes: state of its own, added to a job after its
/// savepoint (it starts empty).
#[derive(Clone, Default, State)]
struct Passed {
    seen: KeyedState<u64, u64>,
}

#[operator]
impl Passed {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        event: (u64, u64),
        out: &mut Collector<(u64, u64)>,
    ) {
        *self.seen.get_or_default(key) += 1;
        out.emit(event);
    }
}

/// A changed job resumes from a savepoint: components are matched by name,
/// an added one starts empty, and one that kept state and is gone (here:
/// the window, renamed) is refused by name unless its state may be
/// dropped.
#[test]
fn a_changed_job_resumes_from_a_savepoint_by_name() {
    let n = 3_000;
    let expected: Vec<(u64, i64, u64)> = {
        let (sink, late) = (CollectSink::new(), CollectSink::new());
        let (source, _) = events(n, None);
        windows_job(source, 2, &sink, &late)
            .run_with(exactly_once(&dir("changed-uninterrupted"), 0))
            .unwrap();
        sink.values().iter().map(key).collect()
    };
    let checkpoints = dir("changed");
    let (sink, late) = (CollectSink::new(), CollectSink::new());
    let (source, stop) = events(n, Some(n / 2));
    let handle = windows_job(source, 2, &sink, &late)
        .start_with(exactly_once(&checkpoints, 0))
        .unwrap();
    *stop.lock().unwrap() = Some(handle.stop_handle());
    handle.join().unwrap().savepoint.expect("a savepoint");
    // The window renamed: its state would be lost, so the run is refused.
    let renamed = |sink: &CollectSink<Counted>| {
        let (source, _) = events(n, None);
        job! {
            delivery exactly_once;
            source events = source;
            operator timed = Watermarks::bounded(Duration::from_millis(5))
                .timestamps(|e: &(u64, u64)| Timestamp::from_millis(e.1 as i64)) <- events;
            operator windows[2] { results, late } = Windows::tumbling(Duration::from_millis(100))
                .count() <- timed.key(|e: &(u64, u64)| e.0);
            sink out = sink.transactional() <- windows.results;
            drop windows.late;
        }
        .unwrap()
    };
    let error = renamed(&CollectSink::new())
        .run_with(exactly_once(&checkpoints, 0))
        .expect_err("the window's state has no component any more");
    let text = error.to_string();
    assert!(text.contains("holds the state of `counts`"), "{text}");
    assert!(text.contains("drop_removed_state"), "{text}");
    assert!(!error.is_retryable());
    // An added component starts empty; the window is matched by name.
    let (source, _) = events(n, None);
    let graph = job! {
        delivery exactly_once;
        source events = source;
        operator timed = Watermarks::bounded(Duration::from_millis(5))
            .timestamps(|e: &(u64, u64)| Timestamp::from_millis(e.1 as i64)) <- events;
        operator passed[3] = Passed::default() <- timed.key(|e: &(u64, u64)| e.0);
        operator counts[3] { results, late } = Windows::tumbling(Duration::from_millis(100))
            .count() <- passed.key(|e: &(u64, u64)| e.0);
        sink out = sink.transactional() <- counts.results;
        sink late_out = late.transactional() <- counts.late;
    }
    .unwrap();
    let report = graph.run_with(exactly_once(&checkpoints, 0)).unwrap();
    assert!(report.recovery.restored_from.is_some());
    let all: Vec<_> = sink.values().iter().map(key).collect();
    assert_same(
        &all,
        &expected,
        "resumed with an added component, at parallelism 3",
    );
    // Dropping the renamed window's state on purpose is allowed.
    let mut options = exactly_once(&checkpoints, 0);
    if let Some(config) = options.checkpoints.as_mut() {
        config.drop_removed_state = true;
    }
    renamed(&CollectSink::new()).run_with(options).unwrap();
}

/// A running sum per key in the state store.
#[derive(Clone, Default, State)]
struct StoredSums {
    sums: StoredState<u64, u64>,
}

#[operator]
impl StoredSums {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        (_, i): (u64, u64),
        out: &mut Collector<(u64, u64, u64)>,
    ) {
        let sum = self.sums.get_or_default(key);
        *sum += i;
        out.emit((*key, i, *sum));
    }
}

fn stored_job(events: Events, p: u32, sink: &CollectSink<(u64, u64, u64)>) -> JobGraph {
    job! {
        delivery exactly_once;
        source events = events;
        operator sums[p] = StoredSums::default() <- events.key(|e: &(u64, u64)| e.0);
        sink out = sink.transactional() <- sums;
    }
    .unwrap()
}

/// Stored state stopped at a savepoint and resumed, at the same
/// parallelism and at another, commits what an uninterrupted run does.
#[test]
fn stored_state_resumes_from_a_savepoint_at_any_parallelism() {
    let n = 5_000;
    let expected = {
        let sink = CollectSink::new();
        let (source, _) = events(n, None);
        stored_job(source, 2, &sink)
            .run_with(exactly_once(&dir("stored-savepoint-uninterrupted"), 0))
            .unwrap();
        sink.values()
    };
    assert_eq!(expected.len(), n as usize);
    for (p_before, p_after) in [(2, 2), (2, 3), (3, 1)] {
        let checkpoints = dir(&format!("stored-savepoint-{p_before}-{p_after}"));
        let sink = CollectSink::new();
        let (source, stop) = events(n, Some(n / 2));
        let handle = stored_job(source, p_before, &sink)
            .start_with(exactly_once(&checkpoints, 0))
            .unwrap();
        *stop.lock().unwrap() = Some(handle.stop_handle());
        let report = handle.join().unwrap();
        let savepoint = report.savepoint.expect("the stop took a savepoint");
        assert!(sink.values().len() < expected.len());
        let (source, _) = events(n, None);
        let report = stored_job(source, p_after, &sink)
            .run_with(exactly_once(&checkpoints, 0))
            .unwrap();
        assert_eq!(report.recovery.restored_from, Some(savepoint));
        assert_same(
            &sink.values(),
            &expected,
            &format!("stored, stopped at p={p_before}, resumed at p={p_after}"),
        );
    }
}
