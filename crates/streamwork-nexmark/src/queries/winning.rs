//! The winning bid of each auction (the core of q4, q6 and q9): among the
//! bids on it whose `dateTime` lies in `[auction.dateTime, auction.expires]`,
//! the highest price; among equal prices the earliest `dateTime`, then the
//! one read first.
//!
//! An auction closes when event time passes its `expires` (a timer): no bid
//! within its range can arrive any more, since a bid read later is either
//! late or at least the watermark. Bids that arrive before their auction
//! wait for it until event time passes them (an auction read later starts
//! after them).

use std::cmp::Reverse;

use streamwork::core::timer::Timers;
use streamwork::prelude::*;
use streamwork::state::{OperatorState, StateData};

use streamwork::runtime::GraphError;

use super::{BidFacts, JobParts, OnlyAuctions, ToBidFacts};
use crate::model::{Auction, Bid};
use crate::sink::{Change, Row};

/// What the winning-bid rule reads of a bid: a whole [`Bid`] (q9 emits
/// it) or its [`BidFacts`] (q4 and q6 need no more).
pub trait RankedBid: Data + Sync {
    /// The auction bid on.
    fn auction(&self) -> u64;
    /// The price.
    fn price(&self) -> u64;
    /// Event time.
    fn date_time(&self) -> i64;
    /// Input position.
    fn seq(&self) -> u64;
}

/// `RankedBid` for types with the fields of its name.
macro_rules! ranked_bid_fields {
    ($($bid:ty),*) => {$(
        impl RankedBid for $bid {
            fn auction(&self) -> u64 {
                self.auction
            }
            fn price(&self) -> u64 {
                self.price
            }
            fn date_time(&self) -> i64 {
                self.date_time
            }
            fn seq(&self) -> u64 {
                self.seq
            }
        }
    )*};
}

ranked_bid_fields!(Bid, BidFacts);

/// What is known of one auction.
#[streamwork::state_data]
#[derive(Clone)]
pub struct AuctionState<B> {
    auction: Option<Auction>,
    best: Option<B>,
    waiting: Vec<B>,
}

impl<B> Default for AuctionState<B> {
    fn default() -> Self {
        AuctionState {
            auction: None,
            best: None,
            waiting: Vec::new(),
        }
    }
}

/// Whether `bid` beats `best` under the winning-bid rule.
fn beats<B: RankedBid>(bid: &B, best: &B) -> bool {
    let rank = |b: &B| (b.price(), Reverse(b.date_time()), Reverse(b.seq()));
    rank(bid) > rank(best)
}

fn in_range<B: RankedBid>(auction: &Auction, bid: &B) -> bool {
    auction.date_time <= bid.date_time() && bid.date_time() <= auction.expires
}

impl<B: RankedBid> AuctionState<B> {
    fn offer(&mut self, bid: B) {
        if self.best.as_ref().is_none_or(|best| beats(&bid, best)) {
            self.best = Some(bid);
        }
    }
}

/// Emits each auction that has a winning bid, with that bid, once event
/// time passes the auction's `expires` (stamped at `expires`). Keyed by the
/// auction id on both inputs. Its auctions are checkpointed by key group;
/// its timers are not, as each follows from an auction's state (see
/// [`timer_of`]) and a restore sets them again.
#[derive(Clone, State)]
pub struct WinningBids<B: StateData + Clone + Send + Sync + 'static> {
    auctions: KeyedState<u64, AuctionState<B>>,
    #[state(transient)]
    timers: Timers<u64>,
}

impl<B: StateData + Clone + Send + Sync + 'static> Default for WinningBids<B> {
    fn default() -> Self {
        WinningBids {
            auctions: KeyedState::new(),
            timers: Timers::new(),
        }
    }
}

/// When event time must next look at an auction's state: after its
/// auction expires, or, for bids waiting for an auction not read yet,
/// after the earliest of them.
fn timer_of<B: RankedBid>(state: &AuctionState<B>) -> Option<Timestamp> {
    let at = match &state.auction {
        Some(auction) => auction.expires,
        None => state.waiting.iter().map(RankedBid::date_time).min()?,
    };
    Some(Timestamp::from_millis(at.saturating_add(1)))
}

impl<B: RankedBid + StateData> Operator for WinningBids<B> {
    type In = Either<Auction, B>;
    type Key = ByKey<u64>;
    type Out = Collector<(Auction, B)>;
    type Time = EventTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.snapshot_state(ctx)
            .map(Some)
            .map_err(|e| TaskError::Snapshot(e.to_string()))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        self.restore_state(restore)
            .map_err(|e| TaskError::Restore(e.to_string()))?;
        self.timers = Timers::new();
        for (&id, state) in self.auctions.iter() {
            if let Some(at) = timer_of(state) {
                self.timers.register_event(at, id);
            }
        }
        Ok(())
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        match record {
            Either::Left(auction) => {
                let state = self.auctions.get_or_default(ctx.key());
                for bid in std::mem::take(&mut state.waiting) {
                    if in_range(&auction, &bid) {
                        state.offer(bid);
                    }
                }
                self.timers.register_event(
                    Timestamp::from_millis(auction.expires.saturating_add(1)),
                    auction.id,
                );
                state.auction = Some(auction);
            }
            Either::Right(bid) => {
                let state = self.auctions.get_or_default(ctx.key());
                match &state.auction {
                    Some(auction) => {
                        if in_range(auction, &bid) {
                            state.offer(bid);
                        }
                    }
                    None => {
                        // Waits for its auction until event time passes it.
                        self.timers.register_event(
                            Timestamp::from_millis(bid.date_time().saturating_add(1)),
                            bid.auction(),
                        );
                        state.waiting.push(bid);
                    }
                }
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
            let Some(state) = self.auctions.get_mut_held(&id) else {
                continue;
            };
            match &state.auction {
                Some(auction) if auction.expires < now => {
                    if let Some(state) = self.auctions.remove_held(&id)
                        && let (Some(auction), Some(best)) = (state.auction, state.best)
                    {
                        let at = Timestamp::from_millis(auction.expires);
                        out.emit_at((auction, best), at);
                    }
                }
                Some(_) => {}
                None => {
                    state.waiting.retain(|bid| bid.date_time() >= now);
                    match timer_of(state) {
                        // Bids still wait (their own timers may have been
                        // merged into one by a restore).
                        Some(at) => {
                            self.timers.register_event(at, id);
                        }
                        None => {
                            self.auctions.remove_held(&id);
                        }
                    }
                }
            }
        }
    }
}

/// The job of q4 and q6: each auction's winning bid, made a `(key, value)`
/// pair by `pair`, and `averages` by that key (q4's by category, q6's by
/// seller).
pub(super) fn winner_averages<M, V, A, R>(
    name: String,
    parts: JobParts<'_>,
    pair: M,
    averages: A,
) -> Result<JobGraph, GraphError>
where
    M: Operator<In = (Auction, BidFacts), Key = NoKey, Out = Collector<(u64, V)>, Time = AnyTime>,
    V: Data + serde::Serialize + serde::de::DeserializeOwned,
    A: Operator<In = (u64, V), Key = ByKey<u64>, Out = Collector<Change<R>>, Time = AnyTime>,
    Change<R>: Row,
{
    query_job!(name, parts, |timed| {
        operator auctions[parts.p] = OnlyAuctions <- timed;
        operator bids[parts.p] = ToBidFacts <- timed;
        operator winners[parts.p] = WinningBids::<BidFacts>::default()
            <- left(auctions.key(|a: &Auction| a.id)), right(bids.key(|b: &BidFacts| b.auction));
        operator pairs[parts.p] = pair <- winners;
        operator averages[parts.p] = averages <- pairs.key(|p: &(u64, V)| p.0);
    } => averages: Change<R>)
}
