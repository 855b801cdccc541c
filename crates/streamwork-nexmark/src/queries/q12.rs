//! Q12, bids per bidder per tumbling 10 s window of event time (Flink counts
//! in processing time, whose result depends on the machine's speed; this is
//! Feldera's reading, and the contract's).

use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::q11::{BidderCount, BidderRows};
use super::{BidBidders, JobParts, timestamps};

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
        name "nexmark-q12";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = BidBidders <- timed;
        operator windows[p] { results, late } = Windows::tumbling(Duration::from_secs(10)).count()
            <- bids.key(|bidder: &u64| *bidder);
        operator rows[p] = BidderRows <- windows.results;
        sink out[op] = output.sink::<BidderCount>() <- rows;
        drop windows.late;
    }
}
