//! Q8, monitor new users: per tumbling 10 s window, the people whose
//! `dateTime` falls in the window and who sell at least one auction whose
//! `dateTime` falls in the same window; each such person once per window: a
//! windowed semi join of people with auctions, on person id = seller.

use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyAuctions, OnlyPeople, timestamps};
use crate::model::{Auction, Person};
use crate::sink::RowSink;
use crate::source::NexmarkSource;
use crate::time::format;

const WINDOW: i64 = 10_000;

#[operator(stateless)]
impl Q8Rows {
    fn on_record(&mut self, row: JoinRow<u64, Person, Auction>, out: &mut Collector<String>) {
        let Some(person) = row.left else { return };
        // A window's results are stamped with its last instant.
        let start = person.date_time.div_euclid(WINDOW) * WINDOW;
        let name = serde_json::to_string(&person.name).unwrap_or_default();
        out.emit(format!(
            "{{\"id\":{},\"name\":{name},\"starttime\":\"{}\"}}",
            person.id,
            format(start)
        ));
    }
}

/// Formats the semi join's people as result rows.
#[derive(Clone, Copy, Default)]
struct Q8Rows;

pub(super) fn job(
    source: NexmarkSource,
    sp: u32,
    p: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    job! {
        name "nexmark-q8";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator people[p] = OnlyPeople <- timed.shuffle();
        operator auctions[p] = OnlyAuctions <- timed.shuffle();
        operator sellers[p] = Join::semi().tumbling(Duration::from_millis(WINDOW as u64))
            <- left(people.key(|p: &Person| p.id)), right(auctions.key(|a: &Auction| a.seller));
        operator rows[p] = Q8Rows <- sellers;
        sink out = sink <- rows.global();
    }
}
