//! The Nexmark queries as Streamwork jobs. Every query reads [`Event`]s from a
//! [`NexmarkSource`], stamps them through the standard watermark (`dateTime -
//! 4 s`, late events dropped and counted where the input is read), and writes
//! JSON rows to a [`RowSink`].

mod q0;
mod q1;
mod q2;
mod q3;
mod q4;
mod q5;
mod q7;
mod q8;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::window::AssignWatermarks;

use crate::model::{Auction, Bid, Event, Person};
use crate::sink::RowSink;
use crate::source::NexmarkSource;

/// How far events may be out of order: the standard watermark is `dateTime - 4 s`.
pub const OUT_OF_ORDERNESS: Duration = Duration::from_secs(4);

/// A Nexmark query.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// Pass-through of bids.
    Q0,
    /// Bids in euro.
    Q1,
    /// Bids on auctions `id % 123 == 0`.
    Q2,
    /// Local item suggestion: category 10 auctions with their west-coast sellers.
    Q3,
    /// Average closing price per category.
    Q4,
    /// Hot items: the most bid-on auctions of sliding 10 s windows.
    Q5,
    /// Highest bid of each tumbling 10 s window.
    Q7,
    /// New users who opened an auction in the same tumbling 10 s window.
    Q8,
    /// Every event, in the input format (to generate inputs).
    Events,
}

/// A query name that is none of the implemented ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownQuery(pub String);

impl fmt::Display for UnknownQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown query `{}`: expected q0, q1, q2, q3, q4, q5, q7, q8 or events",
            self.0
        )
    }
}

impl std::error::Error for UnknownQuery {}

impl FromStr for Query {
    type Err = UnknownQuery;
    fn from_str(s: &str) -> Result<Self, UnknownQuery> {
        match s.to_ascii_lowercase().as_str() {
            "q0" | "0" => Ok(Query::Q0),
            "q1" | "1" => Ok(Query::Q1),
            "q2" | "2" => Ok(Query::Q2),
            "q3" | "3" => Ok(Query::Q3),
            "q4" | "4" => Ok(Query::Q4),
            "q5" | "5" => Ok(Query::Q5),
            "q7" | "7" => Ok(Query::Q7),
            "q8" | "8" => Ok(Query::Q8),
            "events" => Ok(Query::Events),
            other => Err(UnknownQuery(other.to_string())),
        }
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Events => "events",
        })
    }
}

/// The event-time stamp of every query: `dateTime`, watermark `max - 4 s`,
/// late events dropped and counted into `late`.
pub fn timestamps(late: &LateCounter) -> AssignWatermarks<Event, fn(&Event) -> Timestamp> {
    fn at(event: &Event) -> Timestamp {
        Timestamp::from_millis(event.date_time())
    }
    Watermarks::bounded(OUT_OF_ORDERNESS)
        .drop_late(late.clone())
        .timestamps(at as fn(&Event) -> Timestamp)
}

/// Keeps the bids.
#[operator]
pub fn only_bids(event: Event, out: &mut Collector<Bid>) {
    if let Event::Bid(bid) = event {
        out.emit(bid);
    }
}

/// Keeps the auctions.
#[operator]
pub fn only_auctions(event: Event, out: &mut Collector<Auction>) {
    if let Event::Auction(auction) = event {
        out.emit(auction);
    }
}

/// Keeps the people.
#[operator]
pub fn only_people(event: Event, out: &mut Collector<Person>) {
    if let Event::Person(person) = event {
        out.emit(person);
    }
}

/// A query's job: `source` at `source_parallelism`, the query at `parallelism`.
pub fn job(
    query: Query,
    source: NexmarkSource,
    source_parallelism: u32,
    parallelism: u32,
    late: &LateCounter,
    sink: RowSink,
) -> Result<JobGraph, GraphError> {
    match query {
        Query::Q0 => q0::job(source, source_parallelism, parallelism, late, sink),
        Query::Q1 => q1::job(source, source_parallelism, parallelism, late, sink),
        Query::Q2 => q2::job(source, source_parallelism, parallelism, late, sink),
        Query::Q3 => q3::job(source, source_parallelism, parallelism, late, sink),
        Query::Q4 => q4::job(source, source_parallelism, parallelism, late, sink),
        Query::Q5 => q5::job(source, source_parallelism, parallelism, late, sink),
        Query::Q7 => q7::job(source, source_parallelism, parallelism, late, sink),
        Query::Q8 => q8::job(source, source_parallelism, parallelism, late, sink),
        Query::Events => {
            let to_json = Arc::new(|event: &Event| event.to_json());
            job! {
                name "nexmark-events";
                source events[source_parallelism] = source;
                operator timed[source_parallelism] = timestamps(late) <- events;
                operator rows[source_parallelism] = ToRows(to_json) <- timed;
                sink out = sink <- rows.global();
            }
        }
    }
}

/// Formats records as JSON rows.
pub struct ToRows<T>(pub Arc<dyn Fn(&T) -> String + Send + Sync>);

impl<T> Clone for ToRows<T> {
    fn clone(&self) -> Self {
        ToRows(self.0.clone())
    }
}

impl<T: Data> Operator for ToRows<T> {
    type In = T;
    type Key = NoKey;
    type Out = Collector<String>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<String>>) {
        ctx.emit((self.0)(&value));
    }
}
