//! Q4, average closing price per category: for each auction, the highest bid
//! whose `dateTime` lies in `[auction.dateTime, auction.expires]`; then, per
//! category, the average of those over the auctions that had any. At the end
//! of input, one row per category. The winning bids come from
//! [`WinningBids`], shared with q6 and q9.

use std::collections::BTreeMap;

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::winning::WinningBids;
use super::{BidFacts, JobParts, OnlyAuctions, ToBidFacts, timestamps};
use crate::model::Auction;
use crate::sink::serde_rows;

/// A Q4 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q4Row {
    category: u64,
    avg: u64,
}

serde_rows!(Q4Row);

#[operator]
fn closing_price(winner: (Auction, BidFacts), out: &mut Collector<(u64, u64)>) {
    out.emit((winner.0.category, winner.1.price));
}

/// The running average closing price per category (the sum and count of
/// its closing prices), emitted at the end.
#[derive(Clone, Default, State)]
struct CategoryAverages {
    totals: KeyedState<u64, (u128, u64)>,
}

#[operator]
impl CategoryAverages {
    fn on_record(
        &mut self,
        category: CurrentKey<'_, u64>,
        closing: (u64, u64),
        _out: &mut Collector<Q4Row>,
    ) {
        let (sum, n) = self.totals.get_or_default(category);
        *sum += u128::from(closing.1);
        *n += 1;
    }

    fn on_end(&mut self, out: &mut Collector<Q4Row>) {
        let totals: BTreeMap<u64, (u128, u64)> = self.totals.drain().collect();
        for (category, (sum, n)) in totals {
            let avg = u64::try_from(sum / u128::from(n)).unwrap_or(u64::MAX);
            out.emit(Q4Row { category, avg });
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
        name "nexmark-q4";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator auctions[p] = OnlyAuctions <- timed;
        operator bids[p] = ToBidFacts <- timed;
        operator winners[p] = WinningBids::<BidFacts>::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &BidFacts| b.auction));
        operator closing[p] = ClosingPrice <- winners;
        operator averages[p] = CategoryAverages::default() <- closing.key(|c: &(u64, u64)| c.0);
        sink out[op] = output.sink::<Q4Row>() <- averages;
    }
}
