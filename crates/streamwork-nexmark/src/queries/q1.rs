//! Q1: bids with the price converted to euro, `0.908 * price`.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, timestamps};
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
fn q1_rows(event: Event, out: &mut Collector<EuroRow>) {
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
        name "nexmark-q1";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator rows[p] = Q1Rows <- timed;
        sink out[op] = output.sink::<EuroRow>() <- rows;
    }
}
