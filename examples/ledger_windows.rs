//! Chapters 7, 8 and 10 together, exactly once: each input line
//! `ACCOUNT,AMOUNT` is an entry at event time `INDEX` ms. Per account, a
//! running balance (state of the user's own `#[operator]`), the sum of
//! each second's entries (a tumbling window), and every balance joined
//! with its second's sum (a windowed join), all written by transactional
//! file sinks to `OUTPUT/balances`, `OUTPUT/sums` and `OUTPUT/joined`.
//! Kill it at any moment and run it again, at any parallelism: the
//! committed output is exactly that of a run without failure.
//!
//! ```sh
//! cargo run --release --example ledger_windows -- --input ledger.csv --output out \
//!     --checkpoint-dir ckpt --parallelism 2
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::TransactionalFileSink;
use streamwork::connectors::file::Lines;
use streamwork::join::JoinRow;
use streamwork::prelude::*;

/// Balances, per-second sums and their join, exactly once across crashes.
#[derive(Parser, Debug)]
struct Args {
    /// The input: lines `ACCOUNT,AMOUNT`.
    #[arg(long)]
    input: PathBuf,
    /// Where the committed output goes.
    #[arg(long)]
    output: PathBuf,
    /// The checkpoint directory; a run finds its predecessor's state here.
    #[arg(long)]
    checkpoint_dir: PathBuf,
    /// Time between checkpoints.
    #[arg(long, default_value_t = 100)]
    checkpoint_interval_ms: u64,
    /// Instances of the balance, window and join stages.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
}

/// One ledger entry, at event time `index` ms.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Entry {
    index: u64,
    account: u64,
    amount: i64,
}

/// A malformed line is not an entry: it is counted and skipped.
fn parse(index: u64, line: &[u8]) -> Result<Entry, String> {
    let line = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    let (account, amount) = line.split_once(',').ok_or("no comma")?;
    Ok(Entry {
        index,
        account: account
            .trim()
            .parse()
            .map_err(|e| format!("account: {e}"))?,
        amount: amount.trim().parse().map_err(|e| format!("amount: {e}"))?,
    })
}

/// A balance after one entry: `(index, account, balance)`.
type Balance = (u64, u64, i128);

/// Each account's running balance: state that lives in the checkpoint log
/// (`StoredState`: what changed since the last checkpoint in memory, the
/// rest read in place from the log), checkpointed by the framework
/// (`#[derive(State)]`) and restored at any parallelism.
#[derive(Clone, Default, State)]
struct Balances {
    balances: StoredState<u64, i128>,
}

#[operator]
impl Balances {
    fn on_record(
        &mut self,
        account: CurrentKey<'_, u64>,
        entry: Entry,
        out: &mut Collector<Balance>,
    ) {
        let balance = self.balances.get_or_default(account);
        *balance += i128::from(entry.amount);
        out.emit((entry.index, entry.account, *balance));
    }
}

/// A second's sum of an account's amounts, summed as `u64` (wrapping, so
/// read back as `i64` it is the signed sum).
type Sum = WindowResult<u64, u64>;

/// A second's sum: `(account, window start, sum)`.
type SecondSum = (u64, i64, i64);

/// A transactional file sink of `part-*` files in `dir`, one line per row.
fn lines_of<T: Data>(
    dir: PathBuf,
    line: impl Fn(&T) -> String + Send + Sync + 'static,
) -> TransactionalFileSink<T> {
    FileSink::new(dir, move |row: &T, out: &mut Vec<u8>| {
        out.extend_from_slice(line(row).as_bytes())
    })
    .transactional()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let p = args.parallelism.max(1);
    let second = Duration::from_secs(1);
    let lines = FileSource::with_lines(&args.input, Lines::raw(parse));
    let balances_out = lines_of(args.output.join("balances"), |b: &Balance| {
        format!("{},{},{}", b.0, b.1, b.2)
    });
    let sums_out = lines_of(args.output.join("sums"), |s: &SecondSum| {
        format!("{},{},{}", s.0, s.1, s.2)
    });
    let joined_out = lines_of(
        args.output.join("joined"),
        |row: &JoinRow<u64, Balance, SecondSum>| match (&row.left, &row.right) {
            (Some(b), Some(s)) => format!("{},{},{},{},{}", b.0, b.1, b.2, s.1, s.2),
            _ => String::new(),
        },
    );
    let graph = job! {
        name "ledger_windows";
        delivery exactly_once;
        source lines = lines;
        operator timed = Watermarks::monotonic()
            .timestamps(|e: &Entry| Timestamp::from_millis(e.index as i64)) <- lines;
        operator balances[p] = Balances::default() <- timed.key(|e: &Entry| e.account);
        operator sums[p] { results, late } = Windows::tumbling(second)
            .sum(|e: &Entry| e.amount as u64) <- timed.key(|e: &Entry| e.account);
        operator flat[p] = |sum: Sum| -> SecondSum { (sum.key, sum.window.start.millis(), sum.value as i64) } <- sums.results;
        operator joined[p] = Join::inner().tumbling(second)
            <- left(balances.key(|b: &Balance| b.1)), right(flat.key(|s: &SecondSum| s.0));
        sink balances_file[p] = balances_out <- balances;
        sink sums_file[p] = sums_out <- flat;
        sink joined_file[p] = joined_out <- joined;
        drop sums.late;
    }?;
    let mut config = CheckpointConfig::new(
        &args.checkpoint_dir,
        Duration::from_millis(args.checkpoint_interval_ms.max(1)),
    );
    config.retain = 2;
    let handle = graph.start_with(RunOptions {
        checkpoints: Some(config),
        ..RunOptions::default()
    })?;
    handle.stop_on_ctrl_c()?;
    let report = handle.join()?;
    eprint!("{report}");
    Ok(())
}
