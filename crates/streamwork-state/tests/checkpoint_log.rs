//! The checkpoint log as a recovering job meets it: complete checkpoints
//! come back exactly; what a crash leaves (a torn tail, a checkpoint
//! without its commit record) costs only the checkpoint it interrupted;
//! damage to a checkpoint that completed (flipped bits, missing snapshots,
//! a lost segment) is refused, naming it, rather than silently rewinding to
//! an older one; never a panic and never wrong data; retention reclaims
//! old segments.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use streamwork_core::{CheckpointId, InstanceIdx, OperatorId, SideCheck};
use streamwork_state::{CheckpointLog, LogOptions, StateError, archive, load_latest};

/// A fresh directory, removed when dropped.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "swlog-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TestDir(dir)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const OPERATOR: OperatorId = OperatorId(0x5eed);

/// What part `part` of checkpoint `id` holds.
fn state(id: CheckpointId, part: u32) -> Vec<(u64, u64)> {
    let id = id.get();
    (0..id + part as u64)
        .map(|k| (k, k * id + part as u64))
        .collect()
}

/// Writes checkpoints `1..=n` with `parts` snapshots each.
fn write(dir: &Path, options: LogOptions, n: u64, parts: u32) -> CheckpointLog {
    let mut log = CheckpointLog::open(dir, options).unwrap();
    for _ in 0..n {
        let id = log.next_checkpoint_id().unwrap();
        for part in 0..parts {
            log.append_snapshot(
                id,
                OPERATOR,
                InstanceIdx(part),
                1,
                &archive(&state(id, part)).unwrap(),
            )
            .unwrap();
        }
        log.commit(id, parts).unwrap();
    }
    log
}

/// The checkpoint's contents are exactly what was written for its id.
fn assert_intact(checkpoint: &streamwork_state::Checkpoint, parts: u32) {
    for part in 0..parts {
        let snapshot = checkpoint.snapshot(OPERATOR, InstanceIdx(part)).unwrap();
        assert_eq!(snapshot.schema(), 1);
        assert_eq!(
            snapshot.bytes().as_ptr() as usize % 16,
            0,
            "payloads are aligned in the map"
        );
        let value: Vec<(u64, u64)> = snapshot.deserialize().unwrap();
        assert_eq!(value, state(checkpoint.id(), part));
        let archived = snapshot.access::<Vec<(u64, u64)>>().unwrap();
        assert_eq!(archived.len(), value.len());
    }
    assert_eq!(checkpoint.snapshots().count(), parts as usize);
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "swlog"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_newest_complete_checkpoint_comes_back_exactly() {
    let dir = TestDir::new("newest");
    write(&dir.0, LogOptions::default(), 4, 3);
    let checkpoint = load_latest(&dir.0).unwrap();
    assert_eq!(checkpoint.id(), CheckpointId::new(4));
    assert!(checkpoint.skipped().is_empty());
    assert_intact(&checkpoint, 3);
}

#[test]
fn a_checkpoint_without_its_commit_record_is_not_used() {
    let dir = TestDir::new("uncommitted");
    let mut log = write(&dir.0, LogOptions::default(), 2, 2);
    let id = log.next_checkpoint_id().unwrap();
    log.append_snapshot(
        id,
        OPERATOR,
        InstanceIdx(0),
        1,
        &archive(&state(id, 0)).unwrap(),
    )
    .unwrap();
    drop(log); // a crash before the commit
    assert_eq!(load_latest(&dir.0).unwrap().id(), CheckpointId::new(2));
    // A restarted writer never reuses the uncommitted id, nor one it
    // handed out that never reached the log at all.
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    let unlogged = log.next_checkpoint_id().unwrap();
    assert!(unlogged > id);
    drop(log); // a crash before any part of `unlogged` was written
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    let next = log.next_checkpoint_id().unwrap();
    assert!(next > unlogged, "{next} after {unlogged}");
    // Within one writer, ids are consecutive.
    assert_eq!(
        log.next_checkpoint_id().unwrap(),
        CheckpointId::new(next.get() + 1)
    );
}

/// The marker a crash leaves says which checkpoint completed last.
fn set_marker(dir: &Path, id: u64) {
    std::fs::write(dir.join("COMPLETE"), format!("{id}\n")).unwrap();
}

/// A refusal to restore anything older than `newest`, which completed.
fn assert_refused(
    result: Result<streamwork_state::Checkpoint, StateError>,
    newest: u64,
    usable: Option<u64>,
) {
    match result {
        Err(StateError::CompleteCheckpointUnusable {
            newest: n,
            usable: u,
            ..
        }) => {
            assert_eq!(n, CheckpointId::new(newest));
            assert_eq!(u, usable.map(CheckpointId::new));
        }
        Err(other) => panic!("expected a refusal, got: {other}"),
        Ok(checkpoint) => panic!("expected a refusal, got checkpoint {}", checkpoint.id()),
    }
}

#[test]
fn a_complete_checkpoint_whose_snapshots_are_missing_is_refused_not_skipped() {
    let dir = TestDir::new("missing");
    let mut log = write(&dir.0, LogOptions::default(), 1, 2);
    let id = log.next_checkpoint_id().unwrap();
    log.append_snapshot(
        id,
        OPERATOR,
        InstanceIdx(0),
        1,
        &archive(&state(id, 0)).unwrap(),
    )
    .unwrap();
    log.commit(id, 2).unwrap();
    let error = load_latest(&dir.0).err().unwrap();
    let text = error.to_string();
    assert!(
        text.contains("committed with 2 snapshots but 1 are readable"),
        "{text}"
    );
    assert!(text.contains("checkpoint 2"), "{text}");
    assert!(text.contains("newest usable one is 1"), "{text}");
    assert!(text.contains("from a backup"), "{text}");
    assert_refused(load_latest(&dir.0), 2, Some(1));
    // Asked for by id, the older one is still there to read.
    let older = streamwork_state::load_checkpoint(&dir.0, CheckpointId::new(1)).unwrap();
    assert_intact(&older, 2);
}

#[test]
fn a_lost_segment_of_the_newest_checkpoint_is_refused() {
    let dir = TestDir::new("lost-segment");
    let options = LogOptions {
        segment_bytes: 256,
        retain: 10,
    };
    write(&dir.0, options, 4, 2);
    let newest = segments(&dir.0).pop().unwrap();
    std::fs::remove_file(&newest).unwrap();
    // The commit record of 4 went with its segment; the marker remembers it.
    assert_refused(load_latest(&dir.0), 4, Some(3));
    // Every segment lost: still refused, not a fresh start.
    for segment in segments(&dir.0) {
        std::fs::remove_file(segment).unwrap();
    }
    assert_refused(load_latest(&dir.0), 4, None);
    // Without the marker there is no evidence left: an empty directory.
    std::fs::remove_file(dir.0.join("COMPLETE")).unwrap();
    assert!(matches!(
        load_latest(&dir.0),
        Err(StateError::NoCheckpoint { .. })
    ));
}

#[test]
fn an_empty_or_uncommitted_directory_is_a_clear_error() {
    let dir = TestDir::new("empty");
    std::fs::create_dir_all(&dir.0).unwrap();
    let error = load_latest(&dir.0).err().unwrap();
    assert!(matches!(error, StateError::NoCheckpoint { .. }));
    assert!(
        error.to_string().contains("no usable checkpoint"),
        "{error}"
    );
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    log.append_snapshot(CheckpointId::new(1), OPERATOR, InstanceIdx(0), 1, b"0123")
        .unwrap();
    drop(log);
    assert!(matches!(
        load_latest(&dir.0),
        Err(StateError::NoCheckpoint { .. })
    ));
}

#[test]
fn a_payload_of_another_type_is_refused_not_misread() {
    let dir = TestDir::new("wrong-type");
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    log.append_snapshot(
        CheckpointId::new(1),
        OPERATOR,
        InstanceIdx(0),
        1,
        &[0xff; 5],
    )
    .unwrap();
    log.commit(CheckpointId::new(1), 1).unwrap();
    let checkpoint = load_latest(&dir.0).unwrap();
    let error = checkpoint
        .snapshot(OPERATOR, InstanceIdx(0))
        .unwrap()
        .access::<Vec<u64>>()
        .err()
        .unwrap();
    assert!(
        matches!(error, StateError::InvalidArchive { checkpoint, .. } if checkpoint == CheckpointId::new(1)),
        "{error}"
    );
}

#[test]
fn retention_keeps_the_last_complete_checkpoints_and_reclaims_segments() {
    let dir = TestDir::new("retention");
    let options = LogOptions {
        segment_bytes: 256,
        retain: 2,
    };
    let log = write(&dir.0, options.clone(), 6, 2);
    assert_eq!(
        log.complete_checkpoints().collect::<Vec<_>>(),
        vec![CheckpointId::new(5), CheckpointId::new(6)]
    );
    drop(log);
    // Every remaining segment mentions checkpoint 5 or 6 only.
    for segment in segments(&dir.0) {
        let bytes = std::fs::read(&segment).unwrap();
        let id = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        assert!(id >= 5, "{} still holds checkpoint {id}", segment.display());
    }
    assert_intact(&load_latest(&dir.0).unwrap(), 2);
    // A reopened log goes on past every id handed out.
    let mut log = CheckpointLog::open(&dir.0, options).unwrap();
    assert!(log.next_checkpoint_id().unwrap() > CheckpointId::new(6));
}

/// Writes checkpoint 1 with a base record, then checkpoints 2..=n that
/// each build on it (state written in increments): returns the base.
fn write_building_on_the_first(dir: &Path, options: LogOptions, n: u64) -> Vec<u8> {
    let mut log = CheckpointLog::open(dir, options).unwrap();
    let base = archive(&state(CheckpointId::new(40), 0)).unwrap().to_vec();
    let first = log.next_checkpoint_id().unwrap();
    log.append_snapshot(first, OPERATOR, InstanceIdx(0), 1, &base)
        .unwrap();
    log.commit(first, 1).unwrap();
    for _ in 1..n {
        let id = log.next_checkpoint_id().unwrap();
        log.append_snapshot(
            id,
            OPERATOR,
            InstanceIdx(1),
            1,
            &archive(&state(id, 1)).unwrap(),
        )
        .unwrap();
        log.append_dependency(id, first).unwrap();
        log.commit(id, 1).unwrap();
    }
    base
}

#[test]
fn retention_keeps_what_a_retained_checkpoint_builds_on() {
    let dir = TestDir::new("builds-on");
    let options = LogOptions {
        segment_bytes: 256,
        retain: 2,
    };
    let base = write_building_on_the_first(&dir.0, options.clone(), 8);
    let checkpoint = load_latest(&dir.0).unwrap();
    assert_eq!(checkpoint.id(), CheckpointId::new(8));
    // Checkpoint 1's record is kept (while 7 and 8 build on it), and read
    // in place through the newest checkpoint.
    let shared = checkpoint
        .shared(CheckpointId::new(1), OPERATOR, InstanceIdx(0))
        .expect("the record built on is there");
    assert_eq!(shared.bytes(), &base[..]);
    // It outlives the loaded checkpoint.
    drop(checkpoint);
    assert_eq!(shared.bytes(), &base[..]);
    // Segments that held only checkpoints 2..=6 are reclaimed.
    for segment in segments(&dir.0) {
        let ids = checkpoints_in(&segment);
        assert!(
            ids.iter().any(|&id| id == 1 || id >= 7),
            "{} holds only checkpoints {ids:?}",
            segment.display()
        );
    }
}

/// The checkpoint ids of every record of a segment (framing: a 48-byte
/// header with the payload length at 32..40, records 16-byte aligned).
fn checkpoints_in(segment: &Path) -> std::collections::BTreeSet<u64> {
    let bytes = std::fs::read(segment).unwrap();
    let mut ids = std::collections::BTreeSet::new();
    let mut at = 0;
    while at + 48 <= bytes.len() {
        ids.insert(u64::from_le_bytes(
            bytes[at + 8..at + 16].try_into().unwrap(),
        ));
        let len = u64::from_le_bytes(bytes[at + 32..at + 40].try_into().unwrap()) as usize;
        at += (48 + len).next_multiple_of(16);
    }
    ids
}

#[test]
fn damage_to_a_record_built_on_makes_the_checkpoint_unusable() {
    let dir = TestDir::new("builds-on-damaged");
    let options = LogOptions {
        segment_bytes: 256,
        retain: 2,
    };
    write_building_on_the_first(&dir.0, options, 4);
    // Flip a payload bit of checkpoint 1's record (the first segment's
    // first record).
    let first = segments(&dir.0).into_iter().next().unwrap();
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[48 + 3] ^= 0x10;
    std::fs::write(&first, &bytes).unwrap();
    // Every checkpoint builds on it: none is usable, and 4 completed.
    assert_refused(load_latest(&dir.0), 4, None);
}

#[test]
fn a_streamed_record_reads_back_and_a_failed_one_leaves_nothing() {
    let dir = TestDir::new("streamed");
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    let id = log.next_checkpoint_id().unwrap();
    let payload: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    // A producer that fails halfway leaves no torn record behind.
    let failed = log.append_streamed(id, OPERATOR, InstanceIdx(9), 1, SideCheck::OnLoad, |out| {
        out.write_all(&payload[..1000]).unwrap();
        Err(StateError::Serialize {
            type_name: "test",
            reason: "failed halfway".into(),
        })
    });
    assert!(failed.is_err());
    let at = log
        .append_streamed(id, OPERATOR, InstanceIdx(0), 1, SideCheck::OnLoad, |out| {
            for chunk in payload.chunks(7_777) {
                out.write_all(chunk).unwrap();
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(at.len(), payload.len());
    log.append_snapshot(id, OPERATOR, InstanceIdx(1), 1, b"after")
        .unwrap();
    log.commit(id, 2).unwrap();
    assert_eq!(log.map_written(&at).unwrap().bytes(), &payload[..]);
    drop(log);
    let checkpoint = load_latest(&dir.0).unwrap();
    assert_eq!(
        checkpoint
            .snapshot(OPERATOR, InstanceIdx(0))
            .unwrap()
            .bytes(),
        &payload[..]
    );
    assert_eq!(
        checkpoint
            .snapshot(OPERATOR, InstanceIdx(1))
            .unwrap()
            .bytes(),
        b"after"
    );
    assert!(
        checkpoint.skipped().is_empty(),
        "{:?}",
        checkpoint.skipped()
    );
}

/// A streamed record is verified whole on load unless its reader checks it
/// a part at a time: damaged, the first makes its checkpoint unusable; the
/// second is handed to its reader as it is.
#[test]
fn a_damaged_streamed_record_is_refused_unless_its_reader_checks_it() {
    for check in [SideCheck::OnLoad, SideCheck::ByReader] {
        let dir = TestDir::new(&format!("streamed-damaged-{check:?}"));
        let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
        let id = log.next_checkpoint_id().unwrap();
        let payload: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let at = log
            .append_streamed(id, OPERATOR, InstanceIdx(0), 1, check, |out| {
                out.write_all(&payload).unwrap();
                Ok(())
            })
            .unwrap();
        log.commit(id, 1).unwrap();
        drop(log);
        let segment = segments(&dir.0).pop().unwrap();
        let mut bytes = std::fs::read(&segment).unwrap();
        // The payload starts after the record's 48-byte header.
        bytes[48 + at.len() / 2] ^= 0x01;
        std::fs::write(&segment, &bytes).unwrap();
        match check {
            SideCheck::OnLoad => assert_refused(load_latest(&dir.0), id.get(), None),
            SideCheck::ByReader => {
                let checkpoint = load_latest(&dir.0).unwrap();
                let read = checkpoint.snapshot(OPERATOR, InstanceIdx(0)).unwrap();
                assert_ne!(read.bytes(), &payload[..], "the reader sees the damage");
            }
        }
    }
}

/// A crash can cut the log at any byte; the marker then names the last
/// checkpoint whose commit record was whole (it is replaced only after the
/// record is durable). The same cut with the marker at 3 is damage done
/// after the fact, and refused.
#[test]
fn a_torn_tail_at_any_byte_falls_back_to_the_last_whole_checkpoint() {
    let dir = TestDir::new("torn");
    write(&dir.0, LogOptions::default(), 3, 2);
    let segment = segments(&dir.0).pop().unwrap();
    let whole = std::fs::read(&segment).unwrap();
    // Where each commit record ends: a cut at or after it keeps that checkpoint.
    let commits_end: Vec<usize> = {
        let mut ends = Vec::new();
        let mut offset = 0;
        while offset < whole.len() {
            let len = u64::from_le_bytes(whole[offset + 32..offset + 40].try_into().unwrap());
            let record = (48 + len as usize).next_multiple_of(16);
            if whole[offset + 5] == 2 {
                ends.push(offset + record);
            }
            offset += record;
        }
        ends
    };
    assert_eq!(commits_end.len(), 3);
    for cut in 0..whole.len() {
        std::fs::write(&segment, &whole[..cut]).unwrap();
        let expected = commits_end.iter().filter(|&&end| end <= cut).count() as u64;
        if expected < 3 {
            set_marker(&dir.0, 3);
            assert_refused(load_latest(&dir.0), 3, (expected > 0).then_some(expected));
        }
        set_marker(&dir.0, expected);
        match load_latest(&dir.0) {
            Ok(checkpoint) => {
                assert_eq!(checkpoint.id(), CheckpointId::new(expected), "cut at {cut}");
                assert_intact(&checkpoint, 2);
                // A cut inside a record is reported; one between records is not.
                assert_eq!(
                    !checkpoint.skipped().is_empty(),
                    !is_boundary(&whole, cut),
                    "cut at {cut}: {:?}",
                    checkpoint.skipped()
                );
            }
            Err(StateError::NoCheckpoint { .. }) => assert_eq!(expected, 0, "cut at {cut}"),
            Err(other) => panic!("cut at {cut}: {other}"),
        }
    }
}

/// Whether `cut` falls between two records of `log`.
fn is_boundary(log: &[u8], cut: usize) -> bool {
    let mut offset = 0;
    while offset < cut {
        let len = u64::from_le_bytes(log[offset + 32..offset + 40].try_into().unwrap());
        offset += (48 + len as usize).next_multiple_of(16);
    }
    offset == cut
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any flipped bit anywhere in the log: loading never panics, never
    /// returns data other than what was written for the checkpoint it names,
    /// and never an older checkpoint than the newest that completed.
    #[test]
    fn a_flipped_bit_never_yields_wrong_data(position in 0usize..1_000_000, bit in 0u8..8) {
        let dir = TestDir::new("flip");
        write(&dir.0, LogOptions { segment_bytes: 512, retain: 10 }, 4, 2);
        let files = segments(&dir.0);
        let sizes: Vec<usize> = files.iter().map(|f| std::fs::metadata(f).unwrap().len() as usize).collect();
        let mut at = position % sizes.iter().sum::<usize>();
        let (file, offset) = files.iter().zip(&sizes).find_map(|(f, &n)| {
            if at < n { Some((f, at)) } else { at -= n; None }
        }).unwrap();
        let mut bytes = std::fs::read(file).unwrap();
        bytes[offset] ^= 1 << bit;
        std::fs::write(file, &bytes).unwrap();
        match load_latest(&dir.0) {
            Ok(checkpoint) => {
                prop_assert_eq!(checkpoint.id(), CheckpointId::new(4));
                assert_intact(&checkpoint, 2);
            }
            Err(StateError::CompleteCheckpointUnusable { newest, usable, .. }) => {
                prop_assert_eq!(newest, CheckpointId::new(4));
                prop_assert!(usable.is_none_or(|u| u < newest));
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}

/// A record larger than the pieces a load reads it in (16 MiB) is checked
/// whole: intact it loads, and a flipped bit past the first piece makes its
/// checkpoint unusable.
#[test]
fn a_record_larger_than_a_read_is_checked_to_its_last_byte() {
    let dir = TestDir::new("large-record");
    let mut log = CheckpointLog::open(&dir.0, LogOptions::default()).unwrap();
    let id = log.next_checkpoint_id().unwrap();
    let payload: Vec<u8> = (0..40u32 << 20).map(|i| (i % 251) as u8).collect();
    log.append_snapshot(id, OPERATOR, InstanceIdx(0), 1, &payload)
        .unwrap();
    log.commit(id, 1).unwrap();
    drop(log);
    let checkpoint = load_latest(&dir.0).unwrap();
    assert!(
        checkpoint
            .snapshot(OPERATOR, InstanceIdx(0))
            .unwrap()
            .bytes()
            == &payload[..]
    );
    drop(checkpoint);
    let segment = segments(&dir.0).into_iter().next().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // Past the first 16 MiB and the second: in the third piece.
    bytes[(35 << 20) + 7] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    assert_refused(load_latest(&dir.0), id.get(), None);
}
