//! Formats on serde: JSON lines (`serde_json`) and CSV (the `csv` crate),
//! one record per line, as decoders for the line sources (file, TCP) and
//! encoders for the file sink.
//!
//! A line that does not decode is malformed input: counted in the source's
//! [`InputErrors`](crate::InputErrors) with its position (file and line)
//! and the decoder's reason, and skipped, or the job fails naming it
//! ([`BadInput`](crate::BadInput)); or, read `..._with_dead_letters`, it
//! becomes a [`DeadLetter`] in the stream for the job to keep. Never a
//! panic. A record the sink cannot
//! encode fails the write with the encoder's reason.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use streamwork::connectors::formats;
//!
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct Bid { auction: u64, price: f64 }
//!
//! let bid: Bid = formats::from_json_line(r#"{"auction": 7, "price": 2.5}"#).unwrap();
//! let mut line = Vec::new();
//! formats::csv_line(&bid, &mut line).unwrap();
//! assert_eq!(line, b"7,2.5");
//! assert_eq!(formats::from_csv_line::<Bid>("7,2.5").unwrap(), bid);
//! assert!(formats::from_json_line::<Bid>(r#"{"auction": "x"}"#).is_err());
//! ```
//!
//! CSV here has no header line, and fields are read by position; a field
//! that holds a line break is written quoted over two lines, which a line
//! source cannot read back.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A line that could not be read as a record: where it was, why, and the
/// line itself (invalid UTF-8 replaced), for a dead-letter output. It is
/// serializable, so that a `FileSink::json` can keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DeadLetter {
    /// The input and line (`events.jsonl:12`).
    pub position: String,
    /// Why it could not be read.
    pub reason: String,
    /// The line.
    pub line: String,
}

/// One JSON value from `line`.
pub fn from_json_line<T: DeserializeOwned>(line: &str) -> Result<T, String> {
    serde_json::from_str(line).map_err(|e| format!("not valid JSON for this record: {e}"))
}

/// One CSV record from `line`, its fields by position.
pub fn from_csv_line<T: DeserializeOwned>(line: &str) -> Result<T, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => record
            .deserialize(None)
            .map_err(|e| format!("not a CSV record of this type: {e}")),
        Ok(false) => Err("an empty line is not a CSV record".into()),
        Err(e) => Err(format!("not valid CSV: {e}")),
    }
}

/// `value` as one JSON line (without its newline), appended to `line`.
pub fn json_line<T: Serialize>(value: &T, line: &mut Vec<u8>) -> Result<(), String> {
    serde_json::to_writer(line, value).map_err(|e| format!("cannot be written as JSON: {e}"))
}

/// `value` as one CSV record (without its newline), appended to `line`.
pub fn csv_line<T: Serialize>(value: &T, line: &mut Vec<u8>) -> Result<(), String> {
    let mut writer = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::with_capacity(64));
    writer
        .serialize(value)
        .map_err(|e| format!("cannot be written as a CSV record: {e}"))?;
    let bytes = writer
        .into_inner()
        .map_err(|e| format!("cannot be written as a CSV record: {e}"))?;
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    line.extend_from_slice(bytes);
    Ok(())
}
