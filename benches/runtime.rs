//! Criterion benchmarks of the hot path, each beside the hand-written loop
//! doing the same work in the same run:
//!
//! * `keyed_count_10M`: source → map → keyed count → sink over 10 million events (W2);
//! * `map_filter_10M`: source → map/filter → sink, fully fused (W1);
//! * `channel`: records through one channel between two tasks;
//! * `dispatcher`: the key dispatcher routing batches to 4 targets;
//! * `fused_chain`: three fused maps between a source and a sink;
//! * `keyed_state`: keyed state updates against a std `HashMap`;
//! * `batching`: W2 at several batch sizes;
//! * `windows_2M`: sliding (10 s, 1 s) against tumbling (10 s) windows on the
//!   same keyed input: slicing keeps sliding within a small factor of tumbling;
//! * `nexmark_generator_1M`: the Nexmark generator alone.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use streamwork::core::grouping::KeyGroups;
use streamwork::core::hash::{FastHashMap, stable_hash};
use streamwork::core::{Disconnected, Edge};
use streamwork::prelude::*;
use streamwork::runtime::dispatch::ChannelDispatcher;
use streamwork::runtime::message::{ChannelSender, Message, Payload, SenderIdx};
use streamwork::runtime::route::KeyRoute;
use streamwork_benches::{
    KEYS, key, keyed_window_job, w1_baseline, w1_job, w2_baseline, w2_job, w2_job_with_batch,
};

const EVENTS: u64 = 10_000_000;

fn keyed_count(c: &mut Criterion) {
    let expected = w2_baseline(EVENTS);
    let mut group = c.benchmark_group("keyed_count_10M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("hand_written_loop", |b| b.iter(|| w2_baseline(EVENTS)));
    for parallelism in [1u32, 2] {
        assert_eq!(w2_job(EVENTS, parallelism), expected);
        group.bench_with_input(
            BenchmarkId::new("streamwork", parallelism),
            &parallelism,
            |b, &p| b.iter(|| w2_job(EVENTS, p)),
        );
    }
    group.finish();
}

fn map_filter(c: &mut Criterion) {
    let expected = w1_baseline(EVENTS);
    let mut group = c.benchmark_group("map_filter_10M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("hand_written_loop", |b| b.iter(|| w1_baseline(EVENTS)));
    assert_eq!(w1_job(EVENTS, 1), expected);
    group.bench_function("streamwork/1", |b| b.iter(|| w1_job(EVENTS, 1)));
    group.finish();
}

#[derive(Clone)]
struct Discard;

impl Sink for Discard {
    type In = u64;
    #[inline]
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        black_box(record);
        Ok(())
    }
}

#[operator]
fn add_one(value: u64, out: &mut Collector<u64>) {
    out.emit(value.wrapping_add(1));
}

fn channel_and_fusion(c: &mut Criterion) {
    const N: u64 = 2_000_000;
    let mut group = c.benchmark_group("transport_2M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    group.bench_function("hand_written_loop", |b| {
        b.iter(|| {
            (0..N)
                .map(|i| black_box(i).wrapping_add(3))
                .fold(0u64, u64::wrapping_add)
        })
    });
    group.bench_function("channel", |b| {
        b.iter(|| {
            let graph = job! {
                source numbers = GeneratorSource::new(|i| i).take(N);
                sink out = Discard <- numbers.shuffle();
            }
            .unwrap();
            graph.run().unwrap()
        })
    });
    group.bench_function("fused_chain", |b| {
        b.iter(|| {
            let graph = job! {
                source numbers = GeneratorSource::new(|i| i).take(N);
                operator a = AddOne <- numbers;
                operator b = AddOne <- a;
                operator c = AddOne <- b;
                sink out = Discard <- c;
            }
            .unwrap();
            graph.run().unwrap()
        })
    });
    group.finish();
}

/// Counts what it is sent, without a channel.
struct CountingSender(u64);

impl ChannelSender for CountingSender {
    fn send(&mut self, envelope: Message) -> Result<(), Disconnected> {
        if let Payload::Batch(batch) = envelope.payload {
            self.0 += batch
                .downcast::<Vec<Record<(u64, u64)>>>()
                .map(|b| b.len() as u64)
                .unwrap_or(0);
        }
        Ok(())
    }
}

fn dispatcher(c: &mut Criterion) {
    const N: u64 = 1 << 20;
    let records: Vec<Record<(u64, u64)>> = (0..N).map(|i| Record::new((key(i, KEYS), i))).collect();
    let mut group = c.benchmark_group("dispatcher_1M");
    group.throughput(Throughput::Elements(N));
    // The sender's cost of a keyed exchange per record as the number of
    // targets grows: what one core pays to feed N instances (16 or 64 on a
    // larger machine); the receiving side's cost does not depend on N.
    for targets in [1u32, 2, 4, 16, 64, 128] {
        group.bench_function(format!("key_route_{targets}_targets"), |b| {
            b.iter(|| {
                let senders: Vec<Box<dyn ChannelSender>> = (0..targets)
                    .map(|_| Box::new(CountingSender(0)) as Box<dyn ChannelSender>)
                    .collect();
                let route = KeyRoute::new(
                    |r: &(u64, u64)| stable_hash(&r.0),
                    KeyGroups::DEFAULT,
                    targets,
                );
                let mut dispatcher = ChannelDispatcher::new(route, SenderIdx(0), senders, 1024);
                for chunk in records.chunks(1024) {
                    let mut batch = chunk.to_vec();
                    dispatcher.push(&mut batch).unwrap();
                }
                dispatcher.flush().unwrap();
            })
        });
    }
    group.finish();
}

fn keyed_state(c: &mut Criterion) {
    const N: u64 = 1 << 20;
    let keys: Vec<u64> = (0..N).map(|i| key(i, KEYS)).collect();
    let mut group = c.benchmark_group("keyed_state_1M");
    group.throughput(Throughput::Elements(N));
    group.bench_function("keyed_state", |b| {
        b.iter(|| {
            let mut state = KeyedState::<u64, u64>::new();
            for k in &keys {
                *state.get_or_default(CurrentKey::for_testing(k)) += 1;
            }
            state.len()
        })
    });
    group.bench_function("std_hash_map_stable_hasher", |b| {
        b.iter(|| {
            let mut map = FastHashMap::<u64, u64>::default();
            for k in &keys {
                *map.entry(*k).or_insert(0) += 1;
            }
            map.len()
        })
    });
    group.bench_function("std_hash_map_siphash", |b| {
        b.iter(|| {
            let mut map = std::collections::HashMap::<u64, u64>::new();
            for k in &keys {
                *map.entry(*k).or_insert(0) += 1;
            }
            map.len()
        })
    });
    group.finish();
}

fn batching(c: &mut Criterion) {
    const N: u64 = 2_000_000;
    let mut group = c.benchmark_group("batching_w2_2M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    for batch in [16usize, 128, 1024, 4096] {
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| w2_job_with_batch(N, 1, batch))
        });
    }
    group.finish();
}

fn windows(c: &mut Criterion) {
    const N: u64 = 2_000_000;
    let mut group = c.benchmark_group("windows_2M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    // 10 events per ms (10 000 per second of event time); 1 000 keys, so a key
    // has ~10 events per 1 s slice; and the degenerate 1 event per ms, where a
    // key has about one event per slice and a sliding window emits as many
    // results as there are events.
    for (per_ms, keys) in [(10u64, 1_000u64), (1, 1_000)] {
        let label = format!("{per_ms}_per_ms_{keys}_keys");
        group.bench_function(BenchmarkId::new("tumbling_10s", &label), |b| {
            b.iter(|| keyed_window_job(N, per_ms, keys, 10_000, 10_000))
        });
        group.bench_function(BenchmarkId::new("sliding_10s_every_1s", &label), |b| {
            b.iter(|| keyed_window_job(N, per_ms, keys, 10_000, 1_000))
        });
    }
    group.finish();
}

fn nexmark_generator(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let config = streamwork_nexmark::GeneratorConfig::default();
    let mut group = c.benchmark_group("nexmark_generator_1M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N));
    group.bench_function("events", |b| {
        b.iter(|| {
            (0..N)
                .map(|n| streamwork_nexmark::generator::event(&config, n).date_time())
                .fold(0i64, i64::wrapping_add)
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    nexmark_generator,
    keyed_count,
    map_filter,
    channel_and_fusion,
    dispatcher,
    keyed_state,
    batching,
    windows
);
criterion_main!(benches);
