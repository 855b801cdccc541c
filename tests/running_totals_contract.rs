//! The exactly-once contract of `running_totals`, as a user meets it: the
//! process is killed (SIGKILL) at several moments and started again with the
//! same command until it exits 0; the committed output (`part-*` and
//! `dead-letter`) is then exactly that of a run without failure, and a run
//! after completion adds nothing. The kill moments vary; the assertions hold
//! for any of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn example() -> Command {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path: PathBuf = dir.join("examples").join("running_totals");
    assert!(path.exists(), "example not built at {}", path.display());
    Command::new(path)
}

/// A ledger of `n` lines with a malformed line now and then, and what a
/// run without failure commits: the rows and the dead letters.
fn ledger(n: u64) -> (Vec<u8>, Vec<String>, Vec<String>) {
    let mut input = Vec::new();
    let (mut rows, mut dead) = (Vec::new(), Vec::new());
    let mut totals: BTreeMap<u64, i128> = BTreeMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if i % 1009 == 3 {
            let bad: &[u8] =
                [&b"oops"[..], b"", b"7,", b"x,1", b"1,2,3", b"\xff\xfe"][(i % 6) as usize];
            input.extend_from_slice(bad);
            dead.push(format!("{i},{}", String::from_utf8_lossy(bad)));
        } else {
            let account = state % 500;
            let amount = (state >> 20) as i64 % 1_000_000_000;
            input.extend_from_slice(format!("{account},{amount}").as_bytes());
            let total = totals.entry(account).or_default();
            *total += i128::from(amount);
            rows.push(format!("{i},{account},{total}"));
        }
        input.push(b'\n');
    }
    rows.sort();
    dead.sort();
    (input, rows, dead)
}

fn committed(output: &Path) -> (Vec<String>, Vec<String>) {
    let mut rows = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(output)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        if name.starts_with("part-") {
            rows.extend(
                std::fs::read_to_string(file)
                    .unwrap()
                    .lines()
                    .map(String::from),
            );
        }
    }
    let mut dead: Vec<String> = std::fs::read_to_string(output.join("dead-letter"))
        .map(|s| s.lines().map(String::from).collect())
        .unwrap_or_default();
    rows.sort();
    dead.sort();
    (rows, dead)
}

fn run_with_kills(parallelism: u32, kill_after_ms: &[u64]) {
    let dir = std::env::temp_dir().join(format!(
        "streamwork-running-totals-{parallelism}-pid{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (input, rows, dead) = ledger(300_000);
    let input_path = dir.join("ledger.csv");
    std::fs::write(&input_path, input).unwrap();
    let (output, checkpoints) = (dir.join("out"), dir.join("ckpt"));
    let command = || {
        let mut c = example();
        c.arg("--input")
            .arg(&input_path)
            .arg("--output")
            .arg(&output)
            .arg("--checkpoint-dir")
            .arg(&checkpoints)
            .args([
                "--checkpoint-interval-ms",
                "20",
                "--delivery",
                "exactly-once",
            ])
            .args(["--parallelism", &parallelism.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    for &ms in kill_after_ms {
        let mut child = command().spawn().unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        // SIGKILL, unless it has already finished.
        let _ = child.kill();
        child.wait().unwrap();
        // Whatever is committed so far is a part of the right output.
        let (so_far, _) = committed(&output);
        let mut expected = rows.iter().peekable();
        for row in &so_far {
            while expected.peek().is_some_and(|e| *e < row) {
                expected.next();
            }
            assert_eq!(
                expected.next(),
                Some(row),
                "a committed row is wrong or repeated"
            );
        }
    }
    let finish = command()
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(
        finish.status.success(),
        "p={parallelism}: the last run failed: {}",
        String::from_utf8_lossy(&finish.stderr)
    );
    let (got_rows, got_dead) = committed(&output);
    assert_eq!(got_rows.len(), rows.len(), "p={parallelism}: rows");
    assert!(
        got_rows == rows,
        "p={parallelism}: the committed rows differ"
    );
    assert_eq!(got_dead, dead, "p={parallelism}: dead letters");
    // Again after completion: nothing is added.
    assert!(command().status().unwrap().success());
    assert_eq!(committed(&output), (rows, dead));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn killed_and_restarted_runs_commit_exactly_the_output_of_a_clean_run() {
    run_with_kills(1, &[40, 120, 70]);
    run_with_kills(3, &[90, 30, 150, 60]);
}
