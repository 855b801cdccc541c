//! Q4, average closing price per category: for each auction, the highest bid
//! whose `dateTime` lies in `[auction.dateTime, auction.expires]`; then, per
//! category, the average of those over the auctions that had any. At the end
//! of input, one row per category. The winning bids come from
//! [`WinningBids`], shared with q6 and q9.

use std::collections::BTreeMap;

use serde::Serialize;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::winning::winner_averages;
use super::{BidFacts, JobParts};
use crate::model::Auction;
use crate::sink::{Change, serde_rows};

/// A Q4 row.
#[derive(Clone, Debug, Serialize)]
pub struct Q4Row {
    category: u64,
    avg: u64,
}

serde_rows!(Q4Row);

#[operator]
fn closing_price(winner: (Auction, BidFacts), out: &mut Collector<(u64, u64)>) {
    out.emit((winner.0.category, winner.1.price));
}

/// A category's row: the integer average of `n` prices summing to `sum`.
fn average(category: u64, (sum, n): (u128, u64)) -> Q4Row {
    let avg = u64::try_from(sum / u128::from(n.max(1))).unwrap_or(u64::MAX);
    Q4Row { category, avg }
}

/// The running average closing price per category (the sum and count of
/// its closing prices): emitted at the end, or, as an update stream, at
/// each closing (the old row retracted, the new inserted).
#[derive(Clone, Default, State)]
struct CategoryAverages {
    totals: KeyedState<u64, (u128, u64)>,
    #[state(transient)]
    updates: bool,
}

#[operator]
impl CategoryAverages {
    fn on_record(
        &mut self,
        category: CurrentKey<'_, u64>,
        closing: (u64, u64),
        out: &mut Collector<Change<Q4Row>>,
    ) {
        let totals = self.totals.get_or_default(category);
        if self.updates && totals.1 > 0 {
            out.emit(Change::retract(average(closing.0, *totals)));
        }
        totals.0 += u128::from(closing.1);
        totals.1 += 1;
        if self.updates {
            out.emit(Change::insert(average(closing.0, *totals)));
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<Q4Row>>) {
        let totals: BTreeMap<u64, (u128, u64)> = self.totals.drain().collect();
        if !self.updates {
            for (category, totals) in totals {
                out.emit(Change::insert(average(category, totals)));
            }
        }
    }
}

pub(super) fn job(name: String, parts: JobParts<'_>) -> Result<JobGraph, GraphError> {
    let averages = CategoryAverages {
        updates: parts.output.updates(),
        ..CategoryAverages::default()
    };
    winner_averages(name, parts, ClosingPrice, averages)
}
