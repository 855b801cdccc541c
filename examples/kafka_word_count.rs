//! Word count across processes, through Kafka: lines from an input topic;
//! `(word, count)` upserts keyed by word to one output topic and
//! `(letter, total)` upserts, the words counted by first letter, to another.
//! Start the same command as several processes with the same group: the
//! consumer group splits the work between them, and a process that dies is
//! replaced by the others (or by itself, started again) from the
//! checkpoints, kept in a shared directory or, with `--s3-bucket`, in an S3
//! bucket (then each process needs only a directory of its own).
//!
//! ```sh
//! cargo run --release --features kafka --example kafka_word_count -- --brokers 127.0.0.1:9092 \
//!     --input-topic lines --output-topic counts --totals-topic totals --group wc \
//!     --checkpoint-dir /tmp/wc
//! ```
//!
//! The job is one `job!`, the same that would run in one process. It has
//! two keyed exchanges, so it runs as three stages (see
//! `streamwork::scaleout`), which the runner derives from it:
//!
//! 1. **lines**, a job per input partition: each line's words; lines that
//!    are not UTF-8 go to `GROUP-dead-letter`;
//! 2. **counted**, a job per partition of `GROUP-counted-in-repartition`,
//!    the words by word: each word's count, to the output topic;
//! 3. **totalled**, a job per partition of
//!    `GROUP-totalled-in-repartition`, the counts by first letter: how many
//!    words each letter starts, to the totals topic.
//!
//! The runner creates the two repartition topics. What a stage writes into
//! one reaches the next stage only once the checkpoint that covers it is
//! complete, so the counts and totals are exact in the outputs' last value
//! per key, whatever process dies when, without Kafka transactions.
//!
//! With `--nondeterministic`, every stage emits what differs from run to
//! run (and from a replay after a failure): each line's distinct words in
//! the order of a hash set, and the counts' increments summed by first
//! letter and emitted when the wall clock or a coin says so; the totals
//! are sums of those increments, merged per letter before they cross to
//! the last stage (a combiner). The results are as exact.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::kafka::{
    KafkaRecord, KafkaSink, KafkaSource, create_topic, partition_count,
};
use streamwork::prelude::*;
use streamwork::scaleout::GroupRunner;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Word count over Kafka topics, scaled out by a consumer group.
#[derive(Parser, Debug, Clone)]
struct Args {
    /// Kafka bootstrap servers, `HOST:PORT[,...]`.
    #[arg(long)]
    brokers: String,
    /// Lines of words separated by spaces.
    #[arg(long)]
    input_topic: String,
    /// `(word, count)` upserts: key the word, value its count.
    #[arg(long)]
    output_topic: String,
    /// `(letter, total)` upserts: key the letter, value how many words
    /// start with it (default: the output topic's name with `-by-letter`).
    #[arg(long)]
    totals_topic: Option<String>,
    /// The consumer group every process of the job joins (also the prefix
    /// of the job's own topics).
    #[arg(long)]
    group: String,
    /// This process's checkpoints, by stage and partition: shared by every
    /// process, or its own with `--s3-bucket`.
    #[arg(long)]
    checkpoint_dir: PathBuf,
    /// Keep the checkpoints in this S3 bucket too (credentials from the
    /// `AWS_*` variables): processes share no directory.
    #[arg(long)]
    s3_bucket: Option<String>,
    /// An S3-compatible server's address (`http://127.0.0.1:9000`).
    #[arg(long)]
    s3_endpoint: Option<String>,
    /// Instances of the word counts: partitions of their exchange topic.
    #[arg(long, default_value_t = 4)]
    count_partitions: u32,
    /// Instances of the letter totals: partitions of their exchange topic.
    #[arg(long, default_value_t = 3)]
    total_partitions: u32,
    /// Exit after this long without new input, once the group has read
    /// everything (for bounded runs).
    #[arg(long)]
    idle_exit_ms: Option<u64>,
    /// Time between a partition job's checkpoints.
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// How long the group waits for a silent process before giving its
    /// partitions to the others.
    #[arg(long, default_value_t = 6_000)]
    session_timeout_ms: u64,
    /// Copies of each exchange topic partition (default: as many as the
    /// cluster has brokers, up to 3).
    #[arg(long)]
    exchange_replication: Option<u16>,
    /// Serve the job page on this address (`127.0.0.1:7000`): the job's
    /// graph, its stages and their topics.
    #[arg(long)]
    job_page: Option<String>,
    /// Count each line's distinct words, emitted in hash-set order, and
    /// send the letter totals increments summed at moments chosen by the
    /// wall clock and by chance (see the module docs).
    #[arg(long)]
    nondeterministic: bool,
    /// librdkafka debug contexts for every consumer (`cgrp` for the
    /// consumer group), logged at debug level under the `librdkafka`
    /// target: `STREAMWORK_LOG=info,librdkafka=debug`.
    #[arg(long)]
    kafka_debug: Option<String>,
}

/// How often each word was seen so far.
#[derive(Clone, Default, State)]
struct WordCounts {
    counts: KeyedState<String, u64>,
}

#[operator]
impl WordCounts {
    fn on_record(
        &mut self,
        word: CurrentKey<'_, String>,
        _seen: String,
        out: &mut Collector<(String, u64)>,
    ) {
        let count = self.counts.get_or_default(word);
        *count += 1;
        let count = *count;
        out.emit((word.get().clone(), count));
    }
}

/// How many words start with each letter: one more for each count
/// update, which is one more occurrence of one word.
#[derive(Clone, Default, State)]
struct LetterTotals {
    totals: KeyedState<char, u64>,
}

#[operator]
impl LetterTotals {
    fn on_record(
        &mut self,
        letter: CurrentKey<'_, char>,
        _count: (String, u64),
        out: &mut Collector<(char, u64)>,
    ) {
        let total = self.totals.get_or_default(letter);
        *total += 1;
        let total = *total;
        out.emit((*letter.get(), total));
    }
}

/// Each word's count increments by first letter, summed while they wait
/// and emitted whenever the wall clock ticks or a coin says so: what it
/// emits differs from run to run. What waits is checkpointed.
#[derive(Clone, Default, State)]
struct LetterIncrements {
    waiting: InstanceState<Vec<(char, u64)>>,
}

#[operator]
impl LetterIncrements {
    fn on_record(&mut self, count: (String, u64), out: &mut Collector<(char, u64)>) {
        let letter = first_letter(&count);
        match self.waiting.iter_mut().find(|(l, _)| *l == letter) {
            Some((_, n)) => *n += 1,
            None => self.waiting.push((letter, 1)),
        }
        if coin() {
            self.emit_waiting(out);
        }
    }

    fn on_processing_time(&mut self, _now: Timestamp, out: &mut Collector<(char, u64)>) {
        self.emit_waiting(out);
    }

    fn on_end(&mut self, out: &mut Collector<(char, u64)>) {
        self.emit_waiting(out);
    }

    fn emit_waiting(&mut self, out: &mut Collector<(char, u64)>) {
        for increment in self.waiting.drain(..) {
            out.emit(increment);
        }
    }
}

/// One time in eight, at random (a fresh hasher's keys are random).
fn coin() -> bool {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new()
        .hash_one(0u8)
        .is_multiple_of(8)
}

/// The sum of the increments of each letter. Two increments of a letter
/// merge into their sum (`fn combine`), so a combiner in the sending stage
/// adds them up before they cross to the next stage: one record per
/// letter per flush instead of each.
#[derive(Clone, Default, State)]
struct LetterSums {
    sums: KeyedState<char, u64>,
}

#[operator]
impl LetterSums {
    fn combine(&self, earlier: &mut (char, u64), later: (char, u64)) {
        earlier.1 += later.1;
    }

    fn on_record(
        &mut self,
        letter: CurrentKey<'_, char>,
        (_, increment): (char, u64),
        out: &mut Collector<(char, u64)>,
    ) {
        let sum = self.sums.get_or_default(letter);
        *sum += increment;
        let sum = *sum;
        out.emit((*letter.get(), sum));
    }
}

/// A line's distinct words, in the order of a hash set: another order in
/// every process, and in a replay.
fn distinct_words(line: KafkaRecord) -> Vec<String> {
    let words: std::collections::HashSet<String> = String::from_utf8_lossy(&line.value)
        .split_whitespace()
        .map(String::from)
        .collect();
    words.into_iter().collect()
}

/// A line's words (the source refused lines that are not UTF-8).
fn words(line: KafkaRecord) -> Vec<String> {
    String::from_utf8_lossy(&line.value)
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn first_letter((word, _): &(String, u64)) -> char {
    word.chars().next().unwrap_or(' ')
}

/// The job, as it would run in one process.
fn word_count(args: &Args, totals_topic: &str) -> Result<JobGraph, GraphError> {
    let lines = KafkaSource::new(&args.brokers, &args.input_topic, &args.group)
        .check(|r| {
            std::str::from_utf8(&r.value)
                .map(|_| ())
                .map_err(|e| format!("not UTF-8: {e}"))
        })
        .dead_letter(&format!("{}-dead-letter", args.group));
    let counts = KafkaSink::new(
        &args.brokers,
        &args.output_topic,
        |(word, count): &(String, u64)| {
            (
                Some(word.as_bytes().to_vec()),
                count.to_string().into_bytes(),
            )
        },
    );
    let totals = KafkaSink::new(
        &args.brokers,
        totals_topic,
        |(letter, total): &(char, u64)| {
            (
                Some(letter.to_string().into_bytes()),
                total.to_string().into_bytes(),
            )
        },
    );
    let (c, t) = (args.count_partitions.max(1), args.total_partitions.max(1));
    if args.nondeterministic {
        return job! {
            name "kafka_word_count";
            delivery at_least_once;
            source lines = lines;
            operator words = flat_map(distinct_words) <- lines;
            operator counted[c] = WordCounts::default() <- words.key(|w: &String| w.clone());
            operator increments[c] = LetterIncrements::default() <- counted;
            operator totalled[t] = LetterSums::default() <- increments.key(|(l, _): &(char, u64)| *l);
            sink counts = counts <- counted;
            sink totals = totals <- totalled;
        };
    }
    job! {
        name "kafka_word_count";
        delivery at_least_once;
        source lines = lines;
        operator words = flat_map(words) <- lines;
        operator counted[c] = WordCounts::default() <- words.key(|w: &String| w.clone());
        operator totalled[t] = LetterTotals::default() <- counted.key(first_letter);
        sink counts = counts <- counted;
        sink totals = totals <- totalled;
    }
}

/// Logs to stderr, filtered by `STREAMWORK_LOG` (`LEVEL` or
/// `LEVEL,TARGET=LEVEL,...`, say `info,streamwork_connectors=debug`;
/// warnings and errors without it).
fn init_logging() -> anyhow::Result<()> {
    let filter: Targets = match std::env::var("STREAMWORK_LOG") {
        Ok(spec) => spec
            .parse()
            .map_err(|e| anyhow::anyhow!("STREAMWORK_LOG=`{spec}`: {e}"))?,
        Err(_) => Targets::new().with_default(LevelFilter::WARN),
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the logger: {e}"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging()?;
    let totals_topic = args
        .totals_topic
        .clone()
        .unwrap_or_else(|| format!("{}-by-letter", args.output_topic));
    let partitions = partition_count(&args.brokers, &args.input_topic)?;
    anyhow::ensure!(
        partitions > 0,
        "input topic `{}` does not exist on {}: create it first",
        args.input_topic,
        args.brokers
    );
    // The job's own sinks' topics: every process creates them, the first
    // one wins, the others find them. (The runner creates the exchanges'.)
    create_topic(&args.brokers, &format!("{}-dead-letter", args.group), 1)?;
    create_topic(&args.brokers, &args.output_topic, partitions as i32)?;
    create_topic(&args.brokers, &totals_topic, partitions as i32)?;

    let mut runner = GroupRunner::new(&args.brokers, &args.group, &[], &args.checkpoint_dir)
        .delivery(Delivery::AtLeastOnce)
        .checkpoint_interval(Duration::from_millis(args.checkpoint_interval_ms.max(1)))
        .session_timeout(Duration::from_millis(args.session_timeout_ms));
    #[cfg(feature = "s3")]
    if let Some(bucket) = &args.s3_bucket {
        let store = streamwork::state::ObjectStoreCheckpoints::s3(
            args.s3_endpoint.as_deref(),
            bucket,
            &args.group,
        )?;
        runner = runner.checkpoint_store(Arc::new(store));
    }
    #[cfg(not(feature = "s3"))]
    anyhow::ensure!(
        args.s3_bucket.is_none() && args.s3_endpoint.is_none(),
        "--s3-bucket needs the example built with `--features s3`"
    );
    if let Some(copies) = args.exchange_replication {
        runner = runner.exchange_replication(copies);
    }
    if let Some(contexts) = &args.kafka_debug {
        runner = runner.property("debug", contexts);
    }
    if let Some(idle) = args.idle_exit_ms {
        runner = runner.idle_exit(Duration::from_millis(idle));
    }
    // Ctrl-C (or SIGTERM): leave the group, handing the partitions over.
    runner = runner.leave_on_ctrl_c()?;
    let _page = match &args.job_page {
        Some(address) => {
            let graph = word_count(&args, &totals_topic)?;
            let stages = streamwork::scaleout::stages::StagePlan::of(&graph)?;
            let plan = graph.plan().with_stages(stages.rows(&args.group));
            let page = streamwork::web::serve_plan(address, plan)?;
            eprintln!("kafka_word_count: job page at http://{}/", page.address());
            Some(page)
        }
        None => None,
    };
    let job_args = Arc::new(args.clone());
    let report = runner.run_job(move || word_count(&job_args, &totals_topic))?;
    if let Some(stages) = &report.stages {
        eprint!("{stages}");
    }
    // When each partition job started, first read and stopped here: with
    // the other processes' lines, how long each hand-over took.
    for run in &report.runs {
        eprintln!("{}", run.line());
    }
    let busy = report.busy.as_secs_f64();
    eprintln!(
        "kafka_word_count: {} records read in {busy:.2} s busy ({:.0} records/s), {} partition jobs started over {} rebalances",
        report.records,
        report.records as f64 / busy.max(1e-9),
        report.tasks_started,
        report.rebalances
    );
    Ok(())
}
