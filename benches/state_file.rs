//! STATE-FILE: distinct keys read from a text file at full speed into a
//! `StoredState`, exactly once, with a checkpoint every interval: the state
//! store's memory budget as a user meets it. Run in a memory cgroup
//! (`scripts/with-memory-limit.sh 1G ...`), the job must end, its committed
//! output exact, whatever the input rate and however long its checkpoints
//! take.
//!
//! Each instance counts its keys in the store and, at the end, emits one
//! summary (keys, checksum) that a transactional file sink commits; the
//! summaries of every instance add up to the reference computed from the
//! file's keys.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use streamwork::connectors::file::Lines;
use streamwork::prelude::*;

use crate::{Outcome, key, workers_for};

/// Writes `keys` distinct keys, one number a line, into `path` (a
/// permutation of `0..keys`, so that consecutive lines land in different
/// key groups), unless a file of that size is already there.
pub fn write_distinct_keys(path: &Path, keys: u64) -> anyhow::Result<()> {
    let expected: u64 = (0..keys).map(|k| digits(k) + 1).sum();
    if std::fs::metadata(path).is_ok_and(|m| m.len() == expected) {
        return Ok(());
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    for i in 0..keys {
        writeln!(out, "{}", key(i, keys))?;
    }
    out.flush()?;
    Ok(())
}

fn digits(n: u64) -> u64 {
    u64::from(n.checked_ilog10().unwrap_or(0)) + 1
}

/// What the run must commit: every key once.
pub fn distinct_keys_reference(keys: u64) -> Outcome {
    let mut outcome = Outcome::default();
    for key in 0..keys {
        outcome.records += 1;
        outcome.checksum = outcome.checksum.wrapping_add(key + 1);
    }
    outcome
}

/// Each key's count in the state store; at the end, one summary.
#[derive(Clone, Default, State)]
struct StoredKeys {
    counts: StoredState<u64, u64>,
}

#[operator]
impl StoredKeys {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _line: u64,
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        let mut summary = Outcome::default();
        // A run that cannot be read fails the job (the runtime turns the
        // panic into its error): the summary must not silently lack keys.
        self.counts
            .for_each(|key, count| {
                summary.records += 1;
                summary.checksum = summary.checksum.wrapping_add((key + 1).wrapping_mul(count));
            })
            .expect("the stored counts read back");
        out.emit((summary.records, summary.checksum));
    }
}

/// Runs STATE-FILE over `input` at `parallelism`, exactly once, with a
/// checkpoint every `interval` into `checkpoints`, committing the summaries
/// into `output`; returns what was committed, added up.
pub fn state_file_job(
    input: &Path,
    parallelism: u32,
    interval: Duration,
    checkpoints: &Path,
    output: &Path,
) -> anyhow::Result<(Outcome, JobReport)> {
    let lines = FileSource::with_lines(
        input,
        Lines::parsed(|line: &str| line.trim().parse::<u64>().map_err(|e| e.to_string())),
    );
    let summaries = FileSink::new(
        output,
        |(keys, checksum): &(u64, u64), line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{keys} {checksum}").as_bytes());
        },
    )
    .transactional();
    let graph = job! {
        name "STATE-FILE";
        delivery exactly_once;
        workers workers_for(parallelism);
        source lines[parallelism] = lines;
        operator counts[parallelism] = StoredKeys::default() <- lines.key(|k: &u64| *k);
        sink summaries = summaries <- counts;
    }?;
    let mut config = CheckpointConfig::new(checkpoints, interval);
    config.delivery = Delivery::ExactlyOnce;
    config.retain = 2;
    let report = graph.run_with(RunOptions {
        checkpoints: Some(config),
        ..RunOptions::default()
    })?;
    let mut committed = Outcome::default();
    for entry in std::fs::read_dir(output)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines() {
            let Some((keys, checksum)) = line.split_once(' ') else {
                bail!("a summary line that is not `keys checksum`: {line:?}");
            };
            committed.records += keys.parse::<u64>()?;
            committed.checksum = committed.checksum.wrapping_add(checksum.parse::<u64>()?);
        }
    }
    Ok((committed, report))
}
