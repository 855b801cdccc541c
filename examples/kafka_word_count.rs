//! Word count across processes, through Kafka: lines from an input topic,
//! `(word, count)` upserts keyed by word to an output topic. Start the same
//! command as several processes with the same group: the consumer group
//! splits the partitions between them, and a process that dies is replaced
//! by the others (or by itself, started again) from the checkpoints in the
//! shared checkpoint directory.
//!
//! ```sh
//! cargo run --release --features kafka --example kafka_word_count -- --brokers 127.0.0.1:9092 \
//!     --input-topic lines --output-topic counts --group wc --checkpoint-dir /shared/wc
//! ```
//!
//! Two stages, each a job per partition (see `streamwork::scaleout`):
//!
//! 1. **split**, per input partition: each line's words go to the
//!    repartition topic `GROUP-words` (created with as many partitions as
//!    the input), keyed by word, each stamped with its origin (input
//!    partition, offset, index in the line). Lines that are not UTF-8 go to
//!    `GROUP-dead-letter`.
//! 2. **count**, per repartition partition: the counts of the words that
//!    partition holds, checkpointed with the last origin seen from each
//!    input partition. A split job that crashed and replays writes words
//!    already counted again; their origins are not past the last one seen,
//!    so they are dropped. The counts changed by each batch are written to
//!    the output topic, keyed by word, the count in decimal ASCII.
//!
//! Without Kafka transactions (tansu has none), the counts are exact in the
//! output's last value per word, whatever process dies when.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::kafka::{
    KafkaRecord, KafkaSink, Origin, OriginFilter, create_topic, end_offsets,
};
use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::scaleout::{GroupRunner, PartitionTask};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Word count over Kafka topics, scaled out by a consumer group.
#[derive(Parser, Debug)]
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
    /// The consumer group every process of the job joins (also the prefix
    /// of the job's own topics).
    #[arg(long)]
    group: String,
    /// Checkpoints, by topic and partition: shared by every process.
    #[arg(long)]
    checkpoint_dir: PathBuf,
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
    /// librdkafka debug contexts for every consumer (`cgrp` for the
    /// consumer group), logged at debug level under the `librdkafka`
    /// target: `STREAMWORK_LOG=info,librdkafka=debug`.
    #[arg(long)]
    kafka_debug: Option<String>,
}

/// Splits each line into words, each with its origin.
#[derive(Clone, Default)]
struct Split;

#[operator(stateless)]
impl Split {
    fn on_record(&mut self, line: KafkaRecord, out: &mut Collector<(String, Origin)>) {
        // The source refused lines that are not UTF-8.
        let text = String::from_utf8_lossy(&line.value);
        for (index, word) in text.split_whitespace().enumerate() {
            let origin = Origin {
                partition: line.partition,
                offset: line.offset,
                index: index as u32,
            };
            out.emit((word.to_string(), origin));
        }
    }
}

/// The counts of one repartition partition's words.
#[derive(Clone, Default)]
struct Count {
    counts: HashMap<String, u64>,
    seen: OriginFilter,
    changed: HashSet<String>,
}

/// The layout version of the counts' snapshot.
const COUNTS_SCHEMA: u32 = 1;

impl Operator for Count {
    type In = KafkaRecord;
    type Key = NoKey;
    type Out = Collector<(String, u64)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    fn on_record(&mut self, word: KafkaRecord, _ctx: &mut Context<'_, NoKey, Self::Out>) {
        if let Some(origin) = word.origin
            && !self.seen.admit(origin)
        {
            return;
        }
        let word = String::from_utf8_lossy(word.key.as_deref().unwrap_or_default()).into_owned();
        *self.counts.entry(word.clone()).or_default() += 1;
        self.changed.insert(word);
    }

    fn on_batch_end(&mut self, out: &mut Self::Out) {
        for word in self.changed.drain() {
            let count = self.counts[&word];
            out.emit((word, count));
        }
    }

    /// The origin filter, then `(length, word, count)` per word.
    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let mut bytes = Vec::new();
        self.seen.write_to(&mut bytes);
        for (word, count) in &self.counts {
            bytes.extend_from_slice(&(word.len() as u32).to_le_bytes());
            bytes.extend_from_slice(word.as_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
        }
        Ok(Some(StateBytes::new(COUNTS_SCHEMA, bytes)))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let torn =
            || TaskError::Restore(format!("`{}`: a torn counts snapshot", restore.component));
        for part in &restore.parts {
            if part.schema != COUNTS_SCHEMA {
                return Err(TaskError::Restore(format!(
                    "`{}`: counts of schema {} (this version reads {COUNTS_SCHEMA})",
                    restore.component, part.schema
                )));
            }
            let (seen, mut rest) = OriginFilter::read_from(part.bytes).ok_or_else(torn)?;
            self.seen = seen;
            while !rest.is_empty() {
                let (len, after) = rest.split_first_chunk::<4>().ok_or_else(torn)?;
                let len = u32::from_le_bytes(*len) as usize;
                if after.len() < len + 8 {
                    return Err(torn());
                }
                let (word, after) = after.split_at(len);
                let (count, after) = after.split_first_chunk::<8>().ok_or_else(torn)?;
                let word = String::from_utf8(word.to_vec()).map_err(|_| torn())?;
                self.counts.insert(word, u64::from_le_bytes(*count));
                rest = after;
            }
        }
        Ok(())
    }
}

/// The job of one partition: split for an input partition, count for a
/// repartition one.
fn partition_job(
    task: &PartitionTask,
    args: &Args,
    words_topic: &str,
    dead_topic: &str,
) -> Result<JobGraph, GraphError> {
    if task.topic() == args.input_topic {
        let lines = task
            .source()
            .check(|r| {
                std::str::from_utf8(&r.value)
                    .map(|_| ())
                    .map_err(|e| format!("not UTF-8: {e}"))
            })
            .dead_letter(dead_topic);
        let words = KafkaSink::new(
            task.brokers(),
            words_topic,
            |(word, _): &(String, Origin)| (Some(word.as_bytes().to_vec()), Vec::new()),
        )
        .origin(|(_, origin): &(String, Origin)| *origin);
        job! {
            name "kafka_word_count_split";
            delivery at_least_once;
            source lines = lines;
            operator words = Split <- lines;
            sink repartition = words <- words;
        }
    } else {
        let words = task.source();
        let counts = KafkaSink::new(
            task.brokers(),
            &args.output_topic,
            |(word, count): &(String, u64)| {
                (
                    Some(word.as_bytes().to_vec()),
                    count.to_string().into_bytes(),
                )
            },
        );
        job! {
            name "kafka_word_count_count";
            delivery at_least_once;
            source words = words;
            operator counts = Count::default() <- words;
            sink out = counts <- counts;
        }
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
    let words_topic = format!("{}-words", args.group);
    let dead_topic = format!("{}-dead-letter", args.group);
    let partitions = end_offsets(&args.brokers, &args.input_topic)?.len();
    anyhow::ensure!(
        partitions > 0,
        "input topic `{}` does not exist on {}: create it first",
        args.input_topic,
        args.brokers
    );
    // Every process creates them; the first one wins, the others find them.
    create_topic(&args.brokers, &words_topic, partitions as i32)?;
    create_topic(&args.brokers, &dead_topic, 1)?;
    create_topic(&args.brokers, &args.output_topic, partitions as i32)?;

    let mut runner = GroupRunner::new(
        &args.brokers,
        &args.group,
        &[&args.input_topic, &words_topic],
        &args.checkpoint_dir,
    )
    .delivery(Delivery::AtLeastOnce)
    .checkpoint_interval(Duration::from_millis(args.checkpoint_interval_ms.max(1)))
    .session_timeout(Duration::from_millis(args.session_timeout_ms));
    if let Some(contexts) = &args.kafka_debug {
        runner = runner.property("debug", contexts);
    }
    if let Some(idle) = args.idle_exit_ms {
        runner = runner.idle_exit(Duration::from_millis(idle));
    }
    let report = runner.run(move |task| partition_job(task, &args, &words_topic, &dead_topic))?;
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
