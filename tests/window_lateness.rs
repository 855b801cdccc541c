//! Late events: allowed lateness re-fires a window as an update; beyond it,
//! events go to the `late` channel (or are dropped and counted); early firing;
//! and idle inputs that must not hold event time back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use streamwork::prelude::*;

type Event = (u32, i64);

fn at(event: &Event) -> Timestamp {
    Timestamp::from_millis(event.1)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn allowed_lateness_updates_and_beyond_it_goes_to_the_late_channel() {
    // Monotonic watermark, one record per batch: W follows the largest time.
    let events: Vec<Event> = vec![(1, 0), (1, 1500), (1, 500), (1, 3100), (1, 700), (1, 3200)];
    let results = CollectSink::new();
    let late = CollectSink::new();
    let counter = LateCounter::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator counts { results, late } = Windows::tumbling(ms(1000))
            .allowed_lateness(ms(1000))
            .count_late_in(counter.clone())
            .count() <- timed.key(|e: &Event| e.0);
        sink out = results.clone() <- counts.results;
        sink late_out = late.clone() <- counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let got: Vec<_> = results
        .values()
        .into_iter()
        .map(|r| (r.window.start.millis(), r.value, r.firing))
        .collect();
    assert_eq!(
        got,
        vec![
            // W = 1500 closes [0, 1000) with the event at 0.
            (0, 1, Firing::Final),
            // 500 is late but within 1000 ms of lateness: the window re-fires.
            (0, 2, Firing::Update),
            // W = 3100 closes [1000, 2000) and drops [0, 1000) (2000 <= 3100).
            (1000, 1, Firing::Final),
            // End of input closes [3000, 4000).
            (3000, 2, Firing::Final),
        ]
    );
    // 700 arrives when [0, 1000) is beyond its lateness.
    assert_eq!(late.values(), vec![(1, 700)]);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dropped_late_channel_still_counts() {
    let events: Vec<Event> = vec![(1, 5000), (1, 10)];
    let counter = LateCounter::new();
    let results = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator counts { results, late } = Windows::tumbling(ms(1000)).count_late_in(counter.clone()).count()
            <- timed.key(|e: &Event| e.0);
        sink out = results.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(counter.get(), 1);
    assert_eq!(results.values().len(), 1);
}

#[test]
fn a_watermark_strategy_can_drop_events_late_when_read() {
    let events: Vec<Event> = vec![(1, 10_000), (1, 6_500), (1, 5_000), (1, 12_000)];
    let counter = LateCounter::new();
    let out = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events);
        operator timed = Watermarks::bounded(ms(4000)).drop_late(counter.clone()).timestamps(at) <- events;
        sink kept = out.clone() <- timed;
    }
    .unwrap();
    graph.run().unwrap();
    // After 10 000 the watermark is 6 000: 6 500 is on time, 5 000 is late.
    assert_eq!(out.values(), vec![(1, 10_000), (1, 6_500), (1, 12_000)]);
    assert_eq!(counter.get(), 1);
}

#[test]
fn early_firing_by_count_emits_partial_results_before_the_final_one() {
    let events: Vec<Event> = (0..7).map(|t| (1, t)).collect();
    let results = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator counts { results, late } = Windows::tumbling(ms(1000)).early_every(3).count()
            <- timed.key(|e: &Event| e.0);
        sink out = results.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let got: Vec<_> = results
        .values()
        .into_iter()
        .map(|r| (r.value, r.firing))
        .collect();
    assert_eq!(
        got,
        vec![(3, Firing::Early), (6, Firing::Early), (7, Firing::Final)]
    );
}

/// Emits nothing until told to finish: an idle input.
#[derive(Clone)]
struct Silent(Arc<AtomicBool>);

impl Source for Silent {
    type Out = Collector<Event>;
    fn poll(&mut self, _: &mut Collector<Event>) -> Result<SourcePoll, ConnectorError> {
        if self.0.load(Ordering::Relaxed) {
            return Ok(SourcePoll::Finished);
        }
        std::thread::sleep(Duration::from_millis(2));
        Ok(SourcePoll::Idle)
    }
}

/// Raises a flag when it receives a window result.
#[derive(Clone)]
struct Flag(Arc<AtomicBool>, CollectSink<WindowResult<u32, u64>>);

impl Sink for Flag {
    type In = WindowResult<u32, u64>;
    fn write(&mut self, record: Record<WindowResult<u32, u64>>) -> Result<(), ConnectorError> {
        let mut collect = self.1.clone();
        collect.write(record)?;
        collect.flush()?;
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Emits a few events, then waits (idle) until told to finish.
#[derive(Clone)]
struct FewThenWait(Vec<Event>, Arc<AtomicBool>);

impl Source for FewThenWait {
    type Out = Collector<Event>;
    fn poll(&mut self, out: &mut Collector<Event>) -> Result<SourcePoll, ConnectorError> {
        if !self.0.is_empty() {
            for event in self.0.drain(..) {
                out.emit(event);
            }
            return Ok(SourcePoll::Idle);
        }
        if self.1.load(Ordering::Relaxed) {
            return Ok(SourcePoll::Finished);
        }
        std::thread::sleep(Duration::from_millis(2));
        Ok(SourcePoll::Idle)
    }
}

#[test]
fn an_idle_input_does_not_hold_event_time_back() {
    // Two inputs of one window: one has data up to 2 500 ms, the other is
    // silent. Without idleness the window [0, 1000) could only fire at the end
    // of input; with it, the silent input is skipped and the window fires
    // while both sources are still running (they end only once it has).
    let done = Arc::new(AtomicBool::new(false));
    let results = CollectSink::new();
    let events = vec![(1, 100), (1, 900), (1, 2500)];
    let graph = job! {
        source active = FewThenWait(events, done.clone());
        source silent = Silent(done.clone());
        operator timed_active = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- active;
        operator timed_silent = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- silent;
        operator counts { results, late } = Windows::tumbling(ms(1000)).count()
            <- (timed_active, timed_silent).key(|e: &Event| e.0);
        sink out = Flag(done.clone(), results.clone()) <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let first = results
        .values()
        .into_iter()
        .next()
        .expect("a window fired before the end");
    assert_eq!(
        (first.window.start.millis(), first.value, first.firing),
        (0, 2, Firing::Final)
    );
}

#[test]
fn a_sliding_window_past_its_lateness_does_not_refire() {
    // Window [0, 10) fires at W = 12; the event at 7 is late for it (no
    // lateness) but on time for [5, 15), which counts it.
    let events: Vec<Event> = vec![(1, 1), (1, 12), (1, 7)];
    let results = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator counts { results, late } = Windows::sliding(ms(10), ms(5)).count() <- timed.key(|e: &Event| e.0);
        sink out = results.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let got: Vec<_> = results
        .values()
        .into_iter()
        .map(|r| (r.window.start.millis(), r.value, r.firing))
        .collect();
    assert_eq!(
        got,
        vec![
            (-5, 1, Firing::Final),
            (0, 1, Firing::Final),
            (5, 2, Firing::Final),
            (10, 1, Firing::Final),
        ]
    );
}

/// Emits nothing until told to finish, or until it has waited `polls`
/// polls, when it raises `gave_up`: an idle input that ends by itself.
#[derive(Clone)]
struct SilentAtMost {
    done: Arc<AtomicBool>,
    gave_up: Arc<AtomicBool>,
    polls: u32,
}

impl Source for SilentAtMost {
    type Out = Collector<Event>;
    fn poll(&mut self, _: &mut Collector<Event>) -> Result<SourcePoll, ConnectorError> {
        if self.done.load(Ordering::Relaxed) {
            return Ok(SourcePoll::Finished);
        }
        if self.polls == 0 {
            self.gave_up.store(true, Ordering::SeqCst);
            return Ok(SourcePoll::Finished);
        }
        self.polls -= 1;
        std::thread::sleep(Duration::from_millis(2));
        Ok(SourcePoll::Idle)
    }
}

#[test]
fn an_idle_input_beside_one_that_ended_holds_no_window_back() {
    // One input's events end at 2 500 ms and the input ends; the other is
    // silent (idle). The window [2000, 3000) can only fire when event time
    // ends: it must, while the silent input still runs (it ends once a
    // window has fired for [2000, 3000), or gives up after 30 s). On a
    // thread per task and on two workers alike.
    for on_workers in [false, true] {
        let done = Arc::new(AtomicBool::new(false));
        let gave_up = Arc::new(AtomicBool::new(false));
        let results = CollectSink::new();
        let silent = SilentAtMost {
            done: done.clone(),
            gave_up: gave_up.clone(),
            polls: 15_000,
        };
        let sink = LastFlag(done.clone(), results.clone());
        let active = VecSource::new(vec![(1, 100), (1, 2500)]);
        let graph = if on_workers {
            job! {
                workers 2;
                source active = active;
                source silent = silent;
                operator timed_active = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- active;
                operator timed_silent = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- silent;
                operator counts { results, late } = Windows::tumbling(ms(1000)).count()
                    <- (timed_active, timed_silent).key(|e: &Event| e.0);
                sink out = sink <- counts.results;
                drop counts.late;
            }
        } else {
            job! {
                source active = active;
                source silent = silent;
                operator timed_active = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- active;
                operator timed_silent = Watermarks::monotonic().idle_after(ms(20)).timestamps(at) <- silent;
                operator counts { results, late } = Windows::tumbling(ms(1000)).count()
                    <- (timed_active, timed_silent).key(|e: &Event| e.0);
                sink out = sink <- counts.results;
                drop counts.late;
            }
        }
        .unwrap();
        graph.run().unwrap();
        assert!(
            !gave_up.load(Ordering::SeqCst),
            "workers: {on_workers}: the window of the ended input waited for the silent one to end"
        );
        let windows: Vec<i64> = results
            .values()
            .into_iter()
            .map(|r| r.window.start.millis())
            .collect();
        assert_eq!(windows, vec![0, 2000], "workers: {on_workers}");
    }
}

/// Raises a flag when it receives the result of window [2000, 3000).
#[derive(Clone)]
struct LastFlag(Arc<AtomicBool>, CollectSink<WindowResult<u32, u64>>);

impl Sink for LastFlag {
    type In = WindowResult<u32, u64>;
    fn write(&mut self, record: Record<WindowResult<u32, u64>>) -> Result<(), ConnectorError> {
        let last = record.value.window.start.millis() == 2000;
        let mut collect = self.1.clone();
        collect.write(record)?;
        collect.flush()?;
        if last {
            self.0.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}
