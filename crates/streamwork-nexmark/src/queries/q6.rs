//! Q6, average selling price by seller: for each auction with a winning bid
//! ([`WinningBids`]), the average of its winning price and of those of up to
//! 10 of the same seller's auctions just before it, the seller's auctions
//! ordered by the winning bid's `dateTime`, then by auction id (Flink's
//! `AVG(price) OVER (PARTITION BY seller ORDER BY dateTime ROWS BETWEEN 10
//! PRECEDING AND CURRENT ROW)`). Final rows: an auction that closes later may
//! have won earlier than those already closed, so the rows are computed at
//! the end of input. The state is one `(time, id, price)` per closed auction
//! with a winner.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::winning::WinningBids;
use super::{BidFacts, JobParts, OnlyAuctions, ToBidFacts, timestamps};
use crate::model::Auction;
use crate::sink::serde_rows;

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

/// Each seller's sales, averaged over the last 11 at the end.
#[derive(Clone, Default, State)]
struct SellerAverages {
    sellers: KeyedState<u64, Vec<Sale>>,
}

#[operator]
impl SellerAverages {
    fn on_record(
        &mut self,
        seller: CurrentKey<'_, u64>,
        sale: (u64, Sale),
        _out: &mut Collector<Q6Row>,
    ) {
        self.sellers.get_or_default(seller).push(sale.1);
    }

    fn on_end(&mut self, out: &mut Collector<Q6Row>) {
        for (seller, mut sales) in self.sellers.drain() {
            sales.sort_unstable();
            let mut sum: u128 = 0;
            for (i, sale) in sales.iter().enumerate() {
                sum += u128::from(sale.2);
                if i >= ROWS {
                    sum -= u128::from(sales[i - ROWS].2);
                }
                let n = (i + 1).min(ROWS) as u128;
                let avg_price = u64::try_from(sum / n).unwrap_or(u64::MAX);
                out.emit(Q6Row { seller, avg_price });
            }
        }
    }
}

pub(super) fn job(parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    let (
        op,
        JobParts {
            source,
            sp,
            p,
            late,
            output,
            ..
        },
    ) = (parts.sink_parallelism(), parts);
    job! {
        name "nexmark-q6";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator auctions[p] = OnlyAuctions <- timed;
        operator bids[p] = ToBidFacts <- timed;
        operator winners[p] = WinningBids::<BidFacts>::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &BidFacts| b.auction));
        operator sales[p] = ToSale <- winners;
        operator averages[p] = SellerAverages::default() <- sales.key(|s: &(u64, Sale)| s.0);
        sink out[op] = output.sink::<Q6Row>() <- averages;
    }
}
