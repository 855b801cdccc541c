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
//! CSV is read by position, or, with a header line
//! ([`FileSource::has_headers`](crate::FileSource::has_headers)), by
//! column name; a field that holds a line break is written quoted over two
//! lines, which a line source cannot read back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamwork_core::FormatError;

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
pub fn from_json_line<T: DeserializeOwned>(line: &str) -> Result<T, FormatError> {
    serde_json::from_str(line)
        .map_err(|e| FormatError::new(format!("not valid JSON for this record: {e}")))
}

/// One CSV record from `line`, its fields by position.
pub fn from_csv_line<T: DeserializeOwned>(line: &str) -> Result<T, FormatError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => record
            .deserialize(None)
            .map_err(|e| FormatError::new(format!("not a CSV record of this type: {e}"))),
        Ok(false) => Err("an empty line is not a CSV record".into()),
        Err(e) => Err(FormatError::new(format!("not valid CSV: {e}"))),
    }
}

/// One CSV record from `line`, its fields by the column names of `header`.
pub(crate) fn from_csv_line_headed<T: DeserializeOwned>(
    header: &csv::StringRecord,
    line: &str,
) -> Result<T, FormatError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) if record.len() != header.len() => Err(FormatError::new(format!(
            "{} fields where the header has {} columns",
            record.len(),
            header.len()
        ))),
        Ok(true) => record
            .deserialize(Some(header))
            .map_err(|e| FormatError::new(format!("not a CSV record of this type: {e}"))),
        Ok(false) => Err("an empty line is not a CSV record".into()),
        Err(e) => Err(FormatError::new(format!("not valid CSV: {e}"))),
    }
}

/// A CSV header line's columns.
pub(crate) fn csv_header_columns(line: &str) -> Result<csv::StringRecord, FormatError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => Ok(record),
        Ok(false) => Err("the header line is empty".into()),
        Err(e) => Err(FormatError::new(format!(
            "the header line is not valid CSV: {e}"
        ))),
    }
}

/// The field names of a struct `T` as serde reads it (its serialized
/// names), or `None` if `T` is not read as a struct with named fields (a
/// map, a tuple, a flattened struct).
pub(crate) fn struct_fields<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut fields = None;
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that only notes the fields a struct asks for.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

/// Why [`FieldNames`] stops: it has what it wanted, or the type is not a
/// struct.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names noted")
    }
}

impl std::error::Error for Stop {}

impl serde::de::Error for Stop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = Stop;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = Some(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The CSV header line (without its newline) of records shaped like
/// `value`: its field names. A record that is not a struct with named
/// fields has none.
pub(crate) fn csv_header<T: Serialize>(value: &T, line: &mut Vec<u8>) -> Result<(), FormatError> {
    let cannot = |e: &dyn std::fmt::Display| {
        FormatError::new(format!("cannot be written as a CSV record: {e}"))
    };
    let mut writer = csv::WriterBuilder::new()
        .has_headers(true)
        .from_writer(Vec::with_capacity(128));
    writer.serialize(value).map_err(|e| cannot(&e))?;
    let with = writer.into_inner().map_err(|e| cannot(&e))?;
    let mut without = Vec::new();
    csv_line(value, &mut without)?;
    // `with` is the header line, then the record as `csv_line` writes it.
    let record_line = without.len() + 1;
    let header = with
        .len()
        .checked_sub(record_line)
        .map(|end| &with[..end])
        .unwrap_or_default();
    let header = header.strip_suffix(b"\n").unwrap_or(header);
    let header = header.strip_suffix(b"\r").unwrap_or(header);
    if header.is_empty() {
        return Err(
            "has no field names for a CSV header (a struct with named fields has them)".into(),
        );
    }
    line.extend_from_slice(header);
    Ok(())
}

/// `value` as one JSON line (without its newline), appended to `line`.
pub fn json_line<T: Serialize>(value: &T, line: &mut Vec<u8>) -> Result<(), FormatError> {
    serde_json::to_writer(line, value)
        .map_err(|e| FormatError::new(format!("cannot be written as JSON: {e}")))
}

/// `value` as one CSV record (without its newline), appended to `line`.
pub fn csv_line<T: Serialize>(value: &T, line: &mut Vec<u8>) -> Result<(), FormatError> {
    let mut writer = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::with_capacity(64));
    writer
        .serialize(value)
        .map_err(|e| FormatError::new(format!("cannot be written as a CSV record: {e}")))?;
    let bytes = writer
        .into_inner()
        .map_err(|e| FormatError::new(format!("cannot be written as a CSV record: {e}")))?;
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    line.extend_from_slice(bytes);
    Ok(())
}
