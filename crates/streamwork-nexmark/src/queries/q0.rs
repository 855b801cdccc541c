//! Q0: pass-through of bids.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyBids, timestamps};
use crate::model::{Bid, timestamp};
use crate::sink::RowSink;
use crate::source::NexmarkSource;

/// A Q0 (and Q7) result row.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BidRow<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
}

/// A bid as a result row.
pub fn bid_row(bid: &Bid) -> String {
    serde_json::to_string(&BidRow {
        auction: bid.auction,
        bidder: bid.bidder,
        price: bid.price,
        date_time: bid.date_time,
        extra: &bid.extra,
    })
    .unwrap_or_default()
}

#[operator]
fn q0_rows(bid: Bid, out: &mut Collector<String>) {
    out.emit(bid_row(&bid));
}

pub(super) fn job(
    source: NexmarkSource,
    sp: u32,
    p: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    job! {
        name "nexmark-q0";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = OnlyBids <- timed.shuffle();
        operator rows[p] = Q0Rows <- bids;
        sink out = sink <- rows.global();
    }
}
