//! Q2: bids on auctions whose id is a multiple of 123.

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyBids, timestamps};
use crate::model::Bid;
use crate::sink::RowSink;
use crate::source::NexmarkSource;

#[operator]
fn q2_rows(bid: Bid, out: &mut Collector<String>) {
    if bid.auction.is_multiple_of(123) {
        out.emit(format!(
            "{{\"auction\":{},\"price\":{}}}",
            bid.auction, bid.price
        ));
    }
}

pub(super) fn job(
    source: NexmarkSource,
    sp: u32,
    p: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    job! {
        name "nexmark-q2";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = OnlyBids <- timed.shuffle();
        operator rows[p] = Q2Rows <- bids;
        sink out = sink <- rows.global();
    }
}
