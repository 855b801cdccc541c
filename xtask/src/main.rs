//! Project chores, run as `cargo xtask COMMAND`:
//!
//! * `ci`: exactly what CI runs (`.ci/run`): format check, clippy, the main
//!   example, the whole test suite;
//! * `bench`: the criterion benchmarks of the runtime's hot path, in release
//!   mode, with the hand-written baseline measured in the same run.

use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <ci | bench [criterion args]>");
            bail!("unknown or missing command")
        }
    }
}

fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the project root")
        .to_path_buf()
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(project_root())
        .status()
        .with_context(|| format!("running {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed: {status}", args.join(" "));
    }
    Ok(())
}

fn ci() -> anyhow::Result<()> {
    run("bash", &[".ci/run"])
}

fn bench(extra: &[String]) -> anyhow::Result<()> {
    let mut args = vec!["bench", "-p", "streamwork-benches", "--bench", "runtime"];
    if !extra.is_empty() {
        args.push("--");
        args.extend(extra.iter().map(String::as_str));
    }
    run("cargo", &args)
}
