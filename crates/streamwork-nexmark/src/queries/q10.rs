//! Q10, log to file system: every bid with the partition fields Flink's job
//! writes it under, `dt` (`YYYY-MM-DD`) and `hm` (`HH:MM`, 24-hour clock).

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Bid, Event, timestamp};
use crate::sink::{Row, serde_row};
use crate::time::{day_number, format_day, format_minute, minute_of_day};

/// A Q10 row: the bid, its day and its minute of the day.
#[derive(Clone, Debug)]
pub struct Q10Row {
    bid: Bid,
    day: i64,
    minute: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Q10Fields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    #[serde(with = "timestamp")]
    date_time: i64,
    extra: &'a str,
    dt: String,
    hm: String,
}

impl Row for Q10Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.bid;
        serde_row(
            &Q10Fields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                date_time: bid.date_time,
                extra: &bid.extra,
                dt: format_day(self.day),
                hm: format_minute(self.minute),
            },
            out,
        );
    }
}

#[operator]
pub(super) fn q10_rows(event: Event, out: &mut Collector<Q10Row>) {
    if let Event::Bid(bid) = event {
        let (day, minute) = (day_number(bid.date_time), minute_of_day(bid.date_time));
        out.emit(Q10Row { bid, day, minute });
    }
}
