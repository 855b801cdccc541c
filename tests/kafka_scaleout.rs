//! Scale-out through a consumer group, against a real Kafka-protocol broker
//! (tansu, started by `scripts/kafka-test-broker.sh`; the address comes from
//! `STREAMWORK_KAFKA_BROKERS`, and without it every test prints a skip
//! line): the `kafka_word_count` example run as several processes, with
//! processes joining, and one killed with SIGKILL and started again.
//!
//! Nothing here depends on timing to pass: a process is killed at whatever
//! point it has reached, and the counts must be exact wherever that is.
//!
//! ```sh
//! eval "$(scripts/kafka-test-broker.sh start)"
//! cargo build --features kafka --examples && cargo test --features kafka --test kafka_scaleout
//! ```
#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use streamwork::connectors::kafka::{KafkaRecord, KafkaSink, KafkaSource, create_topic};
use streamwork::prelude::*;

fn brokers() -> Option<String> {
    match std::env::var("STREAMWORK_KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Some(brokers),
        _ => {
            println!(
                "skipped: no broker (set STREAMWORK_KAFKA_BROKERS, see scripts/kafka-test-broker.sh)"
            );
            None
        }
    }
}

/// A name no other test run uses.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{}-{nanos}", std::process::id())
}

/// Lines of words from a small vocabulary (so that counts are large), with
/// the exact count of every word.
fn lines(seed: u64, n: usize) -> (Vec<Vec<u8>>, BTreeMap<String, u64>) {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut expected = BTreeMap::new();
    let lines = (0..n)
        .map(|_| {
            let words: Vec<String> = (0..1 + next() % 8)
                .map(|_| format!("w{}", next() % 300))
                .collect();
            for word in &words {
                *expected.entry(word.clone()).or_insert(0) += 1;
            }
            words.join(" ").into_bytes()
        })
        .collect();
    (lines, expected)
}

/// Produces `lines` (no key: spread over the partitions).
fn produce(brokers: &str, topic: &str, lines: Vec<Vec<u8>>) {
    let sink = KafkaSink::new(brokers, topic, |line: &Vec<u8>| (None, line.clone()));
    job! {
        source lines = VecSource::new(lines);
        sink out = sink <- lines;
    }
    .unwrap()
    .run()
    .unwrap();
}

/// Every record of `topic`, in offset order per partition.
fn read_all(brokers: &str, topic: &str) -> Vec<KafkaRecord> {
    let seen = CollectSink::new();
    let source =
        KafkaSource::new(brokers, topic, &unique("reader")).idle_exit(Duration::from_secs(2));
    job! {
        source records = source;
        sink out = seen.clone() <- records;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut records = seen.values();
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}

/// The last value per key of `topic`, as counts.
fn last_counts(brokers: &str, topic: &str) -> BTreeMap<String, u64> {
    read_all(brokers, topic)
        .into_iter()
        .map(|r| {
            let key = String::from_utf8(r.key.expect("a keyed record")).unwrap();
            let count = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
            (key, count)
        })
        .collect()
}

fn word_count() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join("kafka_word_count");
    assert!(
        path.exists(),
        "kafka_word_count not built at {} (cargo build --features kafka --examples)",
        path.display()
    );
    path
}

struct Job<'a> {
    brokers: &'a str,
    input: &'a str,
    output: &'a str,
    group: &'a str,
    checkpoints: &'a Path,
}

impl Job<'_> {
    fn spawn(&self) -> Child {
        Command::new(word_count())
            .args(["--brokers", self.brokers])
            .args(["--input-topic", self.input])
            .args(["--output-topic", self.output])
            .args(["--group", self.group])
            .arg("--checkpoint-dir")
            .arg(self.checkpoints)
            .args(["--idle-exit-ms", "3000"])
            .args(["--checkpoint-interval-ms", "200"])
            .args(["--session-timeout-ms", "6000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kafka_word_count")
    }
}

/// Waits (at most three minutes) for a process and returns its stderr.
fn finish(mut child: Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            assert!(
                status.success(),
                "kafka_word_count failed ({status}):\n{stderr}"
            );
            return stderr;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kafka_word_count did not exit within three minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `topic` holds a record (at most a minute).
fn wait_for_output(brokers: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while streamwork::connectors::kafka::end_offsets(brokers, topic)
        .map(|ends| ends.values().sum::<i64>())
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline, "no output within a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn records_read(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("kafka_word_count: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no report in:\n{stderr}"))
}

#[test]
fn three_processes_one_killed_and_restarted_count_every_word_exactly() {
    let Some(brokers) = brokers() else { return };
    let (input, output, group) = (unique("lines"), unique("counts"), unique("wc"));
    create_topic(&brokers, &input, 4).unwrap();
    let (mut text, mut expected) = lines(7, 20_000);
    // Two lines that are not UTF-8: dead-lettered, not counted.
    text.push(vec![0xff, b' ', b'x']);
    text.push(vec![b'y', 0xc3]);
    produce(&brokers, &input, text);
    let checkpoints = std::env::temp_dir().join(unique("wc-ckpt"));
    let job = Job {
        brokers: &brokers,
        input: &input,
        output: &output,
        group: &group,
        checkpoints: &checkpoints,
    };
    let mut processes: Vec<Child> = (0..3).map(|_| job.spawn()).collect();
    wait_for_output(&brokers, &output);
    // Killed wherever it is, and started again.
    processes[1].kill().unwrap();
    processes[1].wait().unwrap();
    processes[1] = job.spawn();
    let read: u64 = processes
        .into_iter()
        .map(|p| records_read(&finish(p)))
        .sum();
    assert!(read > 0);
    let counts = last_counts(&brokers, &output);
    expected.retain(|_, n| *n > 0);
    assert_eq!(counts, expected, "the last count of every word");
    let dead = read_all(&brokers, &format!("{group}-dead-letter"));
    let mut dead: Vec<Vec<u8>> = dead.into_iter().map(|r| r.value).collect();
    dead.sort();
    assert_eq!(dead, vec![vec![b'y', 0xc3], vec![0xff, b' ', b'x']]);
    let _ = std::fs::remove_dir_all(&checkpoints);
}

#[test]
fn the_processes_that_receive_partitions_carry_on_from_their_checkpoints() {
    let Some(brokers) = brokers() else { return };
    let (input, output, group) = (unique("lines"), unique("counts"), unique("wc"));
    create_topic(&brokers, &input, 4).unwrap();
    let (first, mut expected) = lines(11, 5_000);
    let (second, more) = lines(13, 5_000);
    for (word, n) in more {
        *expected.entry(word).or_insert(0) += n;
    }
    produce(&brokers, &input, first);
    let checkpoints = std::env::temp_dir().join(unique("wc-ckpt"));
    let job = Job {
        brokers: &brokers,
        input: &input,
        output: &output,
        group: &group,
        checkpoints: &checkpoints,
    };
    // One process counts the first half and leaves.
    let first_read = records_read(&finish(job.spawn()));
    assert!(first_read >= 5_000, "lines and words: {first_read}");
    // Two others take its partitions, restore its counts from the
    // checkpoints, and count the second half on top of them (counting from
    // nothing would end with the second half's counts alone).
    let others: Vec<Child> = (0..2).map(|_| job.spawn()).collect();
    produce(&brokers, &input, second);
    let others_read: u64 = others.into_iter().map(|p| records_read(&finish(p))).sum();
    assert!(others_read >= 5_000, "lines and words: {others_read}");
    let counts = last_counts(&brokers, &output);
    assert_eq!(counts, expected, "the last count of every word");
    let _ = std::fs::remove_dir_all(&checkpoints);
}
