//! Sources driven directly, without a runtime: open, poll until finished.

use std::io::Write;
use std::net::TcpListener;

use streamwork_connectors::file::Lines;
use streamwork_connectors::{
    BadInput, FileSource, GeneratorSource, InputErrors, TcpLineSource, VecSource,
};
use streamwork_core::{
    CheckpointId, Collector, InstanceContext, InstanceIdx, KeyGroups, Source, SourcePoll, Timestamp,
};

fn drain<S: Source<Out = Collector<T>>, T: streamwork_core::Data>(
    mut source: S,
    instance: u32,
    parallelism: u32,
) -> Result<Vec<T>, streamwork_core::ConnectorError> {
    source.open(&InstanceContext::new(
        "test",
        InstanceIdx(instance),
        parallelism,
        KeyGroups::DEFAULT,
    ))?;
    let mut out = Collector::detached();
    for _ in 0..100_000 {
        if source.poll(&mut out)? == SourcePoll::Finished {
            source.close()?;
            return Ok(out.take_buffered().into_iter().map(|r| r.value).collect());
        }
    }
    panic!("source did not finish");
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("streamwork-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn file_source_skips_blank_and_counts_invalid_utf8() {
    let dir = temp_dir("file");
    let path = dir.join("in.txt");
    std::fs::write(&path, b"car\r\n\n  \ntruck\n\xff\xfe\nvan").unwrap();
    let errors = InputErrors::new();
    let source = FileSource::with_lines(
        &path,
        Lines::text()
            .skip_blank(true)
            .count_errors_in(errors.clone()),
    );
    assert_eq!(drain(source, 0, 1).unwrap(), vec!["car", "truck", "van"]);
    assert_eq!(errors.count(), 1);
    assert!(
        errors.examples()[0]
            .ends_with("in.txt:5: invalid UTF-8 (invalid utf-8 sequence of 1 bytes from index 0)")
    );
}

#[test]
fn file_source_fails_on_bad_input_when_asked() {
    let dir = temp_dir("fail");
    let path = dir.join("n.txt");
    std::fs::write(&path, "1\nx\n3\n").unwrap();
    let source = FileSource::parsed(&path, |l| l.parse::<u64>().map_err(|e| e.to_string()))
        .map_lines(|l| l.on_bad_input(BadInput::Fail));
    let error = drain(source, 0, 1).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("n.txt:2: invalid digit found in string"),
        "{error}"
    );
}

#[test]
fn file_source_reads_a_directory_split_across_instances() {
    let dir = temp_dir("dir");
    for (i, content) in ["a\nb\n", "c\n", "d\ne\nf\n"].iter().enumerate() {
        std::fs::write(dir.join(format!("part-{i}")), content).unwrap();
    }
    let first = drain(FileSource::text(&dir), 0, 2).unwrap();
    let second = drain(FileSource::text(&dir), 1, 2).unwrap();
    assert_eq!(first, vec!["a", "b", "d", "e", "f"]);
    assert_eq!(second, vec!["c"]);
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let error = drain(FileSource::text("/nonexistent/streamwork/input"), 0, 1).unwrap_err();
    assert!(error.is_retryable());
    assert!(error.to_string().contains("/nonexistent/streamwork/input"));
}

#[test]
fn generator_is_deterministic_and_split_by_instance() {
    let all = drain(GeneratorSource::new(|i| i * 10).take(7), 0, 1).unwrap();
    assert_eq!(all, vec![0, 10, 20, 30, 40, 50, 60]);
    let odd = drain(GeneratorSource::new(|i| i * 10).take(7), 1, 2).unwrap();
    assert_eq!(odd, vec![10, 30, 50]);
}

#[test]
fn generator_stamps_event_time() {
    let mut source = GeneratorSource::new(|i| i)
        .take(3)
        .with_timestamps(|seq, _| Timestamp::from_millis(seq as i64 * 5));
    source
        .open(&InstanceContext::new(
            "g",
            InstanceIdx(0),
            1,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
    let mut out = Collector::detached();
    while source.poll(&mut out).unwrap() != SourcePoll::Finished {}
    let times: Vec<_> = out
        .take_buffered()
        .into_iter()
        .map(|r| r.time.unwrap().millis())
        .collect();
    assert_eq!(times, vec![0, 5, 10]);
}

#[test]
fn vec_source_splits_by_index() {
    assert_eq!(
        drain(VecSource::new(vec![1, 2, 3, 4, 5]), 1, 2).unwrap(),
        vec![2, 4]
    );
}

#[test]
fn tcp_source_reads_lines_split_across_packets() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        for chunk in [&b"alpha\nbe"[..], b"ta\n", b"\xff\n", b"gamma\n"] {
            conn.write_all(chunk).unwrap();
            conn.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    });
    let errors = InputErrors::new();
    let source =
        TcpLineSource::text(addr.to_string()).map_lines(|l| l.count_errors_in(errors.clone()));
    let lines = drain(source, 0, 1).unwrap();
    server.join().unwrap();
    assert_eq!(lines, vec!["alpha", "beta", "gamma"]);
    assert_eq!(errors.count(), 1);
}

#[test]
fn tcp_source_reports_a_refused_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = drain(TcpLineSource::text(addr.to_string()), 0, 1).unwrap_err();
    assert!(
        error.to_string().contains("is `nc -lk PORT` running?"),
        "{error}"
    );
}

/// Polls `source` (opened) until it has emitted at least `n` records.
fn take_some<S: Source<Out = Collector<T>>, T: streamwork_core::Data>(
    source: &mut S,
    n: usize,
) -> Vec<T> {
    let mut out = Collector::detached();
    let mut got = Vec::new();
    while got.len() < n {
        let poll = source.poll(&mut out).unwrap();
        got.extend(out.take_buffered().into_iter().map(|r| r.value));
        if poll == SourcePoll::Finished {
            break;
        }
    }
    got
}

/// A restarted source from the position `snapshot` took.
fn restored<S: Source>(mut fresh: S, state: &streamwork_core::StateBytes, parallelism: u32) -> S {
    let restore = streamwork_core::Restore {
        records: None,
        component: "test",
        checkpoint: CheckpointId::new(1),
        is_final: false,
        ended: Vec::new(),
        instance: InstanceIdx(0),
        parallelism,
        key_groups: KeyGroups::DEFAULT,
        parts: vec![streamwork_core::checkpoint::RestoredPart {
            part: InstanceIdx(0),
            schema: state.schema,
            bytes: &state.bytes,
        }],
    };
    fresh.restore(&restore).unwrap();
    fresh
}

#[test]
fn replayable_sources_resume_exactly_where_they_were_checkpointed() {
    let ctx = InstanceContext::new("test", InstanceIdx(0), 1, KeyGroups::DEFAULT);
    // The generator, by sequence number.
    let mut generator = GeneratorSource::new(|i| i).take(10_000);
    generator.open(&ctx).unwrap();
    let before = take_some(&mut generator, 3_000);
    let from = before.len() as u64;
    let state = generator.snapshot().unwrap();
    let mut again = restored(GeneratorSource::new(|i| i).take(10_000), &state, 1);
    again.open(&ctx).unwrap();
    let after = drain_opened(&mut again);
    let all: Vec<u64> = before.into_iter().chain(after).collect();
    assert!(
        all == (0..10_000).collect::<Vec<u64>>(),
        "every number once, in order"
    );
    // At another parallelism (see tests/generator_rescale.rs), each new
    // instance skips what the old one generated in its share.
    let mut elsewhere = restored(GeneratorSource::new(|i| i).take(10_000), &state, 2);
    elsewhere
        .open(&InstanceContext::new(
            "test",
            InstanceIdx(0),
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
    let evens = drain_opened(&mut elsewhere);
    let expected: Vec<u64> = (from..10_000).filter(|i| i % 2 == 0).collect();
    assert!(
        evens == expected,
        "instance 0 of 2 generates the even numbers from {from}: got {} numbers from {:?}",
        evens.len(),
        evens.first()
    );

    // The file source, by file, byte offset and line index.
    let dir = temp_dir("replay");
    let lines: Vec<String> = (0..5_000).map(|i| format!("line {i}")).collect();
    std::fs::write(dir.join("a.txt"), lines[..2_000].join("\n") + "\n").unwrap();
    std::fs::write(dir.join("b.txt"), lines[2_000..].join("\n") + "\n").unwrap();
    let mut file = FileSource::with_lines(&dir, Lines::indexed_raw());
    file.open(&ctx).unwrap();
    let before = take_some(&mut file, 2_500);
    let state = file.snapshot().unwrap();
    let mut again = restored(
        FileSource::with_lines(&dir, Lines::indexed_raw()),
        &state,
        1,
    );
    again.open(&ctx).unwrap();
    let after = drain_opened(&mut again);
    let all: Vec<(u64, Vec<u8>)> = before.into_iter().chain(after).collect();
    let expected: Vec<(u64, Vec<u8>)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64, l.clone().into_bytes()))
        .collect();
    assert_eq!(all.len(), expected.len(), "every line once");
    assert!(all == expected, "every line once, in order, with its index");
}

fn drain_opened<S: Source<Out = Collector<T>>, T: streamwork_core::Data>(source: &mut S) -> Vec<T> {
    take_some(source, usize::MAX)
}
