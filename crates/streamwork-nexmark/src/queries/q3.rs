//! Q3, local item suggestion: auctions of category 10 joined with their
//! seller, a person in OR, ID or CA; an unwindowed inner join emitting as soon
//! as both sides are known (a person arriving after their auctions included).
//! Both sides are kept for the whole run, as the query asks.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyAuctions, OnlyPeople, timestamps};
use crate::model::{Auction, Person};
use crate::sink::RowSink;
use crate::source::NexmarkSource;

#[operator]
fn category_ten(auction: Auction, out: &mut Collector<Auction>) {
    if auction.category == 10 {
        out.emit(auction);
    }
}

#[operator]
fn west_coast(person: Person, out: &mut Collector<Person>) {
    if matches!(person.state.as_str(), "OR" | "ID" | "CA") {
        out.emit(person);
    }
}

#[derive(Serialize)]
struct Q3Row<'a> {
    name: &'a str,
    city: &'a str,
    state: &'a str,
    id: u64,
}

#[operator]
fn q3_rows(row: JoinRow<u64, Auction, Person>, out: &mut Collector<String>) {
    if let (Some(auction), Some(person)) = (row.left, row.right) {
        let row = Q3Row {
            name: &person.name,
            city: &person.city,
            state: &person.state,
            id: auction.id,
        };
        out.emit(serde_json::to_string(&row).unwrap_or_default());
    }
}

pub(super) fn job(
    source: NexmarkSource,
    sp: u32,
    p: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    job! {
        name "nexmark-q3";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator auctions[p] = OnlyAuctions <- timed.shuffle();
        operator people[p] = OnlyPeople <- timed.shuffle();
        operator tens[p] = CategoryTen <- auctions;
        operator sellers[p] = WestCoast <- people;
        operator joined[p] = Join::inner().unwindowed()
            <- left(tens.key(|a: &Auction| a.seller)), right(sellers.key(|p: &Person| p.id));
        operator rows[p] = Q3Rows <- joined;
        sink out = sink <- rows.global();
    }
}
