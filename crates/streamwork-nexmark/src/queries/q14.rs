//! Q14, calculation: bids whose euro price `0.908 * price` lies strictly
//! between 1,000,000 and 50,000,000 (exactly: `10^9 < 908 * price < 5 *
//! 10^10`), with that price as an exact decimal, the time of day
//! (`bidTimeType`) and the number of `c` in `extra` (Flink's `count_char`).

use streamwork::prelude::*;

use crate::model::{Bid, Event};
use crate::sink::Row;
use crate::time::{format, hour_of_day};

/// The time of day of a bid.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BidTimeType {
    /// 8 to 18 h.
    Day,
    /// 0 to 6 h and 20 to 23 h.
    Night,
    /// 7 and 19 h.
    Other,
}

impl BidTimeType {
    /// The time of day of an hour, 0 to 23.
    pub fn of_hour(hour: u8) -> Self {
        match hour {
            8..=18 => BidTimeType::Day,
            0..=6 | 20..=23 => BidTimeType::Night,
            _ => BidTimeType::Other,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BidTimeType::Day => "dayTime",
            BidTimeType::Night => "nightTime",
            BidTimeType::Other => "otherTime",
        }
    }
}

/// A Q14 row.
#[derive(Clone, Debug)]
pub struct Q14Row {
    bid: Bid,
    /// `908 * price`: the euro price in thousandths.
    milli_euro: u128,
    time_type: BidTimeType,
    c_counts: u64,
}

impl Row for Q14Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let bid = &self.bid;
        let _ = write!(
            out,
            "{{\"auction\":{},\"bidder\":{},\"price\":{}.{:03},\"bidTimeType\":\"{}\",\"dateTime\":\"{}\",\"extra\":",
            bid.auction,
            bid.bidder,
            self.milli_euro / 1000,
            self.milli_euro % 1000,
            self.time_type.name(),
            format(bid.date_time),
        );
        crate::sink::serde_row(&bid.extra, out);
        let _ = write!(out, ",\"c_counts\":{}}}", self.c_counts);
    }
}

/// The number of bytes `c` (U+0063) in `text`.
pub fn count_c(text: &str) -> u64 {
    text.bytes().filter(|&b| b == b'c').count() as u64
}

#[operator]
pub(super) fn q14_rows(event: Event, out: &mut Collector<Q14Row>) {
    if let Event::Bid(bid) = event {
        let milli_euro = 908 * u128::from(bid.price);
        if 1_000_000_000 < milli_euro && milli_euro < 50_000_000_000 {
            let time_type = BidTimeType::of_hour(hour_of_day(bid.date_time));
            let c_counts = count_c(&bid.extra);
            out.emit(Q14Row {
                bid,
                milli_euro,
                time_type,
                c_counts,
            });
        }
    }
}
