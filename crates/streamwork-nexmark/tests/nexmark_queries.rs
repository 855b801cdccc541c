//! The Nexmark contract: every query on an input with out-of-order,
//! late and malformed lines give the rows of an independent batch
//! computation, identical for every parallelism.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use streamwork_nexmark::generator::{GeneratorConfig, event};
use streamwork_nexmark::time::{format, parse};
use streamwork_nexmark::{Input, Query, RunOptions, run};

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
    let mut lines: Vec<(i64, String)> = (0..40_000u64)
        .map(|n| {
            let mut e = event(&config, n);
            let jitter = (mix(n) % 3_000) as i64;
            let key = e.date_time() + jitter;
            if mix(n + 7).is_multiple_of(500) {
                // Late: far behind everything around it.
                let earlier = e.date_time() - 12_000;
                set_time(&mut e, earlier);
            }
            (key, e.to_json())
        })
        .collect();
    // Sort by time plus jitter: out of order by less than the 4 s bound.
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
    let path = dir.join("events.jsonl");
    std::fs::write(&path, text).unwrap();
    path
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

#[test]
fn queries_match_a_batch_computation_at_every_parallelism() {
    let dir = std::env::temp_dir().join(format!("streamwork-nexmark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = input(&dir);
    let (events, late, malformed) = reference(&path);
    assert!(
        late > 10 && malformed > 10,
        "the input exercises lateness ({late}) and bad lines ({malformed})"
    );
    for query in [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q7,
        Query::Q8,
    ] {
        let want = canonical(expected(query, &events));
        assert!(!want.is_empty());
        for parallelism in [1, 2, 5, 8] {
            let output = dir.join(format!("{query}-{parallelism}.jsonl"));
            let summary = run(&RunOptions {
                query,
                input: Input::File(path.clone()),
                output: Some(output.clone()),
                parallelism,
                workers: None,
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
    let dir = std::env::temp_dir().join(format!("streamwork-nexmark-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for query in [Query::Q5, Query::Q7] {
        let mut outputs = Vec::new();
        // Two worker threads for eight instances: the same results.
        for (parallelism, workers) in [(1, None), (3, None), (8, None), (8, Some(2))] {
            let output = dir.join(format!("{query}-{parallelism}-{workers:?}.jsonl"));
            let summary = run(&RunOptions {
                query,
                input: Input::Generated {
                    events: 30_000,
                    seed: 7,
                },
                output: Some(output.clone()),
                parallelism,
                workers,
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
