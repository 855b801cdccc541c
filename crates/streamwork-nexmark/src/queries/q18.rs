//! Q18, find last bid: per (bidder, auction), the bid with the greatest
//! `dateTime`; among bids with that same `dateTime`, the one read last.
//! Final rows.

use serde::Serialize;
use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, OnlyBids};
use crate::model::{Bid, timestamp};
use crate::sink::{Change, Row, serde_row};

/// A bid with its channel and URL: a q18 and q19 row.
#[derive(Clone, Debug)]
pub struct FullBidRow {
    /// The bid.
    pub bid: Bid,
    /// Its rank (q19).
    pub rank: Option<u8>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FullBidFields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: &'a str,
    url: &'a str,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
    #[serde(rename = "rank_number", skip_serializing_if = "Option::is_none")]
    rank_number: Option<u8>,
}

impl Row for FullBidRow {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.bid;
        serde_row(
            &FullBidFields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                channel: &bid.channel,
                url: &bid.url,
                date_time: bid.date_time,
                extra: &bid.extra,
                rank_number: self.rank,
            },
            out,
        );
    }
}

/// The last bid of each bidder on each auction, by bidder, emitted at
/// the end.
#[derive(Clone, Default, State)]
struct LastBids {
    last: KeyedState<u64, FastHashMap<u64, Bid>>,
    /// An update stream: a bid that becomes the last retracts the one it
    /// replaces.
    #[state(transient)]
    updates: bool,
}

#[operator]
impl LastBids {
    fn on_record(
        &mut self,
        bidder: CurrentKey<'_, u64>,
        bid: Bid,
        out: &mut Collector<Change<FullBidRow>>,
    ) {
        let later = |bid: &Bid| (bid.date_time, bid.seq);
        let row = |bid: Bid| FullBidRow { bid, rank: None };
        match self.last.get_or_default(bidder).entry(bid.auction) {
            std::collections::hash_map::Entry::Occupied(mut last) => {
                if later(&bid) > later(last.get()) {
                    let earlier = last.insert(bid);
                    if self.updates {
                        out.emit(Change::retract(row(earlier)));
                        out.emit(Change::insert(row(last.get().clone())));
                    }
                }
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                let last = slot.insert(bid);
                if self.updates {
                    out.emit(Change::insert(row(last.clone())));
                }
            }
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<FullBidRow>>) {
        let rows = self
            .last
            .drain()
            .flat_map(|(_, bids)| bids.into_values())
            .map(|bid| FullBidRow { bid, rank: None });
        Change::finals(self.updates, rows, out);
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = OnlyBids <- timed;
        operator last[parts.p] = LastBids { updates: parts.output.updates(), ..LastBids::default() }
            <- bids.key(|bid: &Bid| bid.bidder);
    } => last: Change<FullBidRow>)
}
