//! Loads a file's lines into a Kafka topic (created with `--partitions` if
//! it does not exist), one record per line, without a key: the input of
//! `kafka_word_count`.
//!
//! ```sh
//! cargo run --release --features kafka --example kafka_load -- --brokers 127.0.0.1:9092 \
//!     --topic lines --partitions 4 --input lines.txt
//! ```

use std::path::PathBuf;

use clap::Parser;
use streamwork::connectors::file::Lines;
use streamwork::connectors::kafka::{KafkaSink, create_topic};
use streamwork::prelude::*;

/// Produces a file's lines to a topic.
#[derive(Parser, Debug)]
struct Args {
    /// Kafka bootstrap servers, `HOST:PORT[,...]`.
    #[arg(long)]
    brokers: String,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Partitions of the topic, if it is created.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// The file: one record per line, bytes as they are.
    #[arg(long)]
    input: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    create_topic(&args.brokers, &args.topic, args.partitions)?;
    let lines = FileSource::with_lines(
        &args.input,
        Lines::raw(|_, line: &[u8]| Ok::<_, streamwork::core::FormatError>(line.to_vec())),
    );
    let sink = KafkaSink::new(&args.brokers, &args.topic, |line: &Vec<u8>| {
        (None, line.clone())
    });
    let report = job! {
        name "kafka_load";
        source lines = lines;
        sink topic = sink <- lines;
    }?
    .run()?;
    let written = report.component("topic").map_or(0, |c| c.records_in());
    eprintln!("kafka_load: {written} records to `{}`", args.topic);
    Ok(())
}
