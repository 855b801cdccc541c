//! CSV by header and compressed files, driven by hand: read by column name
//! in any order from plain, gzip and zstd files in parallel splits;
//! headers that do not match refused by name; written with a header and
//! compressed by every kind of file sink, across commits and a crash, and
//! read back whole by the source and by the `gzip` and `zstd` tools.

mod support;

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};
use streamwork_connectors::file::{Compression, Lines};
use streamwork_connectors::{FileSink, FileSource, TransactionalFileSink};
use streamwork_core::{CheckpointId, Record, Sink, Source};
use support::{context, fresh_dir, read, restore, visible_files};

#[derive(Clone, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
struct Bid {
    auction: u64,
    price: f64,
    bidder: Option<String>,
}

fn bid(auction: u64) -> Bid {
    Bid {
        auction,
        price: auction as f64 + 0.5,
        bidder: (!auction.is_multiple_of(3)).then(|| format!("b, \"{auction}\"")),
    }
}

fn compress(bytes: &[u8], compression: Compression) -> Vec<u8> {
    match compression {
        Compression::None => bytes.to_vec(),
        Compression::Gzip => {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(bytes).unwrap();
            gz.finish().unwrap()
        }
        Compression::Zstd => zstd::encode_all(bytes, 9).unwrap(),
    }
}

/// Reads every instance of a source over `dir` at `parallelism`.
fn read_all(source: &FileSource<Bid>, parallelism: u32) -> Vec<Bid> {
    let mut got = Vec::new();
    for instance in 0..parallelism {
        let mut source = source.clone();
        source.open(&context(instance, parallelism)).unwrap();
        got.extend(read(&mut source, usize::MAX));
    }
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    got
}

#[test]
fn csv_columns_are_read_by_name_in_any_order_from_plain_and_compressed_files() {
    let dir = fresh_dir("csv-headers");
    let files: [(&str, &[u8], Compression); 3] = [
        (
            "a.csv",
            b"auction,price,bidder\n1,1.5,x\n2,2.5,\n",
            Compression::None,
        ),
        (
            "b.csv.gz",
            b"bidder,price,auction\ny,3.5,3\n\"q, \"\"r\"\"\",4.5,4\n",
            Compression::Gzip,
        ),
        // A byte-order mark and CRLF line ends, as a spreadsheet writes.
        (
            "c.csv.zst",
            b"\xEF\xBB\xBFprice,auction,bidder\r\n5.5,5,z\r\n",
            Compression::Zstd,
        ),
    ];
    for (name, text, compression) in files {
        std::fs::write(dir.join(name), compress(text, compression)).unwrap();
    }
    let want = vec![
        Bid {
            auction: 1,
            price: 1.5,
            bidder: Some("x".into()),
        },
        Bid {
            auction: 2,
            price: 2.5,
            bidder: None,
        },
        Bid {
            auction: 3,
            price: 3.5,
            bidder: Some("y".into()),
        },
        Bid {
            auction: 4,
            price: 4.5,
            bidder: Some("q, \"r\"".into()),
        },
        Bid {
            auction: 5,
            price: 5.5,
            bidder: Some("z".into()),
        },
    ];
    // Splits of 4 bytes: most of the plain file's splits begin past its
    // header, and read it first.
    for parallelism in [1, 2, 3] {
        let source = FileSource::<Bid>::csv(&dir).has_headers().split_bytes(4);
        assert_eq!(
            read_all(&source, parallelism),
            want,
            "parallelism {parallelism}"
        );
        assert_eq!(source.errors().count(), 0);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reads `text` as one CSV file with a header; the error opening or
/// reading it.
fn refusal(text: &str) -> String {
    let dir = fresh_dir(&format!("csv-refused-{}", text.len()));
    std::fs::write(dir.join("bids.csv"), text).unwrap();
    let mut source = FileSource::<Bid>::csv(&dir).has_headers();
    let error = source
        .open(&context(0, 1))
        .and_then(|()| {
            let mut out = streamwork_core::Collector::detached();
            source.poll(&mut out).map(drop)
        })
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    error
}

#[test]
fn a_header_that_does_not_match_the_record_is_refused_naming_the_columns() {
    let extra = refusal("auction,price,bidder,seller\n1,1.5,x,y\n");
    assert!(extra.contains("bids.csv:1"), "{extra}");
    assert!(
        extra.contains("no field of the record for column(s) `seller`"),
        "{extra}"
    );
    let missing = refusal("price,bidder\n1.5,x\n");
    assert!(
        missing.contains("no column for field(s) `auction`"),
        "{missing}"
    );
    let twice = refusal("auction,price,bidder,price\n1,1.5,x,2\n");
    assert!(twice.contains("column `price` twice"), "{twice}");
    let empty = refusal("\n1,1.5,x\n");
    assert!(empty.contains("header line is empty"), "{empty}");
}

#[test]
fn headers_on_lines_that_are_not_csv_are_refused_at_open() {
    let dir = fresh_dir("csv-not-csv");
    std::fs::write(dir.join("bids.jsonl"), "{}\n").unwrap();
    let mut source = FileSource::<Bid>::json(&dir).map_lines(Lines::has_headers);
    let error = source.open(&context(0, 1)).unwrap_err().to_string();
    assert!(error.contains("does not read CSV"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_row_under_a_header_is_malformed_input_at_its_position() {
    let dir = fresh_dir("csv-bad-row");
    std::fs::write(
        dir.join("bids.csv"),
        "auction,price,bidder\n1,1.5,x\n2,2.5\nthree,3.5,y\n4,4.5,z\n",
    )
    .unwrap();
    let source = FileSource::<Bid>::csv(&dir).has_headers();
    let got = read_all(&source, 1);
    assert_eq!(got.iter().map(|b| b.auction).collect::<Vec<_>>(), [1, 4]);
    let examples = source.errors().examples().join("\n");
    assert_eq!(source.errors().count(), 2, "{examples}");
    assert!(
        examples.contains("bids.csv:3: 2 fields where the header has 3"),
        "{examples}"
    );
    assert!(examples.contains("bids.csv:4"), "{examples}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file's text as an independent tool reads it (`gzip -dc`, `zstd -dc`).
fn decompressed_by_tool(path: &Path, compression: Compression) -> String {
    let tool = match compression {
        Compression::None => return std::fs::read_to_string(path).unwrap(),
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("running {tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} -dc {}: {:?}",
        path.display(),
        out
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The ways a file sink can be made.
#[derive(Copy, Clone, Debug)]
enum Mode {
    Plain,
    PerCheckpoint,
    Rolling,
    SingleFile,
}

/// A plain or a transactional file sink.
enum AnySink {
    Plain(FileSink<Bid>),
    Transactional(TransactionalFileSink<Bid>),
}

impl AnySink {
    fn as_sink(&mut self) -> &mut dyn SinkMethods {
        match self {
            AnySink::Plain(sink) => sink,
            AnySink::Transactional(sink) => sink,
        }
    }
}

/// The sink methods these tests call, as a trait object.
trait SinkMethods {
    fn open(&mut self, ctx: &streamwork_core::InstanceContext);
    fn write(&mut self, bid: Bid);
    fn pre_commit(&mut self, checkpoint: u64);
    fn commit(&mut self, checkpoint: u64);
    fn restore(&mut self, checkpoint: u64);
    fn close(&mut self);
}

impl<S: Sink<In = Bid>> SinkMethods for S {
    fn open(&mut self, ctx: &streamwork_core::InstanceContext) {
        Sink::open(self, ctx).unwrap();
    }
    fn write(&mut self, bid: Bid) {
        Sink::write(self, Record::new(bid)).unwrap();
    }
    fn pre_commit(&mut self, checkpoint: u64) {
        Sink::pre_commit(self, CheckpointId::new(checkpoint)).unwrap();
    }
    fn commit(&mut self, checkpoint: u64) {
        Sink::commit(self, CheckpointId::new(checkpoint)).unwrap();
    }
    fn restore(&mut self, checkpoint: u64) {
        Sink::restore(self, &restore(checkpoint, 0, 1, &[])).unwrap();
    }
    fn close(&mut self) {
        Sink::close(self).unwrap();
    }
}

fn sink(dir: &Path, mode: Mode, compression: Compression) -> AnySink {
    let csv = |path: &Path| {
        FileSink::<Bid>::csv(path)
            .has_headers()
            .compression(compression)
    };
    match mode {
        Mode::Plain => AnySink::Plain(csv(dir)),
        Mode::PerCheckpoint => AnySink::Transactional(csv(dir).transactional()),
        // Rolls after every commit: several files, each with its header.
        Mode::Rolling => AnySink::Transactional(
            csv(dir)
                .rolling(1, std::time::Duration::from_secs(3600))
                .transactional(),
        ),
        Mode::SingleFile => AnySink::Transactional(
            csv(&dir.join(format!("bids.csv{}", compression.extension())))
                .single_file()
                .transactional(),
        ),
    }
}

/// Writes bids `from..to` and commits them as checkpoint `checkpoint`.
fn write_checkpoint(sink: &mut dyn SinkMethods, from: u64, to: u64, checkpoint: u64) {
    for auction in from..to {
        sink.write(bid(auction));
    }
    sink.pre_commit(checkpoint);
    sink.commit(checkpoint);
}

/// Every visible file begins with the header and nothing else repeats it;
/// the rows of all of them, read by the tools and by the source.
fn check_output(dir: &Path, compression: Compression, want: &[Bid], what: &str) {
    let files = visible_files(dir);
    assert!(!files.is_empty(), "{what}: no output");
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with(compression.extension()), "{what}: {name}");
        let text = decompressed_by_tool(file, compression);
        assert!(
            text.starts_with("auction,price,bidder\n"),
            "{what}: {name}: {text:?}"
        );
        assert_eq!(
            text.matches("auction,price,bidder").count(),
            1,
            "{what}: {name}"
        );
    }
    let source = FileSource::<Bid>::csv(dir).has_headers();
    assert_eq!(read_all(&source, 2), want, "{what}");
    assert_eq!(
        source.errors().count(),
        0,
        "{what}: {:?}",
        source.errors().examples()
    );
}

#[test]
fn every_file_sink_writes_headers_and_compression_that_read_back_whole() {
    let want: Vec<Bid> = (0..300).map(bid).collect();
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        for mode in [
            Mode::Plain,
            Mode::PerCheckpoint,
            Mode::Rolling,
            Mode::SingleFile,
        ] {
            let what = format!("{mode:?} {compression:?}");
            let dir = fresh_dir(&format!("csv-sink-{mode:?}-{compression:?}"));
            let mut out = sink(&dir, mode, compression);
            let out = out.as_sink();
            out.open(&context(0, 1));
            write_checkpoint(out, 0, 100, 1);
            write_checkpoint(out, 100, 101, 2);
            // A checkpoint with nothing written.
            write_checkpoint(out, 101, 101, 3);
            for auction in 101..300 {
                out.write(bid(auction));
            }
            out.close();
            check_output(&dir, compression, &want, &what);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn a_compressed_sink_with_headers_crashed_between_pre_commit_and_commit_ends_exact() {
    let want: Vec<Bid> = (0..300).map(bid).collect();
    for compression in [Compression::Gzip, Compression::Zstd] {
        for mode in [Mode::PerCheckpoint, Mode::Rolling, Mode::SingleFile] {
            let what = format!("{mode:?} {compression:?}");
            let dir = fresh_dir(&format!("csv-crash-{mode:?}-{compression:?}"));
            let mut first = sink(&dir, mode, compression);
            let writer = first.as_sink();
            writer.open(&context(0, 1));
            write_checkpoint(writer, 0, 100, 1);
            for auction in 100..200 {
                writer.write(bid(auction));
            }
            // Checkpoint 2 is staged, and complete, but the process dies
            // before the sink hears so; what follows it is lost.
            writer.pre_commit(2);
            for auction in 200..250 {
                writer.write(bid(auction));
            }
            drop(first);
            let mut second = sink(&dir, mode, compression);
            let writer = second.as_sink();
            writer.open(&context(0, 1));
            writer.restore(2);
            for auction in 200..300 {
                writer.write(bid(auction));
            }
            writer.close();
            check_output(&dir, compression, &want, &what);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn a_sink_of_records_without_field_names_cannot_write_a_header() {
    let dir = fresh_dir("csv-no-names");
    let mut out = FileSink::<(u64, f64)>::csv(&dir).has_headers();
    Sink::open(&mut out, &context(0, 1)).unwrap();
    let error = Sink::write(&mut out, Record::new((1, 2.0)))
        .unwrap_err()
        .to_string();
    assert!(error.contains("no field names for a CSV header"), "{error}");
    let mut json = FileSink::<Bid>::json(&dir).has_headers();
    let error = Sink::open(&mut json, &context(0, 1))
        .unwrap_err()
        .to_string();
    assert!(error.contains("does not write CSV"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}
