//! Q21, add a channel id: `"0"` to `"3"` for the channels Apple, Google,
//! Facebook and Baidu (lower-cased, exactly), otherwise the URL's
//! `channel_id` parameter (Flink's `REGEXP_EXTRACT(url,
//! '(&|^)channel_id=([^&]*)', 2)`); a bid with neither is left out.

use std::ops::Range;

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Bid, Event};
use crate::sink::{Row, serde_row};

/// The channel id of a bid: a known channel's, or a span of its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelId {
    /// One of the four named channels.
    Named(&'static str),
    /// The value of the URL's `channel_id` parameter, as a byte range of the URL.
    Url(Range<usize>),
}

/// The id of a named channel: `apple`, `google`, `facebook`, `baidu` once
/// lower-cased (Unicode lower case, as SQL's `LOWER`).
pub fn named_channel(channel: &str) -> Option<&'static str> {
    const NAMES: [(&str, &str); 4] = [
        ("apple", "0"),
        ("google", "1"),
        ("facebook", "2"),
        ("baidu", "3"),
    ];
    let find = |lower: &str| NAMES.iter().find(|(n, _)| *n == lower).map(|(_, id)| *id);
    if channel.is_ascii() {
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(channel))
            .map(|(_, id)| *id)
    } else {
        find(&channel.to_lowercase())
    }
}

/// Where the value of the leftmost `channel_id=` parameter that begins the
/// URL or follows a `&` lies in `url` (possibly empty).
pub fn url_channel_id(url: &str) -> Option<Range<usize>> {
    const NAME: &str = "channel_id=";
    let (at, _) = url
        .match_indices(NAME)
        .find(|&(at, _)| at == 0 || url.as_bytes()[at - 1] == b'&')?;
    let from = at + NAME.len();
    let to = url[from..].find('&').map_or(url.len(), |end| from + end);
    Some(from..to)
}

/// The channel id of a bid, if it has one.
pub fn channel_id(bid: &Bid) -> Option<ChannelId> {
    named_channel(&bid.channel)
        .map(ChannelId::Named)
        .or_else(|| url_channel_id(&bid.url).map(ChannelId::Url))
}

/// A Q21 row.
#[derive(Clone, Debug)]
pub struct Q21Row {
    bid: Bid,
    channel_id: ChannelId,
}

#[derive(Serialize)]
struct Q21Fields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: &'a str,
    channel_id: &'a str,
}

impl Row for Q21Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.bid;
        let channel_id = match &self.channel_id {
            ChannelId::Named(id) => id,
            ChannelId::Url(range) => &bid.url[range.clone()],
        };
        serde_row(
            &Q21Fields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                channel: &bid.channel,
                channel_id,
            },
            out,
        );
    }
}

#[operator]
pub(super) fn q21_rows(event: Event, out: &mut Collector<Q21Row>) {
    if let Event::Bid(bid) = event
        && let Some(channel_id) = channel_id(&bid)
    {
        out.emit(Q21Row { bid, channel_id });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_ids_as_the_contract_says() {
        assert_eq!(named_channel("Apple"), Some("0"));
        assert_eq!(named_channel("GOOGLE"), Some("1"));
        assert_eq!(named_channel("Apple "), None);
        // The Kelvin sign lower-cases to `k`, as Java's and SQL's LOWER.
        assert_eq!(named_channel("Faceboo\u{212A}"), Some("2"));
        let value = |url: &str| url_channel_id(url).map(|r| url[r].to_string());
        assert_eq!(value("channel_id=7&x=1").as_deref(), Some("7"));
        assert_eq!(value("a=1&channel_id=&b").as_deref(), Some(""));
        assert_eq!(value("https://x/y?channel_id=5"), None);
        assert_eq!(value("a&xchannel_id=9"), None);
        assert_eq!(
            value("a&xchannel_id=9&channel_id=4&channel_id=5").as_deref(),
            Some("4")
        );
    }
}
