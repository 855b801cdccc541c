//! Scale-out through a consumer group, against a real Kafka-protocol broker
//! (tansu, started by `scripts/kafka-test-broker.sh`; the address comes from
//! `STREAMWORK_KAFKA_BROKERS`, and without it every test prints a skip
//! line): the `kafka_word_count` example, one `job!` with two keyed
//! exchanges that the runner runs as three stages, run as several
//! processes, with processes joining, and one killed with SIGKILL and
//! started again; with checkpoints in a shared directory, or (feature
//! `s3`, with `STREAMWORK_S3_ENDPOINT`) in an S3 bucket with each process
//! given an empty directory of its own.
//!
//! Nothing here depends on timing to pass: a process is killed at whatever
//! point it has reached, and the counts must be exact wherever that is.
//!
//! ```sh
//! eval "$(scripts/kafka-test-broker.sh start)"
//! cargo build --features kafka --examples && cargo test --features kafka --test kafka_scaleout
//! ```
#![cfg(feature = "kafka")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use streamwork::connectors::kafka::{KafkaRecord, KafkaSink, create_topic};
use streamwork::prelude::*;
use streamwork::scaleout::{GroupRunner, TaskRun, handovers};

mod kafka_common;
mod support;

use kafka_common::{brokers, create_output_topic, read_all, unique};

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

/// Produces batches of 200 lines (seeds `seed`, `seed + 1`, ...), `pause`
/// apart, on a thread of its own: at least `least`, then more until `stop`
/// is raised, `most` at most. Returns what it produced.
fn produce_until(
    brokers: &str,
    input: &str,
    seed: u64,
    pause: Duration,
    (least, most): (u64, u64),
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<Vec<u8>>> {
    let (brokers, input) = (brokers.to_string(), input.to_string());
    std::thread::spawn(move || {
        let mut produced = Vec::new();
        for b in 0..most {
            if b >= least && stop.load(Ordering::SeqCst) {
                break;
            }
            let batch = lines(seed + b, 200).0;
            produced.extend(batch.iter().cloned());
            produce(&brokers, &input, batch);
            std::thread::sleep(pause);
        }
        produced
    })
}

/// Produces `batches` one after another, `pause` apart, on a thread of
/// its own (bounded: as many batches as given).
fn produce_over_time(
    brokers: &str,
    input: &str,
    batches: Vec<Vec<Vec<u8>>>,
    pause: Duration,
) -> JoinHandle<()> {
    let (brokers, input) = (brokers.to_string(), input.to_string());
    std::thread::spawn(move || {
        for batch in batches {
            produce(&brokers, &input, batch);
            std::thread::sleep(pause);
        }
    })
}

/// How many words start with each letter, from the words' counts.
fn letter_totals(counts: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for (word, count) in counts {
        let letter = word.chars().next().unwrap().to_string();
        *totals.entry(letter).or_insert(0) += count;
    }
    totals
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
    support::example(
        "kafka_word_count",
        "cargo build --features kafka --examples",
    )
}

/// One run of the job: topics, group and checkpoint directory no other run
/// uses (the directory removed when it is dropped).
struct Job {
    brokers: String,
    input: String,
    output: String,
    totals: String,
    group: String,
    checkpoints: PathBuf,
    /// Checkpoints in this S3 bucket at this endpoint, each process with
    /// an empty directory of its own under `checkpoints`.
    s3: Option<(String, String)>,
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.checkpoints);
    }
}

impl Job {
    /// A run with fresh names.
    fn fresh(brokers: &str, s3: Option<(String, String)>) -> Job {
        Job {
            brokers: brokers.to_string(),
            input: unique("lines"),
            output: unique("counts"),
            totals: unique("totals"),
            group: unique("wc"),
            checkpoints: std::env::temp_dir().join(unique("wc-ckpt")),
            s3,
        }
    }

    /// Creates the output topics (with a warm-up record in each
    /// partition: see `create_output_topic`).
    fn create_outputs(&self, partitions: i32) {
        create_output_topic(&self.brokers, &self.output, partitions);
        create_output_topic(&self.brokers, &self.totals, partitions);
    }

    fn spawn(&self) -> Process {
        self.spawn_with(&[])
    }

    /// Started with `extra` arguments too.
    fn spawn_with(&self, extra: &[&str]) -> Process {
        let mut command = Command::new(word_count());
        command.args(extra);
        command
            .args(["--brokers", &self.brokers])
            .args(["--input-topic", &self.input])
            .args(["--output-topic", &self.output])
            .args(["--totals-topic", &self.totals])
            .args(["--group", &self.group]);
        match &self.s3 {
            Some((endpoint, bucket)) => {
                command
                    .arg("--checkpoint-dir")
                    .arg(self.checkpoints.join(unique("own")))
                    .args(["--s3-endpoint", endpoint])
                    .args(["--s3-bucket", bucket]);
            }
            None => {
                command.arg("--checkpoint-dir").arg(&self.checkpoints);
            }
        }
        let mut child = command
            .args(["--idle-exit-ms", "3000"])
            .args(["--checkpoint-interval-ms", "200"])
            .args(["--session-timeout-ms", "6000"])
            // The consumer group's own log, for a process that does not exit.
            .args(["--kafka-debug", "cgrp"])
            .env(
                "STREAMWORK_LOG",
                "info,streamwork_connectors=debug,librdkafka=debug",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kafka_word_count");
        // Read as it is written: a full pipe would block the process.
        let pipe = child.stderr.take().expect("piped stderr");
        let so_far = Arc::new(Mutex::new(String::new()));
        let lines = so_far.clone();
        let log = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(pipe)
                .split(b'\n')
                .map_while(Result::ok)
            {
                let mut log = lines.lock().unwrap();
                log.push_str(&String::from_utf8_lossy(&line));
                log.push('\n');
            }
            lines.lock().unwrap().clone()
        });
        Process { child, log, so_far }
    }
}

/// A running `kafka_word_count` and the reader of its log (stderr).
struct Process {
    child: Child,
    log: JoinHandle<String>,
    /// What it has logged so far.
    so_far: Arc<Mutex<String>>,
}

impl Process {
    /// Waits (at most two minutes) until its log holds `text`.
    fn wait_for_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.so_far.lock().unwrap().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no `{text}` in the log within two minutes:\n{}",
                self.so_far.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most three minutes) for it to fail, and returns its log.
    fn failure(mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = self.log.join().expect("the log reader");
                assert!(!status.success(), "kafka_word_count succeeded:\n{log}");
                return log;
            }
            assert!(Instant::now() < deadline, "kafka_word_count did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks it to leave the group (SIGINT, as Ctrl-C).
    fn interrupt(&self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success());
    }

    /// Kills the process wherever it is, and waits for it.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let _ = self.log.join();
    }

    /// Waits (at most three minutes) for the process and returns its log.
    fn finish(mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = self.log.join().expect("the log reader");
                assert!(
                    status.success(),
                    "kafka_word_count failed ({status}):\n{log}"
                );
                return log;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let log = self.log.join().unwrap_or_default();
                panic!("kafka_word_count did not exit within three minutes; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until `topic` holds a record of the job's (at most a minute):
/// more than the warm-up record each partition of an output topic starts
/// with (`create_output_topic`).
fn wait_for_output(brokers: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while streamwork::connectors::kafka::end_offsets(brokers, topic)
        .map(|ends| ends.values().sum::<i64>() - ends.len() as i64)
        .unwrap_or(0)
        <= 0
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

/// Three processes of the three-stage job, one killed with SIGKILL
/// wherever it is and started again, and a fourth added midway: every
/// word's count and every letter's total exact.
fn three_processes_one_killed_one_added(s3: Option<(String, String)>) {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, s3);
    let (input, output, totals, group) = (&job.input, &job.output, &job.totals, &job.group);
    create_topic(&brokers, input, 4).unwrap();
    let (mut text, mut expected) = lines(7, 20_000);
    // Two lines that are not UTF-8: dead-lettered, not counted.
    text.push(vec![0xff, b' ', b'x']);
    text.push(vec![b'y', 0xc3]);
    produce(&brokers, input, text);
    job.create_outputs(4);
    let mut processes: Vec<Process> = (0..3).map(|_| job.spawn()).collect();
    wait_for_output(&brokers, totals);
    // Killed wherever it is, and started again; and one more.
    processes.remove(1).kill();
    processes.push(job.spawn());
    processes.push(job.spawn());
    let read: u64 = processes
        .into_iter()
        .map(|p| records_read(&p.finish()))
        .sum();
    assert!(read > 0);
    let counts = last_counts(&brokers, output);
    expected.retain(|_, n| *n > 0);
    assert_eq!(counts, expected, "the last count of every word");
    assert_eq!(
        last_counts(&brokers, totals),
        letter_totals(&expected),
        "the last total of every letter"
    );
    let dead = read_all(&brokers, &format!("{group}-dead-letter"));
    let mut dead: Vec<Vec<u8>> = dead.into_iter().map(|r| r.value).collect();
    dead.sort();
    assert_eq!(dead, vec![vec![b'y', 0xc3], vec![0xff, b' ', b'x']]);
    #[cfg(feature = "s3")]
    if let Some((endpoint, bucket)) = &job.s3 {
        // Every partition of every stage has a complete checkpoint in the
        // bucket, under GROUP/STAGE/PARTITION.
        use streamwork::state::{CheckpointStore, ObjectStoreCheckpoints};
        let store = ObjectStoreCheckpoints::s3(Some(endpoint), bucket, group).unwrap();
        for (stage, partitions) in [("lines", 4), ("counted", 4), ("totalled", 3)] {
            for partition in 0..partitions {
                let objects = store
                    .child(&format!("{stage}/{partition}"))
                    .unwrap()
                    .list()
                    .unwrap();
                assert!(
                    objects.iter().any(|(name, _)| name == "COMPLETE"),
                    "{stage}/{partition} in the bucket: {objects:?}"
                );
            }
        }
    }
}

#[test]
fn three_processes_one_killed_and_restarted_one_added_count_every_word_exactly() {
    three_processes_one_killed_one_added(None);
}

/// The same with the checkpoints in an S3 bucket (moto, started by
/// `scripts/s3-test-server.sh`) and each process given an empty directory
/// of its own: a partition's state follows it through the bucket.
#[cfg(feature = "s3")]
#[test]
fn with_checkpoints_in_s3_and_no_shared_directory_every_count_is_exact() {
    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    three_processes_one_killed_one_added(Some((endpoint, bucket)));
}

/// What `kafka_word_count --nondeterministic` counts: each line's distinct
/// words.
fn distinct_counts(lines: &[Vec<u8>]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        let words: BTreeSet<&str> = std::str::from_utf8(line)
            .unwrap()
            .split_whitespace()
            .collect();
        for word in words {
            *counts.entry(word.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// A number below `n` that differs from run to run.
fn random_below(n: u64) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(n) % n.max(1)
}

/// Trials of the three-stage job whose every stage emits what differs from
/// run to run (`--nondeterministic`: hash-set order, increments emitted by
/// the wall clock and by chance): three processes while the input keeps
/// arriving, two of them killed with SIGKILL one after the other at random
/// moments, each replaced by a new one; every count and total exact in
/// every trial. As many trials as `STREAMWORK_KILL_TRIALS` says (2 by
/// default, for CI's time); with `STREAMWORK_KEEP_LOGS=DIR`, the finished processes' logs
/// are kept there.
fn nondeterministic_stages_killed_at_random(s3: Option<(String, String)>) {
    let Some(brokers) = brokers() else { return };
    let trials: u64 = std::env::var("STREAMWORK_KILL_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    for trial in 0..trials {
        let started = Instant::now();
        let job = Job::fresh(&brokers, s3.clone());
        let (input, output, totals) = (&job.input, &job.output, &job.totals);
        create_topic(&brokers, input, 4).unwrap();
        job.create_outputs(4);
        // A first batch of lines; once the processes have formed the group
        // and written their first totals, 40 more, 100 ms apart (bounded),
        // so that the kills land while records flow through every stage.
        let mut batches: Vec<Vec<Vec<u8>>> =
            (0..41).map(|b| lines(1_000 * trial + b, 150).0).collect();
        let expected = distinct_counts(&batches.concat());
        produce(&brokers, input, batches.remove(0));
        let spawn = || job.spawn_with(&["--nondeterministic"]);
        let mut processes: Vec<Process> = (0..3).map(|_| spawn()).collect();
        wait_for_output(&brokers, totals);
        let producer = produce_over_time(&brokers, input, batches, Duration::from_millis(100));
        let mut kills = Vec::new();
        for _ in 0..2 {
            let delay = Duration::from_millis(random_below(2_000));
            std::thread::sleep(delay);
            let victim = random_below(processes.len() as u64) as usize;
            processes.remove(victim).kill();
            processes.push(spawn());
            kills.push(format!("{delay:?}"));
        }
        producer.join().unwrap();
        let logs: Vec<String> = processes.into_iter().map(Process::finish).collect();
        // The letters' increments merge in the sending stage (`LetterSums`
        // has `fn combine`): what the kills test includes a combiner.
        assert!(
            logs.iter()
                .any(|log| log.contains("increments → totalled (combine)")),
            "no combiner before `totalled` in the stages: {logs:?}"
        );
        // How many records the reading stages dropped as sent again by a
        // restored writer: the replays the kills caused (a measurement).
        let resent: u64 = logs
            .iter()
            .enumerate()
            .flat_map(|(i, log)| {
                if let Ok(dir) = std::env::var("STREAMWORK_KEEP_LOGS") {
                    std::fs::write(format!("{dir}/trial-{trial}-{i}.log"), log).unwrap();
                }
                log.lines()
                    .filter_map(|line| line.split("exchange `").nth(1))
                    .filter_map(|rest| rest.split("`: dropped ").nth(1))
                    .filter_map(|n| n.split(' ').next()?.parse::<u64>().ok())
                    .collect::<Vec<u64>>()
            })
            .sum();
        let what = format!(
            "trial {trial} (kills after {}; {resent} records sent again and dropped)",
            kills.join(" and ")
        );
        assert_eq!(
            last_counts(&brokers, output),
            expected,
            "{what}: the last count of every word"
        );
        assert_eq!(
            last_counts(&brokers, totals),
            letter_totals(&expected),
            "{what}: the last total of every letter"
        );
        println!("{what}: exact, in {:?}", started.elapsed());
    }
}

#[test]
fn nondeterministic_stages_killed_at_random_count_exactly() {
    nondeterministic_stages_killed_at_random(None);
}

/// The same with the checkpoints in an S3 bucket and each process given an
/// empty directory of its own.
#[cfg(feature = "s3")]
#[test]
fn nondeterministic_stages_killed_at_random_count_exactly_with_checkpoints_in_s3() {
    let Some(server) = support::s3_server() else {
        return;
    };
    nondeterministic_stages_killed_at_random(Some(server));
}

/// The partition jobs' runs in a process's log (see `TaskRun::line`).
fn runs(log: &str) -> Vec<TaskRun> {
    log.lines().filter_map(TaskRun::parse).collect()
}

#[test]
fn one_then_three_then_two_processes_hand_partitions_over_and_count_exactly() {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, None);
    let (input, output, totals) = (&job.input, &job.output, &job.totals);
    create_topic(&brokers, input, 4).unwrap();
    job.create_outputs(4);
    // Input keeps arriving while processes come and go: 30 batches of 400
    // lines, 200 ms apart (bounded; the counts are exact whenever the
    // processes join and leave).
    let batches: Vec<Vec<Vec<u8>>> = (0..30).map(|b| lines(100 + b, 400).0).collect();
    let mut expected = BTreeMap::new();
    for batch in &batches {
        for line in batch {
            for word in std::str::from_utf8(line).unwrap().split_whitespace() {
                *expected.entry(word.to_string()).or_insert(0u64) += 1;
            }
        }
    }
    let producer = produce_over_time(&brokers, input, batches, Duration::from_millis(200));
    // One process, then three, then two.
    let first = job.spawn();
    wait_for_output(&brokers, totals);
    let (second, third) = (job.spawn(), job.spawn());
    second.wait_for_log("kafka group: running");
    third.wait_for_log("kafka group: running");
    first.interrupt();
    let mut logs = vec![first.finish()];
    producer.join().unwrap();
    logs.push(second.finish());
    logs.push(third.finish());
    assert_eq!(
        last_counts(&brokers, output),
        expected,
        "every word's count"
    );
    assert_eq!(
        last_counts(&brokers, totals),
        letter_totals(&expected),
        "every letter's total"
    );
    // How long each hand-over took (a measurement, not a condition).
    let all: Vec<(usize, TaskRun)> = logs
        .iter()
        .enumerate()
        .flat_map(|(process, log)| runs(log).into_iter().map(move |run| (process + 1, run)))
        .collect();
    let only_runs: Vec<TaskRun> = all.iter().map(|(_, run)| run.clone()).collect();
    let handovers = handovers(&only_runs);
    assert!(
        handovers.iter().any(|h| all[h.from].0 != all[h.to].0),
        "no partition moved to another process"
    );
    for h in &handovers {
        println!(
            "hand-over {} from process {} to {}: {:?} (stopping {:?}, rebalance {:?}, resuming {:?})",
            h.task,
            all[h.from].0,
            all[h.to].0,
            h.total(),
            h.stopping,
            h.rebalance,
            h.resuming
        );
    }
}

/// One process runs every partition; a second joins. The rebalance is
/// cooperative: the partitions the first keeps are never stopped (each of
/// its partition jobs runs once, from its start to the end), only those
/// that move to the second are; and the counts stay exact. Input flows
/// until the second runs a partition: a process that joins a group whose
/// input is all read may leave before it is given any.
#[test]
fn partitions_that_stay_run_on_through_a_rebalance() {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, None);
    let (input, output, totals) = (&job.input, &job.output, &job.totals);
    create_topic(&brokers, input, 4).unwrap();
    job.create_outputs(4);
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Duration::from_millis(150);
    let producer = produce_until(&brokers, input, 500, pause, (30, 800), stop.clone());
    let first = job.spawn();
    wait_for_output(&brokers, totals);
    let second = job.spawn();
    second.wait_for_log("kafka group: running");
    stop.store(true, Ordering::SeqCst);
    let mut expected = BTreeMap::new();
    for line in producer.join().unwrap() {
        for word in std::str::from_utf8(&line).unwrap().split_whitespace() {
            *expected.entry(word.to_string()).or_insert(0u64) += 1;
        }
    }
    let (first, second) = (runs(&first.finish()), runs(&second.finish()));
    assert_eq!(last_counts(&brokers, output), expected);
    assert_eq!(last_counts(&brokers, totals), letter_totals(&expected));
    assert!(
        !second.is_empty(),
        "no partition moved to the second process"
    );
    let mut tasks: Vec<&str> = first.iter().map(|run| run.task.as_str()).collect();
    tasks.sort_unstable();
    let started = tasks.len();
    tasks.dedup();
    assert_eq!(
        tasks.len(),
        started,
        "a partition the first process kept was stopped and started again: {first:?}"
    );
    let kept = tasks
        .iter()
        .filter(|task| !second.iter().any(|run| run.task == **task))
        .count();
    println!(
        "the first process kept {kept} of {started} partition jobs running through the rebalance; {} moved",
        second.len()
    );
}

/// A staged job killed with SIGKILL while records flow through its
/// exchanges, then started with fewer partitions for its counting stage and
/// more for its totalling one, then (after more input) with more for both:
/// every time, the counts and totals go on from where the checkpoints left
/// them (the keyed state moved by key group: counting from nothing would
/// end with the later input's counts alone), and what was in flight in the
/// exchanges reaches the new partitions once.
fn rescaled_down_and_up(s3: Option<(String, String)>) {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, s3);
    let (input, output, totals) = (&job.input, &job.output, &job.totals);
    create_topic(&brokers, input, 4).unwrap();
    job.create_outputs(4);
    let batches: Vec<Vec<Vec<u8>>> = (0..30).map(|b| lines(700 + b, 200).0).collect();
    let mut expected = BTreeMap::new();
    let count = |expected: &mut BTreeMap<String, u64>, batch: &[Vec<u8>]| {
        for line in batch {
            for word in std::str::from_utf8(line).unwrap().split_whitespace() {
                *expected.entry(word.to_string()).or_insert(0u64) += 1;
            }
        }
    };
    for batch in &batches {
        count(&mut expected, batch);
    }
    let producer = produce_over_time(&brokers, input, batches, Duration::from_millis(100));
    // 4 counting and 3 totalling partitions, killed while it runs.
    let first = job.spawn_with(&["--count-partitions", "4", "--total-partitions", "3"]);
    wait_for_output(&brokers, totals);
    std::thread::sleep(Duration::from_millis(random_below(1_500)));
    first.kill();
    producer.join().unwrap();
    // 2 and 5.
    let down = ["--count-partitions", "2", "--total-partitions", "5"];
    let log = job.spawn_with(&down).finish();
    assert!(log.contains("rescaled to generation 1"), "{log}");
    assert_eq!(last_counts(&brokers, output), expected, "after 4 → 2");
    assert_eq!(last_counts(&brokers, totals), letter_totals(&expected));
    // More input, then 6 and 6, in two processes started together (one
    // moves the group, the other waits for it).
    let more = lines(900, 3_000).0;
    count(&mut expected, &more);
    produce(&brokers, input, more);
    let up = ["--count-partitions", "6", "--total-partitions", "6"];
    let logs: Vec<String> = [job.spawn_with(&up), job.spawn_with(&up)]
        .into_iter()
        .map(Process::finish)
        .collect();
    assert_eq!(
        logs.iter()
            .filter(|log| log.contains("rescaled to generation 2"))
            .count(),
        1,
        "one process rescaled the group:\n{}",
        logs.join("\n")
    );
    assert_eq!(last_counts(&brokers, output), expected, "after 2 → 6");
    assert_eq!(last_counts(&brokers, totals), letter_totals(&expected));
}

#[test]
fn a_staged_job_rescaled_down_and_up_carries_its_state_and_its_records_over() {
    rescaled_down_and_up(None);
}

/// The same with the checkpoints in an S3 bucket and each process given an
/// empty directory of its own.
#[cfg(feature = "s3")]
#[test]
fn a_staged_job_rescaled_with_checkpoints_in_s3_carries_its_state_over() {
    let Some(server) = support::s3_server() else {
        return;
    };
    rescaled_down_and_up(Some(server));
}

/// An exchange topic that the group's layout does not account for (made
/// by something else, with another partition count) is refused by name.
#[test]
fn an_exchange_topic_the_layout_does_not_account_for_is_refused_by_name() {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, None);
    let (input, group) = (&job.input, &job.group);
    create_topic(&brokers, input, 2).unwrap();
    create_topic(&brokers, &format!("{group}-counted-in-repartition"), 4).unwrap();
    let log = job.spawn_with(&["--count-partitions", "3"]).failure();
    assert!(
        log.contains(&format!(
            "exchange topic `{group}-counted-in-repartition` has 4 partitions, and the group's layout gives it 3"
        )) && log.contains("run the job as a new group"),
        "{log}"
    );
}

#[test]
fn the_processes_that_receive_partitions_carry_on_from_their_checkpoints() {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, None);
    let (input, output, totals) = (&job.input, &job.output, &job.totals);
    create_topic(&brokers, input, 4).unwrap();
    let (first, mut expected) = lines(11, 5_000);
    let (second, more) = lines(13, 5_000);
    for (word, n) in more {
        *expected.entry(word).or_insert(0) += n;
    }
    produce(&brokers, input, first);
    job.create_outputs(4);
    // One process counts the first half and leaves.
    let first_read = records_read(&job.spawn().finish());
    assert!(first_read >= 5_000, "lines and words: {first_read}");
    // Two others take its partitions, restore its counts from the
    // checkpoints, and count the second half on top of them (counting from
    // nothing would end with the second half's counts alone). The second
    // half is there before they start: a process that, once given its
    // share, finds every partition read to its end exits.
    produce(&brokers, input, second);
    let others: Vec<Process> = (0..2).map(|_| job.spawn()).collect();
    let others_read: u64 = others.into_iter().map(|p| records_read(&p.finish())).sum();
    assert!(others_read >= 5_000, "lines and words: {others_read}");
    let counts = last_counts(&brokers, output);
    assert_eq!(counts, expected, "the last count of every word");
    assert_eq!(last_counts(&brokers, totals), letter_totals(&expected));
}

/// Marks its partition owned while open (until it is dropped: a job
/// stopped at a savepoint, as a hand-over stops it, is not closed);
/// records what it is given.
#[derive(Clone)]
struct Owner {
    partition: i32,
    runner: usize,
    opened: bool,
    owners: Arc<Mutex<BTreeMap<i32, Vec<usize>>>>,
    overlaps: Arc<AtomicU64>,
    seen: Arc<Mutex<BTreeSet<(i32, i64)>>>,
    /// Jobs of this sink's kind that opened and then ended (stopped,
    /// failed or finished).
    ended: Arc<AtomicU64>,
}

impl Sink for Owner {
    type In = KafkaRecord;

    fn open(&mut self, _ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let mut owners = self.owners.lock().unwrap();
        let now = owners.entry(self.partition).or_default();
        // A restarted job opens again in the same runner (a failed job is
        // not closed): only another runner is an overlap.
        now.retain(|&r| r != self.runner);
        if !now.is_empty() {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        now.push(self.runner);
        self.opened = true;
        Ok(())
    }

    fn write(&mut self, record: Record<KafkaRecord>) -> Result<(), ConnectorError> {
        assert_eq!(
            record.value.partition, self.partition,
            "another partition's record"
        );
        self.seen
            .lock()
            .unwrap()
            .insert((record.value.partition, record.value.offset));
        Ok(())
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.opened {
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            let now = owners.entry(self.partition).or_default();
            now.retain(|&r| r != self.runner);
            self.ended.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn two_members_split_the_partitions_and_never_own_one_at_once() {
    let Some(brokers) = brokers() else { return };
    let (topic, group) = (unique("owned"), unique("owners"));
    create_topic(&brokers, &topic, 4).unwrap();
    let (text, _) = lines(3, 20_000);
    produce(&brokers, &topic, text);
    let checkpoints = std::env::temp_dir().join(unique("owners-ckpt"));
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let overlaps = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    // Both leave when told, not when idle for a while: how long a
    // rebalance takes (on a loaded machine, longer than any idle time
    // chosen here was) does not decide whether the second gets its share.
    let leave = Arc::new(AtomicBool::new(false));
    let member = |runner: usize| {
        let (owners, overlaps, seen) = (owners.clone(), overlaps.clone(), seen.clone());
        let runner_of = GroupRunner::new(&brokers, &group, &[&topic], &checkpoints)
            .checkpoint_interval(Duration::from_millis(100))
            .delivery(Delivery::AtLeastOnce)
            .session_timeout(Duration::from_secs(6))
            .leave_when(leave.clone());
        std::thread::spawn(move || {
            runner_of.run(move |task| {
                let sink = Owner {
                    partition: task.partition(),
                    runner,
                    opened: false,
                    owners: owners.clone(),
                    overlaps: overlaps.clone(),
                    seen: seen.clone(),
                    ended: Arc::new(AtomicU64::new(0)),
                };
                let source = task.source();
                job! {
                    delivery at_least_once;
                    source records = source;
                    sink owned = sink <- records;
                }
            })
        })
    };
    let first = member(0);
    // The second joins once the first has read something.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "nothing read within a minute");
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = member(1);
    // The first gives the second its share in a rebalance, and between
    // them they read everything: then both leave.
    let ends = streamwork::connectors::kafka::end_offsets(&brokers, &topic).unwrap();
    let total: i64 = ends.values().sum();
    wait_until(
        "the second member owning a partition and every record read",
        Duration::from_secs(300),
        || {
            let second_owns = owners.lock().unwrap().values().any(|o| o.contains(&1));
            second_owns && seen.lock().unwrap().len() as i64 >= total
        },
    );
    leave.store(true, Ordering::Relaxed);
    // Bounded: a runner that never finishes fails the test, not hangs it.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !(first.is_finished() && second.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "a member still runs after 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = first.join().unwrap().unwrap();
    let second = second.join().unwrap().unwrap();
    assert!(
        first.tasks_started > 0 && second.tasks_started > 0,
        "{first:?} {second:?}"
    );
    assert_eq!(
        overlaps.load(Ordering::Relaxed),
        0,
        "a partition owned twice at once"
    );
    // Nothing lost across the hand-over.
    let seen = seen.lock().unwrap();
    for (partition, end) in ends {
        for offset in 0..end {
            assert!(
                seen.contains(&(partition, offset)),
                "partition {partition} offset {offset} never read"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&checkpoints);
}

/// Waits (bounded) until `done`, failing with `what` after `limit`.
fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every partition lease (`OWNER`) under a directory store.
fn owner_objects(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(owner_objects(&path));
        } else if path.file_name().is_some_and(|name| name == "OWNER") {
            found.push(path);
        }
    }
    found
}

/// Another process takes a running partition's lease over in the store
/// (and then dies without refreshing it): the runner finds its lease lost,
/// stops the partition's job at once rather than letting it write on, then
/// takes the lease back once it has stayed unchanged for a session timeout
/// (by its own clock), retrying while the store refuses it for a while,
/// and carries on from the last checkpoint, reading every record to the
/// end, in the same run of the group.
#[test]
fn a_partition_whose_lease_is_taken_over_stops_and_is_taken_back_when_the_taker_is_silent() {
    use streamwork::state::DirectoryStore;
    use streamwork::state::testkit::{FaultyStore, WriteFault};

    let Some(brokers) = brokers() else { return };
    let (topic, group) = (unique("leased"), unique("leasers"));
    create_topic(&brokers, &topic, 1).unwrap();
    produce(&brokers, &topic, lines(5, 2_000).0);
    let root = std::env::temp_dir().join(unique("leased-ckpt"));
    let store_dir = root.join("store");
    let store = FaultyStore::new(Arc::new(DirectoryStore::new(&store_dir)));
    let owners: Arc<Mutex<BTreeMap<i32, Vec<usize>>>> = Arc::default();
    let overlaps = Arc::new(AtomicU64::new(0));
    let seen: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let (opened, ended) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let leave = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let runner = GroupRunner::new(&brokers, &group, &[&topic], root.join("local"))
        .checkpoint_store(Arc::new(store.clone()))
        .checkpoint_interval(Duration::from_millis(100))
        .delivery(Delivery::AtLeastOnce)
        .session_timeout(Duration::from_secs(6))
        .leave_when(leave.clone());
    let running = {
        let (seen, opened, ended) = (seen.clone(), opened.clone(), ended.clone());
        std::thread::spawn(move || {
            runner.run(move |task| {
                opened.fetch_add(1, Ordering::Relaxed);
                let sink = Owner {
                    partition: task.partition(),
                    runner: 0,
                    opened: false,
                    owners: owners.clone(),
                    overlaps: overlaps.clone(),
                    seen: seen.clone(),
                    ended: ended.clone(),
                };
                let source = task.source();
                job! {
                    delivery at_least_once;
                    source records = source;
                    sink owned = sink <- records;
                }
            })
        })
    };
    let read_to = |end: i64| {
        let seen = seen.clone();
        move || (0..end).all(|offset| seen.lock().unwrap().contains(&(0, offset)))
    };
    wait_until(
        "the first records read",
        Duration::from_secs(120),
        read_to(2_000),
    );
    let owner = owner_objects(&store_dir);
    assert_eq!(owner.len(), 1, "one partition, one lease: {owner:?}");
    // The taker writes the lease (as a conditional write would, whole).
    let aside = owner[0].with_extension("taking");
    std::fs::write(&aside, b"taker 0").unwrap();
    std::fs::rename(&aside, &owner[0]).unwrap();
    wait_until(
        "the job stopped after its lease was lost",
        Duration::from_secs(60),
        || ended.load(Ordering::Relaxed) >= 1,
    );
    // The store refuses the taking back twice before it answers again.
    store.set(WriteFault::Refuse);
    wait_until(
        "the lease taken back while the store refuses it",
        Duration::from_secs(60),
        || store.refusals() >= 2,
    );
    store.set(WriteFault::None);
    // Written while the partition's job is stopped: read once it is back.
    produce(&brokers, &topic, lines(6, 2_000).0);
    wait_until(
        "every record read after the lease was taken back",
        Duration::from_secs(120),
        read_to(4_000),
    );
    leave.store(true, Ordering::Relaxed);
    wait_until("the runner left", Duration::from_secs(120), || {
        running.is_finished()
    });
    let report = running.join().unwrap().unwrap();
    assert!(
        opened.load(Ordering::Relaxed) >= 2,
        "the job was built again after the lease was taken back: {report:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A sink that keeps what it staged in a local directory cannot keep its
/// promise when the processes share only the checkpoint store: the job is
/// refused before anything starts (no broker is reached), naming the sink
/// and the fix (`run` refuses it as it builds a partition's job).
#[test]
fn a_sink_staging_on_one_machine_is_refused_when_processes_share_only_the_store() {
    use streamwork::connectors::FileSink;
    use streamwork::connectors::kafka::KafkaSource;
    use streamwork::state::DirectoryStore;

    let root = std::env::temp_dir().join(unique("staged-locally"));
    let store = Arc::new(DirectoryStore::new(root.join("store")));
    let brokers = "127.0.0.1:1";
    let job = {
        let out = root.join("out");
        move || {
            let lines = KafkaSource::new(brokers, "lines", "g");
            let files = FileSink::<KafkaRecord>::json(&out).transactional();
            job! {
                delivery exactly_once;
                source lines = lines;
                sink files = files <- lines;
            }
        }
    };
    let refused = GroupRunner::new(brokers, "g", &[], root.join("local"))
        .checkpoint_store(store)
        .run_job(job)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "sink `files` keeps what it staged for uncommitted checkpoints in part files in"
        ) && refused.contains("KafkaSink::transactional"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Exchange topics keep as many copies as the job asks; more than the
/// cluster has brokers is refused by name before anything starts (the test
/// broker is one broker, where the default is one copy, with a warning).
#[test]
fn exchange_replication_beyond_the_cluster_is_refused_by_name() {
    let Some(brokers) = brokers() else { return };
    let job = Job::fresh(&brokers, None);
    create_topic(&brokers, &job.input, 2).unwrap();
    let refused = job.spawn_with(&["--exchange-replication", "2"]).failure();
    assert!(
        refused.contains("exchange topics with 2 copies of each partition on a cluster of 1 brokers: more copies than the cluster has brokers"),
        "{refused}"
    );
}
