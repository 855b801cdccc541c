//! The runtime's hot path: source → map → keyed count → sink over 10 million
//! generated events, next to a hand-written single-threaded loop doing the
//! same work in the same run.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use streamwork_benches::{keyed_count_baseline, keyed_count_job};

const EVENTS: u64 = 10_000_000;

fn hot_path(c: &mut Criterion) {
    let expected = keyed_count_baseline(EVENTS);
    let mut group = c.benchmark_group("keyed_count_10M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("hand_written_loop", |b| {
        b.iter(|| keyed_count_baseline(EVENTS))
    });
    for parallelism in [1u32, 2] {
        assert_eq!(keyed_count_job(EVENTS, parallelism), expected);
        group.bench_with_input(
            BenchmarkId::new("streamwork", parallelism),
            &parallelism,
            |b, &p| b.iter(|| keyed_count_job(EVENTS, p)),
        );
    }
    group.finish();
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
