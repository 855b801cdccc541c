//! Q11, user sessions: per bidder, session windows of event time with a 10 s
//! gap (each bid opens `[dateTime, dateTime + 10 s)`; overlapping windows
//! merge, touching ones do not), and the number of bids in each session.

use std::time::Duration;

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{BidBidders, JobParts, timestamps};
use crate::model::timestamp;
use crate::sink::serde_rows;

/// A Q11 (and Q12) row: a bidder's bids in a window.
#[derive(Clone, Debug, Serialize)]
pub struct BidderCount {
    bidder: u64,
    bid_count: u64,
    #[serde(with = "timestamp")]
    starttime: i64,
    #[serde(with = "timestamp")]
    endtime: i64,
}

serde_rows!(BidderCount);

#[operator]
pub(super) fn bidder_rows(count: WindowResult<u64, u64>, out: &mut Collector<BidderCount>) {
    out.emit(BidderCount {
        bidder: count.key,
        bid_count: count.value,
        starttime: count.window.start.millis(),
        endtime: count.window.end.millis(),
    });
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
        name "nexmark-q11";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = BidBidders <- timed;
        operator sessions[p] { results, late } = Windows::session(Duration::from_secs(10)).count()
            <- bids.key(|bidder: &u64| *bidder);
        operator rows[p] = BidderRows <- sessions.results;
        sink out[op] = output.sink::<BidderCount>() <- rows;
        drop sessions.late;
    }
}
