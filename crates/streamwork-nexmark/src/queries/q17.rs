//! Q17, auction statistics report: per auction and day, the bids in total
//! and per price rank, and the minimum, maximum, integer average and sum of
//! their prices; final rows.

use std::io::Write;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::daily::price_rank;
use super::{BidFacts, JobParts, ToBidFacts};
use crate::sink::{Change, Row};
use crate::time::{day_number, format_day};

/// One auction's bids on one day.
#[streamwork::state_data]
#[derive(Clone, Debug)]
pub struct Q17Row {
    auction: u64,
    day: i64,
    /// Total and per rank.
    bids: [u64; 4],
    min: u64,
    max: u64,
    sum: u128,
}

impl Row for Q17Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"day\":\"{}\",\"total_bids\":{},\"rank1_bids\":{},\"rank2_bids\":{},\"rank3_bids\":{},\"min_price\":{},\"max_price\":{},\"avg_price\":{},\"sum_price\":{}}}",
            self.auction,
            format_day(self.day),
            self.bids[0],
            self.bids[1],
            self.bids[2],
            self.bids[3],
            self.min,
            self.max,
            self.sum / u128::from(self.bids[0].max(1)),
            self.sum,
        );
    }
}

/// The statistics of each auction, per day (an auction's bids span a
/// day or two), emitted at the end.
#[derive(Clone, Default, State)]
struct AuctionDays {
    groups: KeyedState<u64, Vec<Q17Row>>,
    /// An update stream: each bid retracts its group's old row and inserts
    /// the new.
    #[state(transient)]
    updates: bool,
}

#[operator]
impl AuctionDays {
    fn on_record(
        &mut self,
        auction: CurrentKey<'_, u64>,
        bid: BidFacts,
        out: &mut Collector<Change<Q17Row>>,
    ) {
        let day = day_number(bid.date_time);
        let days = self.groups.get_or_default(auction);
        let at = match days.iter().position(|row| row.day == day) {
            Some(at) => at,
            None => {
                days.push(Q17Row {
                    auction: bid.auction,
                    day,
                    bids: [0; 4],
                    min: u64::MAX,
                    max: 0,
                    sum: 0,
                });
                days.len() - 1
            }
        };
        let row = &mut days[at];
        if self.updates && row.bids[0] > 0 {
            out.emit(Change::retract(row.clone()));
        }
        row.bids[0] += 1;
        row.bids[price_rank(bid.price)] += 1;
        row.min = row.min.min(bid.price);
        row.max = row.max.max(bid.price);
        row.sum += u128::from(bid.price);
        if self.updates {
            out.emit(Change::insert(row.clone()));
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<Q17Row>>) {
        let rows = self.groups.drain().flat_map(|(_, days)| days);
        Change::finals(self.updates, rows, out);
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = ToBidFacts <- timed;
        operator days[parts.p] = AuctionDays { updates: parts.output.updates(), ..AuctionDays::default() }
            <- bids.key(|bid: &BidFacts| bid.auction);
    } => days: Change<Q17Row>)
}
