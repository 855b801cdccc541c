//! One process against a local Kafka-protocol broker: producing a topic,
//! reading it back, and reading one topic into another.
//!
//! ```sh
//! eval "$(scripts/kafka-test-broker.sh start)"
//! cargo bench -p streamwork-benches --features kafka --bench kafka_throughput
//! ```
//! `KAFKA_EVENTS` sets the number of records (default 1 000 000).

use std::time::{Duration, Instant};

use streamwork::connectors::kafka::{KafkaRecord, KafkaSink, KafkaSource, create_topic};
use streamwork::prelude::*;

/// Counts what it receives.
#[derive(Clone, Default)]
struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Sink for Count {
    type In = KafkaRecord;
    fn write(&mut self, _record: Record<KafkaRecord>) -> Result<(), ConnectorError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

fn main() {
    let Ok(brokers) = std::env::var("STREAMWORK_KAFKA_BROKERS") else {
        println!(
            "skipped: no broker (set STREAMWORK_KAFKA_BROKERS, see scripts/kafka-test-broker.sh)"
        );
        return;
    };
    let events: u64 = std::env::var("KAFKA_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let run = std::process::id();
    let (input, output) = (format!("bench-in-{run}"), format!("bench-out-{run}"));
    create_topic(&brokers, &input, 4).expect("topic");
    create_topic(&brokers, &output, 4).expect("topic");
    let idle = Duration::from_millis(1500);

    let started = Instant::now();
    let sink = KafkaSink::new(&brokers, &input, |i: &u64| {
        (
            Some((i % 1000).to_string().into_bytes()),
            format!("event {i}").into_bytes(),
        )
    });
    job! {
        source numbers = GeneratorSource::new(|i: u64| i).take(events);
        sink out = sink <- numbers;
    }
    .unwrap()
    .run()
    .unwrap();
    let produce = started.elapsed();

    let count = Count::default();
    let started = Instant::now();
    let source = KafkaSource::new(&brokers, &input, &format!("read-{run}")).idle_exit(idle);
    job! {
        source records = source;
        sink counted = count.clone() <- records;
    }
    .unwrap()
    .run()
    .unwrap();
    let read = started.elapsed().saturating_sub(idle);
    let got = count.0.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(got, events, "every record read back");

    let started = Instant::now();
    let source = KafkaSource::new(&brokers, &input, &format!("copy-{run}")).idle_exit(idle);
    let sink = KafkaSink::new(&brokers, &output, |r: &KafkaRecord| {
        (r.key.clone(), r.value.clone())
    });
    job! {
        source records = source;
        sink copied = sink <- records;
    }
    .unwrap()
    .run()
    .unwrap();
    let copy = started.elapsed().saturating_sub(idle);

    let rate = |d: Duration| events as f64 / d.as_secs_f64() / 1e3;
    println!(
        "{events} records of ~12 bytes, 4 partitions, one process: produce {:.0} k rec/s; read {:.0} k rec/s; read and produce to another topic {:.0} k rec/s",
        rate(produce),
        rate(read),
        rate(copy)
    );
}
