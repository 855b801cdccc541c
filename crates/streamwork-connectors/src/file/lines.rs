//! Decoding lines: UTF-8 check, optional parsing, malformed input policy.
//! Shared by the file and TCP sources.

use std::sync::Arc;

use streamwork_core::ConnectorError;

use crate::errors::{BadInput, InputErrors};

/// Parses one line into a record, or says why it cannot.
pub type LineParser<T> = Arc<dyn Fn(&str) -> Result<T, String> + Send + Sync>;

/// Makes a record of a line's 0-based index and its raw bytes.
pub type RawLineParser<T> = Arc<dyn Fn(u64, &[u8]) -> Result<T, String> + Send + Sync>;

/// Makes a record of every line, good or bad: its text (or why it is not
/// text), its raw bytes and its position (file and line).
type LenientParser<T> =
    Arc<dyn Fn(Result<&str, std::str::Utf8Error>, &[u8], String) -> T + Send + Sync>;

enum Parser<T> {
    Text(LineParser<T>),
    Raw(RawLineParser<T>),
    Lenient(LenientParser<T>),
}

impl<T> Clone for Parser<T> {
    fn clone(&self) -> Self {
        match self {
            Parser::Text(parse) => Parser::Text(parse.clone()),
            Parser::Raw(parse) => Parser::Raw(parse.clone()),
            Parser::Lenient(parse) => Parser::Lenient(parse.clone()),
        }
    }
}

/// How lines become records.
pub struct Lines<T> {
    parse: Parser<T>,
    skip_blank: bool,
    policy: BadInput,
    errors: InputErrors,
}

impl<T> Clone for Lines<T> {
    fn clone(&self) -> Self {
        Lines {
            parse: self.parse.clone(),
            skip_blank: self.skip_blank,
            policy: self.policy,
            errors: self.errors.clone(),
        }
    }
}

impl Lines<String> {
    /// Each line as a `String`.
    pub fn text() -> Self {
        Lines::parsed(|line| Ok(line.to_string()))
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

    /// Each line a CSV record, its fields by position (no header line);
    /// blank lines are skipped, and a line that is not a `T` is malformed
    /// input, as for [`json`](Self::json).
    pub fn csv() -> Self {
        Lines::parsed(crate::formats::from_csv_line).skip_blank(true)
    }
}

impl<T: serde::de::DeserializeOwned + 'static> Lines<Result<T, crate::formats::DeadLetter>> {
    /// Each line a JSON value, or, if it is not one, a
    /// [`DeadLetter`](crate::formats::DeadLetter) with its position, the
    /// reason and the line: for a job that keeps what it could not read
    /// (split the stream with `filter_map(Result::ok)` and
    /// `filter_map(Result::err)`). Blank lines are skipped.
    pub fn json_with_dead_letters() -> Self {
        Lines::lenient(crate::formats::from_json_line)
    }

    /// The same for CSV records.
    pub fn csv_with_dead_letters() -> Self {
        Lines::lenient(crate::formats::from_csv_line)
    }

    fn lenient(parse: fn(&str) -> Result<T, String>) -> Self {
        Lines {
            parse: Parser::Lenient(Arc::new(move |text, raw, position| {
                let reason = match text.map(parse) {
                    Ok(Ok(record)) => return Ok(record),
                    Ok(Err(reason)) => reason,
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
        }
    }
}

impl Lines<(u64, Vec<u8>)> {
    /// Each line as its 0-based index in the input and its raw bytes (no
    /// UTF-8 check, nothing skipped): for jobs that handle malformed lines
    /// themselves, say into a dead-letter output.
    pub fn indexed_raw() -> Self {
        Lines::raw(|index, bytes| Ok((index, bytes.to_vec())))
    }
}

impl<T> Lines<T> {
    /// Each line through `parse`.
    pub fn parsed(parse: impl Fn(&str) -> Result<T, String> + Send + Sync + 'static) -> Self {
        Lines {
            parse: Parser::Text(Arc::new(parse)),
            skip_blank: false,
            policy: BadInput::Skip,
            errors: InputErrors::new(),
        }
    }

    /// Each line, with its 0-based index in the input, through `parse` on
    /// its raw bytes.
    pub fn raw(parse: impl Fn(u64, &[u8]) -> Result<T, String> + Send + Sync + 'static) -> Self {
        Lines {
            parse: Parser::Raw(Arc::new(parse)),
            skip_blank: false,
            policy: BadInput::Skip,
            errors: InputErrors::new(),
        }
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
            Parser::Text(parse) => parse,
            Parser::Lenient(parse) => {
                let text = std::str::from_utf8(raw);
                if self.skip_blank && text.is_ok_and(|t| t.trim().is_empty()) {
                    return Ok(None);
                }
                let record = parse(text, raw, where_());
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
        match parse(line) {
            Ok(record) => Ok(Some(record)),
            Err(reason) => self.bad(format!("{}: {reason}", where_())),
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
