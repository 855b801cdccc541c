//! The Nexmark event model and its JSON-lines form (Flink's Nexmark Kafka/JSON
//! table: one object per line with `event_type` and one of `person`,
//! `auction`, `bid`).

use serde::{Deserialize, Serialize};

use crate::text::Text;

/// A person registering.
#[streamwork::state_data]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// Person id.
    pub id: u64,
    /// Name.
    pub name: Text,
    /// E-mail address.
    pub email_address: Text,
    /// Credit card number.
    pub credit_card: Text,
    /// City.
    pub city: Text,
    /// US state.
    pub state: Text,
    /// Event time.
    #[serde(with = "timestamp")]
    pub date_time: i64,
    /// Padding.
    pub extra: Text,
}

/// An auction opening.
#[streamwork::state_data]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// Auction id.
    pub id: u64,
    /// Item name.
    pub item_name: Text,
    /// Description.
    pub description: Text,
    /// Initial bid.
    pub initial_bid: u64,
    /// Reserve price.
    pub reserve: u64,
    /// Event time.
    #[serde(with = "timestamp")]
    pub date_time: i64,
    /// When the auction closes.
    #[serde(with = "timestamp")]
    pub expires: i64,
    /// The seller, a person id.
    pub seller: u64,
    /// Category.
    pub category: u64,
    /// Padding.
    pub extra: Text,
}

/// A bid on an auction.
#[streamwork::state_data]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// Auction id.
    pub auction: u64,
    /// Bidder, a person id.
    pub bidder: u64,
    /// Price.
    pub price: u64,
    /// Channel.
    pub channel: Text,
    /// URL.
    pub url: Text,
    /// Event time.
    #[serde(with = "timestamp")]
    pub date_time: i64,
    /// Padding.
    pub extra: Text,
    /// Where the bid stands in the input: the line's position among the
    /// events read (for a file), or its number (generated). It breaks the
    /// ties the contract decides by input order ("the one read first"), at
    /// any parallelism. Not part of the JSON form.
    #[serde(skip)]
    pub seq: u64,
}

/// One Nexmark event. Its serde form is the input's JSON object (with
/// `event_type` and one of `person`, `auction`, `bid`), so that it reads
/// and writes through the framework's formats (`FileSource::json`,
/// `FileSink::json`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawEvent")]
pub enum Event {
    /// A person.
    Person(Person),
    /// An auction.
    Auction(Auction),
    /// A bid.
    Bid(Bid),
}

impl Event {
    /// Its event time, in epoch milliseconds.
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// Parses one JSON line; `None` if it is not valid JSON or not one of the
    /// three kinds.
    pub fn from_json(line: &str) -> Option<Event> {
        streamwork::connectors::formats::from_json_line(line).ok()
    }

    /// The event as one JSON line (without newline), in the input format.
    pub fn to_json(&self) -> String {
        let mut line = Vec::new();
        match streamwork::connectors::formats::json_line(self, &mut line) {
            Ok(()) => String::from_utf8(line).unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    fn raw(&self) -> RawEventRef<'_> {
        match self {
            Event::Person(p) => RawEventRef {
                event_type: 0,
                person: Some(p),
                auction: None,
                bid: None,
            },
            Event::Auction(a) => RawEventRef {
                event_type: 1,
                person: None,
                auction: Some(a),
                bid: None,
            },
            Event::Bid(b) => RawEventRef {
                event_type: 2,
                person: None,
                auction: None,
                bid: Some(b),
            },
        }
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw().serialize(serializer)
    }
}

impl TryFrom<RawEvent> for Event {
    type Error = streamwork::core::FormatError;

    fn try_from(raw: RawEvent) -> Result<Self, Self::Error> {
        match (raw.event_type, raw.person, raw.auction, raw.bid) {
            (0, Some(person), None, None) => Ok(Event::Person(person)),
            (1, None, Some(auction), None) => Ok(Event::Auction(auction)),
            (2, None, None, Some(bid)) => Ok(Event::Bid(bid)),
            (kind, ..) => Err(streamwork::core::FormatError::new(format!(
                "not a Nexmark event: event_type {kind} with its objects does not name one of person (0), auction (1) or bid (2)"
            ))),
        }
    }
}

#[derive(Deserialize)]
struct RawEvent {
    event_type: u8,
    #[serde(default)]
    person: Option<Person>,
    #[serde(default)]
    auction: Option<Auction>,
    #[serde(default)]
    bid: Option<Bid>,
}

#[derive(Serialize)]
struct RawEventRef<'a> {
    event_type: u8,
    person: Option<&'a Person>,
    auction: Option<&'a Auction>,
    bid: Option<&'a Bid>,
}

/// Serde for timestamps in the Nexmark text form.
pub mod timestamp {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes epoch milliseconds as `YYYY-MM-DD HH:MM:SS.mmm`.
    pub fn serialize<S: Serializer>(millis: &i64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&crate::time::format(*millis))
    }

    /// Reads `YYYY-MM-DD HH:MM:SS.mmm` into epoch milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        crate::time::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("bad dateTime `{text}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_contract_examples() {
        let bid = r#"{"event_type":2,"person":null,"auction":null,"bid":{"auction":1000,"bidder":1001,"price":42,"channel":"Google","url":"...","dateTime":"2024-01-01 00:00:00.300","extra":"..."}}"#;
        let Some(Event::Bid(b)) = Event::from_json(bid) else {
            panic!("a bid")
        };
        assert_eq!(
            (b.auction, b.price, b.date_time),
            (1000, 42, 1_704_067_200_300)
        );
        assert_eq!(
            Event::from_json(&Event::Bid(b.clone()).to_json()),
            Some(Event::Bid(b))
        );
        let auction = r#"{"event_type":1,"person":null,"auction":{"id":1000,"itemName":"...","description":"...","initialBid":10,"reserve":20,"dateTime":"2024-01-01 00:00:00.200","expires":"2024-01-01 00:00:10.200","seller":1000,"category":10,"extra":"..."},"bid":null}"#;
        assert!(
            matches!(Event::from_json(auction), Some(Event::Auction(a)) if a.expires - a.date_time == 10_000)
        );
    }

    #[test]
    fn rejects_other_shapes() {
        assert_eq!(Event::from_json("not json"), None);
        assert_eq!(
            Event::from_json(r#"{"event_type":3,"person":null,"auction":null,"bid":null}"#),
            None
        );
        assert_eq!(
            Event::from_json(r#"{"event_type":2,"person":null,"auction":null,"bid":null}"#),
            None
        );
    }
}
