//! `cargo xtask bench --sinks`: what each sink costs exactly once against
//! the plain local file (`benches/sink_throughput.rs`), with the services
//! it writes to (PostgreSQL, moto for S3) started by the project's own
//! scripts.

use std::process::Command;

use anyhow::{Context, bail};

use crate::project_root;

/// The `export NAME=VALUE [NAME=VALUE ...]` lines a service script
/// prints (values without spaces), as pairs.
fn exports(said: &str) -> Vec<(String, String)> {
    said.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .flat_map(str::split_whitespace)
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_string(), value.trim_matches('"').to_string()))
        .collect()
}

/// Starts a service with its script; the variables it exports.
fn start(script: &str) -> anyhow::Result<Vec<(String, String)>> {
    eprintln!("$ {script} start");
    let output = Command::new(script)
        .arg("start")
        .current_dir(project_root())
        .output()
        .with_context(|| format!("running {script}"))?;
    if !output.status.success() {
        bail!(
            "`{script} start` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(exports(&String::from_utf8_lossy(&output.stdout)))
}

/// Runs the sink bench; `rounds` and `events` as `SINK_ROUNDS` and
/// `SINK_EVENTS`.
pub(crate) fn run(quick: bool, rounds: Option<u32>) -> anyhow::Result<()> {
    let mut env = start("scripts/postgres-test-server.sh")?;
    env.extend(start("scripts/s3-test-server.sh")?);
    let (events, default_rounds) = if quick { (200_000, 1) } else { (1_000_000, 3) };
    let args = [
        "bench",
        "-p",
        "streamwork-benches",
        "--features",
        "postgres,parquet,s3",
        "--bench",
        "sink_throughput",
    ];
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new("cargo")
        .args(args)
        .envs(env)
        .env("SINK_EVENTS", events.to_string())
        .env("SINK_ROUNDS", rounds.unwrap_or(default_rounds).to_string())
        .current_dir(project_root())
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("the sink bench failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_read_from_a_script_s_output() {
        let said =
            "Server started\nexport A=postgresql://x@127.0.0.1:5433/y\nexport B=\"z\" C=1\nnoise";
        assert_eq!(
            exports(said),
            vec![
                (
                    "A".to_string(),
                    "postgresql://x@127.0.0.1:5433/y".to_string()
                ),
                ("B".to_string(), "z".to_string()),
                ("C".to_string(), "1".to_string())
            ]
        );
    }
}
