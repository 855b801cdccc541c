//! Q19, auction top-10 price: per auction, the bids ranked by price, highest
//! first, ties to the bid read first; the first 10 with their rank
//! (`ROW_NUMBER`: exactly `min(10, n)` rows for `n` bids). Final rows.

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::q18::FullBidRow;
use super::{JobParts, OnlyBids};
use crate::model::Bid;
use crate::sink::Change;

/// Rows kept per auction.
const TOP: usize = 10;

/// The row of the bid ranked `at` (from 0).
fn ranked(bid: &Bid, at: usize) -> FullBidRow {
    FullBidRow {
        bid: bid.clone(),
        rank: Some(at as u8 + 1),
    }
}

/// The best bids of each auction, best first: emitted at the end, or, as
/// an update stream, as they change (a bid that enters the top moves those
/// below it down a rank: their rows are retracted and inserted again, and
/// the one pushed out is retracted).
#[derive(Clone, Default, State)]
struct TopBids {
    auctions: KeyedState<u64, Vec<Bid>>,
    #[state(transient)]
    updates: bool,
}

#[operator]
impl TopBids {
    fn on_record(
        &mut self,
        auction: CurrentKey<'_, u64>,
        bid: Bid,
        out: &mut Collector<Change<FullBidRow>>,
    ) {
        let top = self.auctions.get_or_default(auction);
        // Best first: higher price, then read first.
        let rank = |b: &Bid| (std::cmp::Reverse(b.price), b.seq);
        if top.len() == TOP && top.last().is_some_and(|worst| rank(&bid) > rank(worst)) {
            return;
        }
        let at = top.partition_point(|b| rank(b) < rank(&bid));
        if self.updates {
            for (old, moved) in top.iter().enumerate().skip(at) {
                out.emit(Change::retract(ranked(moved, old)));
            }
        }
        if top.len() == TOP {
            // The worst leaves first, so that the list never outgrows `TOP`.
            top.pop();
        } else if top.len() == top.capacity() {
            // Grown to exactly `TOP` at most (4, 8, then 10), where doubling
            // would leave room for 16 bids and use 6 of it never.
            top.reserve_exact((top.len() * 2).clamp(4, TOP) - top.len());
        }
        top.insert(at, bid);
        if self.updates {
            for (new, moved) in top.iter().enumerate().skip(at) {
                out.emit(Change::insert(ranked(moved, new)));
            }
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<FullBidRow>>) {
        for (_, top) in self.auctions.drain() {
            if !self.updates {
                out.extend(top.into_iter().enumerate().map(|(at, bid)| {
                    Change::insert(FullBidRow {
                        bid,
                        rank: Some(at as u8 + 1),
                    })
                }));
            }
        }
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = OnlyBids <- timed;
        operator top[parts.p] = TopBids { updates: parts.output.updates(), ..TopBids::default() }
            <- bids.key(|bid: &Bid| bid.auction);
    } => top: Change<FullBidRow>)
}
