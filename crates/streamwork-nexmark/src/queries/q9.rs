//! Q9, winning bids: each auction that has a winning bid, with that bid
//! ([`WinningBids`]: the highest price in the auction's time range, ties to
//! the earliest `dateTime`, then to the bid read first). An auction's row is
//! final when event time passes its `expires`, so it is emitted then.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::BidFacts;
use super::winning::RankedBid;
use super::winning::WinningBids;
use super::{JobParts, OnlyAuctions};
use crate::model::{Auction, Event, timestamp};
use crate::sink::{Row, serde_row};
use crate::text::Text;

/// What q9 reads of a bid: its facts and its `extra`.
#[streamwork::state_data]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WinnerBid {
    facts: BidFacts,
    extra: Text,
}

impl RankedBid for WinnerBid {
    fn auction(&self) -> u64 {
        self.facts.auction
    }
    fn price(&self) -> u64 {
        self.facts.price
    }
    fn date_time(&self) -> i64 {
        self.facts.date_time
    }
    fn seq(&self) -> u64 {
        self.facts.seq
    }
}

#[operator]
fn winner_bids(event: Event, out: &mut Collector<WinnerBid>) {
    if let Event::Bid(bid) = event {
        out.emit(WinnerBid {
            facts: BidFacts::from(&bid),
            extra: bid.extra,
        });
    }
}

/// A Q9 row: an auction and its winning bid.
#[derive(Clone, Debug)]
pub struct Q9Row(pub Auction, pub WinnerBid);

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
                auction: b.facts.auction,
                bidder: b.facts.bidder,
                price: b.facts.price,
                bid_date_time: b.facts.date_time,
                bid_extra: &b.extra,
            },
            out,
        );
    }
}

#[operator]
fn q9_rows(winner: (Auction, WinnerBid), out: &mut Collector<Q9Row>) {
    out.emit(Q9Row(winner.0, winner.1));
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator auctions[parts.p] = OnlyAuctions <- timed;
        operator bids[parts.p] = WinnerBids <- timed;
        operator winners[parts.p] = WinningBids::<WinnerBid>::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &WinnerBid| b.facts.auction));
        operator rows[parts.p] = Q9Rows <- winners;
    } => rows: Q9Row)
}
