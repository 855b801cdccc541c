//! Chapters 4 and 7: fraud detection. Transactions fan out to three analyzers,
//! each keyed by card; their scores fan in to an aggregator keyed by
//! transaction id, which writes one fraud score per transaction to the score
//! store. As in chapter 7, the proximity and transaction-count analyzers are
//! windowed, in event time with a watermark: each looks at a card's
//! transactions of one 10-minute window at once.
//!
//! ```sh
//! cargo run --release --example fraud_detection
//! cargo run --release --example fraud_detection -- --port 9990   # lines: id,card,amount_cents,x_km,y_km,time_s
//! ```

mod common;

use std::collections::HashMap;
use std::time::Duration;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Fraud detection (Grokking Streaming Systems, chapter 4).
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// Instances of each analyzer and of the aggregator.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=128))]
    parallelism: u32,
}

/// A card transaction.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Transaction {
    id: u64,
    card: u32,
    amount_cents: u64,
    /// Where it happened, in km on a flat map.
    x_km: f64,
    y_km: f64,
    /// When, in seconds.
    time_s: i64,
}

impl Transaction {
    fn parse(line: &str) -> Result<Transaction, String> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [id, card, amount, x, y, time] = fields.as_slice() else {
            return Err(format!(
                "expected 6 comma-separated fields, got {}",
                fields.len()
            ));
        };
        let bad = |what: &str| format!("bad {what}");
        Ok(Transaction {
            id: id.parse().map_err(|_| bad("id"))?,
            card: card.parse().map_err(|_| bad("card"))?,
            amount_cents: amount.parse().map_err(|_| bad("amount"))?,
            x_km: x.parse().map_err(|_| bad("x"))?,
            y_km: y.parse().map_err(|_| bad("y"))?,
            time_s: time.parse().map_err(|_| bad("time"))?,
        })
    }

    /// Generated traffic: 500 cards, one transaction a second; about one in
    /// fifty is made suspicious (a large amount far from home).
    fn generated(seq: u64) -> String {
        let card = (common::mix(seq, 7) % 500) as u32;
        let home_x = f64::from(card % 50) * 10.0;
        let home_y = f64::from(card / 50) * 10.0;
        let odd = common::mix(seq, 11).is_multiple_of(50);
        let amount = if odd {
            90_000 + common::mix(seq, 13) % 50_000
        } else {
            500 + common::mix(seq, 17) % 9_500
        };
        let (x, y) = if odd {
            (home_x + 900.0, home_y + 700.0)
        } else {
            (home_x + 1.0, home_y + 2.0)
        };
        format!("{seq},{card},{amount},{x},{y},{seq}")
    }
}

/// One analyzer's opinion of one transaction, in `[0, 1]`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Score {
    transaction: u64,
    analyzer: Analyzer,
    score: f64,
}

/// Which analyzer scored a transaction.
#[derive(Copy, Clone, Debug, serde::Serialize, serde::Deserialize)]
enum Analyzer {
    AverageTicket,
    Proximity,
    TransactionCount,
}

impl Analyzer {
    fn name(self) -> &'static str {
        match self {
            Analyzer::AverageTicket => "average_ticket",
            Analyzer::Proximity => "proximity",
            Analyzer::TransactionCount => "transaction_count",
        }
    }
}

/// Parses transaction lines; a line that does not parse is counted, reported
/// in the summary, and skipped.
#[derive(Clone)]
struct ParseTransactions {
    errors: InputErrors,
}

#[operator(stateless)]
impl ParseTransactions {
    fn on_record(&self, line: String, out: &mut Collector<Transaction>) {
        match Transaction::parse(&line) {
            Ok(transaction) => out.emit(transaction),
            Err(reason) => self.errors.record(format!("`{line}`: {reason}")),
        }
    }
}

/// Flags amounts far above the card's average ticket.
#[derive(Clone, Default, State)]
struct AverageTicketAnalyzer {
    totals: KeyedState<u32, (u64, u64)>,
}

#[operator]
impl AverageTicketAnalyzer {
    fn on_record(&mut self, card: CurrentKey<'_, u32>, t: Transaction, out: &mut Collector<Score>) {
        let (sum, n) = self.totals.get_or_default(card);
        let score = if *n >= 3 && t.amount_cents as f64 > 5.0 * (*sum as f64 / *n as f64) {
            1.0
        } else {
            0.0
        };
        *sum += t.amount_cents;
        *n += 1;
        out.emit(Score {
            transaction: t.id,
            analyzer: Analyzer::AverageTicket,
            score,
        });
    }
}

/// Flags transactions too far from the card's previous one (in the same
/// window) to have travelled: a full-window function over the card's window.
fn proximity_scores(window: WindowContents<'_, Transaction>) -> Vec<Score> {
    let mut transactions: Vec<&Transaction> = window.iter().collect();
    transactions.sort_by_key(|t| (t.time_s, t.id));
    let mut scores = Vec::with_capacity(transactions.len());
    let mut previous: Option<&Transaction> = None;
    for t in transactions {
        let score = match previous {
            Some(p) => {
                let km = ((t.x_km - p.x_km).powi(2) + (t.y_km - p.y_km).powi(2)).sqrt();
                let hours = ((t.time_s - p.time_s).abs() as f64 / 3600.0).max(1.0 / 60.0);
                if km / hours > 1000.0 { 1.0 } else { 0.0 }
            }
            None => 0.0,
        };
        scores.push(Score {
            transaction: t.id,
            analyzer: Analyzer::Proximity,
            score,
        });
        previous = Some(t);
    }
    scores
}

/// Flags every transaction of a card used more than 5 times in the window.
fn count_scores(window: WindowContents<'_, Transaction>) -> Vec<Score> {
    let score = if window.len() > 5 { 0.5 } else { 0.0 };
    window
        .iter()
        .map(|t| Score {
            transaction: t.id,
            analyzer: Analyzer::TransactionCount,
            score,
        })
        .collect()
}

/// Turns a window's scores back into one record per transaction.
/// The combined score of a transaction.
#[derive(Clone, Debug)]
struct FraudScore {
    transaction: u64,
    score: f64,
    reasons: Vec<&'static str>,
}

const ANALYZERS: usize = 3;

/// Waits for every analyzer's score of a transaction, then emits the total.
#[derive(Clone, Default)]
struct ScoreAggregator {
    pending: KeyedState<u64, Vec<Score>>,
}

#[operator(at_most_once)]
impl ScoreAggregator {
    fn on_record(
        &mut self,
        transaction: CurrentKey<'_, u64>,
        score: Score,
        out: &mut Collector<FraudScore>,
    ) {
        let scores = self.pending.get_or_default(transaction);
        scores.push(score);
        if scores.len() == ANALYZERS {
            let scores = self.pending.remove(transaction).unwrap_or_default();
            out.emit(FraudScore {
                transaction: *transaction,
                score: scores.iter().map(|s| s.score).sum(),
                reasons: scores
                    .iter()
                    .filter(|s| s.score > 0.0)
                    .map(|s| s.analyzer.name())
                    .collect(),
            });
        }
    }
}

/// The score store (the book writes to a database): keeps every score,
/// prints flagged transactions, and reports at the end.
#[derive(Clone)]
struct ScoreStore {
    scores: HashMap<u64, f64>,
    flagged: u64,
}

impl Sink for ScoreStore {
    type In = FraudScore;

    fn write(&mut self, record: Record<FraudScore>) -> Result<(), ConnectorError> {
        let fraud = record.value;
        if fraud.score >= 1.0 {
            self.flagged += 1;
            println!(
                "transaction {} flagged: score {:.1} ({})",
                fraud.transaction,
                fraud.score,
                fraud.reasons.join(", ")
            );
        }
        self.scores.insert(fraud.transaction, fraud.score);
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        eprintln!(
            "score store: {} transactions scored, {} flagged",
            self.scores.len(),
            self.flagged
        );
        Ok(())
    }
}

/// Transactions too late for their window (beyond the watermark's 30 s bound).
#[derive(Clone)]
struct LateTransactions;

impl Sink for LateTransactions {
    type In = Transaction;

    fn write(&mut self, record: Record<Transaction>) -> Result<(), ConnectorError> {
        eprintln!(
            "transaction {} arrived too late to be scored by the windowed analyzers",
            record.value.id
        );
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let source = LineSource::from_args(&args.input, &errors, Transaction::generated);
    let p = args.parallelism;
    let window = Duration::from_secs(600);
    let graph = job! {
        name "fraud_detection";
        source lines = source;
        operator transactions = ParseTransactions { errors: errors.clone() } <- lines;
        operator timed = Watermarks::bounded(Duration::from_secs(30))
            .timestamps(|t: &Transaction| Timestamp::from_millis(t.time_s * 1000)) <- transactions;
        operator average_ticket[p] = AverageTicketAnalyzer::default() <- timed.key(|t: &Transaction| t.card);
        operator proximity_windows[p] { results, late } = Windows::tumbling(window).transient().apply(proximity_scores)
            <- timed.key(|t: &Transaction| t.card);
        operator count_windows[p] { results, late } = Windows::tumbling(window).transient().apply(count_scores)
            <- timed.key(|t: &Transaction| t.card);
        operator proximity[p] = flat_map(|w: WindowResult<u32, Vec<Score>>| w.value) <- proximity_windows.results;
        operator transaction_count[p] = flat_map(|w: WindowResult<u32, Vec<Score>>| w.value) <- count_windows.results;
        operator aggregator[p] = ScoreAggregator::default()
            <- (average_ticket, proximity, transaction_count).key(|s: &Score| s.transaction);
        sink store = ScoreStore { scores: HashMap::new(), flagged: 0 } <- aggregator;
        sink late = LateTransactions <- proximity_windows.late, count_windows.late;
    }?;
    eprintln!("{}", graph.plan().to_mermaid());
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    Ok(())
}
