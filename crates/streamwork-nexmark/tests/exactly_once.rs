//! Nexmark under exactly-once: every stateful query, killed with SIGKILL in
//! the middle of a run that checkpoints and started again with the same
//! options, writes the rows of a run without failure (and counts them);
//! a query whose state cannot move to another parallelism says so.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    BINARY, Scratch, args, checkpointed, complete, kill_after_checkpoint, rows, run, run_ok,
};
use streamwork::core::checkpoint::Delivery;
use streamwork_nexmark::{Checkpoints, Input, Query, RowTarget, RunOptions};

/// `query` killed once (or twice) after a checkpoint and resumed gives
/// the rows and row count of an uninterrupted run at most once.
fn killed_and_resumed(query: &str, events: u64, kills: usize) {
    let scratch = Scratch::new(query);
    let expected_path = scratch.path("expected.jsonl");
    let expected = run_ok(&args(query, events, 2, &expected_path));
    let (out, ckpt) = (scratch.path("out.jsonl"), scratch.path("checkpoints"));
    let args = checkpointed(query, events, 2, &out, &ckpt);
    let mut reached = None;
    for _ in 0..kills {
        reached = Some(kill_after_checkpoint(&args, &ckpt, reached));
    }
    let resumed = run_ok(&args);
    assert!(
        resumed["events"].as_u64().unwrap() < events,
        "{query}: the run after the kill resumed from checkpoint {reached:?}, so it reads less than all {events} events: {resumed}"
    );
    let restored = resumed["resumed"]["checkpoint"].as_u64();
    assert!(
        restored >= reached,
        "{query}: the summary names the checkpoint resumed from, at least {reached:?}: {resumed}"
    );
    let want = rows(&expected_path);
    assert!(!want.is_empty(), "{query}: the check needs rows");
    assert_eq!(rows(&out), want, "{query}: rows after {kills} kill(s)");
    assert_eq!(
        resumed["results"], expected["results"],
        "{query}: rows counted across the runs"
    );
}

#[test]
fn q4_average_price_per_category() {
    killed_and_resumed("q4", 750_000, 1);
}

#[test]
fn q5_hot_items() {
    killed_and_resumed("q5", 1_000_000, 1);
}

#[test]
fn q6_average_selling_price_by_seller() {
    killed_and_resumed("q6", 750_000, 1);
}

#[test]
fn q7_highest_bid() {
    killed_and_resumed("q7", 1_000_000, 2);
}

#[test]
fn q8_new_users() {
    killed_and_resumed("q8", 1_000_000, 1);
}

#[test]
fn q9_winning_bids() {
    killed_and_resumed("q9", 750_000, 1);
}

#[test]
fn q11_user_sessions() {
    killed_and_resumed("q11", 750_000, 2);
}

#[test]
fn q3_local_item_suggestion() {
    killed_and_resumed("q3", 1_000_000, 1);
}

#[test]
fn q12_bids_per_bidder_per_window() {
    killed_and_resumed("q12", 750_000, 1);
}

#[test]
fn q15_bidding_statistics_per_day() {
    killed_and_resumed("q15", 750_000, 1);
}

#[test]
fn q16_bidding_statistics_per_channel_and_day() {
    killed_and_resumed("q16", 750_000, 1);
}

#[test]
fn q20_bids_with_their_auction() {
    killed_and_resumed("q20", 750_000, 1);
}

#[test]
fn q17_auction_statistics() {
    killed_and_resumed("q17", 1_000_000, 1);
}

#[test]
fn q18_last_bid_per_bidder_and_auction() {
    killed_and_resumed("q18", 300_000, 2);
}

#[test]
fn q19_top_bids_per_auction() {
    killed_and_resumed("q19", 300_000, 1);
}

/// A JSON-lines input resumes from its checkpointed offset with its event
/// count, so that bids keep the numbers that break the contract's ties.
#[test]
fn a_file_input_resumes_from_its_offset() {
    let scratch = Scratch::new("file");
    let events = scratch.path("events.jsonl");
    let generated = Command::new(BINARY)
        .args(["--query", "events", "--events", "300000", "--output"])
        .arg(&events)
        .output()
        .unwrap();
    assert!(generated.status.success());
    let from_file = |output: &std::path::Path| {
        vec![
            "--query".to_string(),
            "q9".into(),
            "--input".into(),
            events.display().to_string(),
            "--parallelism".into(),
            "2".into(),
            "--output".into(),
            output.display().to_string(),
            "--json-summary".into(),
        ]
    };
    let expected = scratch.path("expected.jsonl");
    run_ok(&from_file(&expected));
    let (out, ckpt) = (scratch.path("out.jsonl"), scratch.path("checkpoints"));
    let mut args = from_file(&out);
    args.extend([
        "--checkpoint-dir".into(),
        ckpt.display().to_string(),
        "--checkpoint-interval".into(),
        "100ms".into(),
    ]);
    kill_after_checkpoint(&args, &ckpt, None);
    let resumed = run_ok(&args);
    assert!(resumed["events"].as_u64().unwrap() < 300_000, "{resumed}");
    assert!(!rows(&expected).is_empty());
    assert_eq!(rows(&out), rows(&expected));
}

/// Every query runs with checkpoints, exactly once, and writes and counts
/// the rows of a run at most once.
#[test]
fn every_query_runs_exactly_once() {
    let scratch = Scratch::new("every");
    for query in Query::ALL {
        let (expected, out) = (
            scratch.path(&format!("{query}-expected.jsonl")),
            scratch.path(&format!("{query}.jsonl")),
        );
        let input = Input::Generated {
            events: 60_000,
            seed: 11,
        };
        let at_most_once = streamwork_nexmark::run(&RunOptions {
            output: RowTarget::File(expected.clone()),
            parallelism: 2,
            ..RunOptions::new(query, input.clone())
        })
        .unwrap();
        let exactly_once = streamwork_nexmark::run(&RunOptions {
            output: RowTarget::File(out.clone()),
            parallelism: 2,
            checkpoints: Some(Checkpoints {
                dir: scratch.path(&format!("{query}-checkpoints")),
                interval: Duration::from_millis(20),
                delivery: Delivery::ExactlyOnce,
            }),
            ..RunOptions::new(query, input)
        })
        .unwrap_or_else(|e| panic!("{query} exactly once: {e:#}"));
        assert_eq!(rows(&out), rows(&expected), "{query}");
        assert_eq!(exactly_once.results, at_most_once.results, "{query}");
        assert_eq!(exactly_once.events, 60_000, "{query}");
    }
}

/// A run killed before its first checkpoint starts over: nothing was
/// published, and the next run writes every row once.
#[test]
fn a_run_killed_before_its_first_checkpoint_starts_over() {
    let scratch = Scratch::new("early");
    let expected_path = scratch.path("expected.jsonl");
    run_ok(&args("q4", 200_000, 2, &expected_path));
    let (out, ckpt) = (scratch.path("out.jsonl"), scratch.path("checkpoints"));
    // An interval longer than the run: the kill comes before any checkpoint.
    let mut args = checkpointed("q4", 200_000, 2, &out, &ckpt);
    let at = args.iter().position(|a| a == "100ms").unwrap();
    args[at] = "3600s".into();
    let mut child = Command::new(BINARY)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(complete(&ckpt), None);
    let resumed = run_ok(&args);
    assert_eq!(resumed["events"].as_u64(), Some(200_000));
    assert!(resumed["resumed"].is_null(), "nothing to resume: {resumed}");
    assert_eq!(rows(&out), rows(&expected_path));
}

/// Keyed state moves to another parallelism; a query that keeps one
/// instance's partial results (q7's local maxima) is refused at another
/// parallelism, naming the way out, and resumes at its own.
#[test]
fn resuming_at_another_parallelism() {
    let scratch = Scratch::new("rescale");
    let expected_path = scratch.path("expected.jsonl");
    run_ok(&args("q4", 750_000, 2, &expected_path));
    let (out, ckpt) = (scratch.path("out.jsonl"), scratch.path("checkpoints"));
    kill_after_checkpoint(&checkpointed("q4", 750_000, 2, &out, &ckpt), &ckpt, None);
    run_ok(&checkpointed("q4", 750_000, 1, &out, &ckpt));
    assert_eq!(
        rows(&out),
        rows(&expected_path),
        "q4 resumed at parallelism 1"
    );

    let expected_path = scratch.path("expected-q7.jsonl");
    run_ok(&args("q7", 1_000_000, 2, &expected_path));
    let (out, ckpt) = (scratch.path("out-q7.jsonl"), scratch.path("checkpoints-q7"));
    kill_after_checkpoint(&checkpointed("q7", 1_000_000, 2, &out, &ckpt), &ckpt, None);
    let refused = run(&checkpointed("q7", 1_000_000, 1, &out, &ckpt))
        .expect_err("q7 restored at another parallelism");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("restore at parallelism 2"),
        "the refusal names the parallelism to restore at: {stderr}"
    );
    run_ok(&checkpointed("q7", 1_000_000, 2, &out, &ckpt));
    assert_eq!(
        rows(&out),
        rows(&expected_path),
        "q7 resumed at parallelism 2"
    );
}

/// A join's rows (both sides' tables, keyed) move to another parallelism:
/// q20 (bids with their auction) and q3 (auctions with their seller),
/// killed with SIGKILL after a checkpoint at one parallelism and resumed at
/// another, write the rows of a run without failure.
#[test]
fn a_join_killed_resumes_at_another_parallelism() {
    let scratch = Scratch::new("join-rescale");
    for (query, events, from, to) in [
        ("q20", 750_000, 2, 1),
        ("q20", 750_000, 1, 2),
        ("q3", 1_000_000, 2, 1),
    ] {
        let name = format!("{query}-{from}-{to}");
        let expected_path = scratch.path(&format!("expected-{name}.jsonl"));
        run_ok(&args(query, events, from, &expected_path));
        let out = scratch.path(&format!("out-{name}.jsonl"));
        let ckpt = scratch.path(&format!("checkpoints-{name}"));
        let reached =
            kill_after_checkpoint(&checkpointed(query, events, from, &out, &ckpt), &ckpt, None);
        let resumed = run_ok(&checkpointed(query, events, to, &out, &ckpt));
        assert!(
            resumed["events"].as_u64().unwrap() < events,
            "{name}: resumed from checkpoint {reached}, it reads less than all {events} events: {resumed}"
        );
        let want = rows(&expected_path);
        assert!(!want.is_empty(), "{name}: the check needs rows");
        assert_eq!(
            rows(&out),
            want,
            "{query} killed at parallelism {from}, resumed at {to}"
        );
    }
}

/// Into the blackhole, rows are counted as their checkpoint completes and
/// the count is kept in the checkpoint: a run killed and resumed reports
/// the job's rows, as many as a run without failure.
#[test]
fn the_blackhole_counts_across_a_kill() {
    let scratch = Scratch::new("blackhole");
    let none = std::path::Path::new("none");
    let expected = run_ok(&args("q4", 750_000, 2, none));
    let ckpt = scratch.path("checkpoints");
    let args = checkpointed("q4", 750_000, 2, none, &ckpt);
    kill_after_checkpoint(&args, &ckpt, None);
    let resumed = run_ok(&args);
    assert!(resumed["events"].as_u64().unwrap() < 750_000, "{resumed}");
    assert!(expected["results"].as_u64().unwrap() > 0);
    assert_eq!(resumed["results"], expected["results"]);
}

/// A damaged row count in a checkpoint is refused, naming the sink and
/// the way out, never read as some other count.
#[test]
fn a_damaged_checkpoint_is_refused() {
    let scratch = Scratch::new("damaged");
    let (out, ckpt) = (scratch.path("out.jsonl"), scratch.path("checkpoints"));
    let args = checkpointed("q4", 750_000, 2, &out, &ckpt);
    kill_after_checkpoint(&args, &ckpt, None);
    // Flip bytes all through the checkpoint log's segments.
    for entry in std::fs::read_dir(&ckpt).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "swlog") {
            let mut bytes = std::fs::read(&path).unwrap();
            for at in (64..bytes.len()).step_by(97) {
                bytes[at] ^= 0x5a;
            }
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let refused = run(&args).expect_err("a damaged checkpoint");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !stderr.contains("panicked"),
        "refused, not a panic: {stderr}"
    );
    assert!(stderr.contains("checkpoint"), "{stderr}");
}

/// Rows on standard output cannot be taken back: exactly-once is refused
/// before the run starts, and so is standard input, which cannot be read
/// again.
#[test]
fn what_cannot_be_exactly_once_is_refused() {
    let scratch = Scratch::new("refused");
    let ckpt = scratch.path("checkpoints");
    let stdout = Command::new(BINARY)
        .args(["--query", "q4", "--events", "1000", "--checkpoint-dir"])
        .arg(&ckpt)
        .output()
        .unwrap();
    assert!(!stdout.status.success());
    assert!(
        String::from_utf8_lossy(&stdout.stderr).contains("--output FILE"),
        "{}",
        String::from_utf8_lossy(&stdout.stderr)
    );
    let stdin = Command::new(BINARY)
        .args(["--query", "q4", "--input", "-", "--output"])
        .arg(scratch.path("out.jsonl"))
        .arg("--checkpoint-dir")
        .arg(&ckpt)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!stdin.status.success());
    assert!(
        String::from_utf8_lossy(&stdin.stderr).contains("standard input"),
        "{}",
        String::from_utf8_lossy(&stdin.stderr)
    );
}
