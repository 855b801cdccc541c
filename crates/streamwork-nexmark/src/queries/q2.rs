//! Q2: bids on auctions whose id is a multiple of 123.

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::Event;
use crate::sink::serde_rows;

/// A Q2 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q2Row {
    auction: u64,
    price: u64,
}

serde_rows!(Q2Row);

#[operator]
pub(super) fn q2_rows(event: Event, out: &mut Collector<Q2Row>) {
    if let Event::Bid(bid) = event
        && bid.auction.is_multiple_of(123)
    {
        out.emit(Q2Row {
            auction: bid.auction,
            price: bid.price,
        });
    }
}
