//! Q9, winning bids: each auction that has a winning bid, with that bid
//! ([`WinningBids`]: the highest price in the auction's time range, ties to
//! the earliest `dateTime`, then to the bid read first). An auction's row is
//! final when event time passes its `expires`, so it is emitted then.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::winning::WinningBids;
use super::{JobParts, OnlyAuctions, OnlyBids, timestamps};
use crate::model::{Auction, Bid, timestamp};
use crate::sink::{Row, serde_row};

/// A Q9 row: an auction and its winning bid.
#[derive(Clone, Debug)]
pub struct Q9Row(pub Auction, pub Bid);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Q9Fields<'a> {
    id: u64,
    item_name: &'a str,
    description: &'a str,
    initial_bid: u64,
    reserve: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    #[serde(with = "timestamp")]
    expires: i64,
    seller: u64,
    category: u64,
    extra: &'a str,
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(rename = "bid_dateTime", with = "timestamp")]
    bid_date_time: i64,
    #[serde(rename = "bid_extra")]
    bid_extra: &'a str,
}

impl Row for Q9Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let (a, b) = (&self.0, &self.1);
        serde_row(
            &Q9Fields {
                id: a.id,
                item_name: &a.item_name,
                description: &a.description,
                initial_bid: a.initial_bid,
                reserve: a.reserve,
                date_time: a.date_time,
                expires: a.expires,
                seller: a.seller,
                category: a.category,
                extra: &a.extra,
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                bid_date_time: b.date_time,
                bid_extra: &b.extra,
            },
            out,
        );
    }
}

#[operator]
fn q9_rows(winner: (Auction, Bid), out: &mut Collector<Q9Row>) {
    out.emit(Q9Row(winner.0, winner.1));
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
        name "nexmark-q9";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator auctions[p] = OnlyAuctions <- timed;
        operator bids[p] = OnlyBids <- timed;
        operator winners[p] = WinningBids::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &Bid| b.auction));
        operator rows[p] = Q9Rows <- winners;
        sink out[op] = output.sink::<Q9Row>() <- rows;
    }
}
