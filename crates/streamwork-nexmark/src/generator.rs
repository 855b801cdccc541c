//! A deterministic Nexmark event generator, following the structure of the
//! standard one (Beam's and Flink's): of every 50 events, 1 is a person, 3
//! are auctions and 46 are bids; half of the bids go to a hot auction, three
//! quarters come from a hot bidder, and three quarters of the auctions from a
//! hot seller; prices follow `100 * 10^(6u)`. Event `n` is a pure function of
//! `(seed, n)`, so any instance can generate any event and the stream is the
//! same for every parallelism. Event times advance by `1000 / rate` ms per
//! event from a base time, in order.

use std::cell::Cell;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::model::{Auction, Bid, Event, Person};
use crate::text::Text;

const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const TOTAL_PROPORTION: u64 = 50;
const FIRST_PERSON_ID: u64 = 1000;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_CATEGORY_ID: u64 = 10;
const NUM_CATEGORIES: u64 = 5;
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_BIDDER_RATIO: u64 = 4;
const HOT_SELLER_RATIO: u64 = 4;
const NUM_ACTIVE_PEOPLE: u64 = 1000;
const PERSON_ID_LEAD: u64 = 10;
const IN_FLIGHT_AUCTIONS: u64 = 100;
const AUCTION_ID_LEAD: u64 = 10;

const FIRST_NAMES: &[&str] = &[
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: &[&str] = &[
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const CITIES: &[&str] = &[
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const STATES: &[&str] = &["AZ", "CA", "ID", "OR", "WA", "WY"];
const CHANNELS: &[&str] = &["Google", "Facebook", "Baidu", "Apple"];
/// Half of the bids come through one of the four hot channels.
const HOT_CHANNEL_RATIO: u64 = 2;
/// The other channels.
const NUM_CHANNELS: u64 = 10_000;

/// Settings of the generator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Event time of event 0, epoch milliseconds (default 2024-01-01 00:00:00 UTC).
    pub base_time: i64,
    /// Events per second of event time (default 10 000, as Beam's first rate).
    pub events_per_second: u64,
    /// Milliseconds of event time between two events, instead of
    /// `events_per_second`: for inputs that span days with few events
    /// (`Some(8_640)` puts 10 000 events in a day). Auctions then stay open
    /// for up to 2 000 events' time rather than 20 s, so that bids still
    /// reach them. `None` (the default): `events_per_second`.
    pub spacing_ms: Option<u64>,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            seed: 42,
            base_time: 1_704_067_200_000,
            events_per_second: 10_000,
            spacing_ms: None,
        }
    }
}

/// SplitMix64: the random choices of one event.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    fn string(&mut self, len: usize) -> Text {
        let mut bytes = [0u8; 32];
        let len = len.min(bytes.len());
        for byte in &mut bytes[..len] {
            *byte = b'a' + self.below(26) as u8;
        }
        // Lower-case ASCII letters: always UTF-8.
        Text::from(std::str::from_utf8(&bytes[..len]).unwrap_or_default())
    }
}

/// The highest person id (from 0) created at or before event `n`.
fn last_base0_person_id(n: u64) -> u64 {
    n / TOTAL_PROPORTION * PERSON_PROPORTION
}

/// The highest auction id (from 0) created at or before event `n`.
fn last_base0_auction_id(n: u64) -> u64 {
    let epoch = n / TOTAL_PROPORTION;
    let offset = n % TOTAL_PROPORTION;
    let in_epoch = if offset < PERSON_PROPORTION {
        // Before this epoch's auctions: the previous epoch's last one.
        return (epoch * AUCTION_PROPORTION).saturating_sub(1);
    } else {
        (offset - PERSON_PROPORTION).min(AUCTION_PROPORTION - 1)
    };
    epoch * AUCTION_PROPORTION + in_epoch
}

/// A random recent person (from 0).
fn next_base0_person_id(n: u64, random: &mut Random) -> u64 {
    let people = last_base0_person_id(n) + 1;
    let active = people.min(NUM_ACTIVE_PEOPLE);
    let pick = random.below(active + PERSON_ID_LEAD);
    (people - active + pick).min(people + PERSON_ID_LEAD)
}

/// A random in-flight auction (from 0).
fn next_base0_auction_id(n: u64, random: &mut Random) -> u64 {
    let last = last_base0_auction_id(n);
    let min = last.saturating_sub(IN_FLIGHT_AUCTIONS);
    min + random.below(last - min + 1 + AUCTION_ID_LEAD)
}

fn price(random: &mut Random) -> u64 {
    (10f64.powf(random.unit() * 6.0) * 100.0).round() as u64
}

/// The URL of channel `k` (a pure function of the seed and `k`): three
/// random directories, and for nine in ten of the other channels a
/// `channel_id` parameter (as Flink's generator's channel cache).
fn channel_url(config: &GeneratorConfig, k: u64, other: bool) -> String {
    let stream = k + (u64::from(other) << 32);
    let mut random = Random(config.seed ^ stream.wrapping_mul(0x9e6c_63d0_676a_9a99));
    let mut url = format!(
        "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
        random.string(5),
        random.string(5),
        random.string(5)
    );
    if other && random.below(10) > 0 {
        let id = (k as u32).reverse_bits() as i32;
        url.push_str(&format!("&channel_id={}", id.unsigned_abs()));
    }
    url
}

/// The name of channel `k` (one of the hot ones when `hot`) and its URL,
/// made afresh.
fn make_channel(config: &GeneratorConfig, k: u64, hot: bool) -> (Text, String) {
    let name = if hot {
        Text::from_static(CHANNELS[k as usize % CHANNELS.len()])
    } else {
        Text::from(format!("channel-{k}"))
    };
    (name, channel_url(config, k, !hot))
}

/// The names and URLs of one seed's channels, each made once, when first
/// met, and kept for the rest of the process: as Flink's generator keeps
/// its channels' URLs (Java strings, shared by reference), every bid
/// through a channel shares its URL (a [`Text::from_static`]), so that
/// generating a bid neither formats nor allocates one, a copy of a bid
/// allocates nothing for it, and state that keeps bids keeps each URL
/// once rather than once per bid.
struct ChannelTable {
    seed: u64,
    /// The hot channels, then the others.
    slots: Box<[OnceLock<(Text, Text)>]>,
}

impl ChannelTable {
    fn new(seed: u64) -> Self {
        let slots = CHANNELS.len() + NUM_CHANNELS as usize;
        ChannelTable {
            seed,
            slots: (0..slots).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Channel `k`'s name and URL, made on the first call.
    fn channel(&self, config: &GeneratorConfig, k: u64, hot: bool) -> (Text, Text) {
        let slot = if hot {
            k as usize % CHANNELS.len()
        } else {
            CHANNELS.len() + (k % NUM_CHANNELS) as usize
        };
        self.slots[slot]
            .get_or_init(|| {
                let (name, url) = make_channel(config, k, hot);
                // Kept for the process: at most `NUM_CHANNELS + 4` URLs of
                // up to 70 bytes for each of `INTERNED_SEEDS` seeds.
                (name, Text::from_static(Box::leak(url.into_boxed_str())))
            })
            .clone()
    }
}

/// Seeds whose channels are kept (a process that generates with more
/// makes the channels of the others for each bid, as the same text).
const INTERNED_SEEDS: usize = 8;

/// The channel tables of the seeds met so far.
static CHANNEL_TABLES: Mutex<Vec<&'static ChannelTable>> = Mutex::new(Vec::new());

thread_local! {
    /// The table this thread used last: a generating thread looks its
    /// seed's table up once, not once per bid.
    static LAST_TABLE: Cell<Option<&'static ChannelTable>> = const { Cell::new(None) };
}

/// The channel table of `seed`, made on first use, or none past
/// [`INTERNED_SEEDS`] seeds.
fn channel_table(seed: u64) -> Option<&'static ChannelTable> {
    LAST_TABLE.with(|last| {
        if let Some(table) = last.get().filter(|t| t.seed == seed) {
            return Some(table);
        }
        let mut tables = CHANNEL_TABLES
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let table = match tables.iter().find(|t| t.seed == seed) {
            Some(table) => *table,
            None if tables.len() < INTERNED_SEEDS => {
                let table: &'static ChannelTable = Box::leak(Box::new(ChannelTable::new(seed)));
                tables.push(table);
                table
            }
            None => return None,
        };
        last.set(Some(table));
        Some(table)
    })
}

/// Channel `k`'s name and URL, from the seed's table where it has one.
fn channel(config: &GeneratorConfig, k: u64, hot: bool) -> (Text, Text) {
    match channel_table(config.seed) {
        Some(table) => table.channel(config, k, hot),
        None => {
            let (name, url) = make_channel(config, k, hot);
            (name, Text::from(url))
        }
    }
}

/// Event number `n` for `config`.
pub fn event(config: &GeneratorConfig, n: u64) -> Event {
    let mut random = Random(config.seed ^ n.wrapping_mul(0xd6e8_feb8_6659_fd93));
    let (date_time, auction_span) = match config.spacing_ms {
        Some(spacing) => {
            let spacing = spacing.max(1);
            let at = i128::from(n) * i128::from(spacing);
            let at = i64::try_from(at).unwrap_or(i64::MAX);
            (
                config.base_time.saturating_add(at),
                spacing.saturating_mul(2_000).min(i64::MAX as u64),
            )
        }
        None => {
            let rate = config.events_per_second.max(1);
            let at = (n as i128 * 1000 / rate as i128) as i64;
            (config.base_time + at, 20_000)
        }
    };
    let offset = n % TOTAL_PROPORTION;
    if offset < PERSON_PROPORTION {
        let id = last_base0_person_id(n) + FIRST_PERSON_ID;
        let name = format!("{} {}", random.pick(FIRST_NAMES), random.pick(LAST_NAMES));
        Event::Person(Person {
            id,
            email_address: format!("{}@{}.com", random.string(7), random.string(5)).into(),
            credit_card: (0..4)
                .map(|_| format!("{:04}", random.below(10_000)))
                .collect::<Vec<_>>()
                .join(" ")
                .into(),
            city: random.pick(CITIES).into(),
            state: random.pick(STATES).into(),
            name: name.into(),
            date_time,
            extra: random.string(20),
        })
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        let id = last_base0_auction_id(n) + FIRST_AUCTION_ID;
        let seller = if random.below(HOT_SELLER_RATIO) > 0 {
            last_base0_person_id(n) / HOT_SELLER_RATIO * HOT_SELLER_RATIO
        } else {
            next_base0_person_id(n, &mut random)
        } + FIRST_PERSON_ID;
        let initial_bid = price(&mut random);
        Event::Auction(Auction {
            id,
            item_name: random.string(10),
            description: random.string(20),
            initial_bid,
            reserve: initial_bid + price(&mut random),
            date_time,
            expires: date_time
                .saturating_add(1)
                .saturating_add(random.below(auction_span) as i64),
            seller,
            category: FIRST_CATEGORY_ID + random.below(NUM_CATEGORIES),
            extra: random.string(20),
        })
    } else {
        let auction = if random.below(HOT_AUCTION_RATIO) > 0 {
            last_base0_auction_id(n) / HOT_AUCTION_RATIO * HOT_AUCTION_RATIO
        } else {
            next_base0_auction_id(n, &mut random)
        } + FIRST_AUCTION_ID;
        let bidder = if random.below(HOT_BIDDER_RATIO) > 0 {
            last_base0_person_id(n) / HOT_BIDDER_RATIO * HOT_BIDDER_RATIO + 1
        } else {
            next_base0_person_id(n, &mut random)
        } + FIRST_PERSON_ID;
        let (channel, url) = if random.below(HOT_CHANNEL_RATIO) > 0 {
            channel(config, random.below(CHANNELS.len() as u64), true)
        } else {
            channel(config, random.below(NUM_CHANNELS), false)
        };
        Event::Bid(Bid {
            auction,
            bidder,
            price: price(&mut random),
            channel,
            url,
            date_time,
            extra: random.string(10),
            seq: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_and_determinism() {
        let config = GeneratorConfig::default();
        let events: Vec<Event> = (0..5000).map(|n| event(&config, n)).collect();
        let people = events
            .iter()
            .filter(|e| matches!(e, Event::Person(_)))
            .count();
        let auctions = events
            .iter()
            .filter(|e| matches!(e, Event::Auction(_)))
            .count();
        assert_eq!(
            (people, auctions, events.len() - people - auctions),
            (100, 300, 4600)
        );
        assert_eq!(event(&config, 4321), events[4321]);
        assert!(
            events
                .windows(2)
                .all(|w| w[0].date_time() <= w[1].date_time())
        );
    }

    #[test]
    fn kept_channels_are_the_channels_made_afresh() {
        for seed in [42, 7, u64::MAX] {
            let config = GeneratorConfig {
                seed,
                ..GeneratorConfig::default()
            };
            let table = ChannelTable::new(seed);
            for (k, hot) in [
                (0, true),
                (3, true),
                (0, false),
                (9_999, false),
                (17, false),
            ] {
                let (name, url) = make_channel(&config, k, hot);
                // Twice: made, then kept.
                for _ in 0..2 {
                    assert_eq!(
                        table.channel(&config, k, hot),
                        (name.clone(), Text::from(url.clone()))
                    );
                    assert_eq!(
                        channel(&config, k, hot),
                        (name.clone(), Text::from(url.clone()))
                    );
                }
            }
        }
    }

    #[test]
    fn a_kept_url_is_shared_not_copied() {
        let config = GeneratorConfig::default();
        let table = ChannelTable::new(config.seed);
        for (k, hot) in [(1, true), (1_234, false)] {
            let (_, first) = table.channel(&config, k, hot);
            let (_, again) = table.channel(&config, k, hot);
            // Past the 24 bytes a text holds in place, yet the same bytes.
            assert!(first.len() > 24);
            assert_eq!(first.as_ptr(), again.as_ptr());
            assert_eq!(first.clone().as_ptr(), first.as_ptr());
        }
    }

    #[test]
    fn seeds_past_those_kept_generate_the_same_bids() {
        // More seeds than are kept: the later ones make their channels for
        // each bid, and the bids are the same.
        for seed in 1_000..1_000 + 2 * INTERNED_SEEDS as u64 {
            let config = GeneratorConfig {
                seed,
                ..GeneratorConfig::default()
            };
            for n in 0..500 {
                if let Event::Bid(bid) = event(&config, n) {
                    let hot = CHANNELS.contains(&bid.channel.as_str());
                    let k = if hot {
                        CHANNELS
                            .iter()
                            .position(|c| *c == bid.channel.as_str())
                            .unwrap() as u64
                    } else {
                        bid.channel["channel-".len()..].parse().unwrap()
                    };
                    let (name, url) = make_channel(&config, k, hot);
                    assert_eq!((bid.channel, bid.url.as_str()), (name, url.as_str()));
                }
            }
        }
    }

    #[test]
    fn bids_refer_to_existing_or_imminent_auctions_and_people() {
        let config = GeneratorConfig::default();
        for n in 0..20_000 {
            if let Event::Bid(bid) = event(&config, n) {
                assert!(bid.auction >= FIRST_AUCTION_ID);
                assert!(
                    bid.auction <= FIRST_AUCTION_ID + last_base0_auction_id(n) + AUCTION_ID_LEAD
                );
                assert!(
                    bid.bidder <= FIRST_PERSON_ID + last_base0_person_id(n) + PERSON_ID_LEAD + 1
                );
            }
        }
    }
}
