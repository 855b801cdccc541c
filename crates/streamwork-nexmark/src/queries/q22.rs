//! Q22, get URL directories: each bid with the pieces 3, 4 and 5 (from 0)
//! of its URL split at every `/` (Flink's `SPLIT_INDEX`), `null` past the
//! end.

use std::ops::Range;

use serde::Serialize;
use streamwork::prelude::*;

use crate::model::{Bid, Event};
use crate::sink::{Row, serde_row};

/// Where the pieces 3, 4 and 5 of `url` split at `/` lie in it.
pub fn directories(url: &str) -> [Option<Range<usize>>; 3] {
    let mut pieces = [None, None, None];
    let mut start = 0;
    for (index, piece) in url.split('/').enumerate() {
        if index >= 3 {
            pieces[index - 3] = Some(start..start + piece.len());
            if index == 5 {
                break;
            }
        }
        start += piece.len() + 1;
    }
    pieces
}

/// A Q22 row.
#[derive(Clone, Debug)]
pub struct Q22Row {
    bid: Bid,
    dirs: [Option<Range<usize>>; 3],
}

#[derive(Serialize)]
struct Q22Fields<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: &'a str,
    dir1: Option<&'a str>,
    dir2: Option<&'a str>,
    dir3: Option<&'a str>,
}

impl Row for Q22Row {
    fn write_json(&self, out: &mut Vec<u8>) {
        let bid = &self.bid;
        let piece = |i: usize| self.dirs[i].clone().map(|r| &bid.url[r]);
        serde_row(
            &Q22Fields {
                auction: bid.auction,
                bidder: bid.bidder,
                price: bid.price,
                channel: &bid.channel,
                dir1: piece(0),
                dir2: piece(1),
                dir3: piece(2),
            },
            out,
        );
    }
}

#[operator]
pub(super) fn q22_rows(event: Event, out: &mut Collector<Q22Row>) {
    if let Event::Bid(bid) = event {
        let dirs = directories(&bid.url);
        out.emit(Q22Row { bid, dirs });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_as_split_index() {
        let pieces = |url: &str| directories(url).map(|r| r.map(|r| url[r].to_string()));
        assert_eq!(
            pieces("https://www.nexmark.com/a/b/c/item.htm"),
            [Some("a".into()), Some("b".into()), Some("c".into())]
        );
        assert_eq!(pieces("https://x/a"), [Some("a".into()), None, None]);
        assert_eq!(pieces("https://x/"), [Some("".into()), None, None]);
        assert_eq!(pieces("no-slash"), [None, None, None]);
        assert_eq!(
            pieces("a/b/c/d//"),
            [Some("d".into()), Some("".into()), Some("".into())]
        );
    }
}
