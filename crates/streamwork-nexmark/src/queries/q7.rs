//! Q7, highest bid: per tumbling 10 s window, the bids whose price is the
//! window's maximum.
//!
//! Each auction's highest bids per window are found by a keyed tumbling window
//! (in parallel), then gathered by window to keep the overall maximum: the
//! usual two-phase form of a global aggregate.

use std::collections::BTreeMap;
use std::time::Duration;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::window::Aggregate;

use super::q0::BidRow;
use super::{JobParts, OnlyBids, timestamps};
use crate::model::Bid;

/// The highest price of a window and every bid at that price.
#[derive(Copy, Clone, Debug, Default)]
pub struct MaxTies;

impl Aggregate<Bid> for MaxTies {
    type Acc = (u64, Vec<Bid>);
    type Out = (u64, Vec<Bid>);

    fn create(&self) -> Self::Acc {
        (0, Vec::new())
    }

    fn add(&self, acc: &mut Self::Acc, bid: &Bid) {
        if bid.price > acc.0 || acc.1.is_empty() {
            acc.0 = bid.price;
            acc.1.clear();
        }
        if bid.price == acc.0 {
            acc.1.push(bid.clone());
        }
    }

    fn merge(&self, into: &mut Self::Acc, other: &Self::Acc) {
        for bid in &other.1 {
            self.add(into, bid);
        }
    }

    fn result(&self, acc: &Self::Acc) -> Self::Out {
        acc.clone()
    }
}

/// The overall highest bids of each window, from the per-auction ones.
#[derive(Clone, Default)]
struct HighestBids {
    windows: BTreeMap<i64, (u64, Vec<Bid>)>,
}

#[operator(event_time, at_most_once)]
impl HighestBids {
    fn on_record(
        &mut self,
        _window: CurrentKey<'_, i64>,
        best: WindowResult<u64, (u64, Vec<Bid>)>,
        _out: &mut Collector<BidRow>,
    ) {
        let slot = self
            .windows
            .entry(best.window.end.millis())
            .or_insert((0, Vec::new()));
        let (price, bids) = best.value;
        if price > slot.0 || slot.1.is_empty() {
            *slot = (price, Vec::new());
        }
        if price == slot.0 {
            slot.1.extend(bids);
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<BidRow>) {
        while let Some(entry) = self.windows.first_entry() {
            if *entry.key() > watermark.millis() {
                break;
            }
            for bid in entry.remove().1 {
                out.emit(BidRow(bid));
            }
        }
    }
}

pub(super) fn job(parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    let (
        op,
        JobParts {
            source,
            sp,
            p,
            late,
            output,
            ..
        },
    ) = (parts.sink_parallelism(), parts);
    job! {
        name "nexmark-q7";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator bids[p] = OnlyBids <- timed;
        operator best[p] { results, late } = Windows::tumbling(Duration::from_secs(10)).aggregate(MaxTies)
            <- bids.key(|bid: &Bid| bid.auction);
        operator highest[p] = HighestBids::default()
            <- best.results.key(|best: &WindowResult<u64, (u64, Vec<Bid>)>| best.window.start.millis());
        sink out[op] = output.sink::<BidRow>() <- highest;
        drop best.late;
    }
}
