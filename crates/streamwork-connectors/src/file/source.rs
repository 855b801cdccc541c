//! Reads lines from a file, or from every file of a directory.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use streamwork_core::{
    Collector, ConnectorError, Data, InstanceContext, Restore, Source, SourcePoll, StateBytes,
};

use super::lines::Lines;

/// Emits the lines of a file, or of the files of a directory (in name order;
/// with parallelism P, instance `w` reads the files at positions `i % P == w`).
/// Its position is a file index and a byte offset: it is replayable, and a
/// job restored from a checkpoint resumes reading where the checkpoint was
/// taken.
///
/// ```no_run
/// use streamwork_connectors::FileSource;
/// let lines = FileSource::text("input.txt");
/// let numbers = FileSource::parsed("numbers.txt", |l| l.parse::<u64>().map_err(|e| e.to_string()));
/// # let _ = (lines, numbers);
/// ```
pub struct FileSource<T> {
    path: PathBuf,
    lines: Lines<T>,
    files: Vec<PathBuf>,
    file_idx: usize,
    reader: Option<BufReader<File>>,
    offset: u64,
    line_no: u64,
    /// Lines read by this instance, over all its files.
    index: u64,
    /// Where to resume, from a checkpoint.
    resume: Option<Position>,
    buf: Vec<u8>,
}

/// Where a file source is: file, byte offset and line in it, lines before.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Position {
    file: u64,
    offset: u64,
    line_no: u64,
    index: u64,
}

impl Position {
    const SCHEMA: u32 = 1;

    fn encode(self) -> Vec<u8> {
        [self.file, self.offset, self.line_no, self.index]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn decode(bytes: &[u8]) -> Option<Position> {
        if bytes.len() != 32 {
            return None;
        }
        let at =
            |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Some(Position {
            file: at(0),
            offset: at(1),
            line_no: at(2),
            index: at(3),
        })
    }
}

/// Cloning gives an unopened source with the same settings.
impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        FileSource {
            path: self.path.clone(),
            lines: self.lines.clone(),
            files: Vec::new(),
            file_idx: 0,
            reader: None,
            offset: 0,
            line_no: 0,
            index: 0,
            resume: self.resume,
            buf: Vec::new(),
        }
    }
}

impl FileSource<String> {
    /// Each line of `path` as a `String`.
    pub fn text(path: impl AsRef<Path>) -> Self {
        FileSource::with_lines(path, Lines::text())
    }
}

impl<T: Data> FileSource<T> {
    /// Each line of `path` through `parse`.
    pub fn parsed(
        path: impl AsRef<Path>,
        parse: impl Fn(&str) -> Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        FileSource::with_lines(path, Lines::parsed(parse))
    }

    /// Lines of `path` decoded as `lines` says.
    pub fn with_lines(path: impl AsRef<Path>, lines: Lines<T>) -> Self {
        FileSource {
            path: path.as_ref().to_path_buf(),
            lines,
            files: Vec::new(),
            file_idx: 0,
            reader: None,
            offset: 0,
            line_no: 0,
            index: 0,
            resume: None,
            buf: Vec::new(),
        }
    }

    /// Changes how lines are decoded (blank lines, bad input policy, counter).
    pub fn map_lines(mut self, f: impl FnOnce(Lines<T>) -> Lines<T>) -> Self {
        self.lines = f(self.lines);
        self
    }

    /// The malformed-input counter.
    pub fn errors(&self) -> &crate::InputErrors {
        self.lines.errors()
    }

    /// The current position: index of the file being read, and byte offset in it.
    pub fn position(&self) -> (usize, u64) {
        (self.file_idx, self.offset)
    }

    fn open_next(&mut self) -> Result<bool, ConnectorError> {
        let Some(path) = self.files.get(self.file_idx) else {
            return Ok(false);
        };
        let file = File::open(path)
            .map_err(|e| ConnectorError::io(format!("opening {}", path.display()), e))?;
        self.reader = Some(BufReader::with_capacity(256 * 1024, file));
        self.offset = 0;
        self.line_no = 0;
        Ok(true)
    }
}

const LINES_PER_POLL: usize = 1024;

/// A file source resumes from its checkpointed file and byte offset.
impl<T: Data> streamwork_core::checkpoint::Replayable for FileSource<T> {}

impl<T: Data> Source for FileSource<T> {
    type Out = Collector<T>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| ConnectorError::io(format!("reading input {}", self.path.display()), e))?;
        let mut all = if meta.is_dir() {
            let entries = std::fs::read_dir(&self.path).map_err(|e| {
                ConnectorError::io(format!("listing directory {}", self.path.display()), e)
            })?;
            let mut files = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| {
                    ConnectorError::io(format!("listing directory {}", self.path.display()), e)
                })?;
                if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                    files.push(entry.path());
                }
            }
            files.sort();
            files
        } else {
            vec![self.path.clone()]
        };
        let (me, parallelism) = (ctx.instance().0 as usize, ctx.parallelism() as usize);
        let mut i = 0;
        all.retain(|_| {
            let mine = i % parallelism == me;
            i += 1;
            mine
        });
        self.files = all;
        self.file_idx = 0;
        let Some(resume) = self.resume.take() else {
            self.open_next()?;
            return Ok(());
        };
        // Resume where a checkpoint was taken.
        self.file_idx = resume.file as usize;
        self.index = resume.index;
        if self.open_next()? {
            let path = &self.files[self.file_idx];
            if let Some(reader) = self.reader.as_mut() {
                reader.seek(SeekFrom::Start(resume.offset)).map_err(|e| {
                    ConnectorError::io(
                        format!("resuming {} at byte {}", path.display(), resume.offset),
                        e,
                    )
                })?;
            }
            self.offset = resume.offset;
            self.line_no = resume.line_no;
        }
        Ok(())
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        Some(StateBytes {
            schema: Position::SCHEMA,
            bytes: Position {
                file: self.file_idx as u64,
                offset: self.offset,
                line_no: self.line_no,
                index: self.index,
            }
            .encode(),
        })
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let Some(own) = restore.own() else {
            return Ok(());
        };
        if own.schema != Position::SCHEMA {
            return Err(ConnectorError::user(format!(
                "file source position of schema {} cannot be read (this version reads {})",
                own.schema,
                Position::SCHEMA
            )));
        }
        self.resume = Some(Position::decode(own.bytes).ok_or_else(|| {
            ConnectorError::user("a checkpointed file source position is damaged".to_string())
        })?);
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        for _ in 0..LINES_PER_POLL {
            let Some(reader) = self.reader.as_mut() else {
                return Ok(SourcePoll::Finished);
            };
            self.buf.clear();
            let n = reader.read_until(b'\n', &mut self.buf).map_err(|e| {
                ConnectorError::io(
                    format!("reading {}", self.files[self.file_idx].display()),
                    e,
                )
            })?;
            if n == 0 {
                self.reader = None;
                self.file_idx += 1;
                if !self.open_next()? {
                    return Ok(SourcePoll::Finished);
                }
                continue;
            }
            self.offset += n as u64;
            self.line_no += 1;
            self.index += 1;
            let raw = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
            let (path, line_no) = (&self.files[self.file_idx], self.line_no);
            if let Some(record) = self.lines.decode(raw, self.index - 1, || {
                format!("{}:{line_no}", path.display())
            })? {
                out.emit(record);
            }
        }
        Ok(SourcePoll::Emitted)
    }
}
