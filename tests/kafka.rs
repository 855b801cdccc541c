//! Kafka connectors against a real Kafka-protocol broker (tansu, started by
//! `scripts/kafka-test-broker.sh`): the broker's address comes from
//! `STREAMWORK_KAFKA_BROKERS`; without it every test prints a skip line.
//!
//! ```sh
//! eval "$(scripts/kafka-test-broker.sh start)"
//! cargo test --features kafka --test kafka
//! ```
#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use streamwork::connectors::kafka::{
    KafkaRecord, KafkaSink, KafkaSource, PartitionWatermarks, TransactionalKafkaSink, create_topic,
    end_offsets,
};
use streamwork::core::checkpoint::RestoredPart;
use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;

mod kafka_common;

use kafka_common::{brokers, create_output_topic, read_all, read_with, unique as topic};

/// Produces `0..n` keyed by `i % 10` through a job with a Kafka sink.
fn produce(brokers: &str, topic: &str, n: u64) {
    let sink = KafkaSink::new(brokers, topic, |i: &u64| {
        (
            Some((i % 10).to_string().into_bytes()),
            i.to_string().into_bytes(),
        )
    });
    job! {
        source numbers = GeneratorSource::new(|i: u64| i).take(n);
        sink out = sink <- numbers;
    }
    .unwrap()
    .run()
    .unwrap();
}

/// A new topic named after `name`, of `partitions` partitions, holding
/// `0..n` (see [`produce`]).
fn topic_holding(brokers: &str, name: &str, partitions: i32, n: u64) -> String {
    let topic = topic(name);
    create_topic(brokers, &topic, partitions).unwrap();
    produce(brokers, &topic, n);
    topic
}

/// The values `seen` got, sorted.
fn sorted_values(seen: &CollectSink<KafkaRecord>) -> Vec<u64> {
    let mut values: Vec<u64> = seen.values().iter().map(value).collect();
    values.sort_unstable();
    values
}

/// Exactly-once checkpoints under `root/ckpt` every 20 ms, and up to two
/// restarts.
fn exactly_once_restarting(root: &Path) -> RunOptions {
    RunOptions {
        checkpoints: Some(
            CheckpointConfig::new(root.join("ckpt"), Duration::from_millis(20))
                .delivery(Delivery::ExactlyOnce),
        ),
        restart: RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(10),
        },
        ..RunOptions::default()
    }
}

fn value(record: &KafkaRecord) -> u64 {
    std::str::from_utf8(&record.value).unwrap().parse().unwrap()
}

#[test]
fn a_topic_is_read_back_whole_by_parallel_instances() {
    let Some(brokers) = brokers() else { return };
    let topic = topic_holding(&brokers, "roundtrip", 4, 5_000);
    let seen = CollectSink::new();
    let source = KafkaSource::new(&brokers, &topic, &format!("{topic}-group"))
        .idle_exit(Duration::from_secs(2));
    job! {
        source records[2] = source;
        sink out = seen.clone() <- records.global();
    }
    .unwrap()
    .run()
    .unwrap();
    assert_eq!(sorted_values(&seen), (0..5_000).collect::<Vec<_>>());
    let records = seen.values();
    // A key's records share a partition, in order.
    let mut by_key: BTreeMap<Vec<u8>, (i32, i64)> = BTreeMap::new();
    for r in &records {
        let key = r.key.clone().unwrap();
        if let Some(&(partition, offset)) = by_key.get(&key) {
            assert_eq!(partition, r.partition);
            assert!(r.offset > offset || r.partition != partition);
        }
        by_key.insert(key, (r.partition, r.offset));
    }
}

/// An idle exit ends the input only once the broker has said every
/// partition is read to its end: with no idle time at all (a broker that
/// answers later than the idle time, at the limit), the whole topic is
/// still read, empty partitions included (ten keys over sixteen
/// partitions leave some empty).
#[test]
fn an_idle_exit_ends_the_input_only_at_the_end_of_every_partition() {
    let Some(brokers) = brokers() else { return };
    let topic = topic_holding(&brokers, "to-the-end", 16, 5_000);
    let seen = CollectSink::new();
    let source =
        KafkaSource::new(&brokers, &topic, &format!("{topic}-group")).idle_exit(Duration::ZERO);
    let graph = job! {
        source records[2] = source;
        sink out = seen.clone() <- records.global();
    }
    .unwrap();
    // Bounded: a source that never ends fails the test, not hangs it.
    let run = std::thread::spawn(move || graph.run().map(|_| ()));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !run.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the source did not end within two minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run.join().unwrap().unwrap();
    assert_eq!(sorted_values(&seen), (0..5_000).collect::<Vec<_>>());
}

#[test]
fn a_restored_job_resumes_from_its_checkpointed_offsets_exactly_once() {
    let Some(brokers) = brokers() else { return };
    let topic = topic_holding(&brokers, "resume", 3, 20_000);
    let root = std::env::temp_dir().join(format!("streamwork-kafka-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let out: PathBuf = root.join("out");
    let fault = InjectFault::new(1, Fault::BeforeRecord(4_000));
    let source = KafkaSource::new(&brokers, &topic, &format!("{topic}-group"))
        .idle_exit(Duration::from_secs(2));
    let graph = job! {
        delivery exactly_once;
        source records[3] = source;
        operator checked[3] = fault.clone() <- records;
        sink lines = FileSink::new(&out, |r: &KafkaRecord, line: &mut Vec<u8>| {
            line.extend_from_slice(&r.value)
        })
        .transactional() <- checked.global();
    }
    .unwrap();
    let report = graph.run_with(exactly_once_restarting(&root)).unwrap();
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    let mut values: Vec<u64> = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with('.') {
            continue;
        }
        values.extend(
            std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| l.parse::<u64>().unwrap()),
        );
    }
    values.sort_unstable();
    assert_eq!(
        values,
        (0..20_000).collect::<Vec<_>>(),
        "each record exactly once"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn end_offsets_count_every_record_of_the_last_batch() {
    let Some(brokers) = brokers() else { return };
    let topic = topic("ends");
    create_topic(&brokers, &topic, 2).unwrap();
    // One job: the producer sends each partition's records in few batches.
    produce(&brokers, &topic, 3_000);
    let ends = end_offsets(&brokers, &topic).unwrap();
    assert_eq!(ends.len(), 2);
    assert_eq!(ends.values().sum::<i64>(), 3_000, "{ends:?}");
}

/// Partition 0 is written whole before partition 1, over the same event
/// times: read together, partition 0 runs far ahead of partition 1.
#[test]
fn windows_over_partitions_read_out_of_step_lose_no_record_to_lateness() {
    let Some(brokers) = brokers() else { return };
    let topic = topic("event-time");
    create_topic(&brokers, &topic, 2).unwrap();
    let n = 4_000u64;
    for partition in [0, 1] {
        let sink = KafkaSink::new(&brokers, &topic, |i: &u64| {
            (None, i.to_string().into_bytes())
        })
        .partition_by(move |_| partition);
        job! {
            source numbers = GeneratorSource::new(|i: u64| i)
                .take(n)
                // From 1 ms: a Kafka producer reads a timestamp of 0 as "now".
                .with_timestamps(|i: u64, _: &u64| Timestamp::from_millis(i as i64 + 1));
            sink out = sink <- numbers;
        }
        .unwrap()
        .run()
        .unwrap();
    }
    let results = CollectSink::new();
    let late = CollectSink::new();
    let source = KafkaSource::new(&brokers, &topic, &format!("{topic}-group"))
        .assign([0, 1])
        .idle_exit(Duration::from_secs(2));
    let watermarks = PartitionWatermarks::bounded(Duration::ZERO).partitions([0, 1]);
    job! {
        source records = source;
        operator timed = watermarks <- records;
        operator counts { results, late } = Windows::tumbling(Duration::from_millis(100))
            .count::<KafkaRecord, u64>() <- timed.key(|r: &KafkaRecord| r.partition as u64);
        sink out = results.clone() <- counts.results;
        sink lates = late.clone() <- counts.late;
    }
    .unwrap()
    .run()
    .unwrap();
    assert!(
        late.values().is_empty(),
        "{} late records",
        late.values().len()
    );
    let mut per_partition: BTreeMap<u64, u64> = BTreeMap::new();
    for result in results.values() {
        assert!(result.value <= 100, "a window of 100 ms holds 100 records");
        *per_partition.entry(result.key).or_default() += result.value;
    }
    assert_eq!(per_partition, BTreeMap::from([(0, n), (1, n)]));
}

/// The brokers for the transactional sink's tests: a real Kafka named by
/// `STREAMWORK_KAFKA_TRANSACTIONAL_BROKERS`, or else the test broker. The
/// sink never aborts a transaction in these tests, and tansu commits and
/// fences transactions; what it lacks (aborted records stay visible to
/// `read_committed`) only a real Kafka would show.
fn transactional_brokers() -> Option<String> {
    match std::env::var("STREAMWORK_KAFKA_TRANSACTIONAL_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Some(brokers),
        _ => {
            println!(
                "transactions against the test broker (set STREAMWORK_KAFKA_TRANSACTIONAL_BROKERS to use a real Kafka)"
            );
            brokers()
        }
    }
}

/// Every value of `topic`, sorted.
fn read_values(brokers: &str, topic: &str) -> Vec<u64> {
    let mut values: Vec<u64> = read_all(brokers, topic).iter().map(value).collect();
    values.sort_unstable();
    values
}

/// What a sink `out`, instance 0 of `parallelism`, is told when restored
/// from `checkpoint`, whose parts are `parts` (by old instance).
fn restored_from(checkpoint: u64, parallelism: u32, parts: &[StateBytes]) -> Restore<'_> {
    Restore {
        records: None,
        component: "out",
        checkpoint: CheckpointId::new(checkpoint),
        is_final: false,
        ended: Vec::new(),
        instance: InstanceIdx(0),
        parallelism,
        key_groups: KeyGroups::DEFAULT,
        parts: parts
            .iter()
            .enumerate()
            .map(|(k, part)| RestoredPart {
                part: InstanceIdx(k as u32),
                schema: part.schema,
                bytes: &part.bytes,
            })
            .collect(),
    }
}

fn number_sink(brokers: &str, topic: &str) -> KafkaSink<u64> {
    KafkaSink::new(brokers, topic, |i: &u64| {
        (
            Some((i % 10).to_string().into_bytes()),
            i.to_string().into_bytes(),
        )
    })
}

#[test]
fn a_transactional_sink_publishes_every_record_once_across_a_failure() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let (input, output) = (topic("tx-in"), topic("tx-out"));
    create_topic(&brokers, &input, 3).unwrap();
    create_output_topic(&brokers, &output, 2);
    produce(&brokers, &input, 10_000);
    let root = std::env::temp_dir().join(topic("streamwork-kafka-tx"));
    let fault = InjectFault::new(1, Fault::BeforeRecord(2_000));
    let source = KafkaSource::new(&brokers, &input, &format!("{input}-group"))
        .idle_exit(Duration::from_secs(2));
    let sink = KafkaSink::new(&brokers, &output, |r: &KafkaRecord| {
        (r.key.clone(), r.value.clone())
    })
    .transactional(&output);
    let graph = job! {
        delivery exactly_once;
        source records[3] = source;
        operator checked[3] = fault.clone() <- records;
        sink out[2] = sink <- checked;
    }
    .unwrap();
    let report = graph.run_with(exactly_once_restarting(&root)).unwrap();
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    assert_eq!(
        read_values(&brokers, &output),
        (0..10_000).collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The sink driven by hand through the crashes a job can have around a
/// checkpoint's completion, each run in a process of its own that shares
/// nothing with the others but the brokers and the checkpoints (what a
/// checkpoint staged is in it: the sink's part).
#[test]
fn a_restored_transactional_sink_publishes_what_its_checkpoint_covers_once() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-restore");
    create_topic(&brokers, &output, 1).unwrap();
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let open = || {
        let mut sink = number_sink(&brokers, &output).transactional(&output);
        sink.open(&ctx).unwrap();
        sink
    };
    // Checkpoints 1 and 2 staged; the job dies before either is published,
    // with checkpoint 1 complete.
    let mut sink = open();
    for i in 0..10 {
        sink.write(Record::new(i)).unwrap();
    }
    sink.pre_commit(CheckpointId::new(1)).unwrap();
    let first = sink.snapshot(CheckpointId::new(1)).unwrap().unwrap();
    for i in 100..110 {
        sink.write(Record::new(i)).unwrap();
    }
    sink.pre_commit(CheckpointId::new(2)).unwrap();
    drop(sink);
    // Another process restores checkpoint 1: it publishes what it staged.
    let mut sink = open();
    sink.restore(&restored_from(1, 1, std::slice::from_ref(&first)))
        .unwrap();
    // Checkpoint 3 completes and is published; the process dies at once.
    for i in 20..25 {
        sink.write(Record::new(i)).unwrap();
    }
    sink.pre_commit(CheckpointId::new(3)).unwrap();
    let third = sink.snapshot(CheckpointId::new(3)).unwrap().unwrap();
    sink.commit(CheckpointId::new(3)).unwrap();
    drop(sink);
    // A third restores checkpoint 3, which still holds its records as
    // staged: the marker says they reached Kafka, so they are not sent again.
    let mut sink = open();
    sink.restore(&restored_from(3, 1, std::slice::from_ref(&third)))
        .unwrap();
    let expected: Vec<u64> = (0..10).chain(20..25).collect();
    assert_eq!(read_values(&brokers, &output), expected);
    // Restoring checkpoint 1 now would publish 0..10 twice: refused.
    let error = open()
        .restore(&restored_from(1, 1, std::slice::from_ref(&first)))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("has published the output of checkpoint 3"),
        "{error}"
    );
}

/// A transactional sink asks for the job's next checkpoint once what it
/// staged since the last barrier passes its budget, once per barrier, so
/// that input faster than the checkpoint interval does not grow it without
/// bound; what it staged is published as usual.
#[test]
fn a_transactional_sink_asks_for_a_checkpoint_when_its_staged_output_passes_its_budget() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use streamwork::core::checkpoint::CheckpointView;

    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-budget");
    create_topic(&brokers, &output, 1).unwrap();
    let early = Arc::new(AtomicBool::new(false));
    let view =
        CheckpointView::new(Arc::new(AtomicU64::new(0)), None).with_early_requests(early.clone());
    let ctx =
        InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT).with_checkpoints(view);
    let mut sink = number_sink(&brokers, &output)
        .transactional(&output)
        .max_pending_bytes(1_000);
    sink.open(&ctx).unwrap();
    let mut next = 0u64;
    // Writes until the sink asks (at most `limit` records).
    let mut write_until_asked = |sink: &mut TransactionalKafkaSink<u64>, limit: u64| {
        let start = next;
        while !early.load(Ordering::SeqCst) && next - start < limit {
            sink.write(Record::new(next)).unwrap();
            next += 1;
        }
        next - start
    };
    let first = write_until_asked(&mut sink, 1_000);
    assert!(
        (20..1_000).contains(&first),
        "asked after {first} records of a dozen bytes, with a budget of 1,000 bytes"
    );
    early.store(false, Ordering::SeqCst);
    assert_eq!(
        write_until_asked(&mut sink, 500),
        500,
        "asked again before its barrier"
    );
    sink.pre_commit(CheckpointId::new(1)).unwrap();
    let second = write_until_asked(&mut sink, 1_000);
    assert!(second < 1_000, "not asked again after its barrier");
    sink.pre_commit(CheckpointId::new(2)).unwrap();
    sink.commit(CheckpointId::new(2)).unwrap();
    assert_eq!(
        read_values(&brokers, &output),
        (0..next).collect::<Vec<_>>()
    );
}

#[test]
fn a_fenced_transactional_sink_cannot_publish() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-fenced");
    create_topic(&brokers, &output, 1).unwrap();
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let mut zombie = number_sink(&brokers, &output).transactional(&output);
    zombie.open(&ctx).unwrap();
    for i in 0..5 {
        zombie.write(Record::new(i)).unwrap();
    }
    zombie.pre_commit(CheckpointId::new(1)).unwrap();
    // Its successor opens with the same transactional id.
    let mut successor = number_sink(&brokers, &output).transactional(&output);
    successor.open(&ctx).unwrap();
    let error = zombie.commit(CheckpointId::new(1)).unwrap_err();
    assert!(error.to_string().contains("fenced"), "{error}");
    assert!(read_values(&brokers, &output).is_empty());
}

#[test]
fn a_transactional_sink_in_a_job_without_checkpoints_publishes_at_the_end() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-plain");
    create_output_topic(&brokers, &output, 2);
    let sink = number_sink(&brokers, &output).transactional(&output);
    job! {
        source numbers = GeneratorSource::new(|i: u64| i).take(1_000);
        sink out[2] = sink <- numbers;
    }
    .unwrap()
    .run()
    .unwrap();
    assert_eq!(
        read_values(&brokers, &output),
        (0..1_000).collect::<Vec<_>>()
    );
}

/// Without checkpoints, what passes the budget is published at once in a
/// transaction of its own (nothing would ever make room), the rest at the
/// end.
#[test]
fn a_transactional_sink_without_checkpoints_publishes_each_time_its_budget_is_full() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-plain-budget");
    create_topic(&brokers, &output, 1).unwrap();
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let mut sink = number_sink(&brokers, &output)
        .transactional(&output)
        .max_pending_bytes(1_000);
    sink.open(&ctx).unwrap();
    for i in 0..500 {
        sink.write(Record::new(i)).unwrap();
    }
    let before_close = read_values(&brokers, &output);
    assert!(
        (400..500).contains(&before_close.len()),
        "published before the end: {} of 500",
        before_close.len()
    );
    assert_eq!(
        before_close,
        (0..before_close.len() as u64).collect::<Vec<_>>()
    );
    sink.close().unwrap();
    assert_eq!(read_values(&brokers, &output), (0..500).collect::<Vec<_>>());
}

#[test]
fn after_a_scale_down_a_transactional_sink_publishes_what_removed_instances_staged() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let output = topic("tx-scale-down");
    create_topic(&brokers, &output, 1).unwrap();
    let open = |instance: u32, parallelism: u32| {
        let mut sink = number_sink(&brokers, &output).transactional(&output);
        let ctx = InstanceContext::new(
            "out",
            InstanceIdx(instance),
            parallelism,
            KeyGroups::DEFAULT,
        );
        sink.open(&ctx).unwrap();
        sink
    };
    // Two instances stage checkpoint 1; the job dies once it completes.
    let mut parts = Vec::new();
    for instance in 0..2 {
        let mut sink = open(instance, 2);
        for i in 0..5 {
            sink.write(Record::new(instance as u64 * 100 + i)).unwrap();
        }
        sink.pre_commit(CheckpointId::new(1)).unwrap();
        parts.push(sink.snapshot(CheckpointId::new(1)).unwrap().unwrap());
    }
    // Restored at parallelism 1: instance 0 stands for old instance 1 too.
    let mut sink = open(0, 1);
    sink.restore(&restored_from(1, 1, &parts)).unwrap();
    let expected: Vec<u64> = (0..5).chain(100..105).collect();
    assert_eq!(read_values(&brokers, &output), expected);
}

/// A run that takes checkpoints and fails before its first one completes
/// leaves the group's offsets where they were: the next run, starting
/// fresh, reads again everything the failed one read (its sinks committed
/// none of it). Committing the read positions on close lost them.
#[test]
fn a_run_failing_before_its_first_checkpoint_does_not_move_the_group() {
    let Some(brokers) = brokers() else { return };
    let input = topic("first-ckpt-in");
    create_topic(&brokers, &input, 3).unwrap();
    produce(&brokers, &input, 3_000);
    let group = format!("{input}-group");
    let root = std::env::temp_dir().join(topic("streamwork-kafka-first-ckpt"));
    let run = |fault: Option<InjectFault<KafkaRecord>>, dir: &Path, interval: Duration| {
        let seen = CollectSink::new();
        let source = KafkaSource::new(&brokers, &input, &group).idle_exit(Duration::from_secs(2));
        let fault = fault.unwrap_or_else(|| InjectFault::new(0, Fault::BeforeRecord(usize::MAX)));
        let options = RunOptions {
            checkpoints: Some(CheckpointConfig::new(dir, interval).delivery(Delivery::AtLeastOnce)),
            ..RunOptions::default()
        };
        // Three instances: the fault fails one, and the others are stopped
        // (and closed) while their reads are ahead of any checkpoint.
        let result = job! {
            source records[3] = source;
            operator checked[3] = fault <- records;
            sink out[2] = seen.clone() <- checked;
        }
        .unwrap()
        .run_with(options);
        (result, seen)
    };
    // Every record is read before the first checkpoint starts (the sources
    // idle for two seconds before they end), and that checkpoint fails.
    let (failed, _) = run(
        Some(InjectFault::new(1, Fault::InCheckpoint(1))),
        &root.join("a"),
        Duration::from_millis(1_500),
    );
    assert!(failed.is_err(), "the fault fails the first run");
    let (result, seen) = run(None, &root.join("b"), Duration::from_secs(3600));
    result.unwrap();
    let mut values: Vec<u64> = seen.values().iter().map(value).collect();
    values.sort_unstable();
    assert_eq!(values, (0..3_000).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&root);
}

/// A job that fails after dead-lettering two malformed records, before any
/// checkpoint (the interval is an hour), reads them again when restarted:
/// the dead-letter topic still holds each of them once.
#[test]
fn a_replay_does_not_dead_letter_a_record_twice() {
    let Some(brokers) = brokers() else { return };
    let (input, dead) = (topic("dl-in"), topic("dl-dead"));
    create_topic(&brokers, &input, 1).unwrap();
    create_topic(&brokers, &dead, 1).unwrap();
    let mut lines: Vec<Vec<u8>> = (0..200u64).map(|i| i.to_string().into_bytes()).collect();
    lines.insert(10, b"not a number".to_vec());
    lines.insert(20, vec![0xff, b'!']);
    let sink = KafkaSink::new(&brokers, &input, |line: &Vec<u8>| (None, line.clone()));
    job! {
        source lines = streamwork::connectors::VecSource::new(lines);
        sink out = sink <- lines;
    }
    .unwrap()
    .run()
    .unwrap();
    let source = KafkaSource::new(&brokers, &input, &topic("dl-group"))
        .check(|r| {
            std::str::from_utf8(&r.value)
                .map_err(|e| e.to_string())?
                .parse::<u64>()
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .dead_letter(&dead)
        .idle_exit(Duration::from_secs(2));
    let fault = InjectFault::new(0, Fault::BeforeRecord(150));
    let seen = CollectSink::new();
    let root = std::env::temp_dir().join(topic("streamwork-kafka-dl"));
    let report = job! {
        source records = source;
        operator checked = fault.clone() <- records;
        sink out = seen.clone() <- checked;
    }
    .unwrap()
    .run_with(RunOptions {
        checkpoints: Some(
            CheckpointConfig::new(&root, Duration::from_secs(3600)).delivery(Delivery::AtLeastOnce),
        ),
        restart: RestartStrategy::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        },
        ..RunOptions::default()
    })
    .unwrap();
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    let mut dead: Vec<Vec<u8>> = read_all(&brokers, &dead)
        .into_iter()
        .map(|r| r.value)
        .collect();
    dead.sort();
    assert_eq!(dead, vec![b"not a number".to_vec(), vec![0xff, b'!']]);
    let _ = std::fs::remove_dir_all(&root);
}

/// A source told that its topic has no holes reads a hole again, and takes
/// the records after it once its wait is over: the records a transaction's
/// commit marker separates (the marker holds an offset no reader is
/// shown) are all read, once, in order.
#[test]
fn a_source_expecting_no_holes_takes_the_records_after_a_hole_that_outlasts_its_wait() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let input = topic("holes");
    create_output_topic(&brokers, &input, 1);
    let sink = number_sink(&brokers, &input).transactional(&input);
    job! {
        source numbers = GeneratorSource::new(|i: u64| i).take(100);
        sink out = sink <- numbers;
    }
    .unwrap()
    .run()
    .unwrap();
    produce_range(&brokers, &input, 100..200);
    let records = read_with(
        KafkaSource::new(&brokers, &input, &topic("holes-reader"))
            .expect_no_holes(Duration::from_millis(300))
            .idle_exit(Duration::from_secs(2)),
    );
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert!(
        offsets.windows(2).any(|w| w[1] > w[0] + 1),
        "the topic has a hole"
    );
    assert_eq!(
        records.iter().map(value).collect::<Vec<_>>(),
        (0..200).collect::<Vec<_>>()
    );
}

/// A source that expects no holes knows where a partition it reads
/// without a restored position starts (its group's committed offset), so a
/// hole before its first record is read again too: here the commit marker
/// a first reader stopped at, which it then waits out before taking the
/// records after it (a broker showing a later batch before the first would
/// otherwise make a fresh reader pass over the first for good).
#[test]
fn a_fresh_source_expecting_no_holes_reads_a_hole_before_its_first_record_again() {
    let Some(brokers) = transactional_brokers() else {
        return;
    };
    let input = topic("start-hole");
    create_output_topic(&brokers, &input, 1);
    let publish = |range| {
        let sink = number_sink(&brokers, &input).transactional(&input);
        produce_range_into(sink, range);
    };
    let group = topic("start-hole-reader");
    let reader = |wait: Duration| {
        KafkaSource::new(&brokers, &input, &group)
            .expect_no_holes(wait)
            .idle_exit(Duration::from_millis(500))
    };
    // The first reader commits the offset after the first transaction's
    // records: its commit marker's, which no reader is shown.
    publish(0..100);
    let first = read_with(reader(Duration::from_millis(300)));
    assert_eq!(
        first.iter().map(value).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    publish(100..200);
    let wait = Duration::from_secs(4);
    let started = std::time::Instant::now();
    let second = read_with(reader(wait));
    // A lower bound, which no speed of the machine makes fail: the reader
    // read the hole at its start again for its whole wait.
    assert!(
        started.elapsed() >= wait,
        "the hole before the first record was not read again: {:?}",
        started.elapsed()
    );
    assert_eq!(
        second.first().map(|r| r.offset),
        Some(first.last().unwrap().offset + 2),
        "the second reader starts after the marker"
    );
    assert_eq!(
        second.iter().map(value).collect::<Vec<_>>(),
        (100..200).collect::<Vec<_>>()
    );
}

/// Produces `range` keyed by `i % 10` through a job with a Kafka sink.
fn produce_range(brokers: &str, topic: &str, range: std::ops::Range<u64>) {
    produce_range_into(number_sink(brokers, topic), range);
}

/// Produces `range` through a job with `sink`.
fn produce_range_into(sink: impl Sink<In = u64>, range: std::ops::Range<u64>) {
    let start = range.start;
    job! {
        source numbers = GeneratorSource::new(move |i: u64| start + i).take(range.end - range.start);
        sink out = sink <- numbers;
    }
    .unwrap()
    .run()
    .unwrap();
}
