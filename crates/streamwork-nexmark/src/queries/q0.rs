//! Q0: pass-through of bids.

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Bid, Event, timestamp};
use crate::sink::{Row, serde_row};

/// A bid as a Q0 (and Q7) row: `auction`, `bidder`, `price`, `dateTime`,
/// `extra`.
#[derive(Clone, Debug)]
pub struct BidRow(pub Bid);

/// A bid's fields in a row.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BidFields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
}

impl<'a> From<&'a Bid> for BidFields<'a> {
    fn from(bid: &'a Bid) -> Self {
        BidFields {
            auction: bid.auction,
            bidder: bid.bidder,
            price: bid.price,
            date_time: bid.date_time,
            extra: &bid.extra,
        }
    }
}

impl Row for BidRow {
    fn write_json(&self, out: &mut Vec<u8>) {
        serde_row(&BidFields::from(&self.0), out);
    }
}

#[operator]
pub(super) fn q0_rows(event: Event, out: &mut Collector<BidRow>) {
    if let Event::Bid(bid) = event {
        out.emit(BidRow(bid));
    }
}
