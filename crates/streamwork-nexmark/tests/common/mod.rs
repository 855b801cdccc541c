//! What the CLI's tests share: scratch directories, runs of the binary,
//! and a kill with SIGKILL once a checkpoint is complete.

#![allow(dead_code)] // each test file uses its part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

pub const BINARY: &str = env!("CARGO_BIN_EXE_streamwork-nexmark");

/// A scratch directory of this test process, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-nexmark-cli-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The CLI's arguments for `query` on `events` generated events.
pub fn args(query: &str, events: u64, parallelism: u32, output: &Path) -> Vec<String> {
    vec![
        "--query".into(),
        query.into(),
        "--events".into(),
        events.to_string(),
        "--parallelism".into(),
        parallelism.to_string(),
        "--output".into(),
        output.display().to_string(),
        "--json-summary".into(),
    ]
}

/// The same, with checkpoints every 100 ms into `checkpoints`, exactly once.
pub fn checkpointed(
    query: &str,
    events: u64,
    parallelism: u32,
    output: &Path,
    checkpoints: &Path,
) -> Vec<String> {
    let mut args = args(query, events, parallelism, output);
    args.extend([
        "--checkpoint-dir".into(),
        checkpoints.display().to_string(),
        "--checkpoint-interval".into(),
        "100ms".into(),
        "--delivery".into(),
        "exactly-once".into(),
    ]);
    args
}

/// Runs the CLI to the end: its summary, or the failure's output.
pub fn run(args: &[String]) -> Result<Value, Output> {
    let output = Command::new(BINARY).args(args).output().unwrap();
    if !output.status.success() {
        return Err(output);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(serde_json::from_str(stdout.trim()).expect("the JSON summary"))
}

pub fn run_ok(args: &[String]) -> Value {
    run(args).unwrap_or_else(|output| {
        panic!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The last complete checkpoint in `dir`, if any.
pub fn complete(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("COMPLETE"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Starts the CLI, its input held open after its last event (so that it
/// never finishes, however fast the machine), waits until a checkpoint
/// past `after` is complete, and kills it with SIGKILL: the checkpoint it
/// had reached.
pub fn kill_after_checkpoint(args: &[String], checkpoints: &Path, after: Option<u64>) -> u64 {
    let mut child: Child = Command::new(BINARY)
        .args(args)
        .arg("--hold-input-open")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Bounded: 600 s at most, far beyond a run of these sizes.
    for _ in 0..60_000 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{args:?} ended ({status}) before a checkpoint past {after:?}: give it more events"
            );
        }
        if let Some(reached) = complete(checkpoints).filter(|&c| Some(c) > after) {
            child.kill().unwrap();
            child.wait().unwrap();
            return reached;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    panic!("{args:?}: no checkpoint in 600 s");
}

/// Rows as sorted lines.
pub fn rows(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}
