//! Q20, expand bid with auction: each bid joined with its auction, for
//! auctions of category 10; an unwindowed inner join that emits a pair as
//! soon as both sides are known (a bid read before its auction joins when the
//! auction arrives) and never retracts it. Both sides are kept for the whole
//! run, as the query asks: its state grows with the bids on category-10
//! auctions and with the bids whose auction has not been seen.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, OnlyAuctions, OnlyBids};
use crate::model::{Auction, Bid, timestamp};
use crate::sink::{Row, serde_row};

/// A Q20 row: a bid and its auction.
#[derive(Clone, Debug)]
pub struct Q20Row(pub Bid, pub Auction);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Q20Fields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: &'a str,
    url: &'a str,
    #[serde(rename = "bid_dateTime", with = "timestamp")]
    bid_date_time: i64,
    #[serde(rename = "bid_extra")]
    bid_extra: &'a str,
    item_name: &'a str,
    description: &'a str,
    initial_bid: u64,
    reserve: u64,
    #[serde(rename = "auction_dateTime", with = "timestamp")]
    auction_date_time: i64,
    #[serde(with = "timestamp")]
    expires: i64,
    seller: u64,
    category: u64,
    #[serde(rename = "auction_extra")]
    auction_extra: &'a str,
}

impl Row for Q20Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let (b, a) = (&self.0, &self.1);
        serde_row(
            &Q20Fields {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                channel: &b.channel,
                url: &b.url,
                bid_date_time: b.date_time,
                bid_extra: &b.extra,
                item_name: &a.item_name,
                description: &a.description,
                initial_bid: a.initial_bid,
                reserve: a.reserve,
                auction_date_time: a.date_time,
                expires: a.expires,
                seller: a.seller,
                category: a.category,
                auction_extra: &a.extra,
            },
            out,
        );
    }
}

#[operator]
fn category_ten(auction: Auction, out: &mut Collector<Auction>) {
    if auction.category == 10 {
        out.emit(auction);
    }
}

#[operator]
fn q20_rows(row: JoinRow<u64, Bid, Auction>, out: &mut Collector<Q20Row>) {
    if let (Some(bid), Some(auction)) = (row.left, row.right) {
        out.emit(Q20Row(bid, auction));
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = OnlyBids <- timed;
        operator auctions[parts.p] = OnlyAuctions <- timed;
        operator tens[parts.p] = CategoryTen <- auctions;
        operator joined[parts.p] = Join::inner().unwindowed()
            <- left(bids.key(|b: &Bid| b.auction)), right(tens.key(|a: &Auction| a.id));
        operator rows[parts.p] = Q20Rows <- joined;
    } => rows: Q20Row)
}
