//! Word counts upserted into PostgreSQL, and every word appended, exactly
//! once: kill it at any moment and run it again (at any parallelism), and
//! the tables hold what one uninterrupted run writes.
//!
//! ```text
//! eval "$(scripts/postgres-test-server.sh start)"
//! cargo run --features postgres --example postgres_upserts -- --lines 20000
//! psql "$STREAMWORK_POSTGRES_URL" -c 'SELECT * FROM word_counts ORDER BY count DESC LIMIT 5'
//! ```
//!
//! It writes its input (`--lines` generated lines) unless given `--input`,
//! creates the tables `word_counts` (upserted by word) and `words_seen`
//! (appended, a row per word read) if they are missing, and checkpoints
//! into `--checkpoints` (a checkpoint every `--interval-ms`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::file::Lines;
use streamwork::connectors::postgres::PostgresSink;
use streamwork::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// The database (default: STREAMWORK_POSTGRES_URL, else the local test server's).
    #[arg(long)]
    url: Option<String>,
    /// Lines to read: a file or directory; generated when missing.
    #[arg(long, default_value = "target/postgres-upserts/input.txt")]
    input: PathBuf,
    /// Lines to generate when the input is missing.
    #[arg(long, default_value_t = 20_000)]
    lines: u64,
    #[arg(long, default_value = "target/postgres-upserts/checkpoints")]
    checkpoints: PathBuf,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// Prefix of the two tables' names.
    #[arg(long, default_value = "")]
    prefix: String,
}

/// A word's count, upserted by word.
#[derive(Clone, Debug, serde::Serialize)]
struct WordCount {
    word: String,
    count: i64,
}

/// A word read: its line and place in it, appended.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct WordSeen {
    line: i64,
    position: i32,
    word: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let url = args
        .url
        .clone()
        .or_else(|| std::env::var("STREAMWORK_POSTGRES_URL").ok())
        .unwrap_or_else(|| "postgresql://streamwork@127.0.0.1:5433/streamwork".into());
    if !args.input.exists() {
        if let Some(parent) = args.input.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let words = [
            "stream", "table", "window", "barrier", "sink", "key", "state",
        ];
        let text: String = (0..args.lines)
            .map(|i| {
                let n = 1 + i % 5;
                let line: Vec<&str> = (0..n)
                    .map(|j| words[((i * 7 + j * 3) % 7) as usize])
                    .collect();
                line.join(" ") + "\n"
            })
            .collect();
        std::fs::write(&args.input, text)?;
    }
    let (counts_table, seen_table) = (
        format!("{}word_counts", args.prefix),
        format!("{}words_seen", args.prefix),
    );
    let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
    client.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {counts_table} (word text PRIMARY KEY, count bigint NOT NULL);
         CREATE TABLE IF NOT EXISTS {seen_table} (line bigint, position integer, word text, PRIMARY KEY (line, position))"
    ))?;
    drop(client);

    let p = args.parallelism;
    let source = FileSource::with_lines(&args.input, Lines::indexed_raw()).split_bytes(16 << 10);
    let counts = PostgresSink::<WordCount>::upsert(&url, &counts_table, &["word"])
        .id(format!("{counts_table}-sink"));
    let seen = PostgresSink::<WordSeen>::append(&url, &seen_table).id(format!("{seen_table}-sink"));
    let graph = job! {
        name "postgres upserts";
        delivery exactly_once;
        source lines[p] = source;
        operator words[p] = flat_map(|(line, bytes): (u64, Vec<u8>)| {
            String::from_utf8_lossy(&bytes)
                .split_whitespace()
                .enumerate()
                .map(|(position, word)| WordSeen { line: line as i64, position: position as i32, word: word.to_string() })
                .collect::<Vec<_>>()
        }) <- lines;
        operator tally[p] = fold(0i64, |n: &mut i64, _: WordSeen| *n += 1) <- words.key(|w: &WordSeen| w.word.clone());
        operator rows[p] = |(word, count): (String, i64)| WordCount { word, count } <- tally;
        sink counted[p] = counts <- rows;
        sink appended[p] = seen <- words;
    }?;
    let options = RunOptions {
        checkpoints: Some(CheckpointConfig::new(
            &args.checkpoints,
            Duration::from_millis(args.interval_ms),
        )),
        ..RunOptions::default()
    };
    let report = graph.run_with(options)?;
    println!(
        "done: restored from {:?}, tables {counts_table} and {seen_table}",
        report.recovery.restored_from
    );
    Ok(())
}
