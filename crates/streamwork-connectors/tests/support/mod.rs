//! Driving sources and sinks by hand, as the engine would.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use streamwork_core::checkpoint::RestoredPart;
use streamwork_core::{
    CheckpointId, Collector, Data, InstanceContext, InstanceIdx, KeyGroups, Restore, Source,
    SourcePoll, StateBytes,
};

/// Instance `instance` of `parallelism`.
pub fn context(instance: u32, parallelism: u32) -> InstanceContext {
    InstanceContext::new(
        "lines",
        InstanceIdx(instance),
        parallelism,
        KeyGroups::DEFAULT,
    )
}

/// Polls until `limit` records came out or the source finished.
pub fn read<T: Data>(source: &mut impl Source<Out = Collector<T>>, limit: usize) -> Vec<T> {
    let mut out = Collector::detached();
    let mut got = Vec::new();
    for _ in 0..1_000_000 {
        if got.len() >= limit {
            break;
        }
        let poll = source.poll(&mut out).unwrap();
        got.extend(out.take_buffered().into_iter().map(|r| r.value));
        if poll == SourcePoll::Finished {
            break;
        }
    }
    got
}

/// A restore of instance `instance` of `parallelism` from checkpoint
/// `checkpoint`, whose parts are `parts` (one per old instance).
pub fn restore<'a>(
    checkpoint: u64,
    instance: u32,
    parallelism: u32,
    parts: &'a [StateBytes],
) -> Restore<'a> {
    Restore {
        records: None,
        component: "lines",
        checkpoint: CheckpointId::new(checkpoint),
        is_final: false,
        ended: Vec::new(),
        instance: InstanceIdx(instance),
        parallelism,
        key_groups: KeyGroups::DEFAULT,
        parts: parts
            .iter()
            .enumerate()
            .map(|(k, p)| RestoredPart {
                part: InstanceIdx(k as u32),
                schema: p.schema,
                bytes: &p.bytes,
            })
            .collect(),
    }
}

/// A fresh directory for test `name`.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("streamwork-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The visible files of `dir` (not hidden), by name.
pub fn visible_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}
