//! Windowed results equal a batch computation over the same events, for random
//! timestamps within the out-of-orderness bound (so no event is late), random
//! keys, parallelism, batch sizes and workers.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use streamwork::prelude::*;

type Event = (u8, i64);

const BOUND: i64 = 50;

fn at(event: &Event) -> Timestamp {
    Timestamp::from_millis(event.1)
}

/// Events whose times never fall more than `BOUND` behind the largest so far.
fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((0u8..5, 0i64..40, 0i64..=BOUND), 0..200).prop_map(|raw| {
        let mut max = 0i64;
        raw.into_iter()
            .map(|(key, step, back)| {
                max += step;
                (key, (max - back).max(0))
            })
            .collect()
    })
}

fn batch_windows(events: &[Event], size: i64, slide: i64) -> BTreeMap<(u8, i64), u64> {
    let mut expected = BTreeMap::new();
    for (key, t) in events {
        let mut start = t.div_euclid(slide) * slide;
        while start > t - size {
            *expected.entry((*key, start)).or_insert(0) += 1;
            start -= slide;
        }
    }
    expected
}

fn streamed(
    events: Vec<Event>,
    size: u64,
    slide: u64,
    parallelism: u32,
    batch: usize,
    workers: u32,
) -> BTreeMap<(u8, i64), u64> {
    let sink = CollectSink::new();
    let graph = job! {
        batch_size batch;
        workers workers;
        source events = VecSource::new(events);
        operator timed = Watermarks::bounded(Duration::from_millis(BOUND as u64)).timestamps(at) <- events;
        operator counts[parallelism] { results, late } =
            Windows::sliding(Duration::from_millis(size), Duration::from_millis(slide)).count()
            <- timed.key(|e: &Event| e.0);
        sink out = sink.clone() <- counts.results;
        sink late = StdoutSink::new(|_: &Event, _: &mut Vec<u8>| {}) <- counts.late;
    }
    .unwrap();
    let report = graph.run().unwrap();
    assert_eq!(
        report.component("late").unwrap().records_in(),
        0,
        "no event may be late"
    );
    let mut got = BTreeMap::new();
    for result in sink.values() {
        assert_eq!(result.firing, Firing::Final);
        let previous = got.insert((result.key, result.window.start.millis()), result.value);
        assert!(previous.is_none(), "window fired twice");
    }
    got
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn tumbling_and_sliding_windows_match_a_batch_computation(
        events in events(),
        (size, slide) in prop_oneof![Just((100u64, 100u64)), Just((100, 25)), Just((90, 60)), Just((10, 10))],
        parallelism in 1u32..4,
        batch in prop_oneof![Just(1usize), Just(3), Just(1024)],
        workers in 0u32..3,
    ) {
        let expected = batch_windows(&events, size as i64, slide as i64);
        prop_assert_eq!(streamed(events, size, slide, parallelism, batch, workers), expected);
    }
}

/// Emits each record with the event time it carries.
#[derive(Clone)]
struct WithTime;

impl Operator for WithTime {
    type In = Event;
    type Key = NoKey;
    type Out = Collector<(Event, Option<i64>)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    fn on_record(&mut self, value: Event, ctx: &mut Context<'_, NoKey, Self::Out>) {
        let time = ctx.timestamp().map(|t| t.millis());
        ctx.emit((value, time));
    }
}

/// The records (with their event times) a bounded watermark strategy that
/// drops late records lets through, and how many it dropped; `fused`: right
/// after the source (stamped a batch at a time, in place) or behind a
/// channel (record by record).
fn stamped(
    events: Vec<Event>,
    bound: u64,
    batch: usize,
    fused: bool,
) -> (Vec<(Event, Option<i64>)>, u64) {
    let counter = LateCounter::new();
    let sink = CollectSink::new();
    let strategy = Watermarks::bounded(Duration::from_millis(bound)).drop_late(counter.clone());
    let graph = if fused {
        job! {
            batch_size batch;
            source events = VecSource::new(events);
            operator timed = strategy.timestamps(at) <- events;
            operator timed_out = WithTime <- timed;
            sink out = sink.clone() <- timed_out;
        }
    } else {
        job! {
            batch_size batch;
            source events = VecSource::new(events);
            operator timed = strategy.timestamps(at) <- events.shuffle();
            operator timed_out = WithTime <- timed;
            sink out = sink.clone() <- timed_out;
        }
    }
    .unwrap();
    graph.run().unwrap();
    (sink.values(), counter.get())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn stamping_a_batch_in_place_matches_stamping_record_by_record(
        raw in prop::collection::vec((0u8..5, 0i64..300), 0..200),
        bound in 0u64..60,
        batch in prop_oneof![Just(1usize), Just(3), Just(1024)],
    ) {
        let (in_place, late_in_place) = stamped(raw.clone(), bound, batch, true);
        let (one_by_one, late_one_by_one) = stamped(raw.clone(), bound, batch, false);
        prop_assert_eq!(&in_place, &one_by_one);
        prop_assert_eq!(late_in_place, late_one_by_one);
        prop_assert_eq!(in_place.len() as u64 + late_in_place, raw.len() as u64);
    }
}

/// Events at the edges of time: `i64::MIN + offset` or `i64::MAX - offset`.
fn edge_events() -> impl Strategy<Value = Vec<Event>> {
    (
        prop_oneof![Just(i64::MIN), Just(i64::MAX)],
        prop::collection::vec((0u8..3, 0i64..200), 1..100),
    )
        .prop_map(|(edge, raw)| {
            let mut events: Vec<Event> = raw
                .into_iter()
                .map(|(key, offset)| {
                    let t = if edge == i64::MIN {
                        edge.saturating_add(offset)
                    } else {
                        edge - offset
                    };
                    (key, t)
                })
                .collect();
            events.sort_by_key(|e| e.1);
            events
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// At any `i64` time (`i64::MIN` and `i64::MAX` included) windows and
    /// sessions run without a panic or a wrapped bound: no event is late,
    /// every event is counted, and windows away from the edges are exactly
    /// the batch computation's.
    #[test]
    fn windows_at_the_edges_of_time_neither_panic_nor_wrap(
        events in edge_events(),
        (size, slide) in prop_oneof![Just((10u64, 10u64)), Just((30, 20)), Just((100, 7))],
    ) {
        let sink = CollectSink::new();
        let sessions = CollectSink::new();
        let graph = job! {
            source events = VecSource::new(events.clone());
            operator timed = Watermarks::bounded(Duration::from_millis(500)).timestamps(at) <- events;
            operator counts { results, late } =
                Windows::sliding(Duration::from_millis(size), Duration::from_millis(slide)).count()
                <- timed.key(|e: &Event| e.0);
            operator gaps { results, late } =
                Windows::session(Duration::from_millis(size)).count()
                <- timed.key(|e: &Event| e.0);
            sink out = sink.clone() <- counts.results;
            sink session_out = sessions.clone() <- gaps.results;
            sink late = StdoutSink::new(|_: &Event, _: &mut Vec<u8>| {}) <- counts.late, gaps.late;
        }
        .unwrap();
        let report = graph.run().unwrap();
        prop_assert_eq!(report.component("late").unwrap().records_in(), 0);
        let session_total: u64 = sessions.values().iter().map(|r| r.value).sum();
        prop_assert_eq!(session_total, events.len() as u64);
        let (size, slide) = (size as i64, slide as i64);
        let far = |start: i64| start > i64::MIN + 2 * size && start < i64::MAX - 2 * size;
        let expected: BTreeMap<(u8, i64), u64> = batch_windows(
            &events.iter().copied().filter(|e| far(e.1)).collect::<Vec<_>>(),
            size,
            slide,
        );
        let mut got = BTreeMap::new();
        for result in sink.values() {
            let start = result.window.start.millis();
            prop_assert!(result.window.start <= result.window.end);
            if far(start) && far(result.window.end.millis()) {
                got.insert((result.key, start), result.value);
            }
        }
        let expected: BTreeMap<_, _> = expected
            .into_iter()
            .filter(|((_, start), _)| far(*start) && far(start + size))
            .collect();
        prop_assert_eq!(got, expected);
        for (key, t) in &events {
            // A `Timestamp` holds `i64::MIN + 1` for `i64::MIN`.
            let t = at(&(*key, *t)).millis();
            let counted = sink.values().iter().any(|r| {
                r.key == *key && r.window.start.millis() <= t && t <= r.window.end.millis()
            });
            prop_assert!(counted, "({key}, {t}) is in no window");
        }
    }
}
