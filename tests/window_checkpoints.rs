//! A windowed exactly-once job recovers from an injected failure, within one
//! run (restart strategy) and across runs at another parallelism, and
//! commits exactly what the run without a failure commits.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::runtime::{CheckpointConfig, RestartStrategy, RunOptions};

const EVENTS: u64 = 60_000;

fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("streamwork-wjob-{name}-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Event `i` has key `i % 7` and time `i` ms; per key, counts in tumbling
/// 100 ms windows and sums in sliding 300/100 ms windows.
fn graph(out: &Path, parallelism: u32, fault: InjectFault<u64>) -> JobGraph {
    job! {
        name "window-checkpoints";
        batch_size 64;
        delivery exactly_once;
        // After its first poll it holds until a checkpoint is complete: a
        // fault in the second checkpoint (or the final one) comes after.
        source events = support::Held::new(GeneratorSource::new(|i: u64| i)
            .take(EVENTS)
            .with_timestamps(|i: u64, _: &u64| Timestamp::from_millis(i as i64)), 1);
        operator timed = Watermarks::monotonic().timestamps(|i: &u64| Timestamp::from_millis(*i as i64)) <- events;
        operator faulty[parallelism] = fault <- timed.shuffle();
        operator counts { results, late } = Windows::tumbling(Duration::from_millis(100))
            .count::<u64, u64>() <- faulty.key(|i: &u64| i % 7);
        operator sums { results, late } = Windows::sliding(Duration::from_millis(300), Duration::from_millis(100))
            .sum::<u64, u64, _>(|i: &u64| *i) <- faulty.key(|i: &u64| i % 7);
        sink counted = FileSink::new(out.join("counts"), |r: &WindowResult<u64, u64>, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{},{}", r.key, r.window.start.millis(), r.value).as_bytes())
        })
        .transactional() <- counts.results;
        sink summed = FileSink::new(out.join("sums"), |r: &WindowResult<u64, u64>, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{},{},{}", r.key, r.window.start.millis(), r.value).as_bytes())
        })
        .transactional() <- sums.results;
        drop counts.late;
        drop sums.late;
    }
    .unwrap()
}

fn options(checkpoints: &Path, restart: RestartStrategy) -> RunOptions {
    let config = CheckpointConfig::new(checkpoints, Duration::from_millis(2))
        .delivery(Delivery::ExactlyOnce);
    RunOptions {
        checkpoints: Some(config),
        restart,
        ..RunOptions::default()
    }
}

fn results(out: &Path) -> (Vec<String>, Vec<String>) {
    (
        support::committed_lines(&out.join("counts")),
        support::committed_lines(&out.join("sums")),
    )
}

/// The results a run without failure commits, computed once.
fn expected() -> (Vec<String>, Vec<String>) {
    let root = dir("clean");
    graph(
        &root.join("out"),
        2,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    )
    .run_with(options(&root.join("ckpt"), RestartStrategy::Never))
    .unwrap();
    let clean = results(&root.join("out"));
    // Every event is in exactly one tumbling window.
    let total: u64 = clean
        .0
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, EVENTS);
    std::fs::remove_dir_all(&root).unwrap();
    clean
}

#[test]
fn a_windowed_job_recovers_within_a_run_and_across_parallelisms() {
    let clean = expected();

    // Within one run: instance 1 of `faulty` fails; the restart strategy
    // restores every window from the last complete checkpoint.
    let root = dir("restart");
    let fault = InjectFault::new(1, Fault::BeforeRecord(12_000));
    let report = graph(&root.join("out"), 2, fault.clone())
        .run_with(options(
            &root.join("ckpt"),
            RestartStrategy::FixedDelay {
                attempts: 2,
                delay: Duration::from_millis(1),
            },
        ))
        .unwrap();
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    assert_eq!(results(&root.join("out")), clean);
    std::fs::remove_dir_all(&root).unwrap();

    // Across runs: a run at parallelism 2 fails in its second checkpoint
    // (the final one, if the input ends first), after a first one
    // completed; the next run, at parallelism 3, takes the windows' keys by
    // key group.
    let root = dir("rescale");
    let fault = InjectFault::new(0, Fault::InCheckpoint(2));
    let error = graph(&root.join("out"), 2, fault.clone())
        .run_with(options(&root.join("ckpt"), RestartStrategy::Never))
        .expect_err("the injected fault");
    assert!(error.to_string().contains("injected fault"), "{error}");
    let report = graph(&root.join("out"), 3, fault)
        .run_with(options(&root.join("ckpt"), RestartStrategy::Never))
        .unwrap();
    assert!(
        report.recovery.restored_from.is_some(),
        "restored, at another parallelism"
    );
    assert_eq!(results(&root.join("out")), clean);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_job_promising_delivery_refuses_a_window_left_out_of_its_checkpoints() {
    // Windows are checkpointed unless built `.transient()`.
    let error = job! {
        name "forgetful";
        delivery exactly_once;
        source events = GeneratorSource::new(|i: u64| i).take(10);
        operator timed = Watermarks::monotonic().timestamps(|i: &u64| Timestamp::from_millis(*i as i64)) <- events;
        operator counts { results, late } = Windows::tumbling(Duration::from_millis(100))
            .transient()
            .count::<u64, u64>() <- timed.key(|i: &u64| i % 7);
        sink out = FileSink::new(std::env::temp_dir().join("never-written"), |r: &WindowResult<u64, u64>, line: &mut Vec<u8>| {
            line.extend_from_slice(r.value.to_string().as_bytes())
        })
        .transactional() <- counts.results;
        drop counts.late;
    }
    .err()
    .expect("refused when built");
    let message = error.to_string();
    assert!(
        message.contains("`counts`") && message.contains("without `.transient()`"),
        "{message}"
    );
}
