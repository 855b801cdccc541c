//! The bidding statistics of q15 (per day) and q16 (per channel, the string
//! exactly, and day, with the latest minute `HH:MM` among the group's bids):
//! bids, distinct bidders and distinct auctions, in total and per price rank;
//! final rows, one per group, or their updates.
//!
//! Distinct counts do not add up across instances unless each instance sees
//! all of a value's bids: so the bids are partitioned twice, by bidder (for
//! the bid counts, the distinct bidders and the latest minute) and by auction
//! (for the distinct auctions). Each instance's counts per group are then
//! disjoint and are summed per group at the end, keyed by the group.

use std::io::Write;

use streamwork::core::hash::FastHashMap;
use streamwork::prelude::*;
use streamwork::runtime::GraphError;

use super::{BidFacts, JobParts};
use crate::model::Event;
use crate::sink::{Change, Row, serde_row};
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

/// The bids' [`StatBid`]s, with their channel for q16.
#[derive(Copy, Clone, Debug)]
pub struct StatBids {
    /// Whether each bid keeps its channel (q16) or leaves it empty (q15).
    pub per_channel: bool,
}

#[operator(stateless)]
impl StatBids {
    fn on_record(&self, event: Event, out: &mut Collector<StatBid>) {
        if let Event::Bid(bid) = event {
            out.emit(StatBid {
                facts: BidFacts::from(&bid),
                channel: if self.per_channel {
                    bid.channel
                } else {
                    Text::default()
                },
            });
        }
    }
}

/// The job of q15 (`per_channel` false) and q16 (true): each bid counted
/// twice, partitioned by bidder and by auction, the partial counts merged
/// per group.
pub(super) fn job(
    name: String,
    per_channel: bool,
    parts: JobParts<'_>,
) -> Result<JobGraph, GraphError> {
    let updates = parts.output.updates();
    query_job!(name, parts, |timed| {
        operator bids[parts.p] = StatBids { per_channel } <- timed;
        operator by_bidder[parts.p] = DailyStats::new(Distinct::Bidders, per_channel, updates)
            <- bids.key(|bid: &StatBid| bid.facts.bidder);
        operator by_auction[parts.p] = DailyStats::new(Distinct::Auctions, per_channel, updates)
            <- bids.key(|bid: &StatBid| bid.facts.auction);
        operator merged[parts.p] = MergeStats::new(updates)
            <- (by_bidder, by_auction).key(group_partition);
    } => merged: Change<StatsRow>)
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

/// One value's bids in one group: how many at each rank (their total, and
/// the ranks the value was seen at, follow), the latest minute. An
/// instance's [`Partial`] of a group is the sum of its values'.
#[streamwork::state_data]
#[derive(Clone, Debug, Default)]
struct ValueCounts {
    day: i64,
    /// The channel (q16), or empty.
    channel: Text,
    /// Bids at ranks 1, 2 and 3.
    bids: [u64; 3],
    minute: u16,
    /// [`channel_hash`] of the channel (0 for q15): compared before the
    /// channel, so that looking a group up among a value's many compares
    /// integers; it fills what was padding.
    channel_hash: u32,
}

/// The channel's stable hash, cut to 32 bits: the same in every process,
/// as it is kept in checkpoints.
fn channel_hash(channel: &Text) -> u32 {
    streamwork::core::hash::stable_hash(channel.as_str()) as u32
}

/// A value's groups: the first in place (a value is seen on a day or two,
/// on few channels: most have one), the others beside it. Kept compact, as
/// there is one per distinct value.
#[streamwork::state_data]
#[derive(Clone, Debug, Default)]
struct ValueGroups {
    first: ValueCounts,
    #[expect(
        clippy::box_collection,
        reason = "8 bytes in place rather than a vector's 24: most values have no other group"
    )]
    more: Option<Box<Vec<ValueCounts>>>,
}

impl ValueGroups {
    /// The counts of the group of `day` and `channel` (compared only when
    /// `by_channel`; `hash` is its [`channel_hash`], or 0), added if new.
    fn group(&mut self, day: i64, channel: &Text, hash: u32, by_channel: bool) -> &mut ValueCounts {
        let matches = |g: &ValueCounts| {
            g.day == day && g.channel_hash == hash && (!by_channel || g.channel == *channel)
        };
        let fresh = || ValueCounts {
            day,
            channel: if by_channel {
                channel.clone()
            } else {
                Text::default()
            },
            channel_hash: hash,
            ..ValueCounts::default()
        };
        if self.first.bids == [0; 3] {
            self.first = fresh();
            return &mut self.first;
        }
        if matches(&self.first) {
            return &mut self.first;
        }
        let more = self.more.get_or_insert_with(Box::default);
        match more.iter().position(matches) {
            Some(at) => &mut more[at],
            None => {
                more.push(fresh());
                let last = more.len() - 1;
                &mut more[last]
            }
        }
    }

    /// Every group's counts.
    fn into_groups(self) -> impl Iterator<Item = ValueCounts> {
        std::iter::once(self.first).chain(self.more.into_iter().flat_map(|more| *more))
    }
}

/// A group as [`DailyStats::on_end`] sums it: hashed by its day and its
/// channel's hash, compared by its channel too, so that no string is
/// hashed per value.
#[derive(PartialEq, Eq)]
struct GroupKey {
    day: i64,
    hash: u32,
    channel: Text,
}

impl std::hash::Hash for GroupKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.day.hash(state);
        self.hash.hash(state);
    }
}

/// Counts bids and distinct values per group (see the module docs), by
/// the value counted (the key), so that the counts move with their keys to
/// any parallelism; at the end, emits each group's [`Partial`].
#[derive(Clone, State)]
pub struct DailyStats {
    #[state(transient)]
    distinct: Distinct,
    #[state(transient)]
    by_channel: bool,
    /// An update stream: each bid's part of its group's counts is sent on
    /// as it comes, rather than each group's total at the end.
    #[state(transient)]
    updates: bool,
    /// Each value's groups: a value is met on a day or two, on a few
    /// channels. (Named `values` until its groups kept their channel's
    /// hash: a checkpoint written before is refused by that name, rather
    /// than read with no hashes.)
    value_groups: KeyedState<u64, ValueGroups>,
}

impl DailyStats {
    /// Counts `distinct`, per day, and per channel too when `by_channel`;
    /// as an update stream when `updates`.
    pub fn new(distinct: Distinct, by_channel: bool, updates: bool) -> Self {
        DailyStats {
            distinct,
            by_channel,
            updates,
            value_groups: KeyedState::new(),
        }
    }
}

#[operator]
impl DailyStats {
    fn on_record(
        &mut self,
        value: CurrentKey<'_, u64>,
        bid: StatBid,
        out: &mut Collector<(Group, Distinct, Partial)>,
    ) {
        let day = day_number(bid.facts.date_time);
        let updates = self.updates;
        let hash = if self.by_channel {
            channel_hash(&bid.channel)
        } else {
            0
        };
        let counts =
            self.value_groups
                .get_or_default(value)
                .group(day, &bid.channel, hash, self.by_channel);
        let rank = price_rank(bid.facts.price);
        let new_value = counts.bids == [0; 3];
        let new_rank = counts.bids[rank - 1] == 0;
        counts.bids[rank - 1] += 1;
        let minute = minute_of_day(bid.facts.date_time);
        counts.minute = counts.minute.max(minute);
        if updates {
            // What this bid adds to its group's counts.
            let mut delta = Partial {
                minute,
                ..Partial::default()
            };
            delta.bids[0] = 1;
            delta.bids[rank] = 1;
            delta.distinct[0] = u64::from(new_value);
            delta.distinct[rank] = u64::from(new_rank);
            let channel = self.by_channel.then(|| counts.channel.as_str().to_string());
            out.emit(((day, channel), self.distinct, delta));
        }
    }

    fn on_end(&mut self, out: &mut Collector<(Group, Distinct, Partial)>) {
        if self.updates {
            // Every bid's part was sent as it came.
            self.value_groups.drain().for_each(drop);
            return;
        }
        let mut groups: FastHashMap<GroupKey, Partial> = FastHashMap::default();
        for (_, values) in self.value_groups.drain() {
            for counts in values.into_groups() {
                let partial = groups
                    .entry(GroupKey {
                        day: counts.day,
                        hash: counts.channel_hash,
                        channel: counts.channel,
                    })
                    .or_default();
                partial.distinct[0] += 1;
                for rank in 1..4 {
                    let bids = counts.bids[rank - 1];
                    partial.bids[0] += bids;
                    partial.bids[rank] += bids;
                    partial.distinct[rank] += u64::from(bids > 0);
                }
                partial.minute = partial.minute.max(counts.minute);
            }
        }
        for (group, partial) in groups {
            let channel = self.by_channel.then(|| group.channel.as_str().to_string());
            out.emit(((group.day, channel), self.distinct, partial));
        }
    }
}

/// A q15 or q16 row: a group and its twelve counts.
#[streamwork::state_data]
#[derive(Clone, Debug, PartialEq)]
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

/// Sums the partial counts of each group; emits its row at the end. Keyed
/// by the group's hash ([`group_partition`]), under which groups rarely
/// share a key.
#[derive(Clone, Default, State)]
pub struct MergeStats {
    groups: KeyedState<u64, Vec<StatsRow>>,
    /// An update stream: each part retracts its group's old row and
    /// inserts the new.
    #[state(transient)]
    updates: bool,
}

impl MergeStats {
    /// Sums the parts of each group; as an update stream when `updates`.
    pub fn new(updates: bool) -> Self {
        MergeStats {
            updates,
            ..MergeStats::default()
        }
    }
}

#[operator]
impl MergeStats {
    fn on_record(
        &mut self,
        partition: CurrentKey<'_, u64>,
        partial: (Group, Distinct, Partial),
        out: &mut Collector<Change<StatsRow>>,
    ) {
        let (group, distinct, partial) = partial;
        let rows = self.groups.get_or_default(partition);
        let (at, new_row) = match rows.iter().position(|row| row.group == group) {
            Some(at) => (at, false),
            None => {
                rows.push(StatsRow {
                    group,
                    minute: 0,
                    counts: [0; 12],
                });
                (rows.len() - 1, true)
            }
        };
        let row = &mut rows[at];
        let before = (self.updates && !new_row).then(|| row.clone());
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
        if self.updates {
            match before {
                // A part that changes nothing (a value already counted).
                Some(before) if before == *row => {}
                Some(before) => {
                    out.emit(Change::retract(before));
                    out.emit(Change::insert(row.clone()));
                }
                None => out.emit(Change::insert(row.clone())),
            }
        }
    }

    fn on_end(&mut self, out: &mut Collector<Change<StatsRow>>) {
        let rows = self.groups.drain().flat_map(|(_, rows)| rows);
        Change::finals(self.updates, rows, out);
    }
}

/// The partition of a group for [`MergeStats`].
pub fn group_partition(partial: &(Group, Distinct, Partial)) -> u64 {
    use std::hash::BuildHasher;
    streamwork::core::hash::BuildStableHasher::default().hash_one(&partial.0)
}
