//! Q7, highest bid: per tumbling 10 s window, the bids whose price is the
//! window's maximum.
//!
//! The usual two-phase form of a global aggregate: each instance keeps the
//! highest bids of each window among the bids it reads (no exchange of
//! bids), and hands them on when event time passes the window's end; the
//! candidates of a window are then gathered, keyed by the window, to keep
//! the overall maximum.

use std::collections::BTreeMap;

use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::JobParts;
use super::q0::BidRow;
use crate::model::{Bid, Event};

/// Window size.
const WINDOW: i64 = 10_000;

/// A window's highest bids among those one instance read: (window start,
/// price, bids).
type Candidates = (i64, u64, Vec<Bid>);

/// Adds the bids of `bids` at `price` to a window's `(price, bids)`, keeping
/// the highest.
fn keep_highest(slot: &mut (u64, Vec<Bid>), price: u64, bids: impl IntoIterator<Item = Bid>) {
    if price > slot.0 || slot.1.is_empty() {
        slot.0 = price;
        slot.1.clear();
    }
    if price == slot.0 {
        slot.1.extend(bids);
    }
}

/// This instance's highest bids per window (a partial result of this
/// instance's input alone, so checkpointed with the instance).
#[derive(Clone, Default, State)]
struct LocalHighest {
    windows: InstanceState<BTreeMap<i64, (u64, Vec<Bid>)>>,
}

#[operator(event_time)]
impl LocalHighest {
    fn on_record(&mut self, event: Event, _out: &mut Collector<Candidates>) {
        let Event::Bid(bid) = event else { return };
        let start = bid.date_time.div_euclid(WINDOW) * WINDOW;
        let slot = self.windows.entry(start).or_insert((0, Vec::new()));
        if bid.price >= slot.0 || slot.1.is_empty() {
            keep_highest(slot, bid.price, [bid]);
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<Candidates>) {
        while let Some(entry) = self.windows.first_entry() {
            let start = *entry.key();
            if start + WINDOW > watermark.millis() {
                break;
            }
            let (price, bids) = entry.remove();
            out.emit_at(
                (start, price, bids),
                Timestamp::from_millis(start + WINDOW - 1),
            );
        }
    }
}

/// The overall highest bids of each window, from each instance's, by the
/// window's start.
#[derive(Clone, Default, State)]
struct HighestBids {
    windows: KeyedState<i64, (u64, Vec<Bid>)>,
}

#[operator(event_time)]
impl HighestBids {
    fn on_record(
        &mut self,
        window: CurrentKey<'_, i64>,
        candidates: Candidates,
        _out: &mut Collector<BidRow>,
    ) {
        let (_, price, bids) = candidates;
        keep_highest(self.windows.get_or_default(window), price, bids);
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<BidRow>) {
        // A few windows are open at a time: the ended ones, in order.
        let mut ended: Vec<i64> = self
            .windows
            .iter()
            .map(|(&start, _)| start)
            .filter(|start| start + WINDOW <= watermark.millis())
            .collect();
        ended.sort_unstable();
        for start in ended {
            for bid in self
                .windows
                .remove_held(&start)
                .map(|w| w.1)
                .unwrap_or_default()
            {
                out.emit(BidRow(bid));
            }
        }
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    query_job!(name, parts, |timed| {
        operator local[parts.p] = LocalHighest::default() <- timed;
        operator highest[parts.p] = HighestBids::default()
            <- local.key(|candidates: &Candidates| candidates.0);
    } => highest: BidRow)
}
