//! Q2: bids on auctions whose id is a multiple of 123.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, timestamps};
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
fn q2_rows(event: Event, out: &mut Collector<Q2Row>) {
    if let Event::Bid(bid) = event
        && bid.auction.is_multiple_of(123)
    {
        out.emit(Q2Row {
            auction: bid.auction,
            price: bid.price,
        });
    }
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
        name "nexmark-q2";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator rows[p] = Q2Rows <- timed;
        sink out[op] = output.sink::<Q2Row>() <- rows;
    }
}
