//! Q4, average closing price per category: for each auction, the highest bid
//! whose `dateTime` lies in `[auction.dateTime, auction.expires]`; then, per
//! category, the average of those over the auctions that had any. At the end
//! of input, one row per category.
//!
//! An auction closes when event time passes its `expires` (a timer): no bid
//! within its range can arrive any more. Bids that arrive before their auction
//! wait for it, until event time passes them (an auction arriving later starts
//! after them).

use std::collections::BTreeMap;

use streamwork::core::hash::FastHashMap;
use streamwork::core::timer::Timers;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{OnlyAuctions, OnlyBids, timestamps};
use crate::model::{Auction, Bid};
use crate::sink::RowSink;
use crate::source::NexmarkSource;

/// What is known of one auction.
#[derive(Clone, Default)]
struct AuctionState {
    auction: Option<Auction>,
    best: Option<u64>,
    waiting: Vec<Bid>,
}

/// The closing price of each auction that had a bid in its range.
#[derive(Clone, Default)]
struct ClosingPrices {
    auctions: FastHashMap<u64, AuctionState>,
    timers: Timers<u64>,
}

fn in_range(auction: &Auction, bid: &Bid) -> bool {
    auction.date_time <= bid.date_time && bid.date_time <= auction.expires
}

impl CoOperator for ClosingPrices {
    type Left = Auction;
    type Right = Bid;
    type Key = ByKey<u64>;
    type Out = Collector<(u64, u64)>;
    type Time = EventTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Unchecked("the Nexmark queries run at most once")
    }

    fn on_left(&mut self, auction: Auction, _ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        let state = self.auctions.entry(auction.id).or_default();
        for bid in std::mem::take(&mut state.waiting) {
            if in_range(&auction, &bid) {
                state.best = state.best.max(Some(bid.price));
            }
        }
        self.timers.register_event(
            Timestamp::from_millis(auction.expires.saturating_add(1)),
            auction.id,
        );
        state.auction = Some(auction);
    }

    fn on_right(&mut self, bid: Bid, _ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        let state = self.auctions.entry(bid.auction).or_default();
        match &state.auction {
            Some(auction) => {
                if in_range(auction, &bid) {
                    state.best = state.best.max(Some(bid.price));
                }
            }
            None => {
                // Waits for its auction until event time passes it.
                self.timers.register_event(
                    Timestamp::from_millis(bid.date_time.saturating_add(1)),
                    bid.auction,
                );
                state.waiting.push(bid);
            }
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        let due: Vec<u64> = self
            .timers
            .fire_event(watermark)
            .map(|(_, id)| id)
            .collect();
        let now = watermark.millis();
        for id in due {
            let Some(state) = self.auctions.get_mut(&id) else {
                continue;
            };
            match &state.auction {
                Some(auction) if auction.expires < now => {
                    if let Some(best) = state.best {
                        out.emit_at(
                            (auction.category, best),
                            Timestamp::from_millis(auction.expires),
                        );
                    }
                    self.auctions.remove(&id);
                }
                Some(_) => {}
                None => {
                    state.waiting.retain(|bid| bid.date_time >= now);
                    if state.waiting.is_empty() {
                        self.auctions.remove(&id);
                    }
                }
            }
        }
    }
}

/// The running average closing price per category, emitted at the end.
#[derive(Clone, Default)]
struct CategoryAverages {
    totals: BTreeMap<u64, (u128, u64)>,
}

#[operator(at_most_once)]
impl CategoryAverages {
    fn on_record(
        &mut self,
        _category: CurrentKey<'_, u64>,
        closing: (u64, u64),
        _out: &mut Collector<String>,
    ) {
        let (sum, n) = self.totals.entry(closing.0).or_insert((0, 0));
        *sum += u128::from(closing.1);
        *n += 1;
    }

    fn on_end(&mut self, out: &mut Collector<String>) {
        for (category, (sum, n)) in &self.totals {
            out.emit(format!(
                "{{\"category\":{category},\"avg\":{}}}",
                sum / u128::from(*n)
            ));
        }
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
        name "nexmark-q4";
        source events[sp] = source;
        operator timed[sp] = timestamps(late) <- events;
        operator auctions[p] = OnlyAuctions <- timed.shuffle();
        operator bids[p] = OnlyBids <- timed.shuffle();
        operator closing[p] = ClosingPrices::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &Bid| b.auction));
        operator averages[p] = CategoryAverages::default() <- closing.key(|c: &(u64, u64)| c.0);
        sink out = sink <- averages.global();
    }
}
