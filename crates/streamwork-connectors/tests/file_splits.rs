//! The file source's splits, driven directly: any input (files with and
//! without a last newline, empty files and lines, lines longer than a
//! split, plain, gzip or zstd in one or more members), read partly at one
//! parallelism, checkpointed, and read to the end at another, yields every
//! line once with its index in the whole input.

use std::io::Write;

mod support;

use proptest::prelude::*;
use streamwork_connectors::FileSource;
use streamwork_connectors::file::Lines;
use streamwork_core::{Source, StateBytes};
use support::{context, read, restore};

type Line = (u64, Vec<u8>);

/// File `i`'s name and bytes: plain, or compressed in two members (gzip)
/// or frames (zstd) cut at byte `cut`.
fn compressed(i: usize, bytes: &[u8], compression: u8, cut: usize) -> (String, Vec<u8>) {
    let (head, tail) = bytes.split_at(cut);
    match compression {
        1 => {
            let mut out = Vec::new();
            for piece in [head, tail] {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(piece).unwrap();
                out.extend(gz.finish().unwrap());
            }
            (format!("part-{i:02}.gz"), out)
        }
        2 => {
            let mut out = zstd::encode_all(head, 1).unwrap();
            out.extend(zstd::encode_all(tail, 1).unwrap());
            (format!("part-{i:02}.zst"), out)
        }
        _ => (format!("part-{i:02}"), bytes.to_vec()),
    }
}

fn source(dir: &std::path::Path, split_bytes: u64) -> FileSource<Line> {
    FileSource::with_lines(dir, Lines::indexed_raw()).split_bytes(split_bytes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_line_once_across_a_restore_at_another_parallelism(
        files in prop::collection::vec(
            (
                prop::collection::vec(prop::collection::vec(b'a'..=b'z', 0..30), 0..40),
                any::<bool>(),
                // Plain, gzip or zstd, and where a second member begins.
                0u8..3,
                any::<prop::sample::Index>(),
            ),
            1..5,
        ),
        split_bytes in 1u64..64,
        before in 1u32..4,
        after in 1u32..4,
        taken in prop::collection::vec(0usize..60, 4),
    ) {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-splits-{}-{}",
            std::process::id(),
            std::thread::current().name().unwrap_or("t").replace("::", "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut expected: Vec<Line> = Vec::new();
        for (i, (lines, last_newline, compression, cut)) in files.iter().enumerate() {
            let mut bytes = Vec::new();
            for (j, line) in lines.iter().enumerate() {
                bytes.extend_from_slice(line);
                if j + 1 < lines.len() || *last_newline {
                    bytes.push(b'\n');
                }
            }
            // What a reader sees: lines split at newlines, the last without one.
            let mut parts: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            if bytes.last() == Some(&b'\n') || bytes.is_empty() {
                parts.pop();
            }
            for part in parts {
                expected.push((expected.len() as u64, part.to_vec()));
            }
            let (name, stored) = compressed(i, &bytes, *compression, cut.index(bytes.len() + 1));
            std::fs::write(dir.join(name), stored).unwrap();
        }
        // The first run reads part of the input, then every instance's
        // position is checkpointed.
        let mut got: Vec<Line> = Vec::new();
        let mut parts: Vec<StateBytes> = Vec::new();
        for instance in 0..before {
            let mut first = source(&dir, split_bytes);
            first.open(&context(instance, before)).unwrap();
            got.extend(read(&mut first, taken[instance as usize]));
            parts.push(first.snapshot().unwrap());
        }
        // The second reads the rest at another parallelism.
        for instance in 0..after {
            let mut second = source(&dir, split_bytes);
            let restore = restore(1, instance, after, &parts);
            second.restore(&restore).unwrap();
            second.open(&context(instance, after)).unwrap();
            got.extend(read(&mut second, usize::MAX));
        }
        got.sort();
        prop_assert_eq!(got, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A checkpoint of an input that has changed since is refused, naming
/// what changed.
#[test]
fn a_changed_input_is_refused() {
    let dir =
        std::env::temp_dir().join(format!("streamwork-splits-changed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a"), "1\n2\n3\n").unwrap();
    let mut first = source(&dir, 4);
    first.open(&context(0, 1)).unwrap();
    read(&mut first, 1);
    let part = first.snapshot().unwrap();
    std::fs::write(dir.join("a"), "1\n2\n3\n4\n").unwrap();
    std::fs::write(dir.join("b"), "5\n").unwrap();
    let mut second = source(&dir, 4);
    let parts = [part];
    let restore = restore(1, 0, 1, &parts);
    second.restore(&restore).unwrap();
    let error = second.open(&context(0, 1)).unwrap_err().to_string();
    assert!(error.contains("a was 6 bytes and is 8"), "{error}");
    assert!(error.contains("b is new"), "{error}");
    // Another split size is refused too.
    let mut other = source(&dir, 5);
    let error = other.restore(&restore).unwrap_err().to_string();
    assert!(error.contains("split_bytes(4)"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}
