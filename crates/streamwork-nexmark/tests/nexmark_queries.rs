//! The Nexmark contract: every query on an input with out-of-order,
//! late and malformed lines give the rows of an independent batch
//! computation, identical for every parallelism.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use streamwork_nexmark::generator::{GeneratorConfig, event};
use streamwork_nexmark::time::{format, parse};
use streamwork_nexmark::{Bid, Event, Input, Query, RowTarget, RunOptions, run};

/// A deterministic scramble.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

/// Generated events, locally reordered by up to ~3 s, with some late events
/// (12 s behind) and malformed lines mixed in.
fn input(dir: &Path) -> PathBuf {
    // 1 000 events per second of event time: windows hold a few hundred bids.
    let config = GeneratorConfig {
        events_per_second: 1_000,
        ..GeneratorConfig::default()
    };
    input_of(dir, "events.jsonl", config, 40_000, 12_000)
}

/// `count` events of `config`, written as [`input`] says, late ones
/// `late_by` ms behind their own time.
fn input_of(dir: &Path, name: &str, config: GeneratorConfig, count: u64, late_by: i64) -> PathBuf {
    let mut lines: Vec<(i64, String)> = (0..count)
        .flat_map(|n| {
            let mut e = event(&config, n);
            let jitter = (mix(n) % 3_000) as i64;
            let key = e.date_time() + jitter;
            if mix(n + 7).is_multiple_of(500) {
                // Late: far behind everything around it.
                let earlier = e.date_time() - late_by;
                set_time(&mut e, earlier);
            }
            let mut lines = vec![(key, e.to_json())];
            if let Event::Bid(bid) = &mut e {
                vary(n, bid);
                lines[0].1 = e.to_json();
                if let Event::Bid(bid) = &e {
                    lines.extend(
                        ties(n, bid)
                            .into_iter()
                            .map(|b| (key, Event::Bid(b).to_json())),
                    );
                }
            }
            lines
        })
        .collect();
    // Sort by time plus jitter: out of order by less than the 4 s bound
    // (a stable sort: a tie's copies stay after their original).
    lines.sort_by_key(|(key, _)| *key);
    let mut text = String::new();
    for (i, (_, line)) in lines.iter().enumerate() {
        text.push_str(line);
        text.push('\n');
        match i % 4_001 {
            17 => text.push_str("{not json\n"),
            42 => {
                text.push_str("{\"event_type\":7,\"person\":null,\"auction\":null,\"bid\":null}\n")
            }
            _ => {}
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Edge cases of the per-bid queries in some bids: channels and URLs for
/// q21 and q22, `extra` for q14, prices for q14's bounds.
fn vary(n: u64, bid: &mut Bid) {
    match mix(n + 11) % 40 {
        0 => bid.channel = "APPLE".into(),
        1 => bid.channel = "Apple ".into(),
        2 => bid.url = "https://x/y?channel_id=5".into(),
        3 => bid.url = "a=1&xchannel_id=9&channel_id=&b=2".into(),
        4 => bid.url = "channel_id=77&channel_id=78".into(),
        5 => bid.url = "no-slashes".into(),
        6 => bid.url = "a/b/c/d//".into(),
        7 => bid.extra = "cCçc \"quoted\" ☃".into(),
        8 => bid.price = 1_101_322, // 908 * price = 1,000,000,376 thousandths: just inside
        9 => bid.price = 1_101_321, // 999,999,468: just outside
        10 => bid.price = 55_066_079, // 908 * price = 49,999,999,732: inside
        11 => bid.price = 55_066_080, // 50,000,000,640: outside
        _ => {}
    }
}

/// Copies of some bids that tie with them: the same price and time (read
/// after them), the same time at another price, the same price later.
fn ties(n: u64, bid: &Bid) -> Vec<Bid> {
    let copy = |extra: &str, price: u64, later: i64| Bid {
        extra: extra.into(),
        price,
        date_time: bid.date_time + later,
        ..bid.clone()
    };
    match mix(n + 3) % 30 {
        0 => vec![copy("tie-same", bid.price, 0)],
        1 => vec![
            copy("tie-time", bid.price / 2, 0),
            copy("tie-later", bid.price, 1),
        ],
        2 => vec![copy("tie-a", bid.price, 0), copy("tie-b", bid.price, 0)],
        _ => vec![],
    }
}

fn set_time(e: &mut streamwork_nexmark::Event, t: i64) {
    match e {
        streamwork_nexmark::Event::Person(p) => p.date_time = t,
        streamwork_nexmark::Event::Auction(a) => a.date_time = t,
        streamwork_nexmark::Event::Bid(b) => b.date_time = t,
    }
}

/// The events that are on time, by kind, read independently of the crate's model.
struct Reference {
    people: Vec<Value>,
    auctions: Vec<Value>,
    bids: Vec<Value>,
}

fn reference(path: &Path) -> (Reference, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let (mut people, mut auctions, mut bids, mut late, mut malformed) =
        (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    let mut max_seen = i64::MIN;
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            malformed += 1;
            continue;
        };
        let kind = match value["event_type"].as_u64() {
            Some(0) => "person",
            Some(1) => "auction",
            Some(2) => "bid",
            _ => {
                malformed += 1;
                continue;
            }
        };
        let body = value[kind].clone();
        let time = parse(body["dateTime"].as_str().unwrap()).unwrap();
        if max_seen != i64::MIN && time < max_seen - 4_000 {
            late += 1;
            continue;
        }
        max_seen = max_seen.max(time);
        match kind {
            "person" => people.push(body),
            "auction" => auctions.push(body),
            _ => bids.push(body),
        }
    }
    (
        Reference {
            people,
            auctions,
            bids,
        },
        late,
        malformed,
    )
}

fn bid_row(bid: &Value) -> Value {
    json!({"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"], "dateTime": bid["dateTime"], "extra": bid["extra"]})
}

fn time_of(bid: &Value) -> i64 {
    parse(bid["dateTime"].as_str().unwrap()).unwrap()
}

fn expected(query: Query, events: &Reference) -> Vec<Value> {
    let bids = &events.bids;
    match query {
        Query::Q0 => bids.iter().map(bid_row).collect(),
        Query::Q1 => bids
            .iter()
            .map(|b| {
                let mut row = bid_row(b);
                row["price"] = json!(b["price"].as_u64().unwrap() as f64 * 0.908);
                row
            })
            .collect(),
        Query::Q2 => bids
            .iter()
            .filter(|b| b["auction"].as_u64().unwrap().is_multiple_of(123))
            .map(|b| json!({"auction": b["auction"], "price": b["price"]}))
            .collect(),
        Query::Q5 => {
            let mut counts: BTreeMap<i64, BTreeMap<u64, u64>> = BTreeMap::new();
            for b in bids {
                let t = time_of(b);
                let mut start = t.div_euclid(2_000) * 2_000;
                while start > t - 10_000 {
                    *counts
                        .entry(start)
                        .or_default()
                        .entry(b["auction"].as_u64().unwrap())
                        .or_default() += 1;
                    start -= 2_000;
                }
            }
            let mut rows = Vec::new();
            for (start, per_auction) in counts {
                let max = *per_auction.values().max().unwrap();
                for (auction, num) in per_auction.into_iter().filter(|(_, n)| *n == max) {
                    rows.push(json!({"auction": auction, "num": num, "window_start": format(start), "window_end": format(start + 10_000)}));
                }
            }
            rows
        }
        Query::Q7 => {
            let mut windows: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
            for b in bids {
                windows
                    .entry(time_of(b).div_euclid(10_000))
                    .or_default()
                    .push(b);
            }
            let mut rows = Vec::new();
            for bids in windows.values() {
                let max = bids
                    .iter()
                    .map(|b| b["price"].as_u64().unwrap())
                    .max()
                    .unwrap();
                rows.extend(
                    bids.iter()
                        .filter(|b| b["price"].as_u64().unwrap() == max)
                        .map(|b| bid_row(b)),
                );
            }
            rows
        }
        Query::Q3 => {
            let mut rows = Vec::new();
            for a in events.auctions.iter().filter(|a| a["category"] == 10) {
                for p in &events.people {
                    let state = p["state"].as_str().unwrap();
                    if p["id"] == a["seller"] && matches!(state, "OR" | "ID" | "CA") {
                        rows.push(json!({"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]}));
                    }
                }
            }
            rows
        }
        Query::Q4 => {
            let mut per_category: BTreeMap<u64, (u128, u128)> = BTreeMap::new();
            let mut by_auction: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
            for b in bids {
                by_auction
                    .entry(b["auction"].as_u64().unwrap())
                    .or_default()
                    .push(b);
            }
            for a in &events.auctions {
                let (start, end) = (time_of(a), parse(a["expires"].as_str().unwrap()).unwrap());
                let best = by_auction
                    .get(&a["id"].as_u64().unwrap())
                    .into_iter()
                    .flatten()
                    .filter(|b| (start..=end).contains(&time_of(b)))
                    .map(|b| b["price"].as_u64().unwrap())
                    .max();
                if let Some(best) = best {
                    let (sum, n) = per_category
                        .entry(a["category"].as_u64().unwrap())
                        .or_default();
                    *sum += u128::from(best);
                    *n += 1;
                }
            }
            per_category
                .into_iter()
                .map(|(category, (sum, n))| json!({"category": category, "avg": (sum / n) as u64}))
                .collect()
        }
        Query::Q8 => {
            let mut rows = Vec::new();
            for p in &events.people {
                let window = time_of(p).div_euclid(10_000);
                let sells = events
                    .auctions
                    .iter()
                    .any(|a| a["seller"] == p["id"] && time_of(a).div_euclid(10_000) == window);
                if sells {
                    rows.push(json!({"id": p["id"], "name": p["name"], "starttime": format(window * 10_000)}));
                }
            }
            rows
        }
        Query::Events => unreachable!("not a query under test"),
        other => expected_more(other, events),
    }
}

fn num(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap()
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap()
}

fn day(t: i64) -> String {
    format(t)[..10].to_string()
}

fn hour_minute(t: i64) -> String {
    format(t)[11..16].to_string()
}

/// Each auction with a winning bid, with that bid: the highest price in
/// `[dateTime, expires]`, then the earliest time, then the bid read first.
fn winning_bids(events: &Reference) -> Vec<(&Value, &Value)> {
    let mut by_auction: BTreeMap<u64, Vec<(usize, &Value)>> = BTreeMap::new();
    for (read, b) in events.bids.iter().enumerate() {
        by_auction
            .entry(num(b, "auction"))
            .or_default()
            .push((read, b));
    }
    let mut winners = Vec::new();
    for a in &events.auctions {
        let (start, end) = (time_of(a), parse(text(a, "expires")).unwrap());
        let best = by_auction
            .get(&num(a, "id"))
            .into_iter()
            .flatten()
            .filter(|(_, b)| (start..=end).contains(&time_of(b)))
            .min_by_key(|(read, b)| (std::cmp::Reverse(num(b, "price")), time_of(b), *read));
        if let Some((_, b)) = best {
            winners.push((a, *b));
        }
    }
    winners
}

/// The twelve counts of q15 and q16 over a group's bids.
fn rank_counts(bids: &[&Value]) -> Vec<(String, Value)> {
    let rank = |b: &Value| match num(b, "price") {
        0..10_000 => 1,
        10_000..1_000_000 => 2,
        _ => 3,
    };
    let mut row = Vec::new();
    for (what, field) in [
        ("bids", None),
        ("bidders", Some("bidder")),
        ("auctions", Some("auction")),
    ] {
        for r in 0..4 {
            let chosen = bids.iter().filter(|b| r == 0 || rank(b) == r);
            let n = match field {
                None => chosen.count(),
                Some(f) => chosen
                    .map(|b| num(b, f))
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
            };
            let name = if r == 0 {
                format!("total_{what}")
            } else {
                format!("rank{r}_{what}")
            };
            row.push((name, json!(n)));
        }
    }
    row
}

fn full_bid_row(b: &Value) -> Value {
    json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "channel": b["channel"], "url": b["url"], "dateTime": b["dateTime"], "extra": b["extra"]})
}

fn expected_more(query: Query, events: &Reference) -> Vec<Value> {
    let bids = &events.bids;
    match query {
        Query::Q6 => {
            let mut sellers: BTreeMap<u64, Vec<(i64, u64, u64)>> = BTreeMap::new();
            for (a, b) in winning_bids(events) {
                sellers.entry(num(a, "seller")).or_default().push((time_of(b), num(a, "id"), num(b, "price")));
            }
            let mut rows = Vec::new();
            for (seller, mut sales) in sellers {
                sales.sort();
                for i in 0..sales.len() {
                    let window = &sales[i.saturating_sub(10)..=i];
                    let sum: u128 = window.iter().map(|s| u128::from(s.2)).sum();
                    rows.push(json!({"seller": seller, "avg_price": (sum / window.len() as u128) as u64}));
                }
            }
            rows
        }
        Query::Q9 => winning_bids(events)
            .into_iter()
            .map(|(a, b)| {
                json!({"id": a["id"], "itemName": a["itemName"], "description": a["description"], "initialBid": a["initialBid"], "reserve": a["reserve"], "dateTime": a["dateTime"], "expires": a["expires"], "seller": a["seller"], "category": a["category"], "extra": a["extra"], "auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "bid_dateTime": b["dateTime"], "bid_extra": b["extra"]})
            })
            .collect(),
        Query::Q10 => bids
            .iter()
            .map(|b| {
                let mut row = bid_row(b);
                row["dt"] = json!(day(time_of(b)));
                row["hm"] = json!(hour_minute(time_of(b)));
                row
            })
            .collect(),
        Query::Q11 => {
            let mut bidders: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
            for b in bids {
                bidders.entry(num(b, "bidder")).or_default().push(time_of(b));
            }
            let mut rows = Vec::new();
            for (bidder, mut times) in bidders {
                times.sort();
                let mut start = 0;
                for i in 1..=times.len() {
                    if i == times.len() || times[i] - times[i - 1] >= 10_000 {
                        rows.push(json!({"bidder": bidder, "bid_count": i - start, "starttime": format(times[start]), "endtime": format(times[i - 1] + 10_000)}));
                        start = i;
                    }
                }
            }
            rows
        }
        Query::Q12 => {
            let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
            for b in bids {
                *counts.entry((num(b, "bidder"), time_of(b).div_euclid(10_000))).or_default() += 1;
            }
            counts
                .into_iter()
                .map(|((bidder, w), n)| json!({"bidder": bidder, "bid_count": n, "starttime": format(w * 10_000), "endtime": format(w * 10_000 + 10_000)}))
                .collect()
        }
        Query::Q13 => {
            // The standard side input: key k has the value "k".
            bids.iter()
                .map(|b| {
                    let key = num(b, "auction") % 10_000;
                    json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "dateTime": b["dateTime"], "value": key.to_string()})
                })
                .collect()
        }
        Query::Q14 => bids
            .iter()
            .filter_map(|b| {
                let milli = 908 * u128::from(num(b, "price"));
                if !(1_000_000_000 < milli && milli < 50_000_000_000) {
                    return None;
                }
                let hour: u32 = hour_minute(time_of(b))[..2].parse().unwrap();
                let kind = match hour {
                    8..=18 => "dayTime",
                    0..=6 | 20..=23 => "nightTime",
                    _ => "otherTime",
                };
                let c = text(b, "extra").matches('c').count();
                Some(json!({"auction": b["auction"], "bidder": b["bidder"], "price": format!("{}.{:03}", milli / 1000, milli % 1000), "bidTimeType": kind, "dateTime": b["dateTime"], "extra": b["extra"], "c_counts": c}))
            })
            .collect(),
        Query::Q15 | Query::Q16 => {
            let mut groups: BTreeMap<(String, String), Vec<&Value>> = BTreeMap::new();
            for b in bids {
                let channel = if query == Query::Q16 { text(b, "channel").to_string() } else { String::new() };
                groups.entry((channel, day(time_of(b)))).or_default().push(b);
            }
            groups
                .into_iter()
                .map(|((channel, day), bids)| {
                    let mut row = serde_json::Map::new();
                    row.insert("day".into(), json!(day));
                    if query == Query::Q16 {
                        row.insert("channel".into(), json!(channel));
                        let minute = bids.iter().map(|b| hour_minute(time_of(b))).max().unwrap();
                        row.insert("minute".into(), json!(minute));
                    }
                    row.extend(rank_counts(&bids));
                    Value::Object(row)
                })
                .collect()
        }
        Query::Q17 => {
            let mut groups: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
            for b in bids {
                groups.entry((num(b, "auction"), day(time_of(b)))).or_default().push(num(b, "price"));
            }
            groups
                .into_iter()
                .map(|((auction, day), prices)| {
                    let in_rank = |r: std::ops::Range<u64>| prices.iter().filter(|p| r.contains(p)).count();
                    let sum: u128 = prices.iter().map(|&p| u128::from(p)).sum();
                    json!({"auction": auction, "day": day, "total_bids": prices.len(), "rank1_bids": in_rank(0..10_000), "rank2_bids": in_rank(10_000..1_000_000), "rank3_bids": in_rank(1_000_000..u64::MAX), "min_price": prices.iter().min(), "max_price": prices.iter().max(), "avg_price": (sum / prices.len() as u128) as u64, "sum_price": sum as u64})
                })
                .collect()
        }
        Query::Q18 => {
            let mut last: BTreeMap<(u64, u64), &Value> = BTreeMap::new();
            for b in bids {
                let slot = last.entry((num(b, "bidder"), num(b, "auction"))).or_insert(b);
                // Read later wins a tie on time.
                if time_of(b) >= time_of(slot) {
                    *slot = b;
                }
            }
            last.into_values().map(full_bid_row).collect()
        }
        Query::Q19 => {
            let mut auctions: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
            for b in bids {
                auctions.entry(num(b, "auction")).or_default().push(b);
            }
            let mut rows = Vec::new();
            for mut bids in auctions.into_values() {
                // A stable sort: among equal prices, read first ranks first.
                bids.sort_by_key(|b| std::cmp::Reverse(num(b, "price")));
                for (i, b) in bids.iter().take(10).enumerate() {
                    let mut row = full_bid_row(b);
                    row["rank_number"] = json!(i + 1);
                    rows.push(row);
                }
            }
            rows
        }
        Query::Q20 => {
            let mut tens: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
            for a in events.auctions.iter().filter(|a| a["category"] == 10) {
                tens.entry(num(a, "id")).or_default().push(a);
            }
            let mut rows = Vec::new();
            for b in bids {
                for a in tens.get(&num(b, "auction")).into_iter().flatten() {
                    rows.push(json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "channel": b["channel"], "url": b["url"], "bid_dateTime": b["dateTime"], "bid_extra": b["extra"], "itemName": a["itemName"], "description": a["description"], "initialBid": a["initialBid"], "reserve": a["reserve"], "auction_dateTime": a["dateTime"], "expires": a["expires"], "seller": a["seller"], "category": a["category"], "auction_extra": a["extra"]}));
                }
            }
            rows
        }
        Query::Q21 => bids
            .iter()
            .filter_map(|b| {
                let id = match text(b, "channel").to_lowercase().as_str() {
                    "apple" => "0".to_string(),
                    "google" => "1".to_string(),
                    "facebook" => "2".to_string(),
                    "baidu" => "3".to_string(),
                    _ => {
                        let url = text(b, "url");
                        // Every `&`-separated piece, the first one included.
                        url.split('&').find_map(|piece| piece.strip_prefix("channel_id=")).map(String::from)?
                    }
                };
                Some(json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "channel": b["channel"], "channel_id": id}))
            })
            .collect(),
        Query::Q22 => bids
            .iter()
            .map(|b| {
                let pieces: Vec<&str> = text(b, "url").split('/').collect();
                let dir = |i: usize| pieces.get(i).map_or(Value::Null, |p| json!(p));
                json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "channel": b["channel"], "dir1": dir(3), "dir2": dir(4), "dir3": dir(5)})
            })
            .collect(),
        _ => unreachable!("handled in `expected`"),
    }
}

/// Rows as sorted canonical strings; euro prices rounded to 3 decimals.
fn canonical(rows: impl IntoIterator<Item = Value>) -> Vec<String> {
    let mut rows: Vec<String> = rows
        .into_iter()
        .map(|mut row| {
            if let Some(price) = row.get("price").and_then(Value::as_f64)
                && row["price"].is_f64()
            {
                row["price"] = json!(format!("{price:.3}"));
            }
            row.to_string()
        })
        .collect();
    rows.sort();
    rows
}

// Every query at parallelism 1, 2, 5 and 8, in two tests that the
// harness runs side by side.

#[test]
fn queries_match_a_batch_computation_at_parallelism_1_and_8() {
    let scratch = common::Scratch::new("queries-1-8");
    let dir = scratch.dir().to_path_buf();
    let path = input(&dir);
    match_the_batch_computation(&dir, &path, &[1, 8], &[]);
}

#[test]
fn queries_match_a_batch_computation_at_parallelism_2_and_5() {
    let scratch = common::Scratch::new("queries-2-5");
    let dir = scratch.dir().to_path_buf();
    let path = input(&dir);
    match_the_batch_computation(&dir, &path, &[2, 5], &[]);
}

/// Three days of event time, from 20:00 on the first: the day boundaries
/// of q14's time of day and q15-q17's days, and auctions open across
/// midnight.
#[test]
fn queries_match_a_batch_computation_across_days() {
    let scratch = common::Scratch::new("days");
    let dir = scratch.dir().to_path_buf();
    // 13 s between events: 20 000 events span three days.
    let config = GeneratorConfig {
        base_time: 1_704_139_200_000,
        spacing_ms: Some(13_000),
        ..GeneratorConfig::default()
    };
    let path = input_of(&dir, "days.jsonl", config, 20_000, 60_000);
    let (events, ..) = reference(&path);
    let days: std::collections::BTreeSet<String> = events
        .bids
        .iter()
        .map(|bid| day(parse(bid["dateTime"].as_str().unwrap()).unwrap()))
        .collect();
    assert!(
        days.len() >= 4,
        "the bids span four calendar days: {days:?}"
    );
    // q8's windows of 10 s never hold a person and an auction 13 s apart.
    match_the_batch_computation(&dir, &path, &[1, 3], &[Query::Q8]);
}

/// Every query on the input at `path`, at each of `parallelisms`, gives the
/// rows of the batch computation (none only for `may_be_empty`).
fn match_the_batch_computation(
    dir: &Path,
    path: &Path,
    parallelisms: &[u32],
    may_be_empty: &[Query],
) {
    let (events, late, malformed) = reference(path);
    assert!(
        late > 10 && malformed > 10,
        "the input exercises lateness ({late}) and bad lines ({malformed})"
    );
    for query in Query::ALL {
        let want = canonical(expected(query, &events));
        assert!(
            !want.is_empty() || may_be_empty.contains(&query),
            "{query} has rows to check"
        );
        for &parallelism in parallelisms {
            let output = dir.join(format!("{query}-{parallelism}.jsonl"));
            let summary = run(&RunOptions {
                query,
                output: RowTarget::File(output.clone()),
                parallelism,
                ..RunOptions::new(query, Input::File(path.to_path_buf()))
            })
            .unwrap();
            assert_eq!(
                (summary.late, summary.malformed),
                (late, malformed),
                "{query}"
            );
            let text = std::fs::read_to_string(&output).unwrap();
            let got = canonical(
                text.lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()),
            );
            assert_eq!(
                got.len(),
                want.len(),
                "{query} at parallelism {parallelism}"
            );
            assert!(
                got == want,
                "{query} at parallelism {parallelism} differs from the batch computation"
            );
            assert_eq!(summary.results as usize, want.len());
        }
    }
}

#[test]
fn generated_runs_are_identical_for_every_parallelism() {
    let scratch = common::Scratch::new("gen");
    let dir = scratch.dir().to_path_buf();
    for query in [Query::Q5, Query::Q7] {
        let mut outputs = Vec::new();
        // Two worker threads for eight instances: the same results.
        for (parallelism, workers) in [(1, None), (3, Some(0)), (8, None), (8, Some(3))] {
            let output = dir.join(format!("{query}-{parallelism}-{workers:?}.jsonl"));
            let summary = run(&RunOptions {
                query,
                input: Input::Generated {
                    events: 30_000,
                    seed: 7,
                },
                output: RowTarget::File(output.clone()),
                parallelism,
                workers,
                side_input: None,
                checkpoints: None,
                updates: false,
                hold_input_open: false,
            })
            .unwrap();
            assert_eq!((summary.events, summary.late), (30_000, 0));
            assert!(summary.cpu_s > 0.0, "the run used CPU time");
            let mut lines: Vec<String> = std::fs::read_to_string(&output)
                .unwrap()
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            outputs.push(lines);
        }
        assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{query}");
    }
}

fn read_rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn q13_joins_every_row_of_a_side_input_file() {
    let scratch = common::Scratch::new("q13");
    let dir = scratch.dir().to_path_buf();
    let path = input(&dir);
    let (events, _, _) = reference(&path);
    // Repeated keys, empty values, commas and quotes in values, keys no bid
    // has, a negative key, empty lines, no final newline.
    let side = dir.join("side.csv");
    std::fs::write(&side, "0,zero\n\n1007,seven,with \"commas\"\n1007,\n-3,never\n2500,x\n2500,y\n1500,z\n123456789,none").unwrap();
    let rows_of = |key: u64| -> Vec<&str> {
        match key {
            0 => vec!["zero"],
            1007 => vec!["seven,with \"commas\"", ""],
            2500 => vec!["x", "y"],
            1500 => vec!["z"],
            _ => vec![],
        }
    };
    let want = canonical(events.bids.iter().flat_map(|b| {
        rows_of(num(b, "auction") % 10_000).into_iter().map(move |value| {
            json!({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "dateTime": b["dateTime"], "value": value})
        })
    }));
    assert!(want.len() > 10, "the input's bids meet the side input");
    for parallelism in [1, 3] {
        let output = dir.join(format!("q13-{parallelism}.jsonl"));
        let summary = run(&RunOptions {
            output: RowTarget::File(output.clone()),
            parallelism,
            side_input: Some(side.clone()),
            ..RunOptions::new(Query::Q13, Input::File(path.clone()))
        })
        .unwrap();
        assert_eq!(summary.results as usize, want.len());
        assert!(
            canonical(read_rows(&output)) == want,
            "q13 at parallelism {parallelism}"
        );
    }
}

#[test]
fn q13_refuses_a_bad_side_input_before_any_result() {
    let scratch = common::Scratch::new("q13-bad");
    let dir = scratch.dir().to_path_buf();
    let side = dir.join("bad.csv");
    std::fs::write(&side, "1,a\n2,b\nthree,c\n").unwrap();
    let output = dir.join("never.jsonl");
    let error = run(&RunOptions {
        output: RowTarget::File(output.clone()),
        side_input: Some(side.clone()),
        ..RunOptions::new(
            Query::Q13,
            Input::Generated {
                events: 1_000,
                seed: 1,
            },
        )
    })
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("line 3") && error.contains("bad.csv"),
        "{error}"
    );
    assert!(!output.exists(), "no result before the side input is read");
    let missing = run(&RunOptions {
        side_input: Some(dir.join("missing.csv")),
        ..RunOptions::new(
            Query::Q13,
            Input::Generated {
                events: 1_000,
                seed: 1,
            },
        )
    })
    .unwrap_err()
    .to_string();
    assert!(missing.contains("missing.csv"), "{missing}");
}

#[test]
fn q14_prints_exact_euro_prices_with_three_decimals() {
    let scratch = common::Scratch::new("q14");
    let dir = scratch.dir().to_path_buf();
    let path = input(&dir);
    let output = dir.join("q14.jsonl");
    run(&RunOptions {
        output: RowTarget::File(output.clone()),
        ..RunOptions::new(Query::Q14, Input::File(path))
    })
    .unwrap();
    let text = std::fs::read_to_string(&output).unwrap();
    let prices: Vec<&str> = text
        .lines()
        .map(|line| {
            let from = line.find("\"price\":").unwrap() + 8;
            let to = from + line[from..].find(',').unwrap();
            &line[from..to]
        })
        .collect();
    assert!(prices.contains(&"1000000.376"), "the lower edge is in");
    assert!(prices.contains(&"49999999.732"), "the upper edge is in");
    for price in prices {
        let (units, thousandths) = price.split_once('.').unwrap();
        assert!(
            units.bytes().all(|b| b.is_ascii_digit()) && thousandths.len() == 3,
            "{price}"
        );
    }
}

#[test]
fn the_blackhole_counts_the_rows_it_does_not_write() {
    for query in Query::ALL {
        let rows = |output: RowTarget| {
            run(&RunOptions {
                output,
                parallelism: 2,
                ..RunOptions::new(
                    query,
                    Input::Generated {
                        events: 20_000,
                        seed: 3,
                    },
                )
            })
            .unwrap()
            .results
        };
        let file = std::env::temp_dir().join(format!(
            "streamwork-nexmark-blackhole-{}-{query}.jsonl",
            std::process::id()
        ));
        let written = rows(RowTarget::File(file.clone()));
        assert_eq!(read_rows(&file).len() as u64, written, "{query}");
        let _ = std::fs::remove_file(&file);
        assert_eq!(rows(RowTarget::Blackhole), written, "{query}");
    }
}
