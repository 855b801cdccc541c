//! Q10, log to file system: every bid with the partition fields Flink's job
//! writes it under, `dt` (`YYYY-MM-DD`) and `hm` (`HH:MM`, 24-hour clock).

use serde::Serialize;
use streamwork::prelude::*;

use super::q0::BidFields;
use crate::model::{Bid, Event};
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
struct Q10Fields<'a> {
    #[serde(flatten)]
    bid: BidFields<'a>,
    dt: String,
    hm: String,
}

impl Row for Q10Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        serde_row(
            &Q10Fields {
                bid: BidFields::from(&self.bid),
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
