//! q13's side input: a file of `KEY,VALUE` rows read entirely before the
//! first event and fixed for the whole job.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork::core::hash::FastHashMap;

/// The rows of the side input, by key (a key may have several).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideInput {
    rows: FastHashMap<i64, Vec<Arc<str>>>,
}

/// A side-input file that is not one: which file, which line, and why.
#[derive(Debug)]
pub enum SideInputError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A line is not `KEY,VALUE`.
    Line {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
}

impl fmt::Display for SideInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SideInputError::Read { path, error } => write!(
                f,
                "cannot read the side input {}: {error}; give an existing file with --side-input, or leave it out for the standard side input",
                path.display()
            ),
            SideInputError::Line {
                path,
                line,
                problem,
            } => write!(
                f,
                "the side input {} is not `KEY,VALUE` lines: line {line} {problem}; fix that line (KEY is a decimal integer within 64 bits, VALUE the rest of the line)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SideInputError {}

impl SideInput {
    /// Flink-Nexmark's standard side input: the keys 0 to 9999, each with
    /// its own decimal string as value.
    pub fn standard() -> Self {
        let rows = (0..10_000i64)
            .map(|k| (k, vec![Arc::from(k.to_string())]))
            .collect();
        SideInput { rows }
    }

    /// Reads the side input at `path`.
    pub fn read(path: &Path) -> Result<Self, SideInputError> {
        let bytes = std::fs::read(path).map_err(|error| SideInputError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::parse(&bytes).map_err(|(line, problem)| SideInputError::Line {
            path: path.to_path_buf(),
            line,
            problem,
        })
    }

    /// Parses side-input text; an error gives the line number (from 1) and
    /// what is wrong with it.
    pub fn parse(bytes: &[u8]) -> Result<Self, (usize, String)> {
        let mut rows: FastHashMap<i64, Vec<Arc<str>>> = FastHashMap::default();
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if bytes.is_empty() {
            return Ok(SideInput { rows });
        }
        for (index, line) in body.split(|&b| b == b'\n').enumerate() {
            let number = index + 1;
            if line.is_empty() {
                continue;
            }
            let line = std::str::from_utf8(line)
                .map_err(|_| (number, "is not valid UTF-8".to_string()))?;
            let Some((key, value)) = line.split_once(',') else {
                return Err((number, format!("has no comma: `{}`", shorten(line))));
            };
            let digits = key.strip_prefix('-').unwrap_or(key);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err((
                    number,
                    format!(
                        "has a key that is not a decimal integer: `{}`",
                        shorten(key)
                    ),
                ));
            }
            let key: i64 = key.parse().map_err(|_| {
                (
                    number,
                    format!("has a key outside 64 bits: `{}`", shorten(key)),
                )
            })?;
            rows.entry(key).or_default().push(Arc::from(value));
        }
        Ok(SideInput { rows })
    }

    /// The values of `key`'s rows.
    #[inline]
    pub fn values(&self, key: i64) -> &[Arc<str>] {
        self.rows.get(&key).map_or(&[], Vec::as_slice)
    }
}

/// At most 60 characters of `text`, for a message.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_contract_format() {
        let side = SideInput::parse(b"1,a\n\n-2,\n1,b,c\n007,x\r\n5,last").unwrap();
        let values = |key| side.values(key).iter().map(|v| &**v).collect::<Vec<_>>();
        assert_eq!(values(1), ["a", "b,c"]);
        assert_eq!(values(-2), [""]);
        assert_eq!(values(7), ["x\r"]);
        assert_eq!(values(5), ["last"]);
        assert!(side.values(3).is_empty());
        assert_eq!(SideInput::parse(b"").unwrap(), SideInput::default());
    }

    #[test]
    fn refuses_other_lines_by_number() {
        for (text, line) in [
            (&b"1,a\nnocomma\n"[..], 2),
            (b"+1,a\n", 1),
            (b"1,a\n\n x,1\n", 3),
            (b"99999999999999999999,a\n", 1),
            (b"-,a\n", 1),
            (b"1,\xff\n", 1),
            (b"\r\n", 1),
        ] {
            assert_eq!(SideInput::parse(text).unwrap_err().0, line, "{text:?}");
        }
    }

    #[test]
    fn the_standard_side_input() {
        let side = SideInput::standard();
        assert_eq!(&*side.values(0)[0], "0");
        assert_eq!(&*side.values(9999)[0], "9999");
        assert!(side.values(10_000).is_empty());
    }
}
