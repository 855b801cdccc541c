//! Sinks driven directly, without a runtime.

use streamwork_connectors::{CollectSink, FileSink};
use streamwork_core::{CheckpointId, InstanceContext, InstanceIdx, KeyGroups, Record, Sink};

#[test]
fn file_sink_writes_one_part_per_instance() {
    let dir = std::env::temp_dir().join(format!("streamwork-sink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for instance in 0..2u32 {
        let mut sink = FileSink::new(&dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(v.to_string().as_bytes())
        });
        sink.open(&InstanceContext::new(
            "files",
            InstanceIdx(instance),
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
        sink.write(Record::new(u64::from(instance) * 10)).unwrap();
        sink.write(Record::new(u64::from(instance) * 10 + 1))
            .unwrap();
        sink.close().unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("part-0")).unwrap(),
        "0\n1\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("part-1")).unwrap(),
        "10\n11\n"
    );
}

#[test]
fn single_file_sink_refuses_parallel_instances() {
    let path = std::env::temp_dir().join(format!("streamwork-single-{}", std::process::id()));
    let mut sink = FileSink::new(&path, |v: &u64, line: &mut Vec<u8>| {
        line.extend_from_slice(v.to_string().as_bytes())
    })
    .single_file();
    let error = sink
        .open(&InstanceContext::new(
            "out",
            InstanceIdx(0),
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap_err();
    assert!(error.to_string().contains("parallelism 2"), "{error}");
}

#[test]
fn collect_sink_keeps_instance_and_order() {
    let sink = CollectSink::new();
    let mut instance = sink.clone();
    instance
        .open(&InstanceContext::new(
            "c",
            InstanceIdx(1),
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
    instance.write(Record::new("a")).unwrap();
    instance.write(Record::new("b")).unwrap();
    assert!(sink.values().is_empty(), "records are published on flush");
    instance.close().unwrap();
    assert_eq!(sink.values_of_instance(1), vec!["a", "b"]);
}

fn restore_at(checkpoint: u64, is_final: bool) -> streamwork_core::Restore<'static> {
    streamwork_core::Restore {
        records: None,
        component: "out",
        checkpoint: CheckpointId::new(checkpoint),
        is_final,
        ended: Vec::new(),
        instance: InstanceIdx(0),
        parallelism: 1,
        key_groups: KeyGroups::DEFAULT,
        parts: Vec::new(),
    }
}

fn record(v: u64) -> Record<u64> {
    Record {
        value: v,
        time: None,
    }
}

fn visible(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

#[test]
fn a_transactional_sink_commits_only_complete_checkpoints_across_a_crash() {
    let dir = std::env::temp_dir().join(format!("streamwork-txn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let sink = || {
        FileSink::new(&dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(v.to_string().as_bytes())
        })
        .transactional()
    };
    let mut first = sink();
    first.open(&ctx).unwrap();
    for v in 0..3 {
        first.write(record(v)).unwrap();
    }
    first.pre_commit(CheckpointId::new(1)).unwrap();
    assert!(visible(&dir).is_empty(), "staged, not yet visible");
    for v in 3..5 {
        first.write(record(v)).unwrap();
    }
    first.pre_commit(CheckpointId::new(2)).unwrap();
    first.write(record(5)).unwrap();
    first.flush().unwrap();
    // A crash: checkpoint 1 completed, checkpoint 2 did not.
    drop(first);
    let mut second = sink();
    second.open(&ctx).unwrap();
    second.restore(&restore_at(1, false)).unwrap();
    assert_eq!(visible(&dir), vec!["part-0-00000000000000000001"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("part-0-00000000000000000001")).unwrap(),
        "0\n1\n2\n"
    );
    let hidden = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(hidden, 1, "what checkpoint 2 staged is discarded");
    // The replay writes them again, and the end commits them.
    for v in 3..6 {
        second.write(record(v)).unwrap();
    }
    second.close().unwrap();
    let mut all = String::new();
    for name in visible(&dir) {
        all += &std::fs::read_to_string(dir.join(name)).unwrap();
    }
    assert_eq!(all, "0\n1\n2\n3\n4\n5\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn scaled_down_instances_commit_what_the_removed_ones_staged() {
    let dir = std::env::temp_dir().join(format!("streamwork-txn-down-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sink = || {
        FileSink::new(&dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(v.to_string().as_bytes())
        })
        .transactional()
    };
    // Three instances each stage checkpoint 4 (complete) and 5 (not).
    for i in 0..3u32 {
        let mut old = sink();
        old.open(&InstanceContext::new(
            "out",
            InstanceIdx(i),
            3,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
        old.write(record(u64::from(i))).unwrap();
        old.pre_commit(CheckpointId::new(4)).unwrap();
        old.write(record(100 + u64::from(i))).unwrap();
        old.pre_commit(CheckpointId::new(5)).unwrap();
    }
    // Restored at parallelism 2 from checkpoint 4: instance 0 also takes
    // the place of old instance 2.
    for i in 0..2u32 {
        let mut new = sink();
        new.open(&InstanceContext::new(
            "out",
            InstanceIdx(i),
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
        let mut restore = restore_at(4, false);
        restore.instance = InstanceIdx(i);
        restore.parallelism = 2;
        new.restore(&restore).unwrap();
    }
    let mut committed: Vec<String> = Vec::new();
    for name in visible(&dir) {
        committed.extend(
            std::fs::read_to_string(dir.join(&name))
                .unwrap()
                .lines()
                .map(String::from),
        );
    }
    committed.sort();
    assert_eq!(committed, vec!["0", "1", "2"]);
    let hidden: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        hidden.is_empty(),
        "nothing staged is left behind: {hidden:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_single_file_append_cut_short_by_a_crash_is_redone_once() {
    let (path, sink) = single_file_cut_at_commit("txn1");
    let dir = path.parent().unwrap().to_path_buf();
    let ctx = InstanceContext::new("dead", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    // A crash in the middle of committing checkpoint 2: its marker says how
    // long the file was, and half the append made it to disk.
    std::fs::write(dir.join(".dead-letter.commit-00000000000000000002"), "2").unwrap();
    std::fs::write(&path, "1\n2").unwrap();
    let mut second = sink();
    second.open(&ctx).unwrap();
    second.restore(&restore_at(2, false)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
    assert_eq!(visible(&dir), vec!["dead-letter"]);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".dead-letter.published", "dead-letter"],
        "no staging left, only the record of what was published"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(".dead-letter.published")).unwrap(),
        "00000000000000000002"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A single-file sink with one committed checkpoint (`1`) and a second
/// staged (`2`), as a crash in the middle of committing it leaves them;
/// returns the file's path and a maker of the same sink.
fn single_file_cut_at_commit(
    tag: &str,
) -> (
    std::path::PathBuf,
    impl Fn() -> streamwork_connectors::TransactionalFileSink<u64>,
) {
    let dir = std::env::temp_dir().join(format!("streamwork-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("dead-letter");
    let ctx = InstanceContext::new("dead", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let target = path.clone();
    let sink = move || {
        FileSink::new(&target, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(v.to_string().as_bytes())
        })
        .single_file()
        .transactional()
    };
    let mut first = sink();
    first.open(&ctx).unwrap();
    first.write(record(1)).unwrap();
    first.pre_commit(CheckpointId::new(1)).unwrap();
    first.commit(CheckpointId::new(1)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
    first.write(record(2)).unwrap();
    first.pre_commit(CheckpointId::new(2)).unwrap();
    drop(first);
    (path, sink)
}

/// Killed while writing the append marker of checkpoint 2: the marker is
/// written whole or not at all, so what is left is its partial file, and
/// the append is done once, after what was committed.
#[test]
fn a_crash_while_writing_the_append_marker_appends_once_after_what_was_committed() {
    let (path, sink) = single_file_cut_at_commit("txn-marker");
    let dir = path.parent().unwrap().to_path_buf();
    std::fs::write(
        dir.join(".dead-letter.commit-00000000000000000002.partial"),
        "",
    )
    .unwrap();
    let ctx = InstanceContext::new("dead", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let mut second = sink();
    second.open(&ctx).unwrap();
    second.restore(&restore_at(2, false)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
    let hidden: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".dead-letter.published")
        .collect();
    assert!(hidden.is_empty(), "nothing staged is left: {hidden:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An append marker that does not hold a length (damaged: the sink writes
/// it whole) cannot say where to undo the append: the restore is refused,
/// naming the marker, and the committed output is untouched (it was once
/// cut to nothing, losing every earlier commit).
#[test]
fn a_damaged_append_marker_is_refused_and_the_committed_output_kept() {
    let (path, sink) = single_file_cut_at_commit("txn-damaged-marker");
    let dir = path.parent().unwrap().to_path_buf();
    std::fs::write(dir.join(".dead-letter.commit-00000000000000000002"), "").unwrap();
    let ctx = InstanceContext::new("dead", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let mut second = sink();
    second.open(&ctx).unwrap();
    let refused = second.restore(&restore_at(2, false)).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(".dead-letter.commit-00000000000000000002"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Both kinds of transactional file sink in `dir`: a directory of parts
/// (`dir/parts`) and one file (`dir/single`).
fn both(dir: &std::path::Path) -> [streamwork_connectors::TransactionalFileSink<u64>; 2] {
    let format = |v: &u64, line: &mut Vec<u8>| line.extend_from_slice(v.to_string().as_bytes());
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let mut sinks = [
        FileSink::new(dir.join("parts"), format).transactional(),
        FileSink::new(dir.join("single"), format)
            .single_file()
            .transactional(),
    ];
    for sink in &mut sinks {
        sink.open(&ctx).unwrap();
    }
    sinks
}

/// A run that crashed before its first checkpoint completed left staged
/// output; the next run starts from no checkpoint and must not publish it,
/// even when its own checkpoints reuse the ids (here: 1, with nothing
/// written before its barrier).
#[test]
fn a_run_from_no_checkpoint_discards_what_a_crashed_run_staged() {
    let dir = std::env::temp_dir().join(format!("streamwork-txn-fresh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for mut crashed in both(&dir) {
        for v in 0..3 {
            crashed.write(record(v)).unwrap();
        }
        crashed.pre_commit(CheckpointId::new(1)).unwrap();
    }
    for mut sink in both(&dir) {
        sink.restore(&restore_at(0, false)).unwrap();
        // Checkpoint 1 of this run covers nothing; then everything, once.
        sink.pre_commit(CheckpointId::new(1)).unwrap();
        sink.commit(CheckpointId::new(1)).unwrap();
        for v in 0..3 {
            sink.write(record(v)).unwrap();
        }
        sink.pre_commit(CheckpointId::new(2)).unwrap();
        sink.commit(CheckpointId::new(2)).unwrap();
    }
    let mut parts = String::new();
    for name in visible(&dir.join("parts")) {
        parts += &std::fs::read_to_string(dir.join("parts").join(name)).unwrap();
    }
    assert_eq!(parts, "0\n1\n2\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("single")).unwrap(),
        "0\n1\n2\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Output published for checkpoint 2 and a run that starts from checkpoint
/// 1, or from none (the checkpoint directory was lost or is another one):
/// refused, naming the sink, the checkpoint and the fix; nothing changes.
#[test]
fn a_run_that_starts_before_published_output_is_refused() {
    let dir = std::env::temp_dir().join(format!("streamwork-txn-behind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for mut sink in both(&dir) {
        for checkpoint in 1..=2 {
            sink.write(record(checkpoint)).unwrap();
            sink.pre_commit(CheckpointId::new(checkpoint)).unwrap();
            sink.commit(CheckpointId::new(checkpoint)).unwrap();
        }
    }
    let before = std::fs::read_to_string(dir.join("single")).unwrap();
    for from in [1, 0] {
        for (mut sink, target) in both(&dir).into_iter().zip(["parts", "single"]) {
            let error = sink.restore(&restore_at(from, false)).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("`out`"), "{text}");
            assert!(text.contains("checkpoint 2"), "{text}");
            let start = match from {
                0 => "no checkpoint".to_string(),
                n => format!("checkpoint {n}"),
            };
            assert!(text.contains(&format!("starts from {start}")), "{text}");
            let fix = format!("remove {}", dir.join(target).display());
            assert!(text.contains(&fix), "{text}");
        }
    }
    assert_eq!(std::fs::read_to_string(dir.join("single")).unwrap(), before);
    assert_eq!(
        visible(&dir.join("parts")),
        ["part-0-00000000000000000001", "part-0-00000000000000000002"]
    );
    // From the checkpoint that published it, or the final one, it resumes.
    for mut sink in both(&dir) {
        sink.restore(&restore_at(2, false)).unwrap();
    }
    for mut sink in both(&dir) {
        sink.restore(&restore_at(0, true)).unwrap();
    }
    // The fix the refusal names: with what it names removed, a run from no
    // checkpoint starts over and publishes once.
    std::fs::remove_dir_all(dir.join("parts")).unwrap();
    std::fs::remove_file(dir.join("single")).unwrap();
    for mut sink in both(&dir) {
        sink.restore(&restore_at(0, false)).unwrap();
        sink.write(record(7)).unwrap();
        sink.pre_commit(CheckpointId::new(1)).unwrap();
        sink.commit(CheckpointId::new(1)).unwrap();
    }
    assert_eq!(std::fs::read_to_string(dir.join("single")).unwrap(), "7\n");
    assert_eq!(visible(&dir.join("parts")), ["part-0-00000000000000000001"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A rolling sink's run of `checkpoints` checkpoints of `per` records each,
/// crashed after step `crash` (each checkpoint is three steps: its writes,
/// its pre-commit, its commit) and restored from the last checkpoint known
/// complete (`pre_committed_completes`: a checkpoint whose pre-commit ran
/// may have completed before the crash), then run to the end. Returns the
/// visible files, in name order, with their contents.
fn rolling_run(
    dir: &std::path::Path,
    checkpoints: u64,
    per: u64,
    crash: Option<u64>,
    pre_committed_completes: bool,
) -> Vec<(String, String)> {
    let _ = std::fs::remove_dir_all(dir);
    let ctx = InstanceContext::new("out", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    let sink = || {
        FileSink::new(dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{v:04}").as_bytes())
        })
        .rolling(40, std::time::Duration::from_secs(3600))
        .transactional()
    };
    let mut instance = sink();
    instance.open(&ctx).unwrap();
    instance.restore(&restore_at(0, false)).unwrap();
    let mut step = 0u64;
    let mut completed = 0u64;
    let mut from = 1u64;
    if let Some(crash) = crash {
        'run: for c in 1..=checkpoints {
            for (phase, last) in [(0, false), (1, false), (2, true)] {
                match phase {
                    0 => (0..per).for_each(|i| instance.write(record((c - 1) * per + i)).unwrap()),
                    1 => instance.pre_commit(CheckpointId::new(c)).unwrap(),
                    _ => {
                        completed = c;
                        instance.commit(CheckpointId::new(c)).unwrap()
                    }
                }
                let _ = last;
                if step == crash {
                    if phase == 1 && pre_committed_completes {
                        completed = c;
                    }
                    break 'run;
                }
                step += 1;
            }
        }
        drop(instance);
        instance = sink();
        instance.open(&ctx).unwrap();
        instance.restore(&restore_at(completed, false)).unwrap();
        from = completed + 1;
    }
    for c in from..=checkpoints {
        for i in 0..per {
            instance.write(record((c - 1) * per + i)).unwrap();
        }
        instance.pre_commit(CheckpointId::new(c)).unwrap();
        instance.commit(CheckpointId::new(c)).unwrap();
    }
    instance.close().unwrap();
    visible(dir)
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

#[test]
fn a_rolling_sink_writes_whole_files_of_its_size_exactly_once_across_any_crash() {
    let dir = std::env::temp_dir().join(format!("streamwork-rolling-{}", std::process::id()));
    let (checkpoints, per) = (12u64, 3u64);
    let expected: String = (0..checkpoints * per)
        .map(|v| format!("{v:04}\n"))
        .collect();
    let clean = rolling_run(&dir, checkpoints, per, None, false);
    // 180 bytes in commits of 15, closed past 40 bytes: files of 45 bytes
    // (the last smaller), not one per checkpoint, nor one for everything.
    assert_eq!(clean.len(), 4, "{clean:?}");
    assert!(
        clean[..3].iter().all(|(_, text)| text.len() == 45),
        "{clean:?}"
    );
    for crash in 0..checkpoints * 3 {
        for completes in [false, true] {
            let files = rolling_run(&dir, checkpoints, per, Some(crash), completes);
            let all: String = files.iter().map(|(_, text)| text.as_str()).collect();
            assert_eq!(
                all, expected,
                "crash after step {crash} (completes: {completes})"
            );
            for (name, text) in &files[..files.len() - 1] {
                assert!(text.len() >= 40, "{name} closed before its size: {text:?}");
            }
            let hidden: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".part-0.open") || n.contains("staged"))
                .collect();
            assert!(hidden.is_empty(), "left behind: {hidden:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_rolling_sink_scaled_down_closes_the_open_files_of_the_removed_instances() {
    let dir = std::env::temp_dir().join(format!("streamwork-rolling-down-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sink = || {
        FileSink::new(&dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("{v:04}").as_bytes())
        })
        .rolling(1 << 20, std::time::Duration::from_secs(3600))
        .transactional()
    };
    let ctx = |i: u32, n: u32| InstanceContext::new("out", InstanceIdx(i), n, KeyGroups::DEFAULT);
    // Three instances commit checkpoint 3 (kept in their open files, far
    // below the size), stage checkpoint 4 (complete) and 5 (not).
    for i in 0..3u32 {
        let mut old = sink();
        old.open(&ctx(i, 3)).unwrap();
        old.write(record(u64::from(i))).unwrap();
        old.pre_commit(CheckpointId::new(3)).unwrap();
        old.commit(CheckpointId::new(3)).unwrap();
        old.write(record(10 + u64::from(i))).unwrap();
        old.pre_commit(CheckpointId::new(4)).unwrap();
        old.write(record(100 + u64::from(i))).unwrap();
        old.pre_commit(CheckpointId::new(5)).unwrap();
    }
    assert!(visible(&dir).is_empty(), "open files are not yet visible");
    // Restored at parallelism 2 from checkpoint 4, then run to the end.
    for i in 0..2u32 {
        let mut new = sink();
        new.open(&ctx(i, 2)).unwrap();
        let mut restore = restore_at(4, false);
        restore.instance = InstanceIdx(i);
        restore.parallelism = 2;
        new.restore(&restore).unwrap();
        new.close().unwrap();
    }
    let mut committed: Vec<String> = Vec::new();
    for name in visible(&dir) {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        committed.extend(text.lines().map(String::from));
    }
    committed.sort();
    // Every record of checkpoints 3 and 4 once, none of checkpoint 5.
    assert_eq!(committed, ["0000", "0001", "0002", "0010", "0011", "0012"]);
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".open") || n.contains("staged") || n.contains("inprogress"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
