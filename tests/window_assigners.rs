//! Window assigners at their boundaries: tumbling, sliding, session and count
//! windows, keyed and over all records, and the end-of-input flush.

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::prelude::*;

type Event = (u32, i64);

fn at(event: &Event) -> Timestamp {
    Timestamp::from_millis(event.1)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `(key, start, end) -> count`, from window results.
fn table(results: Vec<WindowResult<u32, u64>>) -> BTreeMap<(u32, i64, i64), u64> {
    results
        .into_iter()
        .map(|r| {
            (
                (r.key, r.window.start.millis(), r.window.end.millis()),
                r.value,
            )
        })
        .collect()
}

#[test]
fn tumbling_windows_are_half_open() {
    let events: Vec<Event> = vec![(1, 0), (1, 999), (1, 1000), (2, 1500), (1, 1999), (1, 2000)];
    let sink = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator counts[2] { results, late } = Windows::tumbling(ms(1000)).count() <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let expected: BTreeMap<_, _> = [
        ((1, 0, 1000), 2),
        ((1, 1000, 2000), 2),
        ((2, 1000, 2000), 1),
        ((1, 2000, 3000), 1),
    ]
    .into();
    assert_eq!(table(sink.values()), expected);
    assert!(sink.values().iter().all(|r| r.firing == Firing::Final));
}

#[test]
fn sliding_windows_count_every_window_containing_the_event() {
    let events: Vec<Event> = (0..200).map(|i| ((i % 3) as u32, i * 37 % 1000)).collect();
    let sink = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events.clone());
        operator timed = Watermarks::bounded(ms(1000)).timestamps(at) <- events;
        operator counts[3] { results, late } = Windows::sliding(ms(300), ms(100)).count() <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let mut expected = BTreeMap::new();
    for (key, t) in &events {
        let mut start = t.div_euclid(100) * 100;
        while start > t - 300 {
            *expected.entry((*key, start, start + 300)).or_insert(0u64) += 1;
            start -= 100;
        }
    }
    assert_eq!(table(sink.values()), expected);
}

#[test]
fn a_sliding_window_result_is_a_merge_of_slices_with_non_dividing_slide() {
    // size 10, slide 4: slices of gcd = 2.
    let events: Vec<Event> = (0..40).map(|t| (7, t)).collect();
    let sink = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator sums { results, late } = Windows::sliding(ms(10), ms(4)).all_records().sum(|e: &Event| e.1 as u64) <- timed;
        sink out = sink.clone() <- sums.results;
        drop sums.late;
    }
    .unwrap();
    graph.run().unwrap();
    for result in sink.values() {
        let (start, end) = (result.window.start.millis(), result.window.end.millis());
        assert_eq!(start % 4, 0);
        assert_eq!(end - start, 10);
        let expected: u64 = (start.max(0)..end.min(40)).map(|t| t as u64).sum();
        assert_eq!(result.value, expected, "window [{start}, {end})");
    }
    assert_eq!(sink.values().len(), 12, "windows ending at 4, 8, ..., 48");
}

#[test]
fn sessions_merge_when_an_event_bridges_them() {
    // Gap 4: 0 and 6 open two sessions, [0, 4) and [6, 10); 3 bridges them.
    let events: Vec<Event> = vec![(1, 0), (1, 6), (1, 3), (2, 1), (1, 20)];
    let sink = CollectSink::new();
    let graph = job! {
        batch_size 1;
        source events = VecSource::new(events);
        operator timed = Watermarks::bounded(ms(5)).timestamps(at) <- events;
        operator sessions { results, late } = Windows::session(ms(4)).count() <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- sessions.results;
        drop sessions.late;
    }
    .unwrap();
    graph.run().unwrap();
    let expected: BTreeMap<_, _> = [((1, 0, 10), 3), ((1, 20, 24), 1), ((2, 1, 5), 1)].into();
    assert_eq!(table(sink.values()), expected);
}

#[test]
fn count_windows_tumble_and_slide_per_key() {
    let events: Vec<Event> = (0..10).map(|t| ((t % 2) as u32, t)).collect();
    let tumbling = CollectSink::new();
    let sliding = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events);
        operator threes { results, late } = Windows::count(3).sum(|e: &Event| e.1 as u64) <- events.key(|e: &Event| e.0);
        operator pairs { results, late } = Windows::sliding_count(4, 2).sum(|e: &Event| e.1 as u64) <- events.key(|e: &Event| e.0);
        sink t = tumbling.clone() <- threes.results;
        sink s = sliding.clone() <- pairs.results;
        drop threes.late;
        drop pairs.late;
    }
    .unwrap();
    graph.run().unwrap();
    let mut got: Vec<_> = tumbling
        .values()
        .into_iter()
        .map(|r| (r.key, r.window.first, r.window.end, r.value))
        .collect();
    got.sort();
    // Key 0 sees 0, 2, 4, 6, 8; key 1 sees 1, 3, 5, 7, 9: one full window of 3 each.
    assert_eq!(got, vec![(0, 0, 3, 6), (1, 0, 3, 9)]);
    let mut got: Vec<_> = sliding
        .values()
        .into_iter()
        .map(|r| (r.key, r.window.first, r.window.end, r.value))
        .collect();
    got.sort();
    assert_eq!(got, vec![(0, 0, 4, 12), (1, 0, 4, 16)]);
}

#[test]
fn end_of_input_fires_every_open_window() {
    let events: Vec<Event> = vec![(1, 10), (1, 5_000), (2, 9_999)];
    let sink = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events);
        operator timed = Watermarks::bounded(ms(60_000)).timestamps(at) <- events;
        operator counts { results, late } = Windows::tumbling(ms(10_000)).count() <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- counts.results;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();
    let expected: BTreeMap<_, _> = [((1, 0, 10_000), 2), ((2, 0, 10_000), 1)].into();
    assert_eq!(table(sink.values()), expected);
}

#[test]
fn full_window_functions_see_the_window_contents() {
    let events: Vec<Event> = (0..20).map(|t| (1, t)).collect();
    let sink = CollectSink::new();
    let graph = job! {
        source events = VecSource::new(events);
        operator timed = Watermarks::monotonic().timestamps(at) <- events;
        operator spans { results, late } = Windows::sliding(ms(10), ms(5))
            .apply(|events: WindowContents<'_, Event>| {
                let times: Vec<i64> = events.iter().map(|e| e.1).collect();
                (times.first().copied(), times.last().copied(), events.len())
            })
            <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- spans.results;
        drop spans.late;
    }
    .unwrap();
    graph.run().unwrap();
    let mut got: Vec<_> = sink
        .values()
        .into_iter()
        .map(|r| (r.window.start.millis(), r.value))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (-5, (Some(0), Some(4), 5)),
            (0, (Some(0), Some(9), 10)),
            (5, (Some(5), Some(14), 10)),
            (10, (Some(10), Some(19), 10)),
            (15, (Some(15), Some(19), 5)),
        ]
    );
}
