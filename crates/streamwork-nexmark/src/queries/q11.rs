//! Bids per bidder per window of event time, for two queries that differ only
//! in their windows:
//!
//! - Q11, user sessions: session windows with a 10 s gap (each bid opens
//!   `[dateTime, dateTime + 10 s)`; overlapping windows merge, touching ones
//!   do not).
//! - Q12: tumbling 10 s windows (Flink counts in processing time, whose
//!   result depends on the machine's speed; this is Feldera's reading, and
//!   the contract's).

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::window::WindowOutputs;

use super::{BidBidders, JobParts};
use crate::model::timestamp;
use crate::sink::serde_rows;

/// A Q11 and Q12 row: a bidder's bids in a window.
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
fn bidder_rows(count: WindowResult<u64, u64>, out: &mut Collector<BidderCount>) {
    out.emit(BidderCount {
        bidder: count.key,
        bid_count: count.value,
        starttime: count.window.start.millis(),
        endtime: count.window.end.millis(),
    });
}

/// The job: `windows` counts each bidder's bids.
pub(super) fn job<W>(name: String, windows: W, parts: JobParts<'_>) -> Result<JobGraph, GraphError>
where
    W: Operator<
            In = u64,
            Key = ByKey<u64>,
            Out = WindowOutputs<WindowResult<u64, u64>, u64>,
            Time = EventTime,
        >,
{
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = BidBidders <- timed;
        operator windows[parts.p] { results, late } = windows <- bids.key(|bidder: &u64| *bidder);
        operator rows[parts.p] = BidderRows <- windows.results;
        drop windows.late;
    } => rows: BidderCount)
}
