//! Q15, bidding statistics per day: bids, distinct bidders and
//! distinct auctions, in total and per price rank ([`DailyStats`]); final
//! rows, one per group.

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::daily::{
    DailyStats, Distinct, MergeStats, StatBid, StatBids, StatsRow, group_partition,
};
use super::{JobParts, timestamps};
use crate::sink::Change;

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
        name "nexmark-q15";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = StatBids <- timed;
        operator by_bidder[p] = DailyStats::new(Distinct::Bidders, false, output.updates())
            <- bids.key(|bid: &StatBid| bid.facts.bidder);
        operator by_auction[p] = DailyStats::new(Distinct::Auctions, false, output.updates())
            <- bids.key(|bid: &StatBid| bid.facts.auction);
        operator merged[p] = MergeStats::new(output.updates())
            <- (by_bidder, by_auction).key(group_partition);
        sink out[op] = output.sink::<Change<StatsRow>>() <- merged;
    }
}
