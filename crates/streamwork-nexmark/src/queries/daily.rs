//! The bidding statistics of q15 (per day) and q16 (per channel and day):
//! bids, distinct bidders and distinct auctions, in total and per price rank.
//!
//! Distinct counts do not add up across instances unless each instance sees
//! all of a value's bids: so the bids are partitioned twice, by bidder (for
//! the bid counts, the distinct bidders and the latest minute) and by auction
//! (for the distinct auctions). Each instance's counts per group are then
//! disjoint and are summed per group at the end, keyed by the group.

use std::io::Write;

use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;

use super::BidFacts;
use crate::model::Event;
use crate::sink::{Row, serde_row};
use crate::text::Text;
use crate::time::{day_number, format_day, format_minute, minute_of_day};

/// The price rank of a bid: 1 below 10,000, 2 below 1,000,000, else 3.
#[inline]
pub fn price_rank(price: u64) -> usize {
    match price {
        0..10_000 => 1,
        10_000..1_000_000 => 2,
        _ => 3,
    }
}

/// What the statistics read of a bid: its facts, and its channel for q16
/// (empty for q15: no allocation).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct StatBid {
    /// The bid's facts.
    pub facts: BidFacts,
    /// Its channel (q16), or empty.
    pub channel: Text,
}

/// The bids' [`StatBid`]s without their channel (q15).
#[operator]
pub fn stat_bids(event: Event, out: &mut Collector<StatBid>) {
    if let Event::Bid(bid) = &event {
        out.emit(StatBid {
            facts: BidFacts::from(bid),
            channel: Text::default(),
        });
    }
}

/// The bids' [`StatBid`]s with their channel (q16).
#[operator]
pub fn stat_bids_with_channel(event: Event, out: &mut Collector<StatBid>) {
    if let Event::Bid(bid) = event {
        let facts = BidFacts::from(&bid);
        out.emit(StatBid {
            facts,
            channel: bid.channel,
        });
    }
}

/// Which distinct values an instance counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Distinct {
    /// Bidders (and the bids, and the latest minute).
    Bidders,
    /// Auctions.
    Auctions,
}

/// A group: the day, and the channel for q16.
pub type Group = (i64, Option<String>);

/// One instance's counts of one group.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Partial {
    /// Total and per rank.
    bids: [u64; 4],
    /// Distinct values, total and per rank.
    distinct: [u64; 4],
    /// The latest minute of the day among the bids.
    minute: u16,
}

#[derive(Clone, Default)]
struct Counting {
    partial: Partial,
    /// Each value seen, with the ranks it was seen at (bit `r`).
    seen: FastHashMap<u64, u8>,
}

/// Counts bids and distinct values per group (see the module docs); at the
/// end, emits each group's [`Partial`].
#[derive(Clone)]
pub struct DailyStats {
    distinct: Distinct,
    by_channel: bool,
    /// Channel names, interned: looked up by `&str`, never allocated per bid.
    channels: FastHashMap<String, u32>,
    groups: FastHashMap<(i64, u32), Counting>,
}

impl DailyStats {
    /// Counts `distinct`, per day, and per channel too when `by_channel`.
    pub fn new(distinct: Distinct, by_channel: bool) -> Self {
        DailyStats {
            distinct,
            by_channel,
            channels: FastHashMap::default(),
            groups: FastHashMap::default(),
        }
    }

    fn channel(&mut self, name: &str) -> u32 {
        if !self.by_channel {
            return 0;
        }
        if let Some(&id) = self.channels.get(name) {
            return id;
        }
        let id = self.channels.len() as u32;
        self.channels.insert(name.to_string(), id);
        id
    }
}

#[operator(at_most_once)]
impl DailyStats {
    fn on_record(
        &mut self,
        _partition: CurrentKey<'_, u64>,
        bid: StatBid,
        _out: &mut Collector<(Group, Distinct, Partial)>,
    ) {
        let channel = self.channel(&bid.channel);
        let bid = bid.facts;
        let group = self
            .groups
            .entry((day_number(bid.date_time), channel))
            .or_default();
        let rank = price_rank(bid.price);
        let value = match self.distinct {
            Distinct::Bidders => bid.bidder,
            Distinct::Auctions => bid.auction,
        };
        let partial = &mut group.partial;
        partial.bids[0] += 1;
        partial.bids[rank] += 1;
        partial.minute = partial.minute.max(minute_of_day(bid.date_time));
        let seen = group.seen.entry(value).or_insert_with(|| {
            partial.distinct[0] += 1;
            0
        });
        if *seen & (1 << rank) == 0 {
            *seen |= 1 << rank;
            partial.distinct[rank] += 1;
        }
    }

    fn on_end(&mut self, out: &mut Collector<(Group, Distinct, Partial)>) {
        let mut names = vec![String::new(); self.channels.len()];
        for (name, &id) in &self.channels {
            names[id as usize] = name.clone();
        }
        for ((day, channel), counting) in std::mem::take(&mut self.groups) {
            let channel = self.by_channel.then(|| names[channel as usize].clone());
            out.emit(((day, channel), self.distinct, counting.partial));
        }
    }
}

/// A q15 or q16 row: a group and its twelve counts.
#[derive(Clone, Debug)]
pub struct StatsRow {
    group: Group,
    /// The latest minute of the day (q16).
    minute: u16,
    /// Bids, bidders, auctions: each total, rank 1, 2, 3.
    counts: [u64; 12],
}

const COUNT_NAMES: [&str; 12] = [
    "total_bids",
    "rank1_bids",
    "rank2_bids",
    "rank3_bids",
    "total_bidders",
    "rank1_bidders",
    "rank2_bidders",
    "rank3_bidders",
    "total_auctions",
    "rank1_auctions",
    "rank2_auctions",
    "rank3_auctions",
];

impl Row for StatsRow {
    fn write_json(&self, out: &mut Vec<u8>) {
        let (day, channel) = &self.group;
        out.push(b'{');
        if let Some(channel) = channel {
            out.extend_from_slice(b"\"channel\":");
            serde_row(channel, out);
            out.push(b',');
        }
        let _ = write!(out, "\"day\":\"{}\"", format_day(*day));
        if channel.is_some() {
            let _ = write!(out, ",\"minute\":\"{}\"", format_minute(self.minute));
        }
        for (name, count) in COUNT_NAMES.iter().zip(self.counts) {
            let _ = write!(out, ",\"{name}\":{count}");
        }
        out.push(b'}');
    }
}

/// Sums the partial counts of each group; emits its row at the end.
#[derive(Clone, Default)]
pub struct MergeStats {
    groups: FastHashMap<Group, StatsRow>,
}

#[operator(at_most_once)]
impl MergeStats {
    fn on_record(
        &mut self,
        _group: CurrentKey<'_, u64>,
        partial: (Group, Distinct, Partial),
        _out: &mut Collector<StatsRow>,
    ) {
        let (group, distinct, partial) = partial;
        let row = self
            .groups
            .entry(group.clone())
            .or_insert_with(|| StatsRow {
                group,
                minute: 0,
                counts: [0; 12],
            });
        let at = match distinct {
            Distinct::Bidders => {
                row.minute = row.minute.max(partial.minute);
                for (count, bids) in row.counts[..4].iter_mut().zip(partial.bids) {
                    *count += bids;
                }
                4
            }
            Distinct::Auctions => 8,
        };
        for (count, n) in row.counts[at..at + 4].iter_mut().zip(partial.distinct) {
            *count += n;
        }
    }

    fn on_end(&mut self, out: &mut Collector<StatsRow>) {
        out.extend(std::mem::take(&mut self.groups).into_values());
    }
}

/// The partition of a group for [`MergeStats`].
pub fn group_partition(partial: &(Group, Distinct, Partial)) -> u64 {
    use std::hash::BuildHasher;
    streamwork::core::hash::BuildStableHasher::default().hash_one(&partial.0)
}
