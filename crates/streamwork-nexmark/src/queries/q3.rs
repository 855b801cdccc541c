//! Q3, local item suggestion: auctions of category 10 joined with their
//! seller, a person in OR, ID or CA; an unwindowed inner join emitting as soon
//! as both sides are known (a person arriving after their auctions included).
//! Both sides are kept for the whole run, as the query asks.

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, OnlyAuctions, OnlyPeople};
use crate::model::{Auction, Person};
use crate::sink::serde_rows;
use crate::text::Text;

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

/// A Q3 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q3Row {
    name: Text,
    city: Text,
    state: Text,
    id: u64,
}

serde_rows!(Q3Row);

#[operator]
fn q3_rows(row: JoinRow<u64, Auction, Person>, out: &mut Collector<Q3Row>) {
    if let (Some(auction), Some(person)) = (row.left, row.right) {
        out.emit(Q3Row {
            name: person.name,
            city: person.city,
            state: person.state,
            id: auction.id,
        });
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator auctions[parts.p] = OnlyAuctions <- timed;
        operator people[parts.p] = OnlyPeople <- timed;
        operator tens[parts.p] = CategoryTen <- auctions;
        operator sellers[parts.p] = WestCoast <- people;
        operator joined[parts.p] = Join::inner().unwindowed()
            <- left(tens.key(|a: &Auction| a.seller)), right(sellers.key(|p: &Person| p.id));
        operator rows[parts.p] = Q3Rows <- joined;
    } => rows: Q3Row)
}
