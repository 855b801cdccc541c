//! Project chores, run as `cargo xtask COMMAND`:
//!
//! * `ci`: exactly what CI runs (`.ci/run`): format check, clippy, the main
//!   example, the whole test suite;
//! * `bench [--quick]`: the standard workloads at parallelism 1 and 2, each
//!   beside its hand-written baseline, as one table and as JSON in
//!   `target/bench/results.json`; `--quick` runs a reduced size (a smoke check);
//! * `bench --sinks [--quick] [--rounds N]`: what each sink costs exactly
//!   once against the plain local file, Postgres and moto started first;
//! * `criterion [ARGS]`: the criterion micro-benchmarks.

mod bench;
mod chart;
mod sinks;

use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => run("bash", &[".ci/run"]),
        Some("bench") => bench::run(&args[1..]),
        Some("criterion") => {
            let mut cargo = vec!["bench", "-p", "streamwork-benches", "--bench", "runtime"];
            if args.len() > 1 {
                cargo.push("--");
                cargo.extend(args[1..].iter().map(String::as_str));
            }
            run("cargo", &cargo)
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | bench [--quick] | bench --sinks | criterion [ARGS]>"
            );
            bail!("unknown or missing command")
        }
    }
}

/// The workspace root.
pub(crate) fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the project root")
        .to_path_buf()
}

/// Runs a command in the project root, failing if it fails.
pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
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
