//! Q19, auction top-10 price: per auction, the bids ranked by price, highest
//! first, ties to the bid read first; the first 10 with their rank
//! (`ROW_NUMBER`: exactly `min(10, n)` rows for `n` bids). Final rows.

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::q18::FullBidRow;
use super::{JobParts, OnlyBids, timestamps};
use crate::model::Bid;

/// Rows kept per auction.
const TOP: usize = 10;

/// The best bids of each auction, best first, emitted at the end.
#[derive(Clone, Default, State)]
struct TopBids {
    auctions: KeyedState<u64, Vec<Bid>>,
}

#[operator]
impl TopBids {
    fn on_record(
        &mut self,
        auction: CurrentKey<'_, u64>,
        bid: Bid,
        _out: &mut Collector<FullBidRow>,
    ) {
        let top = self.auctions.get_or_default(auction);
        // Best first: higher price, then read first.
        let rank = |b: &Bid| (std::cmp::Reverse(b.price), b.seq);
        if top.len() == TOP && top.last().is_some_and(|worst| rank(&bid) > rank(worst)) {
            return;
        }
        let at = top.partition_point(|b| rank(b) < rank(&bid));
        top.insert(at, bid);
        top.truncate(TOP);
    }

    fn on_end(&mut self, out: &mut Collector<FullBidRow>) {
        for (_, top) in self.auctions.drain() {
            out.extend(top.into_iter().enumerate().map(|(i, bid)| FullBidRow {
                bid,
                rank: Some(i as u8 + 1),
            }));
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
        name "nexmark-q19";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = OnlyBids <- timed;
        operator top[p] = TopBids::default() <- bids.key(|bid: &Bid| bid.auction);
        sink out[op] = output.sink::<FullBidRow>() <- top;
    }
}
