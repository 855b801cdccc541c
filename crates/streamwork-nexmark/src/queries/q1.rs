//! Q1: bids with the price converted to euro, `0.908 * price`.

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Event, timestamp};
use crate::sink::serde_rows;
use crate::text::Text;

/// A Q1 row.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EuroRow {
    auction: u64,
    bidder: u64,
    price: f64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: Text,
}

serde_rows!(EuroRow);

/// The euro price, to three decimals.
pub fn euro(price: u64) -> f64 {
    (price as f64 * 908.0).round() / 1000.0
}

#[operator]
pub(super) fn q1_rows(event: Event, out: &mut Collector<EuroRow>) {
    if let Event::Bid(bid) = event {
        out.emit(EuroRow {
            auction: bid.auction,
            bidder: bid.bidder,
            price: euro(bid.price),
            date_time: bid.date_time,
            extra: bid.extra,
        });
    }
}
