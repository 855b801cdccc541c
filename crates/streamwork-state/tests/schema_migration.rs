//! Backward-compatible loading: a checkpoint written by an older version of
//! an operator's state (kept in `tests/fixtures/counts-v1`, written once by
//! `write_the_v1_fixture`) loads into the current version through its
//! migration; versions it cannot read are refused by name.

use std::path::{Path, PathBuf};

use rkyv::{Archive, Deserialize, Serialize};
use streamwork_core::{CheckpointId, InstanceIdx};
use streamwork_state::{
    CheckpointLog, LogOptions, Migration, Snapshot, StateError, VersionedState, archive,
    load_latest, operator_id,
};

/// The layout version 1 of the counter's state wrote: counts as u32.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
struct CountsV1 {
    counts: Vec<(u64, u32)>,
}

/// Version 2: counts widened to u64, and a running total.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
struct Counts {
    counts: Vec<(u64, u64)>,
    total: u64,
}

impl VersionedState for Counts {
    const SCHEMA: u32 = 2;
    fn migrate(from: u32, snapshot: &Snapshot<'_>) -> Result<Self, Migration> {
        match from {
            1 => {
                let old = snapshot.access::<CountsV1>().map_err(Migration::Failed)?;
                let counts: Vec<(u64, u64)> = old
                    .counts
                    .iter()
                    .map(|p| (p.0.to_native(), u64::from(p.1.to_native())))
                    .collect();
                let total = counts.iter().map(|c| c.1).sum();
                Ok(Counts { counts, total })
            }
            _ => Err(Migration::Unsupported),
        }
    }
}

/// A state type with no migrations at all.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
struct Strict {
    counts: Vec<(u64, u64)>,
}

impl VersionedState for Strict {
    const SCHEMA: u32 = 2;
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/counts-v1")
}

fn v1_state() -> CountsV1 {
    CountsV1 {
        counts: vec![(1, 10), (2, 20), (7, u32::MAX)],
    }
}

/// Writes the version 1 checkpoint kept in the repository. Run it only when
/// the fixture must be recreated:
/// `cargo test -p streamwork-state --test schema_migration -- --ignored`.
#[test]
#[ignore = "writes the fixture kept in the repository"]
fn write_the_v1_fixture() {
    let dir = fixture();
    let _ = std::fs::remove_dir_all(&dir);
    let mut log = CheckpointLog::open(&dir, LogOptions::default()).unwrap();
    let id = log.next_checkpoint_id().unwrap();
    log.append_snapshot(
        id,
        operator_id("counter"),
        InstanceIdx(0),
        1,
        &archive(&v1_state()).unwrap(),
    )
    .unwrap();
    log.commit(id, 1).unwrap();
}

#[test]
fn a_checkpoint_of_version_1_loads_into_version_2() {
    let checkpoint = load_latest(fixture()).unwrap();
    let snapshot = checkpoint
        .snapshot(operator_id("counter"), InstanceIdx(0))
        .unwrap();
    assert_eq!(snapshot.schema(), 1);
    // The kept bytes still read as version 1 ...
    assert_eq!(snapshot.deserialize::<CountsV1>().unwrap(), v1_state());
    // ... and restore as version 2 through the migration.
    let counts: Counts = snapshot.restore().unwrap();
    assert_eq!(
        counts,
        Counts {
            counts: vec![(1, 10), (2, 20), (7, u64::from(u32::MAX))],
            total: 30 + u64::from(u32::MAX),
        }
    );
}

#[test]
fn a_version_without_a_migration_is_refused_by_name() {
    let checkpoint = load_latest(fixture()).unwrap();
    let snapshot = checkpoint
        .snapshot(operator_id("counter"), InstanceIdx(0))
        .unwrap();
    let error = snapshot.restore::<Strict>().err().unwrap();
    assert!(
        matches!(
            error,
            StateError::IncompatibleSchema {
                found: 1,
                supported: 2,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("Strict") && message.contains("schema version 1"),
        "{message}"
    );
    assert!(message.contains("no migration"), "{message}");
}

#[test]
fn a_snapshot_from_a_newer_version_is_refused() {
    let dir = std::env::temp_dir().join(format!("swlog-newer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut log = CheckpointLog::open(&dir, LogOptions::default()).unwrap();
    let state = Counts {
        counts: vec![(1, 1)],
        total: 1,
    };
    log.append_snapshot(
        CheckpointId::new(1),
        operator_id("counter"),
        InstanceIdx(0),
        3,
        &archive(&state).unwrap(),
    )
    .unwrap();
    log.commit(CheckpointId::new(1), 1).unwrap();
    let checkpoint = load_latest(&dir).unwrap();
    let snapshot = checkpoint
        .snapshot(operator_id("counter"), InstanceIdx(0))
        .unwrap();
    let error = snapshot.restore::<Counts>().err().unwrap();
    assert!(error.to_string().contains("newer version"), "{error}");
    // The same version restores directly.
    let mut log = CheckpointLog::open(&dir, LogOptions::default()).unwrap();
    log.append_snapshot(
        CheckpointId::new(2),
        operator_id("counter"),
        InstanceIdx(0),
        2,
        &archive(&state).unwrap(),
    )
    .unwrap();
    log.commit(CheckpointId::new(2), 1).unwrap();
    let checkpoint = load_latest(&dir).unwrap();
    let snapshot = checkpoint
        .snapshot(operator_id("counter"), InstanceIdx(0))
        .unwrap();
    assert_eq!(snapshot.restore::<Counts>().unwrap(), state);
    drop(checkpoint);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What an operator's `restore` is offered migrates the same way: the
/// migration is reachable from any operator, through `Snapshot::of_part`.
#[test]
fn a_migration_is_reachable_from_an_operators_restore() {
    let checkpoint = load_latest(fixture()).unwrap();
    let snapshot = checkpoint
        .snapshot(operator_id("counter"), InstanceIdx(0))
        .unwrap();
    let restore = streamwork_core::Restore {
        records: None,
        component: "counter",
        checkpoint: checkpoint.id(),
        is_final: false,
        ended: Vec::new(),
        instance: streamwork_core::InstanceIdx(0),
        parallelism: 1,
        key_groups: streamwork_core::KeyGroups::DEFAULT,
        parts: vec![streamwork_core::checkpoint::RestoredPart {
            part: streamwork_core::InstanceIdx(0),
            schema: snapshot.schema(),
            bytes: snapshot.bytes(),
        }],
    };
    let own = restore.own().unwrap();
    let counts = Snapshot::of_part(&restore, own)
        .restore::<Counts>()
        .unwrap();
    assert_eq!(counts.total, 10 + 20 + u64::from(u32::MAX));
    let error = Snapshot::of_part(&restore, own)
        .restore::<Strict>()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("declares no migration"), "{error}");
}
