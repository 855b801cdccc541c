//! The Nexmark queries as Streamwork jobs. Every query reads [`Event`]s from a
//! [`NexmarkSource`], stamps them through the standard watermark (`dateTime -
//! 4 s`, late events dropped and counted where the input is read), and writes
//! JSON rows to a [`RowSink`](crate::sink::RowSink).

/// A query's job: the events stamped by [`timestamps`] (the stream named
/// between the bars), the query's own streams, and the last of them
/// (`$rows`, of `$row`s) written to the output:
///
/// ```ignore
/// query_job!(name, parts, |timed| {
///     operator rows[parts.p] = Q3Rows <- timed;
/// } => rows: Q3Row)
/// ```
macro_rules! query_job {
    ($name:expr, $parts:ident, |$timed:ident| { $($streams:tt)* } => $rows:ident: $row:ty) => {
        streamwork::job! {
            name $name;
            source events[$parts.sp] = $parts.source;
            operator $timed[$parts.sp] = $crate::queries::timestamps($parts.late) <- events;
            $($streams)*
            sink out[$parts.sink_p] = $parts.output.sink::<$row>() <- $rows;
        }
    };
}

mod daily;
mod q0;
mod q1;
mod q10;
mod q11;
mod q13;
mod q14;
mod q17;
mod q18;
mod q19;
mod q2;
mod q20;
mod q21;
mod q22;
mod q3;
mod q4;
mod q5;
mod q6;
mod q7;
mod q8;
mod q9;
mod side_input;
mod winning;

pub use side_input::{SideInput, SideInputError};

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::window::AssignWatermarks;

use crate::model::{Auction, Bid, Event, Person};
use crate::sink::{Row, RowOutput, serde_row};
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
    /// Average selling price by seller, over each seller's last 11 auctions.
    Q6,
    /// Highest bid of each tumbling 10 s window.
    Q7,
    /// New users who opened an auction in the same tumbling 10 s window.
    Q8,
    /// Winning bids: each auction with its winning bid.
    Q9,
    /// Bids with the partition fields (`dt`, `hm`) of a file-system log.
    Q10,
    /// User sessions: bids per bidder per session (10 s gap).
    Q11,
    /// Bids per bidder per tumbling 10 s window of event time.
    Q12,
    /// Bids joined with a bounded side input.
    Q13,
    /// Bids in euro within a range, with the time of day and a UDF.
    Q14,
    /// Bidding statistics per day.
    Q15,
    /// Bidding statistics per channel and day.
    Q16,
    /// Auction statistics per auction and day.
    Q17,
    /// The last bid of each bidder on each auction.
    Q18,
    /// The top 10 bids of each auction.
    Q19,
    /// Bids joined with their auction, for auctions of category 10.
    Q20,
    /// Bids with a channel id from the channel or the URL.
    Q21,
    /// Bids with the first three directories of their URL.
    Q22,
    /// Every event, in the input format (to generate inputs).
    Events,
}

impl Query {
    /// Every query of the suite, q0 to q22.
    pub const ALL: [Query; 23] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q6,
        Query::Q7,
        Query::Q8,
        Query::Q9,
        Query::Q10,
        Query::Q11,
        Query::Q12,
        Query::Q13,
        Query::Q14,
        Query::Q15,
        Query::Q16,
        Query::Q17,
        Query::Q18,
        Query::Q19,
        Query::Q20,
        Query::Q21,
        Query::Q22,
    ];
}

/// A query name that is none of the implemented ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownQuery(pub String);

impl fmt::Display for UnknownQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown query `{}`: expected q0 to q22, or events",
            self.0
        )
    }
}

impl std::error::Error for UnknownQuery {}

impl FromStr for Query {
    type Err = UnknownQuery;
    fn from_str(s: &str) -> Result<Self, UnknownQuery> {
        let lower = s.to_ascii_lowercase();
        if lower == "events" {
            return Ok(Query::Events);
        }
        let number = lower.strip_prefix('q').unwrap_or(&lower);
        number
            .parse::<usize>()
            .ok()
            .filter(|n| number == n.to_string())
            .and_then(|n| Query::ALL.get(n).copied())
            .ok_or_else(|| UnknownQuery(s.to_string()))
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Query::ALL.iter().position(|q| q == self) {
            Some(n) => write!(f, "q{n}"),
            None => f.write_str("events"),
        }
    }
}

/// How far apart in event time the generator's instances may get: the
/// windows of a query at parallelism above 1 hold what the fastest source
/// read beyond the slowest, so without a bound their state grows with the
/// run (measured: q5's peak RSS from 26 MiB at 5 M events to 46 MiB at 80 M
/// at parallelism 2; flat at 1).
pub const MAX_SOURCE_DRIFT: Duration = Duration::from_secs(2);

/// The event-time stamp of every query: `dateTime`, watermark `max - 4 s`,
/// late events dropped and counted into `late`; the instances of a
/// generated input aligned within [`MAX_SOURCE_DRIFT`] (one reader of a
/// file has nothing to align with).
pub fn timestamps(late: &LateCounter) -> AssignWatermarks<Event, fn(&Event) -> Timestamp> {
    fn at(event: &Event) -> Timestamp {
        Timestamp::from_millis(event.date_time())
    }
    Watermarks::bounded(OUT_OF_ORDERNESS)
        .drop_late(late.clone())
        .align(MAX_SOURCE_DRIFT)
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

/// The fields of a bid that the aggregating queries read: what crosses
/// their exchanges instead of the whole bid with its strings (a projection,
/// as a SQL planner pushes it down).
#[streamwork::state_data]
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BidFacts {
    /// Auction id.
    pub auction: u64,
    /// Bidder.
    pub bidder: u64,
    /// Price.
    pub price: u64,
    /// Event time.
    pub date_time: i64,
    /// Input position.
    pub seq: u64,
}

impl From<&Bid> for BidFacts {
    fn from(bid: &Bid) -> Self {
        BidFacts {
            auction: bid.auction,
            bidder: bid.bidder,
            price: bid.price,
            date_time: bid.date_time,
            seq: bid.seq,
        }
    }
}

/// Keeps the bids' [`BidFacts`].
#[operator]
pub fn to_bid_facts(event: Event, out: &mut Collector<BidFacts>) {
    if let Event::Bid(bid) = &event {
        out.emit(BidFacts::from(bid));
    }
}

/// Keeps the bids' auctions.
#[operator]
pub fn bid_auctions(event: Event, out: &mut Collector<u64>) {
    if let Event::Bid(bid) = &event {
        out.emit(bid.auction);
    }
}

/// Keeps the bids' bidders.
#[operator]
pub fn bid_bidders(event: Event, out: &mut Collector<u64>) {
    if let Event::Bid(bid) = &event {
        out.emit(bid.bidder);
    }
}

/// Keeps the people.
#[operator]
pub fn only_people(event: Event, out: &mut Collector<Person>) {
    if let Event::Person(person) = event {
        out.emit(person);
    }
}

/// What a query's job is built from.
pub struct JobParts<'a> {
    /// The events.
    pub source: NexmarkSource,
    /// Instances of the source (1 for a file: read in order).
    pub sp: u32,
    /// Instances of the query's operators.
    pub p: u32,
    /// Instances of the sink (see [`RowOutput::parallelism`]).
    pub sink_p: u32,
    /// Where late events are counted.
    pub late: &'a LateCounter,
    /// Where rows go.
    pub output: &'a RowOutput,
    /// q13's side input.
    pub side_input: Arc<SideInput>,
}

/// The job of a query that turns each event into rows alone, with no state
/// and no exchange: `events → timestamps → rows → sink`.
fn per_event<O, R>(name: String, rows: O, parts: JobParts<'_>) -> Result<JobGraph, GraphError>
where
    O: Operator<In = Event, Key = NoKey, Out = Collector<R>, Time = AnyTime>,
    R: Row,
{
    query_job!(name, parts, |timed| {
        operator rows[parts.p] = rows <- timed;
    } => rows: R)
}

/// A query's job.
pub fn job(query: Query, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    let name = format!("nexmark-{query}");
    match query {
        Query::Q0 => per_event(name, q0::Q0Rows, parts),
        Query::Q1 => per_event(name, q1::Q1Rows, parts),
        Query::Q2 => per_event(name, q2::Q2Rows, parts),
        Query::Q3 => q3::job(name, parts),
        Query::Q4 => q4::job(name, parts),
        Query::Q5 => q5::job(name, parts),
        Query::Q6 => q6::job(name, parts),
        Query::Q7 => q7::job(name, parts),
        Query::Q8 => q8::job(name, parts),
        Query::Q9 => q9::job(name, parts),
        Query::Q10 => per_event(name, q10::Q10Rows, parts),
        Query::Q11 => q11::job(
            name,
            Windows::session(Duration::from_secs(10)).count(),
            parts,
        ),
        Query::Q12 => q11::job(
            name,
            Windows::tumbling(Duration::from_secs(10)).count(),
            parts,
        ),
        Query::Q13 => {
            let side = parts.side_input.clone();
            per_event(name, q13::JoinSideInput { side }, parts)
        }
        Query::Q14 => per_event(name, q14::Q14Rows, parts),
        Query::Q15 => daily::job(name, false, parts),
        Query::Q16 => daily::job(name, true, parts),
        Query::Q17 => q17::job(name, parts),
        Query::Q18 => q18::job(name, parts),
        Query::Q19 => q19::job(name, parts),
        Query::Q20 => q20::job(name, parts),
        Query::Q21 => per_event(name, q21::Q21Rows, parts),
        Query::Q22 => per_event(name, q22::Q22Rows, parts),
        Query::Events => job! {
            name name;
            source events[parts.sp] = parts.source;
            operator timed[parts.sp] = timestamps(parts.late) <- events;
            sink out = parts.output.sink::<Event>() <- timed.global();
        },
    }
}

impl Row for Event {
    fn write_json(&self, out: &mut Vec<u8>) {
        serde_row(self, out);
    }
}
