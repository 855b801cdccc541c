//! Decoding lines: UTF-8 check, optional parsing, malformed input policy.
//! Shared by the file and TCP sources.

use std::sync::Arc;

use streamwork_core::{ConnectorError, FormatError};

use crate::errors::{BadInput, InputErrors};

/// Parses one line into a record, or says why it cannot.
pub type LineParser<T> = Arc<dyn Fn(&str) -> Result<T, FormatError> + Send + Sync>;

/// Makes a record of a line's 0-based index and its raw bytes.
pub type RawLineParser<T> = Arc<dyn Fn(u64, &[u8]) -> Result<T, FormatError> + Send + Sync>;

/// Makes a record of every line, good or bad: the CSV header read (if
/// any), its text (or why it is not text), its raw bytes and its position
/// (file and line).
type LenientParser<T> = Arc<
    dyn Fn(Option<&csv::StringRecord>, Result<&str, std::str::Utf8Error>, &[u8], String) -> T
        + Send
        + Sync,
>;

/// Parses one CSV line, by position or by the columns of the header read.
type CsvParser<T> =
    Arc<dyn Fn(Option<&csv::StringRecord>, &str) -> Result<T, FormatError> + Send + Sync>;

enum Parser<T> {
    Text(LineParser<T>),
    Raw(RawLineParser<T>),
    Lenient(LenientParser<T>),
    Csv(CsvParser<T>),
}

/// What a CSV source knows of its columns.
#[derive(Clone)]
struct CsvColumns {
    /// The record's field names, if it is a struct.
    fields: Option<&'static [&'static str]>,
    /// The header of the input being read, once read.
    header: Option<csv::StringRecord>,
}

impl<T> Clone for Parser<T> {
    fn clone(&self) -> Self {
        match self {
            Parser::Text(parse) => Parser::Text(parse.clone()),
            Parser::Raw(parse) => Parser::Raw(parse.clone()),
            Parser::Lenient(parse) => Parser::Lenient(parse.clone()),
            Parser::Csv(parse) => Parser::Csv(parse.clone()),
        }
    }
}

/// How lines become records.
pub struct Lines<T> {
    parse: Parser<T>,
    skip_blank: bool,
    policy: BadInput,
    errors: InputErrors,
    /// Whether each input begins with a header line.
    headers: bool,
    /// Set for CSV lines.
    csv: Option<CsvColumns>,
}

impl<T> Clone for Lines<T> {
    fn clone(&self) -> Self {
        Lines {
            parse: self.parse.clone(),
            skip_blank: self.skip_blank,
            policy: self.policy,
            errors: self.errors.clone(),
            headers: self.headers,
            csv: self.csv.clone(),
        }
    }
}

impl Lines<String> {
    /// Each line as a `String`.
    pub fn text() -> Self {
        Lines::parsed(|line| Ok::<_, FormatError>(line.to_string()))
    }
}

impl<T: serde::de::DeserializeOwned + 'static> Lines<T> {
    /// Each line a JSON value (JSON lines); blank lines are skipped, and a
    /// line that is not a `T` is malformed input (counted with its
    /// position and reason, and skipped unless the policy is
    /// [`BadInput::Fail`]).
    pub fn json() -> Self {
        Lines::parsed(crate::formats::from_json_line).skip_blank(true)
    }

    /// Each line a CSV record, its fields by position, or by column name
    /// after [`has_headers`](Self::has_headers); blank lines are skipped,
    /// and a line that is not a `T` is malformed input, as for
    /// [`json`](Self::json).
    pub fn csv() -> Self {
        let mut lines = Lines::with_parser(Parser::Csv(Arc::new(|header, line| match header {
            Some(header) => crate::formats::from_csv_line_headed(header, line),
            None => crate::formats::from_csv_line(line),
        })))
        .skip_blank(true);
        lines.csv = Some(CsvColumns {
            fields: crate::formats::struct_fields::<T>(),
            header: None,
        });
        lines
    }
}

impl<T: serde::de::DeserializeOwned + 'static> Lines<Result<T, crate::formats::DeadLetter>> {
    /// Each line a JSON value, or, if it is not one, a
    /// [`DeadLetter`](crate::formats::DeadLetter) with its position, the
    /// reason and the line: for a job that keeps what it could not read
    /// (split the stream with `filter_map(Result::ok)` and
    /// `filter_map(Result::err)`). Blank lines are skipped.
    pub fn json_with_dead_letters() -> Self {
        Lines::lenient(|_, line| crate::formats::from_json_line(line))
    }

    /// The same for CSV records (by column name after
    /// [`has_headers`](Self::has_headers)).
    pub fn csv_with_dead_letters() -> Self {
        let mut lines = Lines::lenient(|header, line| match header {
            Some(header) => crate::formats::from_csv_line_headed(header, line),
            None => crate::formats::from_csv_line(line),
        });
        lines.csv = Some(CsvColumns {
            fields: crate::formats::struct_fields::<T>(),
            header: None,
        });
        lines
    }

    fn lenient(parse: fn(Option<&csv::StringRecord>, &str) -> Result<T, FormatError>) -> Self {
        Lines {
            parse: Parser::Lenient(Arc::new(move |header, text, raw, position| {
                let reason = match text.map(|line| parse(header, line)) {
                    Ok(Ok(record)) => return Ok(record),
                    Ok(Err(reason)) => reason.reason().to_string(),
                    Err(e) => format!("invalid UTF-8 ({e})"),
                };
                Err(crate::formats::DeadLetter {
                    position,
                    reason,
                    line: String::from_utf8_lossy(raw).into_owned(),
                })
            })),
            skip_blank: true,
            policy: BadInput::Skip,
            errors: InputErrors::new(),
            headers: false,
            csv: None,
        }
    }
}

impl Lines<(u64, Vec<u8>)> {
    /// Each line as its 0-based index in the input and its raw bytes (no
    /// UTF-8 check, nothing skipped): for jobs that handle malformed lines
    /// themselves, say into a dead-letter output.
    pub fn indexed_raw() -> Self {
        Lines::raw(|index, bytes| Ok::<_, FormatError>((index, bytes.to_vec())))
    }
}

impl<T> Lines<T> {
    /// Each line through `parse`, whose error (a [`FormatError`], or a
    /// `String` saying why) makes the line malformed input.
    ///
    /// ```
    /// use streamwork::connectors::file::Lines;
    /// let ports = Lines::parsed(|line: &str| line.trim().parse::<u16>().map_err(|e| e.to_string()));
    /// # let _ = ports;
    /// ```
    pub fn parsed<E: Into<FormatError>>(
        parse: impl Fn(&str) -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        Lines::with_parser(Parser::Text(Arc::new(move |line| {
            parse(line).map_err(Into::into)
        })))
    }

    fn with_parser(parse: Parser<T>) -> Self {
        Lines {
            parse,
            skip_blank: false,
            policy: BadInput::Skip,
            errors: InputErrors::new(),
            headers: false,
            csv: None,
        }
    }

    /// Each line, with its 0-based index in the input, through `parse` on
    /// its raw bytes.
    pub fn raw<E: Into<FormatError>>(
        parse: impl Fn(u64, &[u8]) -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        Lines::with_parser(Parser::Raw(Arc::new(move |index, bytes| {
            parse(index, bytes).map_err(Into::into)
        })))
    }

    /// CSV with a header line: each input (each file, each connection)
    /// begins with a line naming its columns, and a record's fields are
    /// read by those names, in whatever order the columns come. The header
    /// must name every field of the record and nothing else (an `Option`
    /// field reads an empty value as `None`): a column the record has no
    /// field for, a field with no column, or a column named twice fails
    /// the job naming the input and the columns, whatever the bad-input
    /// policy, since every line of that input would be misread. For CSV
    /// lines only ([`csv`](Lines::csv), [`csv_with_dead_letters`](Lines::csv_with_dead_letters)):
    /// a source of other lines refuses to start with it.
    ///
    /// ```
    /// use streamwork::connectors::file::Lines;
    /// #[derive(Debug, PartialEq, serde::Deserialize)]
    /// struct Bid { auction: u64, price: f64 }
    /// let mut lines = Lines::<Bid>::csv().has_headers();
    /// lines.read_header(b"price,auction", || "bids.csv:1".into())?;
    /// let bid = lines.decode(b"2.5,7", 1, || "bids.csv:2".into())?;
    /// assert_eq!(bid, Some(Bid { auction: 7, price: 2.5 }));
    /// assert!(lines.read_header(b"auction,price,bidder", || "more.csv:1".into()).is_err());
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    pub fn has_headers(mut self) -> Self {
        self.headers = true;
        self
    }

    /// Whether each input begins with a header line.
    pub fn wants_header(&self) -> bool {
        self.headers
    }

    /// Refuses settings that do not go together: a header for lines that
    /// are not CSV. `component` names the source.
    pub fn check(&self, component: &str) -> Result<(), ConnectorError> {
        if self.headers && self.csv.is_none() {
            return Err(ConnectorError::user(format!(
                "source `{component}` is told its input has a header line (`has_headers()`), but it does not read CSV: drop `has_headers()`, or read with `csv()`"
            )));
        }
        Ok(())
    }

    /// Reads an input's header line (without its terminator): the columns
    /// the lines after it are read by, until the next header. `where_`
    /// names its position. See [`has_headers`](Self::has_headers) for what
    /// is refused.
    pub fn read_header(
        &mut self,
        raw: &[u8],
        where_: impl FnOnce() -> String,
    ) -> Result<(), ConnectorError> {
        let Some(csv) = self.csv.as_mut() else {
            return Ok(());
        };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        // A header written with a byte-order mark (as spreadsheets do).
        let raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
        let position = where_();
        let refuse = |what: String| {
            ConnectorError::user(format!(
                "malformed input: {position}: {what}; every input of a source with `has_headers()` begins with a CSV header naming the record's fields"
            ))
        };
        let text = std::str::from_utf8(raw)
            .map_err(|e| refuse(format!("the header line is not UTF-8 ({e})")))?;
        let header =
            crate::formats::csv_header_columns(text).map_err(|e| refuse(e.reason().to_string()))?;
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = header.iter().find(|column| !seen.insert(*column)) {
            return Err(refuse(format!("the header names column `{twice}` twice")));
        }
        if let Some(fields) = csv.fields {
            let extra: Vec<&str> = header.iter().filter(|c| !fields.contains(c)).collect();
            let missing: Vec<&str> = fields
                .iter()
                .copied()
                .filter(|f| !header.iter().any(|c| c == *f))
                .collect();
            if !extra.is_empty() || !missing.is_empty() {
                let mut why = Vec::new();
                if !extra.is_empty() {
                    why.push(format!(
                        "no field of the record for column(s) `{}`",
                        extra.join("`, `")
                    ));
                }
                if !missing.is_empty() {
                    why.push(format!("no column for field(s) `{}`", missing.join("`, `")));
                }
                return Err(refuse(format!(
                    "the header `{text}` does not match the record ({}); the record's fields are `{}`",
                    why.join("; "),
                    fields.join("`, `")
                )));
            }
        }
        csv.header = Some(header);
        Ok(())
    }

    /// Ignores lines that are empty or only whitespace.
    pub fn skip_blank(mut self, skip: bool) -> Self {
        self.skip_blank = skip;
        self
    }

    /// What to do with malformed lines.
    pub fn on_bad_input(mut self, policy: BadInput) -> Self {
        self.policy = policy;
        self
    }

    /// Counts malformed lines into `errors` (shared with the caller).
    pub fn count_errors_in(mut self, errors: InputErrors) -> Self {
        self.errors = errors;
        self
    }

    /// The malformed-input counter.
    pub fn errors(&self) -> &InputErrors {
        &self.errors
    }

    /// Decodes one raw line (without its terminator), the `index`-th of
    /// the input (from 0). `where_` describes its position for error
    /// messages.
    pub fn decode(
        &self,
        raw: &[u8],
        index: u64,
        where_: impl FnOnce() -> String,
    ) -> Result<Option<T>, ConnectorError> {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let parse = match &self.parse {
            parse @ (Parser::Text(_) | Parser::Csv(_)) => parse,
            Parser::Lenient(parse) => {
                let text = std::str::from_utf8(raw);
                if self.skip_blank && text.is_ok_and(|t| t.trim().is_empty()) {
                    return Ok(None);
                }
                let record = parse(self.header()?, text, raw, where_());
                return Ok(Some(record));
            }
            Parser::Raw(parse) => {
                return match parse(index, raw) {
                    Ok(record) => Ok(Some(record)),
                    Err(reason) => self.bad(format!("{}: {reason}", where_())),
                };
            }
        };
        let line = match std::str::from_utf8(raw) {
            Ok(line) => line,
            Err(e) => return self.bad(format!("{}: invalid UTF-8 ({e})", where_())),
        };
        if self.skip_blank && line.trim().is_empty() {
            return Ok(None);
        }
        let parsed = match parse {
            Parser::Csv(parse) => parse(self.header()?, line),
            Parser::Text(parse) => parse(line),
            _ => unreachable!("handled above"),
        };
        match parsed {
            Ok(record) => Ok(Some(record)),
            Err(reason) => self.bad(format!("{}: {reason}", where_())),
        }
    }

    /// The header the lines are read by: none without `has_headers`.
    fn header(&self) -> Result<Option<&csv::StringRecord>, ConnectorError> {
        if !self.headers {
            return Ok(None);
        }
        match self.csv.as_ref().and_then(|csv| csv.header.as_ref()) {
            Some(header) => Ok(Some(header)),
            None => Err(ConnectorError::user(
                "a CSV line was read before its input's header line: read the header with `Lines::read_header` first".to_string(),
            )),
        }
    }

    fn bad(&self, what: String) -> Result<Option<T>, ConnectorError> {
        match self.policy {
            BadInput::Skip => {
                self.errors.record(what);
                Ok(None)
            }
            BadInput::Fail => Err(ConnectorError::user(format!(
                "malformed input: {what} (skip such lines with BadInput::Skip)"
            ))),
        }
    }
}
