//! Q6, average selling price by seller: for each auction with a winning bid
//! ([`WinningBids`]), the average of its winning price and of those of up to
//! 10 of the same seller's auctions just before it, the seller's auctions
//! ordered by the winning bid's `dateTime`, then by auction id (Flink's
//! `AVG(price) OVER (PARTITION BY seller ORDER BY dateTime ROWS BETWEEN 10
//! PRECEDING AND CURRENT ROW)`). Final rows: an auction that closes later may
//! have won earlier than those already closed, so the rows are computed at
//! the end of input (or, as an update stream, changed as sales arrive). The state is one `(time, id, price)` per closed auction
//! with a winner.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::winning::winner_averages;
use super::{BidFacts, JobParts};
use crate::model::Auction;
use crate::sink::{Change, serde_rows};

/// The rows each average covers: the auction and the 10 before it.
const ROWS: usize = 11;

/// A Q6 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q6Row {
    seller: u64,
    avg_price: u64,
}

serde_rows!(Q6Row);

/// One closed auction of a seller: (winning bid's `dateTime`, auction id,
/// winning price).
type Sale = (i64, u64, u64);

#[operator]
fn to_sale(winner: (Auction, BidFacts), out: &mut Collector<(u64, Sale)>) {
    let (auction, bid) = winner;
    out.emit((auction.seller, (bid.date_time, auction.id, bid.price)));
}

/// The row of the sale at `at` among a seller's `sales` (in order): the
/// average of its price and of up to 10 before it.
fn average_at(seller: u64, sales: &[Sale], at: usize) -> Q6Row {
    let window = &sales[at.saturating_sub(ROWS - 1)..=at];
    let sum: u128 = window.iter().map(|sale| u128::from(sale.2)).sum();
    let avg_price = u64::try_from(sum / window.len() as u128).unwrap_or(u64::MAX);
    Q6Row { seller, avg_price }
}

/// Each seller's sales, averaged over the last 11: at the end, or, as an
/// update stream, as each sale arrives (a sale that won before others
/// already in changes their rows too: those are retracted and inserted
/// again).
#[derive(Clone, Default, State)]
struct SellerAverages {
    /// Each seller's sales, in order as an update stream (unordered
    /// until the end otherwise).
    sellers: KeyedState<u64, Vec<Sale>>,
    #[state(transient)]
    updates: bool,
}

#[operator]
impl SellerAverages {
    fn on_record(
        &mut self,
        seller: CurrentKey<'_, u64>,
        sale: (u64, Sale),
        out: &mut Collector<Change<Q6Row>>,
    ) {
        let sales = self.sellers.get_or_default(seller);
        if !self.updates {
            sales.push(sale.1);
            return;
        }
        // The rows from the new sale's place to 10 past it change.
        let at = sales.partition_point(|s| *s < sale.1);
        for old in at..sales.len().min(at + ROWS - 1) {
            out.emit(Change::retract(average_at(sale.0, sales, old)));
        }
        sales.insert(at, sale.1);
        for new in at..sales.len().min(at + ROWS) {
            out.emit(Change::insert(average_at(sale.0, sales, new)));
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<Q6Row>>) {
        for (seller, mut sales) in self.sellers.drain() {
            if self.updates {
                continue;
            }
            sales.sort_unstable();
            for at in 0..sales.len() {
                out.emit(Change::insert(average_at(seller, &sales, at)));
            }
        }
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    let averages = SellerAverages {
        updates: parts.output.updates(),
        ..SellerAverages::default()
    };
    winner_averages(name, parts, ToSale, averages)
}
