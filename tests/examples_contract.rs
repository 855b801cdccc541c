//! The examples as a user runs them: the `vehicle_count` contract (exact
//! sorted totals on stdout for any parallelism and grouping, malformed lines
//! counted on stderr), and every example ending by itself on generated data.
//!
//! `cargo test` builds the examples before running tests; they are found next
//! to this test's executable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> Command {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path: PathBuf = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "example {name} not built at {}",
        path.display()
    );
    Command::new(path)
}

fn input_file() -> (PathBuf, String, u64) {
    let kinds = ["car", "truck", "bus", "van", "motorcycle", "tram", "bike"];
    let mut content = Vec::new();
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    let mut state = 12345u64;
    let mut malformed = 0;
    for i in 0..5000u64 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match i % 101 {
            7 => content.extend_from_slice(b"\n"),
            13 => {
                malformed += 1;
                content.extend_from_slice(b"\xc3\x28 broken\n");
            }
            _ => {
                let kind = kinds[(state >> 33) as usize % kinds.len()];
                *expected.entry(kind).or_default() += 1;
                content.extend_from_slice(kind.as_bytes());
                content.push(b'\n');
            }
        }
    }
    let path =
        std::env::temp_dir().join(format!("streamwork-vehicles-pid{}.txt", std::process::id()));
    std::fs::write(&path, content).unwrap();
    let stdout = expected
        .iter()
        .map(|(k, v)| format!("{k}\t{v}\n"))
        .collect();
    (path, stdout, malformed)
}

#[test]
fn vehicle_count_prints_exact_sorted_totals_for_any_parallelism_and_grouping() {
    let (path, expected, malformed) = input_file();
    for parallelism in [1, 2, 5, 16] {
        for grouping in ["fields", "shuffle"] {
            let output = example("vehicle_count")
                .args(["--input", path.to_str().unwrap()])
                .args([
                    "--parallelism",
                    &parallelism.to_string(),
                    "--grouping",
                    grouping,
                ])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{stderr}");
            assert_eq!(
                String::from_utf8_lossy(&output.stdout),
                expected,
                "N={parallelism} {grouping}"
            );
            assert!(
                stderr.contains(&format!("malformed input skipped: {malformed}")),
                "{stderr}"
            );
            assert!(
                stderr.contains(&format!("grouping: {grouping}")),
                "{stderr}"
            );
        }
    }
}

#[test]
fn every_example_runs_on_generated_data_and_ends() {
    for name in [
        "vehicle_count",
        "parallel_vehicle_count",
        "fraud_detection",
        "stream_fork",
        "stream_merge",
        "stream_split",
        "windowing",
        "emissions",
    ] {
        let output = example(name).args(["--events", "3000"]).output().unwrap();
        if name == "windowing" {
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                stdout.contains("(update: a late event arrived within the lateness)"),
                "{stdout}"
            );
            assert!(stdout.contains("sent to the late channel"), "{stdout}");
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("finished in"),
            "{name} printed no summary: {stderr}"
        );
    }
}

#[test]
fn a_missing_input_file_fails_with_a_clear_error() {
    let output = example("vehicle_count")
        .args(["--input", "/nonexistent/vehicles.txt"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/vehicles.txt"), "{stderr}");
    assert!(output.stdout.is_empty());
}

/// The chapter 9 example under every overflow policy: whatever the timing,
/// every record the source emitted is either delivered or counted as dropped,
/// and `block` drops nothing.
#[test]
fn backpressure_example_accounts_for_every_record_under_every_policy() {
    for policy in ["block", "drop-newest", "drop-oldest", "sample"] {
        let output = example("backpressure")
            .args(["--duration-s", "0.5", "--sink-delay-us", "50"])
            .args(["--overflow", policy])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{policy}: {stderr}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().last().expect("a JSON line on stdout");
        let line: serde_json::Value = serde_json::from_str(last).expect("valid JSON");
        let count = |field: &str| line[field].as_u64().expect(field);
        let (emitted, dropped, delivered) =
            (count("emitted"), count("dropped"), count("delivered"));
        assert!(emitted > 0, "{policy}: {last}");
        assert_eq!(emitted, dropped + delivered, "{policy}: {last}");
        if policy == "block" {
            assert_eq!(dropped, 0, "{last}");
        }
    }
}

/// `transactions=T frauds=F` from the last line of a `system_usage` run.
fn system_usage(delivery: &str, fail_at: Option<u64>) -> (u64, u64) {
    let root = std::env::temp_dir().join(format!(
        "streamwork-usage-{delivery}-{}-pid{}",
        fail_at.is_some(),
        std::process::id()
    ));
    let mut command = example("system_usage");
    command
        .args(["--transactions", "120000", "--report-every", "1000"])
        .args(["--delivery", delivery])
        .arg("--output")
        .arg(root.join("out"))
        .arg("--checkpoint-dir")
        .arg(root.join("ckpt"));
    if let Some(n) = fail_at {
        command.args(["--fail-at", &n.to_string()]);
    }
    let output = command.output().expect("system_usage runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    if fail_at.is_some() {
        assert!(stderr.contains("injected fault"), "{stderr}");
    }
    let last = stdout.lines().last().expect("a usage line");
    let counts: Vec<u64> = last
        .split(' ')
        .map(|kv| {
            kv.split_once('=')
                .expect("key=value")
                .1
                .parse()
                .expect("a count")
        })
        .collect();
    let _ = std::fs::remove_dir_all(&root);
    (counts[0], counts[1])
}

#[test]
fn system_usage_shows_each_delivery_semantic_under_a_failure() {
    let truth = system_usage("exactly-once", None);
    assert_eq!(truth.0, 120_000);
    assert!(truth.1 > 0, "some transactions are fraud");
    // Exactly-once: the failure changes nothing committed.
    assert_eq!(system_usage("exactly-once", Some(30_000)), truth);
    // At-least-once: nothing lost (a replay may count some twice).
    let at_least = system_usage("at-least-once", Some(30_000));
    assert!(
        at_least.0 >= truth.0 && at_least.1 >= truth.1,
        "{at_least:?}"
    );
    // At-most-once: no replay; the run ends at the failure, short of the truth.
    let at_most = system_usage("at-most-once", Some(30_000));
    assert!(at_most.0 < truth.0 && at_most.1 <= truth.1, "{at_most:?}");
}
