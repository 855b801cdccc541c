//! Q5, hot items: per sliding window of 10 s every 2 s, the auctions with the
//! most bids (all of them on a tie).
//!
//! Bids are counted per auction and window by a keyed sliding window (on
//! slices); the counts of a window are then gathered, keyed by the window, by
//! an event-time operator that picks the maximum once event time passes the
//! window's end, when every count of the window has arrived.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{BidAuctions, JobParts};
use crate::model::timestamp;
use crate::sink::serde_rows;

/// A Q5 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q5Row {
    auction: u64,
    num: u64,
    #[serde(with = "timestamp")]
    window_start: i64,
    #[serde(with = "timestamp")]
    window_end: i64,
}

serde_rows!(Q5Row);

/// The auctions of each window with the highest bid count, by the
/// window's start: `(end, count, auctions)`.
#[derive(Clone, Default, State)]
struct HotItems {
    windows: KeyedState<i64, (i64, u64, Vec<u64>)>,
}

#[operator(event_time)]
impl HotItems {
    fn on_record(
        &mut self,
        window: CurrentKey<'_, i64>,
        count: WindowResult<u64, u64>,
        _out: &mut Collector<Q5Row>,
    ) {
        let (end, max, auctions) = self.windows.get_or_default(window);
        *end = count.window.end.millis();
        if count.value > *max {
            *max = count.value;
            auctions.clear();
        }
        if count.value == *max {
            auctions.push(count.key);
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<Q5Row>) {
        // A few windows are open at a time: the ended ones, in order.
        let ended: BTreeMap<i64, i64> = self
            .windows
            .iter()
            .filter(|(_, (end, ..))| *end <= watermark.millis())
            .map(|(&start, &(end, ..))| (start, end))
            .collect();
        for (start, end) in ended {
            let Some((_, num, auctions)) = self.windows.remove_held(&start) else {
                continue;
            };
            for auction in auctions {
                out.emit(Q5Row {
                    auction,
                    num,
                    window_start: start,
                    window_end: end,
                });
            }
        }
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = BidAuctions <- timed;
        operator counts[parts.p] { results, late } = Windows::sliding(Duration::from_secs(10), Duration::from_secs(2)).count()
            <- bids.key(|auction: &u64| *auction);
        operator hot[parts.p] = HotItems::default()
            <- counts.results.key(|count: &WindowResult<u64, u64>| count.window.start.millis());
        drop counts.late;
    } => hot: Q5Row)
}
