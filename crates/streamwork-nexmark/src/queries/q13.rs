//! Q13, bounded side input join: each bid joined with the side input's rows
//! whose key is `auction % 10000` (an inner join: a bid whose key has no row
//! gives nothing, one with several rows gives one row each). The side input
//! is read before the first event and shared, read-only, by every instance.

use std::sync::Arc;

use serde::Serialize;
use streamwork::prelude::*;

use super::SideInput;
use crate::model::{Bid, Event, timestamp};
use crate::sink::{Row, serde_row};

/// A Q13 row: a bid and the value of one side-input row.
#[derive(Clone, Debug)]
pub struct Q13Row {
    bid: Bid,
    value: Arc<str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Q13Fields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    value: &'a str,
}

impl Row for Q13Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.bid;
        serde_row(
            &Q13Fields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                date_time: bid.date_time,
                value: &self.value,
            },
            out,
        );
    }
}

/// Joins bids with the side input.
#[derive(Clone)]
pub(super) struct JoinSideInput {
    pub(super) side: Arc<SideInput>,
}

#[operator(stateless)]
impl JoinSideInput {
    fn on_record(&self, event: Event, out: &mut Collector<Q13Row>) {
        let Event::Bid(bid) = event else { return };
        // SQL's MOD: the sign of the dividend (an auction id is never negative).
        let key = (bid.auction % 10_000) as i64;
        match self.side.values(key) {
            [] => {}
            [value] => out.emit(Q13Row {
                bid,
                value: value.clone(),
            }),
            values => {
                for value in values {
                    out.emit(Q13Row {
                        bid: bid.clone(),
                        value: value.clone(),
                    });
                }
            }
        }
    }
}
