//! Chapter 10: exactly-once running totals. Each input line `ACCOUNT,AMOUNT`
//! becomes `INDEX,ACCOUNT,TOTAL` (the account's total over the lines up to
//! and including this one), written to `OUTPUT/part-*` by transactional file
//! sinks; malformed lines go, with their index, to `OUTPUT/dead-letter`.
//! Kill the process at any moment and run the same command again: it
//! resumes from its last complete checkpoint, and the committed output is
//! exactly that of a run without failure.
//!
//! ```sh
//! cargo run --release --example running_totals -- --input ledger.csv --output out \
//!     --checkpoint-dir ckpt --checkpoint-interval-ms 200 --delivery exactly-once --parallelism 2
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::file::Lines;
use streamwork::prelude::*;

/// Running totals per account, exactly once across crashes.
#[derive(Parser, Debug)]
struct Args {
    /// The input: lines `ACCOUNT,AMOUNT`.
    #[arg(long)]
    input: PathBuf,
    /// Where the committed output goes (`part-*` and `dead-letter`).
    #[arg(long)]
    output: PathBuf,
    /// The checkpoint directory; a run finds its predecessor's state here.
    #[arg(long)]
    checkpoint_dir: PathBuf,
    /// Time between checkpoints.
    #[arg(long, default_value_t = 200)]
    checkpoint_interval_ms: u64,
    /// at-most-once, at-least-once or exactly-once.
    #[arg(long, default_value = "exactly-once")]
    delivery: Delivery,
    /// Instances of the totals operator and of the output sink.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
}

/// One ledger entry.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Entry {
    index: u64,
    account: u64,
    amount: i64,
}

/// The parser's two channels: entries, and lines that are not entries.
#[derive(Outputs)]
struct Parsed {
    entries: Collector<Entry>,
    dead: Collector<(u64, String)>,
}

fn parse_entry(line: &[u8]) -> Option<(u64, i64)> {
    let line = std::str::from_utf8(line).ok()?;
    let (account, amount) = line.split_once(',')?;
    Some((account.trim().parse().ok()?, amount.trim().parse().ok()?))
}

#[operator]
fn parse(line: (u64, Vec<u8>), out: &mut Parsed) {
    let (index, bytes) = line;
    match parse_entry(&bytes) {
        Some((account, amount)) => out.entries.emit(Entry {
            index,
            account,
            amount,
        }),
        None => out
            .dead
            .emit((index, String::from_utf8_lossy(&bytes).into_owned())),
    }
}

/// Each account's running total. The framework checkpoints it by key group
/// (`#[derive(State)]`), so that it can be restored at any parallelism, each
/// instance taking the accounts it now owns.
#[derive(Clone, Default, State)]
struct Totals {
    totals: KeyedState<u64, i128>,
}

#[operator]
impl Totals {
    fn on_record(
        &mut self,
        account: CurrentKey<'_, u64>,
        entry: Entry,
        out: &mut Collector<(u64, u64, i128)>,
    ) {
        let total = self.totals.get_or_default(account);
        *total += i128::from(entry.amount);
        out.emit((entry.index, entry.account, *total));
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let lines = FileSource::with_lines(&args.input, Lines::indexed_raw());
    let out = FileSink::new(
        &args.output,
        |row: &(u64, u64, i128), line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{},{}", row.0, row.1, row.2).as_bytes());
        },
    )
    // Whole files of about 64 KiB (or a minute's output), not one per checkpoint.
    .rolling(64 * 1024, std::time::Duration::from_secs(60))
    .transactional();
    let dead = FileSink::new(
        args.output.join("dead-letter"),
        |row: &(u64, String), line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{}", row.0, row.1).as_bytes());
        },
    )
    .single_file()
    .transactional();
    let p = args.parallelism.max(1);
    // Declared exactly-once, the job compiles only because its source is
    // replayable and its sinks transactional; the other modes are run-time
    // choices of the same graph.
    macro_rules! running_totals {
        ($($delivery:tt)*) => {
            job! {
                name "running_totals";
                $($delivery)*
                source lines = lines;
                operator parsed { entries, dead } = Parse <- lines;
                operator totals[p] = Totals::default() <- parsed.entries.key(|e: &Entry| e.account);
                sink out[p] = out <- totals;
                sink dead_letter = dead <- parsed.dead;
            }
        };
    }
    let graph = if args.delivery == Delivery::ExactlyOnce {
        running_totals!(delivery exactly_once;)?
    } else {
        running_totals!()?
    };
    let mut config = CheckpointConfig::new(
        &args.checkpoint_dir,
        Duration::from_millis(args.checkpoint_interval_ms.max(1)),
    )
    .delivery(args.delivery);
    config.retain = 2;
    let handle = graph.start_with(RunOptions {
        checkpoints: Some(config),
        ..RunOptions::default()
    })?;
    handle.stop_on_ctrl_c()?;
    let report = handle.join()?;
    let checkpoints = report.checkpoints.len();
    eprint!("{report}");
    eprintln!(
        "  checkpoints completed: {checkpoints}; delivery {:?}",
        args.delivery
    );
    Ok(())
}
