//! Chapter 5: the system usage job, and what each delivery semantic does
//! with a failure. Card transactions are scored for fraud per account; a
//! usage analyzer counts the transactions processed and the fraudulent ones,
//! and a usage writer records the counts every `--report-every`
//! transactions and at the end.
//!
//! `--fail-at N` makes one analyzer instance fail before its N-th
//! transaction, once. Then:
//!
//! * `--delivery exactly-once`: aligned checkpoints, a replayable source and
//!   a transactional writer. The job restarts from its last complete
//!   checkpoint and the committed counts are exactly those of a run without
//!   the failure;
//! * `--delivery at-least-once`: checkpoints without alignment, a plain
//!   writer. Nothing is lost, but what was processed after the last
//!   checkpoint is processed again: the counts may exceed the truth;
//! * `--delivery at-most-once`: no checkpoints, no replay. The run ends at
//!   the failure with the counts it had: what was in flight is lost.
//!
//! ```sh
//! cargo run --release --example system_usage -- --transactions 200000 --fail-at 50000 \
//!     --delivery exactly-once --output usage --checkpoint-dir ckpt
//! ```
//!
//! Usage records go to `OUTPUT/usage`, one `TRANSACTIONS,FRAUDS` line per
//! report. The last line printed is `transactions=T frauds=F`, from the
//! committed records.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;

/// The system usage job of chapter 5, with a failure on demand.
#[derive(Parser, Debug)]
struct Args {
    /// Transactions to generate.
    #[arg(long, default_value_t = 200_000)]
    transactions: u64,
    /// Fail one analyzer instance before its N-th transaction (once).
    #[arg(long)]
    fail_at: Option<usize>,
    /// at-most-once, at-least-once or exactly-once.
    #[arg(long, default_value = "exactly-once")]
    delivery: Delivery,
    /// The directory the usage records go to (`usage`, one `TRANSACTIONS,FRAUDS`
    /// line per report).
    #[arg(long, default_value = "target/system_usage/out")]
    output: PathBuf,
    /// The checkpoint directory (emptied first: every run starts afresh).
    #[arg(long, default_value = "target/system_usage/ckpt")]
    checkpoint_dir: PathBuf,
    /// Write the usage every this many transactions.
    #[arg(long, default_value_t = 10_000)]
    report_every: u64,
}

/// One card transaction.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Transaction {
    account: u64,
    amount_cents: u64,
}

/// Transaction `seq`: 1000 accounts; every 251st transaction of the stream is
/// a spike far above its account's usual amounts.
fn transaction(seq: u64) -> Transaction {
    let mixed = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    let spike = seq % 251 == 250;
    Transaction {
        account: mixed % 1000,
        amount_cents: if spike {
            500_000 + mixed % 100_000
        } else {
            1_000 + mixed % 9_000
        },
    }
}

/// Per account, the count and sum of its transactions so far: a transaction
/// more than five times the account's average (after three) is fraud. The
/// framework checkpoints the history by key group (`#[derive(State)]`).
#[derive(Clone, Default, State)]
struct FraudScorer {
    history: KeyedState<u64, (u64, u64)>,
}

#[operator]
impl FraudScorer {
    fn on_record(
        &mut self,
        account: CurrentKey<'_, u64>,
        t: Transaction,
        out: &mut Collector<bool>,
    ) {
        let (count, sum) = self.history.get_or_default(account);
        let fraud = *count >= 3 && t.amount_cents > 5 * (*sum / *count);
        *count += 1;
        *sum += t.amount_cents;
        out.emit(fraud);
    }
}

/// The usage analyzer: transactions and frauds counted so far, reported
/// every `every` transactions and at the end. Its counts are the state of
/// its one instance (`InstanceState`); `every` is configuration.
#[derive(Clone, State)]
struct UsageAnalyzer {
    #[state(transient)]
    every: u64,
    transactions: InstanceState<u64>,
    frauds: InstanceState<u64>,
}

#[operator]
impl UsageAnalyzer {
    fn on_record(&mut self, fraud: bool, out: &mut Collector<(u64, u64)>) {
        *self.transactions += 1;
        *self.frauds += u64::from(fraud);
        if self.transactions.is_multiple_of(self.every) {
            out.emit((*self.transactions, *self.frauds));
        }
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        if !self.transactions.is_multiple_of(self.every) {
            out.emit((*self.transactions, *self.frauds));
        }
    }
}

fn usage_line(usage: &(u64, u64), line: &mut Vec<u8>) {
    line.extend_from_slice(format!("{},{}", usage.0, usage.1).as_bytes());
}

/// The last usage record written to `file` (the largest count), if any.
fn last_usage(file: &Path) -> std::io::Result<Option<(u64, u64)>> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| {
            let (t, f) = line.split_once(',')?;
            Some((t.parse::<u64>().ok()?, f.parse::<u64>().ok()?))
        })
        .max())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    for dir in [&args.output, &args.checkpoint_dir] {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
    }
    let source = GeneratorSource::new(transaction).take(args.transactions);
    let fault = InjectFault::new(1, Fault::BeforeRecord(args.fail_at.unwrap_or(usize::MAX)));
    let usage = UsageAnalyzer {
        every: args.report_every.max(1),
        transactions: InstanceState(0),
        frauds: InstanceState(0),
    };
    let usage_file = args.output.join("usage");
    let writer = FileSink::new(&usage_file, usage_line).single_file();
    // Only the exactly-once job needs the transactional writer, and only it
    // is declared so: the declaration checks its source and sink when it
    // compiles.
    let graph = if args.delivery == Delivery::ExactlyOnce {
        job! {
            name "system_usage";
            delivery exactly_once;
            source transactions = source;
            operator scores[2] = FraudScorer::default() <- transactions.key(|t: &Transaction| t.account);
            operator checked[2] = fault <- scores;
            operator usage = usage <- checked.global();
            sink usage_writer = writer.transactional() <- usage;
        }?
    } else {
        job! {
            name "system_usage";
            source transactions = source;
            operator scores[2] = FraudScorer::default() <- transactions.key(|t: &Transaction| t.account);
            operator checked[2] = fault <- scores;
            operator usage = usage <- checked.global();
            sink usage_writer = writer <- usage;
        }?
    };
    let options = match args.delivery {
        Delivery::AtMostOnce => RunOptions::default(),
        delivery => RunOptions {
            checkpoints: Some(
                CheckpointConfig::new(&args.checkpoint_dir, Duration::from_millis(20))
                    .delivery(delivery),
            ),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(10),
            },
            ..RunOptions::default()
        },
    };
    match graph.run_with(options) {
        Ok(report) => eprintln!(
            "{:?}: completed after {} restart(s), {} checkpoint(s)",
            args.delivery,
            report.restarts,
            report.checkpoints.len()
        ),
        Err(error) => eprintln!(
            "{:?}: the run failed and is not replayed: {error}",
            args.delivery
        ),
    }
    let (transactions, frauds) = last_usage(&usage_file)?.unwrap_or((0, 0));
    println!("transactions={transactions} frauds={frauds}");
    Ok(())
}
