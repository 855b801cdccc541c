//! Q8, monitor new users: per tumbling 10 s window, the people whose
//! `dateTime` falls in the window and who sell at least one auction whose
//! `dateTime` falls in the same window; each such person once per window: a
//! windowed semi join of people with auctions, on person id = seller.

use std::time::Duration;

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{JobParts, OnlyAuctions, OnlyPeople};
use crate::model::{Auction, Person, timestamp};
use crate::sink::serde_rows;
use crate::text::Text;

const WINDOW: i64 = 10_000;

/// A Q8 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q8Row {
    id: u64,
    name: Text,
    #[serde(with = "timestamp")]
    starttime: i64,
}

serde_rows!(Q8Row);

#[operator(stateless)]
impl Q8Rows {
    fn on_record(&self, row: JoinRow<u64, Person, Auction>, out: &mut Collector<Q8Row>) {
        let Some(person) = row.left else { return };
        out.emit(Q8Row {
            id: person.id,
            name: person.name,
            starttime: person.date_time.div_euclid(WINDOW) * WINDOW,
        });
    }
}

/// Formats the semi join's people as result rows.
#[derive(Clone, Copy, Default)]
struct Q8Rows;

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator people[parts.p] = OnlyPeople <- timed;
        operator auctions[parts.p] = OnlyAuctions <- timed;
        operator sellers[parts.p] = Join::semi().tumbling(Duration::from_millis(WINDOW as u64))
            <- left(people.key(|p: &Person| p.id)), right(auctions.key(|a: &Auction| a.seller));
        operator rows[parts.p] = Q8Rows <- sellers;
    } => rows: Q8Row)
}
