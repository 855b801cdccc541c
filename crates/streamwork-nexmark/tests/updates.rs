//! Update streams: the changes of a query's result as they happen, each
//! row with its `"op"`. Applied in order from an empty result they give the
//! final rows (no row retracted that is not there), for every query and
//! parallelism, and across a kill with SIGKILL and a restart exactly once.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Scratch, args, checkpointed, kill_after_checkpoint, run_ok};
use serde_json::Value;
use streamwork_nexmark::{Input, Query, RowTarget, RunOptions, run};

/// Rows as a multiset of canonical JSON (keys sorted).
type Result_ = BTreeMap<String, u64>;

/// The final rows at `path`.
fn final_rows(path: &Path) -> Result_ {
    let mut rows = Result_::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        *rows.entry(row.to_string()).or_default() += 1;
    }
    rows
}

/// The update stream at `path` applied in order: the result, and the
/// number of lines. Panics at a line without an op, or one that retracts a
/// row the result does not hold.
fn applied(path: &Path) -> (Result_, u64) {
    let mut result = Result_::new();
    let mut lines = 0;
    for (at, line) in std::fs::read_to_string(path).unwrap().lines().enumerate() {
        lines += 1;
        let mut row: Value = serde_json::from_str(line).unwrap();
        let op = row
            .as_object_mut()
            .and_then(|fields| fields.remove("op"))
            .unwrap_or_else(|| panic!("line {at} has no op: {line}"));
        let key = row.to_string();
        match op.as_str() {
            Some("+") => *result.entry(key).or_default() += 1,
            Some("-") => {
                let count = result.get_mut(&key).unwrap_or_else(|| {
                    panic!("line {at} retracts a row not in the result: {line}")
                });
                *count -= 1;
                if *count == 0 {
                    result.remove(&key);
                }
            }
            _ => panic!("line {at} has op {op}"),
        }
    }
    (result, lines)
}

fn run_to(query: Query, path: &Path, updates: bool, parallelism: u32) -> u64 {
    run(&RunOptions {
        output: RowTarget::File(path.to_path_buf()),
        parallelism,
        updates,
        ..RunOptions::new(
            query,
            Input::Generated {
                events: 40_000,
                seed: 5,
            },
        )
    })
    .unwrap()
    .results
}

/// The queries whose rows change as input arrives.
const CHANGING: [Query; 7] = [
    Query::Q4,
    Query::Q6,
    Query::Q15,
    Query::Q16,
    Query::Q17,
    Query::Q18,
    Query::Q19,
];

// Every query's update stream at parallelism 1 and 3, in two tests that
// the harness runs side by side.

#[test]
fn an_update_stream_applied_gives_the_final_rows_at_parallelism_1() {
    update_streams_apply_to_the_final_rows(1);
}

#[test]
fn an_update_stream_applied_gives_the_final_rows_at_parallelism_3() {
    update_streams_apply_to_the_final_rows(3);
}

/// Every query at `parallelism`: its update stream, applied, gives its
/// final rows, with a change per line.
fn update_streams_apply_to_the_final_rows(parallelism: u32) {
    let scratch = Scratch::new(&format!("updates-{parallelism}"));
    for query in Query::ALL {
        {
            let (final_path, updates_path) = (
                scratch.path(&format!("{query}-{parallelism}-final.jsonl")),
                scratch.path(&format!("{query}-{parallelism}-updates.jsonl")),
            );
            let rows = run_to(query, &final_path, false, parallelism);
            let lines = run_to(query, &updates_path, true, parallelism);
            let want = final_rows(&final_path);
            let (got, written) = applied(&updates_path);
            assert_eq!(written, lines, "{query}: every line counted");
            assert!(
                got == want,
                "{query} at parallelism {parallelism}: the update stream applied differs from the final rows"
            );
            if CHANGING.contains(&query) {
                assert!(
                    lines > rows,
                    "{query}: {lines} changes for {rows} final rows: its rows change as input arrives"
                );
            } else {
                assert_eq!(lines, rows, "{query}: rows that never change, each a +");
            }
        }
    }
}

/// q4 changes a category's average at each auction that closes with a
/// winning bid: a `+` for each, and a `-` for each but a category's first.
/// The auctions with a winning bid are q9's rows.
#[test]
fn q4_updates_once_per_winning_bid() {
    let scratch = Scratch::new("q4-count");
    let (q9, q4_final, q4_updates) = (
        scratch.path("q9.jsonl"),
        scratch.path("q4.jsonl"),
        scratch.path("q4-updates.jsonl"),
    );
    let winners = run_to(Query::Q9, &q9, false, 2);
    let categories = run_to(Query::Q4, &q4_final, false, 2);
    let changes = run_to(Query::Q4, &q4_updates, true, 2);
    assert!(winners > 50, "{winners} winning bids");
    assert_eq!(changes, 2 * winners - categories);
}

/// Killed with SIGKILL after a checkpoint and run again, exactly once: the
/// stream written across both runs applies to the final rows.
#[test]
fn an_update_stream_survives_a_kill_exactly_once() {
    let scratch = Scratch::new("updates-killed");
    for (query, events) in [("q4", 600_000), ("q19", 100_000)] {
        let final_path = scratch.path(&format!("{query}-final.jsonl"));
        run_ok(&args(query, events, 2, &final_path));
        let (out, ckpt) = (
            scratch.path(&format!("{query}-updates.jsonl")),
            scratch.path(&format!("{query}-checkpoints")),
        );
        let mut with_updates = checkpointed(query, events, 2, &out, &ckpt);
        with_updates.push("--updates".into());
        kill_after_checkpoint(&with_updates, &ckpt, None);
        let resumed = run_ok(&with_updates);
        assert!(
            resumed["events"].as_u64().unwrap() < events,
            "{query} resumed"
        );
        let (got, lines) = applied(&out);
        assert!(
            got == final_rows(&final_path),
            "{query}: applied across the kill"
        );
        assert_eq!(
            resumed["results"].as_u64(),
            Some(lines),
            "{query}: lines counted"
        );
    }
}
