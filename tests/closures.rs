//! Closures as operators: chained on the builder (`JobBuilder::flow`), given
//! to `job!` (a bare closure is a `map`), and kept exactly once when they
//! hold state (`fold`, `reduce`: checkpointed by key group).

mod support;

use std::collections::BTreeMap;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use support::{Numbers, assert_same, dir, exactly_once};

const TEXT: &[&str] = &[
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog sleeps",
    "",
    "a fox and a dog",
];

fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for word in TEXT.iter().flat_map(|l| l.split_whitespace()) {
        *counts.entry(word.to_string()).or_default() += 1;
    }
    counts
}

/// The last count emitted for each word: the word's total.
fn finals(rows: Vec<(String, u64)>) -> BTreeMap<String, u64> {
    let mut last = BTreeMap::new();
    for (word, count) in rows {
        let entry = last.entry(word).or_insert(0);
        *entry = (*entry).max(count);
    }
    last
}

#[test]
fn a_word_count_chained_on_the_builder_counts_every_word() {
    for parallelism in [1, 2, 3] {
        let out = CollectSink::new();
        let mut job = JobBuilder::new("word count");
        let lines = job.source(
            "lines",
            1,
            VecSource::new(TEXT.iter().map(|l| l.to_string()).collect()),
        );
        job.flow(lines)
            .flat_map(|line: String| {
                line.split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|word: &String| !word.is_empty())
            .map(|word: String| word.to_lowercase())
            .parallelism(parallelism)
            .key_by(|word: &String| word.clone())
            .fold(0u64, |count: &mut u64, _word: String| *count += 1)
            .sink("counts", out.clone());
        let graph = job.build().unwrap();
        graph.run().unwrap();
        assert_eq!(finals(out.values()), expected_counts(), "p={parallelism}");
    }
}

#[test]
fn job_takes_closures_where_it_takes_operators() {
    let lengths = CollectSink::new();
    let graph = job! {
        name "closures";
        source lines = VecSource::new(TEXT.iter().map(|l| l.to_string()).collect());
        operator words = flat_map(|line: String| {
            line.split_whitespace().map(str::to_owned).collect::<Vec<_>>()
        }) <- lines;
        // A bare closure is a `map`.
        operator lengths_of = |word: String| (word.clone(), word.len() as u64) <- words;
        operator totals[2] = reduce(|total: &mut (String, u64), next: (String, u64)| total.1 += next.1)
            <- lengths_of.key(|(word, _): &(String, u64)| word.clone());
        operator flat = map(|(_, total): (String, (String, u64))| total) <- totals;
        sink out = lengths.clone() <- flat;
    }
    .unwrap();
    graph.run().unwrap();
    let expected: BTreeMap<String, u64> = expected_counts()
        .into_iter()
        .map(|(word, count)| {
            let len = word.len() as u64;
            (word, count * len)
        })
        .collect();
    assert_eq!(finals(lengths.values()), expected);
}

#[test]
fn a_fold_is_restored_after_a_failure_and_commits_exactly_once() {
    // Numbers: (i % 10, i - 500) for i in 0..n. A running sum per key,
    // failed once mid-stream and restored from its checkpoint, commits the
    // rows of a run without the failure.
    let n = 3_000u64;
    let expected: Vec<(u64, i64)> = {
        let mut sums = [0i64; 10];
        (0..n)
            .map(|i| {
                let (k, v) = (i % 10, i as i64 - 500);
                sums[k as usize] += v;
                (k, sums[k as usize])
            })
            .collect()
    };
    for p in [1, 2] {
        let checkpoints = dir(&format!("closures-fold-{p}"));
        let out = CollectSink::new();
        let fault = InjectFault::new(0, Fault::BeforeRecord(2_000));
        let graph = job! {
            delivery exactly_once;
            source numbers = Numbers::new(n);
            operator sums[p] = fold(0i64, |sum: &mut i64, (_, v): (u64, i64)| *sum += v)
                <- numbers.key(|(k, _): &(u64, i64)| *k);
            operator faulty = fault <- sums.global();
            sink rows = out.transactional() <- faulty;
        }
        .unwrap();
        let report = graph.run_with(exactly_once(&checkpoints, 1)).unwrap();
        assert_eq!(report.restarts, 1, "the fault fired");
        assert_same(&out.values(), &expected, &format!("p={p}"));
        let _ = std::fs::remove_dir_all(&checkpoints);
    }
}

#[test]
fn a_job_wide_parallelism_is_the_default_of_every_component() {
    let out = CollectSink::new();
    let graph = job! {
        name "wide";
        parallelism 3;
        source numbers = VecSource::new((0..100u64).collect());
        operator doubled = |n: u64| n * 2 <- numbers;
        operator narrow[1] = filter(|n: &u64| n.is_multiple_of(4)) <- doubled;
        sink out = out.clone() <- narrow;
    }
    .unwrap();
    let parallelism: Vec<(String, u32)> = graph
        .nodes()
        .iter()
        .map(|n| (n.name().to_string(), n.parallelism()))
        .collect();
    assert_eq!(
        parallelism,
        vec![
            ("numbers".to_string(), 3),
            ("doubled".to_string(), 3),
            ("narrow".to_string(), 1),
            ("out".to_string(), 3),
        ]
    );
    graph.run().unwrap();
    let mut values = out.values();
    values.sort_unstable();
    // VecSource gives each instance its share of the items.
    let expected: Vec<u64> = (0..100u64)
        .map(|n| n * 2)
        .filter(|n| n.is_multiple_of(4))
        .collect();
    assert_eq!(values, expected);
}

#[test]
fn rolled_csv_output_is_committed_exactly_once_after_a_failure() {
    let n = 3_000u64;
    for p in [1u32, 2] {
        let checkpoints = dir(&format!("closures-rolling-{p}"));
        let out = checkpoints.join("out");
        // Instance 0 of two sees about half the records.
        let fault = InjectFault::new(0, Fault::BeforeRecord(1_000));
        let graph = job! {
            delivery exactly_once;
            source numbers = Numbers::new(n);
            operator faulty[p] = fault <- numbers.shuffle();
            sink rows[p] = FileSink::csv(&out)
                .rolling(4_096, std::time::Duration::from_secs(3_600))
                .transactional() <- faulty;
        }
        .unwrap();
        let report = graph
            .run_with(exactly_once(&checkpoints.join("ckpt"), 1))
            .unwrap();
        assert_eq!(report.restarts, 1, "the fault fired");
        let mut rows: Vec<(u64, i64)> = Vec::new();
        let mut files = 0;
        for entry in std::fs::read_dir(&out).unwrap() {
            let name = entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.starts_with('.') {
                // Only the record of what was published stays hidden.
                assert!(name.ends_with(".published"), "left behind: {name}");
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            // Closed by size, but for each instance's last, closed by the end.
            assert!(
                name.ends_with("-final") || text.len() >= 4_096,
                "{name} closed at {} bytes",
                text.len()
            );
            for line in text.lines() {
                rows.push(streamwork::connectors::formats::from_csv_line(line).unwrap());
            }
        }
        let expected: Vec<(u64, i64)> = (0..n).map(|i| (i % 10, i as i64 - 500)).collect();
        assert_same(&rows, &expected, &format!("p={p}"));
        assert!(
            files >= p as usize,
            "every instance closes its last file: {files}"
        );
        let _ = std::fs::remove_dir_all(&checkpoints);
    }
}

#[test]
fn a_grouping_chosen_at_run_time_routes_as_its_fixed_form_does() {
    let words: Vec<String> = (0..600).map(|i| format!("w{}", i % 7)).collect();
    for fields in [true, false] {
        let out = CollectSink::new();
        let choice = if fields {
            GroupingChoice::key(|w: &String| w.clone())
        } else {
            GroupingChoice::shuffle()
        };
        let graph = job! {
            source words = VecSource::new(words.clone());
            sink out[3] = out.clone() <- words.grouped(choice);
        }
        .unwrap();
        graph.run().unwrap();
        let per_instance: Vec<std::collections::BTreeSet<String>> = (0..3)
            .map(|i| out.values_of_instance(i).into_iter().collect())
            .collect();
        let spread = (0..7)
            .map(|k| format!("w{k}"))
            .filter(|w| per_instance.iter().filter(|set| set.contains(w)).count() > 1)
            .count();
        if fields {
            assert_eq!(spread, 0, "a key's records all go to one instance");
        } else {
            assert_eq!(spread, 7, "round-robin spreads every key");
        }
        assert_eq!(out.values().len(), 600);
    }
}

#[test]
fn a_windowed_word_count_chains_on_the_builder() {
    use std::time::Duration;
    // (time in ms, text): three one-minute windows.
    let events: Vec<(i64, String)> = (0..180)
        .map(|i| (i * 1_000, ["a b", "b c", "a"][(i % 3) as usize].to_string()))
        .collect();
    let mut expected: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for (time, text) in &events {
        for word in text.split_whitespace() {
            *expected
                .entry((time / 60_000 * 60_000, word.to_string()))
                .or_default() += 1;
        }
    }
    let out = CollectSink::new();
    let mut job = JobBuilder::new("windowed word count");
    let lines = job.source("lines", 1, VecSource::new(events));
    job.flow(lines)
        .operator(
            "timed",
            Watermarks::monotonic().timestamps(|(t, _): &(i64, String)| Timestamp::from_millis(*t)),
        )
        .flat_map(|(_, text): (i64, String)| {
            text.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .key_by(|word: &String| word.clone())
        .window(Windows::tumbling(Duration::from_secs(60)).count())
        .map(|r: WindowResult<String, u64>| ((r.window.start.millis(), r.key), r.value))
        .sink("counts", out.clone());
    job.build().unwrap().run().unwrap();
    let counted: BTreeMap<(i64, String), u64> = out.values().into_iter().collect();
    assert_eq!(counted, expected);
}

#[test]
fn a_join_chains_on_the_builder() {
    use std::time::Duration;
    let out = CollectSink::new();
    let mut job = JobBuilder::new("chained join");
    let clicks = job.source(
        "clicks",
        1,
        VecSource::new(vec![(1u32, 10i64), (2, 20), (3, 30)]),
    );
    let views = job.source("views", 1, VecSource::new(vec![(1u32, 5i64), (3, 70_000)]));
    let timed = |v: &(u32, i64)| Timestamp::from_millis(v.1);
    let views = job
        .flow(views)
        .operator("timed views", Watermarks::monotonic().timestamps(timed))
        .stream();
    job.flow(clicks)
        .operator("timed clicks", Watermarks::monotonic().timestamps(timed))
        .key_by(|c: &(u32, i64)| c.0)
        .join(
            views.key_by(|v: &(u32, i64)| v.0),
            Join::inner().tumbling(Duration::from_secs(60)),
        )
        .map(|row: JoinRow<u32, (u32, i64), (u32, i64)>| row.key)
        .sink("pairs", out.clone());
    job.build().unwrap().run().unwrap();
    // Key 1 meets in the first minute; key 3's view is a minute later.
    assert_eq!(out.values(), vec![1]);
}
