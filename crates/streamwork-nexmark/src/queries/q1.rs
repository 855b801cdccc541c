//! Q1: bids with the price converted to euro, `0.908 * price`.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyBids, timestamps};
use crate::model::{Bid, timestamp};
use crate::sink::RowSink;
use crate::source::NexmarkSource;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EuroRow<'a> {
    auction: u64,
    bidder: u64,
    price: f64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
}

/// The euro price, to three decimals.
pub fn euro(price: u64) -> f64 {
    (price as f64 * 908.0).round() / 1000.0
}

#[operator]
fn q1_rows(bid: Bid, out: &mut Collector<String>) {
    let row = EuroRow {
        auction: bid.auction,
        bidder: bid.bidder,
        price: euro(bid.price),
        date_time: bid.date_time,
        extra: &bid.extra,
    };
    out.emit(serde_json::to_string(&row).unwrap_or_default());
}

pub(super) fn job(
    source: NexmarkSource,
    sp: u32,
    p: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    job! {
        name "nexmark-q1";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = OnlyBids <- timed.shuffle();
        operator rows[p] = Q1Rows <- bids;
        sink out = sink <- rows.global();
    }
}
