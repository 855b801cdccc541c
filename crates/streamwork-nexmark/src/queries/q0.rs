//! Q0: pass-through of bids.

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Bid, Event, timestamp};
use crate::sink::{Row, serde_row};

/// A bid as a Q0 (and Q7) row: `auction`, `bidder`, `price`, `dateTime`,
/// `extra`.
#[derive(Clone, Debug)]
pub struct BidRow(pub Bid);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BidFields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
}

impl Row for BidRow {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.0;
        serde_row(
            &BidFields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                date_time: bid.date_time,
                extra: &bid.extra,
            },
            out,
        );
    }
}

#[operator]
pub(super) fn q0_rows(event: Event, out: &mut Collector<BidRow>) {
    if let Event::Bid(bid) = event {
        out.emit(BidRow(bid));
    }
}
