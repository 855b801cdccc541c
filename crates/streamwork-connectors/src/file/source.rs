//! Reads lines from a file, or from every file of a directory, in splits
//! that any parallelism can take over.
//!
//! The input is cut into **splits**: each file (in name order) into byte
//! ranges of [`FileSource::split_bytes`], whatever the parallelism, so the
//! cut is the same in every run. Split `j` belongs to instance `j % P`,
//! which reads its splits in order. A split `[start, end)` holds the lines
//! that *start* in it: a reader skips the partial line a split begins with
//! (the previous split's last line) and reads past `end` to finish its own
//! last line, so one large file is read in parallel, every line once.
//!
//! An instance's checkpointed part is the input's plan (every file's name
//! and size) and the progress of each of its splits that has begun: done,
//! or the byte at which its next line starts. A run restored at another
//! parallelism gathers the progress of every split from all the old parts
//! and each instance takes its own splits' progress: every line is read
//! once, whatever the parallelism before and after. An input that changed
//! since the checkpoint (a file added, removed or resized) is refused.
//!
//! A compressed file (`.gz`, `.zst`, or all files with
//! [`FileSource::compression`]) is one split, since it cannot be entered
//! in the middle; its progress counts decompressed bytes, and a restore
//! decompresses up to it. A directory of compressed files is still read in
//! parallel, a file per instance.
//!
//! CSV read by column name ([`FileSource::has_headers`]): every file
//! begins with a header line, which each split of the file reads first.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use streamwork_core::{
    Collector, ConnectorError, Data, InstanceContext, Restore, Source, SourcePoll, StateBytes,
};

use super::compression::{self, Compression};
use super::input::{Input, describe_change, plan_names};
use super::lines::Lines;

/// The default split size: 32 MiB.
const DEFAULT_SPLIT_BYTES: u64 = 32 << 20;

/// Emits the lines of a file, or of the files of a directory and its
/// subdirectories (in path order; names beginning with `.` or `_` are left
/// out, as the staging files of a sink writing there), read in splits by its instances (see the module docs). A line's
/// index ([`Lines::indexed_raw`]) is its 0-based number in the whole input,
/// the same at any parallelism. Replayable: a job restored from a
/// checkpoint, at any parallelism, resumes reading where the checkpoint
/// was taken.
///
/// ```no_run
/// use streamwork::connectors::FileSource;
/// let lines = FileSource::text("input.txt");
/// let numbers = FileSource::parsed("numbers.txt", |l| l.parse::<u64>().map_err(|e| e.to_string()));
/// # let _ = (lines, numbers);
/// ```
pub struct FileSource<T> {
    path: PathBuf,
    /// Where the files are: on local disk at `path`, or objects.
    input: Input,
    lines: Lines<T>,
    split_bytes: u64,
    /// Every file's compression, if not by its extension.
    compression: Option<Compression>,
    /// Every file of the input, with its size.
    plan: Vec<(PathBuf, u64)>,
    /// Every file's compression.
    kinds: Vec<Compression>,
    /// The file whose header `lines` holds.
    header_of: Option<usize>,
    /// Every split of the input.
    splits: Vec<Split>,
    /// This instance's splits not yet done, in order.
    todo: std::collections::VecDeque<usize>,
    /// Progress of this instance's splits that have begun.
    progress: BTreeMap<usize, Progress>,
    /// The split being read.
    reading: Option<Reading>,
    /// Lines in each file, once counted (for the index of a split that
    /// does not follow the previous one read).
    line_counts: BTreeMap<usize, u64>,
    /// Where the last split read ended.
    last_end: Option<SplitEnd>,
    /// The progress of every split, from a checkpoint.
    resume: Option<Resume>,
    /// Lines a poll reads at most: the job's batch size.
    lines_per_poll: usize,
    buf: Vec<u8>,
}

/// A byte range of one file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Split {
    file: usize,
    start: u64,
    end: u64,
}

/// How far a split has been read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Progress {
    /// The byte at which its next line starts (past its partial first line).
    offset: u64,
    /// The index of that line in the whole input.
    index: u64,
    done: bool,
}

/// The split being read.
struct Reading {
    split: usize,
    reader: Box<dyn BufRead + Send>,
    offset: u64,
    index: u64,
    /// Lines in the files before this one: a line's number in its file is
    /// `index - file_base + 1`.
    file_base: u64,
}

/// Where a split that was read to its end ended: the next line's file,
/// byte and index, and the lines before that file.
#[derive(Copy, Clone, Debug)]
struct SplitEnd {
    file: usize,
    byte: u64,
    index: u64,
    file_base: u64,
}

/// What a checkpoint says of the input.
struct Resume {
    plan: Vec<(String, u64)>,
    progress: BTreeMap<usize, Progress>,
}

/// Cloning gives an unopened source with the same settings.
impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        FileSource::unopened(
            self.path.clone(),
            self.input.clone(),
            self.lines.clone(),
            self.split_bytes,
            self.compression,
        )
    }
}

impl<T> FileSource<T> {
    /// A source of these settings that has read nothing.
    fn unopened(
        path: PathBuf,
        input: Input,
        lines: Lines<T>,
        split_bytes: u64,
        compression: Option<Compression>,
    ) -> Self {
        FileSource {
            path,
            input,
            lines,
            split_bytes,
            compression,
            plan: Vec::new(),
            kinds: Vec::new(),
            header_of: None,
            splits: Vec::new(),
            todo: Default::default(),
            progress: BTreeMap::new(),
            reading: None,
            line_counts: BTreeMap::new(),
            last_end: None,
            resume: None,
            lines_per_poll: streamwork_core::collector::DEFAULT_BATCH_SIZE,
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

impl<T: Data + serde::de::DeserializeOwned> FileSource<T> {
    /// Each line of `path` (a file or a directory of them) a JSON value; see
    /// [`Lines::json`].
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSource;
    /// #[derive(Clone, serde::Deserialize)]
    /// struct Bid { auction: u64, price: f64 }
    /// let bids = FileSource::<Bid>::json("bids.jsonl");
    /// # let _ = bids;
    /// ```
    pub fn json(path: impl AsRef<Path>) -> Self {
        FileSource::with_lines(path, Lines::json())
    }

    /// The records of `path`, a Parquet file or a directory of them: see
    /// [`ParquetSource`](super::ParquetSource).
    #[cfg(feature = "parquet")]
    pub fn parquet(path: impl AsRef<Path>) -> super::ParquetSource<T> {
        super::ParquetSource::new(path)
    }

    /// Each line of `path` a CSV record, its fields by position, or by
    /// column name after [`has_headers`](Self::has_headers); see
    /// [`Lines::csv`].
    pub fn csv(path: impl AsRef<Path>) -> Self {
        FileSource::with_lines(path, Lines::csv())
    }
}

impl<T: Data + serde::de::DeserializeOwned> FileSource<Result<T, crate::formats::DeadLetter>> {
    /// Each line of `path` a JSON value, or a dead letter; see
    /// [`Lines::json_with_dead_letters`].
    pub fn json_with_dead_letters(path: impl AsRef<Path>) -> Self {
        FileSource::with_lines(path, Lines::json_with_dead_letters())
    }

    /// Each line of `path` a CSV record, or a dead letter; see
    /// [`Lines::csv_with_dead_letters`].
    pub fn csv_with_dead_letters(path: impl AsRef<Path>) -> Self {
        FileSource::with_lines(path, Lines::csv_with_dead_letters())
    }
}

impl<T: Data> FileSource<T> {
    /// Each line of `path` through `parse`.
    pub fn parsed<E: Into<streamwork_core::FormatError>>(
        path: impl AsRef<Path>,
        parse: impl Fn(&str) -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        FileSource::with_lines(path, Lines::parsed(parse))
    }

    /// Lines of `path` decoded as `lines` says.
    pub fn with_lines(path: impl AsRef<Path>, lines: Lines<T>) -> Self {
        FileSource::unopened(
            path.as_ref().to_path_buf(),
            Input::Local,
            lines,
            DEFAULT_SPLIT_BYTES,
            None,
        )
    }

    /// Changes how lines are decoded (blank lines, bad input policy, counter).
    pub fn map_lines(mut self, f: impl FnOnce(Lines<T>) -> Lines<T>) -> Self {
        self.lines = f(self.lines);
        self
    }

    /// Each file begins with a CSV header line, and records are read by
    /// column name: see [`Lines::has_headers`] for what is refused. Only
    /// for CSV sources.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSource;
    /// #[derive(Clone, serde::Deserialize)]
    /// struct Bid { auction: u64, price: f64 }
    /// // bids/*.csv.gz, each file beginning `auction,price` (or `price,auction`).
    /// let bids = FileSource::<Bid>::csv("bids").has_headers();
    /// # let _ = bids;
    /// ```
    pub fn has_headers(mut self) -> Self {
        self.lines = self.lines.has_headers();
        self
    }

    /// Reads the objects under `prefix` of an object store (and its
    /// sub-prefixes) instead of local files, in the same splits, replayably
    /// at any parallelism: each split is read by ranged reads of its
    /// object. The path the source was made with is not used.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSource;
    /// use streamwork::connectors::file::StorePrefix;
    /// let prefix = StorePrefix::s3(None, "analytics", "events/2026-12-04")?;
    /// let lines = FileSource::text("").from_store(prefix);
    /// # let _ = lines;
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    #[cfg(feature = "s3")]
    pub fn from_store(mut self, prefix: super::StorePrefix) -> Self {
        self.input = Input::Store(super::store::StoreInput::new(prefix));
        self
    }

    /// Reads every file as `compression`, whatever its name (by default, a
    /// file's extension says: `.gz` gzip, `.zst` zstd, else plain).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = Some(compression);
        self
    }

    /// Cuts files into splits of `bytes` (32 MiB by default; at least 1):
    /// smaller splits spread one file over more instances. Part of the
    /// checkpointed plan: a job restores only with the split size it was
    /// checkpointed with.
    pub fn split_bytes(mut self, bytes: u64) -> Self {
        self.split_bytes = bytes.max(1);
        self
    }

    /// The malformed-input counter.
    pub fn errors(&self) -> &crate::InputErrors {
        self.lines.errors()
    }

    /// Lines in file `file`: newlines, and a last line without one.
    fn lines_in(&mut self, file: usize) -> Result<u64, ConnectorError> {
        if let Some(&n) = self.line_counts.get(&file) {
            return Ok(n);
        }
        let (path, size) = &self.plan[file];
        let n = if self.kinds[file].splittable() {
            let newlines = count_newlines(&self.input, path, *size)?;
            let unterminated = *size > 0 && last_byte(&self.input, path, *size)? != Some(b'\n');
            newlines + u64::from(unterminated)
        } else {
            count_lines(&self.input, path, self.kinds[file])?
        };
        self.line_counts.insert(file, n);
        Ok(n)
    }

    /// Lines in the files before `file`.
    fn lines_before_file(&mut self, file: usize) -> Result<u64, ConnectorError> {
        let mut n = 0;
        for earlier in 0..file {
            n += self.lines_in(earlier)?;
        }
        Ok(n)
    }

    /// Where file `file` ends for its splits: its size, or, compressed,
    /// wherever its decompressed bytes end.
    fn file_end(&self, file: usize) -> u64 {
        if self.kinds[file].splittable() {
            self.plan[file].1
        } else {
            u64::MAX
        }
    }

    /// Reads file `file`'s header line into `lines`, unless it holds it.
    fn read_header(&mut self, file: usize) -> Result<(), ConnectorError> {
        if !self.lines.wants_header() || self.header_of == Some(file) {
            return Ok(());
        }
        let path = &self.plan[file].0;
        let kind = self.kinds[file];
        let io = |what: &str, e| {
            ConnectorError::io(format!("{what} {} ({})", path.display(), kind.name()), e)
        };
        let file_handle = self.input.open(path).map_err(|e| io("opening", e))?;
        let mut reader = kind.reader(file_handle).map_err(|e| io("reading", e))?;
        let mut line = Vec::new();
        reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io("reading", e))?;
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        self.lines
            .read_header(line, || format!("{}:1", path.display()))?;
        self.header_of = Some(file);
        Ok(())
    }

    /// Opens split `split` where its progress says, or at its start.
    fn open_split(&mut self, split: usize) -> Result<(), ConnectorError> {
        let Split { file, start, .. } = self.splits[split];
        self.read_header(file)?;
        let path = self.plan[file].0.clone();
        let kind = self.kinds[file];
        let io = |what: String, e| {
            ConnectorError::io(format!("{what} {} ({})", path.display(), kind.name()), e)
        };
        // The lines in the files before this one: known from the split
        // read last if it was in this file or ended the one before.
        let file_base = match self.last_end {
            _ if file == 0 => 0,
            Some(end) if end.file == file => end.file_base,
            Some(end) if end.file + 1 == file && end.byte == self.file_end(end.file) => end.index,
            _ => self.lines_before_file(file)?,
        };
        let (offset, index) = match self.progress.get(&split) {
            Some(p) => (p.offset, p.index),
            None => {
                // Past the partial line the split begins with (only a plain
                // file has splits that do not start at 0).
                let offset = if start == 0 {
                    0
                } else {
                    let mut reader = BufReader::new(
                        self.input
                            .open(&path)
                            .map_err(|e| io("opening".into(), e))?,
                    );
                    reader
                        .seek(SeekFrom::Start(start - 1))
                        .map_err(|e| io(format!("seeking to byte {} of", start - 1), e))?;
                    let mut skipped = Vec::new();
                    let n = reader
                        .read_until(b'\n', &mut skipped)
                        .map_err(|e| io("reading".into(), e))?;
                    start - 1 + n as u64
                };
                let size = self.plan[file].1;
                let index = match self.last_end {
                    Some(end) if end.file == file && end.byte == offset => end.index,
                    _ if offset == 0 => file_base,
                    // At the end of the file (a last line without a newline
                    // counts too).
                    _ if offset >= size => file_base + self.lines_in(file)?,
                    // At a line start: one line per newline before it.
                    _ => file_base + count_newlines(&self.input, &path, offset)?,
                };
                self.progress.insert(
                    split,
                    Progress {
                        offset,
                        index,
                        done: false,
                    },
                );
                (offset, index)
            }
        };
        let mut handle = self
            .input
            .open(&path)
            .map_err(|e| io("opening".into(), e))?;
        let reader = if kind.splittable() {
            handle
                .seek(SeekFrom::Start(offset))
                .map_err(|e| io(format!("resuming at byte {offset} of"), e))?;
            kind.reader(handle).map_err(|e| io("reading".into(), e))?
        } else {
            let mut reader = kind.reader(handle).map_err(|e| io("reading".into(), e))?;
            let skipped = compression::skip(&mut reader, offset)
                .map_err(|e| io(format!("resuming at byte {offset} of"), e))?;
            if skipped < offset {
                return Err(ConnectorError::user(format!(
                    "file source: {} decompresses to {skipped} bytes, but its checkpoint resumes it at byte {offset}: the file changed since the checkpoint; restore it with the input it read, or start over without restoring",
                    path.display()
                )));
            }
            reader
        };
        self.reading = Some(Reading {
            split,
            reader,
            offset,
            index,
            file_base,
        });
        Ok(())
    }
}

/// Newlines in the first `len` bytes of `path`.
fn count_newlines(input: &Input, path: &Path, len: u64) -> Result<u64, ConnectorError> {
    let file = input
        .open(path)
        .map_err(|e| ConnectorError::io(format!("opening {}", path.display()), e))?;
    let mut reader = file.take(len);
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let read = reader
            .read(&mut buf)
            .map_err(|e| ConnectorError::io(format!("reading {}", path.display()), e))?;
        if read == 0 {
            return Ok(n);
        }
        n += buf[..read].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

fn last_byte(input: &Input, path: &Path, size: u64) -> Result<Option<u8>, ConnectorError> {
    if size == 0 {
        return Ok(None);
    }
    let mut file = input
        .open(path)
        .map_err(|e| ConnectorError::io(format!("opening {}", path.display()), e))?;
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(size - 1))
        .and_then(|_| file.read_exact(&mut byte))
        .map_err(|e| ConnectorError::io(format!("reading {}", path.display()), e))?;
    Ok(Some(byte[0]))
}

/// Lines in compressed file `path`: newlines, and a last line without one.
fn count_lines(input: &Input, path: &Path, kind: Compression) -> Result<u64, ConnectorError> {
    let io = |e| ConnectorError::io(format!("reading {} ({})", path.display(), kind.name()), e);
    let file = input.open(path).map_err(io)?;
    let mut reader = kind.reader(file).map_err(io)?;
    let (mut n, mut last) = (0u64, None);
    loop {
        let buf = reader.fill_buf().map_err(io)?;
        let Some(&end) = buf.last() else {
            return Ok(n + u64::from(last.is_some_and(|b| b != b'\n')));
        };
        n += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        last = Some(end);
        let len = buf.len();
        reader.consume(len);
    }
}

/// The splits of files of these sizes, `bytes` each at most; a compressed
/// file is one split, to wherever its decompressed bytes end.
fn splits_of(plan: &[(PathBuf, u64)], kinds: &[Compression], bytes: u64) -> Vec<Split> {
    let mut splits = Vec::new();
    for (file, &(_, size)) in plan.iter().enumerate() {
        if !kinds[file].splittable() {
            if size > 0 {
                splits.push(Split {
                    file,
                    start: 0,
                    end: u64::MAX,
                });
            }
            continue;
        }
        let mut start = 0;
        while start < size {
            let end = start.saturating_add(bytes).min(size);
            splits.push(Split { file, start, end });
            start = end;
        }
    }
    splits
}

/// The checkpointed part of one instance (schema 2): the plan, the split
/// size, and the progress of the instance's begun splits. Little endian:
/// `split_bytes`, `files`, then per file `size` and the name's length and
/// UTF-8 bytes, then `entries`, then per entry `split`, `offset`, `index`
/// and `done` (one byte).
mod codec {
    use super::Progress;
    use std::collections::BTreeMap;

    pub(super) const SCHEMA: u32 = 2;

    pub(super) fn encode(
        split_bytes: u64,
        plan: &[(String, u64)],
        progress: &BTreeMap<usize, Progress>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&split_bytes.to_le_bytes());
        out.extend_from_slice(&(plan.len() as u64).to_le_bytes());
        for (name, size) in plan {
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&(name.len() as u64).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
        out.extend_from_slice(&(progress.len() as u64).to_le_bytes());
        for (&split, p) in progress {
            out.extend_from_slice(&(split as u64).to_le_bytes());
            out.extend_from_slice(&p.offset.to_le_bytes());
            out.extend_from_slice(&p.index.to_le_bytes());
            out.push(u8::from(p.done));
        }
        out
    }

    /// One decoded part: split size, plan, progress.
    pub(super) type Part = (u64, Vec<(String, u64)>, BTreeMap<usize, Progress>);

    /// What `encode` wrote, or `None` if the bytes are not such a part.
    pub(super) fn decode(bytes: &[u8]) -> Option<Part> {
        let mut at = Cursor(bytes);
        let split_bytes = at.u64()?;
        let files = at.u64()?;
        let mut plan = Vec::new();
        for _ in 0..files {
            let size = at.u64()?;
            let len = usize::try_from(at.u64()?).ok()?;
            let name = String::from_utf8(at.take(len)?.to_vec()).ok()?;
            plan.push((name, size));
        }
        let entries = at.u64()?;
        let mut progress = BTreeMap::new();
        for _ in 0..entries {
            let split = usize::try_from(at.u64()?).ok()?;
            let (offset, index) = (at.u64()?, at.u64()?);
            let done = at.take(1)?[0] == 1;
            progress.insert(
                split,
                Progress {
                    offset,
                    index,
                    done,
                },
            );
        }
        at.0.is_empty().then_some((split_bytes, plan, progress))
    }

    /// The unread rest of a part.
    struct Cursor<'a>(&'a [u8]);

    impl<'a> Cursor<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            let head = self.0.get(..n)?;
            self.0 = &self.0[n..];
            Some(head)
        }

        fn u64(&mut self) -> Option<u64> {
            Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }
    }
}

/// A file source resumes from its checkpointed splits, at any parallelism.
impl<T: Data> streamwork_core::checkpoint::Replayable for FileSource<T> {}

impl<T: Data> Source for FileSource<T> {
    type Out = Collector<T>;

    fn replayable(&self) -> bool {
        true
    }

    /// Local files are read without waiting; an object store is not.
    fn may_block(&self) -> bool {
        !self.input.is_local(&self.path)
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.lines_per_poll = ctx.batch_size();
        self.lines.check(ctx.component())?;
        self.input.start(&self.path)?;
        self.plan = self.input.list(&self.path)?;
        self.kinds = self
            .plan
            .iter()
            .map(|(path, _)| {
                self.compression
                    .unwrap_or_else(|| Compression::of_path(path))
            })
            .collect();
        self.splits = splits_of(&self.plan, &self.kinds, self.split_bytes);
        if let Some(resume) = self.resume.take() {
            let now = plan_names(self.input.root(&self.path), &self.plan);
            if resume.plan != now {
                let changed = describe_change(&resume.plan, &now);
                return Err(ConnectorError::user(format!(
                    "file source `{}`: the input {} changed since the checkpoint ({changed}): restore it with the input it read, or start over without restoring",
                    ctx.component(),
                    self.path.display()
                )));
            }
            self.progress = resume.progress;
        }
        let (me, parallelism) = (ctx.instance().0 as usize, ctx.parallelism().max(1) as usize);
        self.progress.retain(|&split, _| split % parallelism == me);
        self.todo = (0..self.splits.len())
            .filter(|&split| split % parallelism == me)
            .filter(|split| !self.progress.get(split).is_some_and(|p| p.done))
            .collect();
        Ok(())
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        if let Some(reading) = &self.reading {
            self.progress.insert(
                reading.split,
                Progress {
                    offset: reading.offset,
                    index: reading.index,
                    done: false,
                },
            );
        }
        Some(StateBytes::new(
            codec::SCHEMA,
            codec::encode(
                self.split_bytes,
                &plan_names(self.input.root(&self.path), &self.plan),
                &self.progress,
            ),
        ))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut resume: Option<Resume> = None;
        for part in &restore.parts {
            if part.schema != codec::SCHEMA {
                return Err(ConnectorError::user(format!(
                    "file source `{}`: its checkpointed position has schema {} and this version reads {}: resume the checkpoint with the version that wrote it, or start over without restoring",
                    restore.component,
                    part.schema,
                    codec::SCHEMA
                )));
            }
            let Some((split_bytes, plan, progress)) = codec::decode(part.bytes) else {
                return Err(ConnectorError::user(format!(
                    "file source `{}`: the checkpointed position of instance {} is damaged",
                    restore.component, part.part.0
                )));
            };
            if split_bytes != self.split_bytes {
                return Err(ConnectorError::user(format!(
                    "file source `{}` was checkpointed with splits of {split_bytes} bytes and restored with {}: restore it with `split_bytes({split_bytes})`",
                    restore.component, self.split_bytes
                )));
            }
            let resume = resume.get_or_insert_with(|| Resume {
                plan,
                progress: BTreeMap::new(),
            });
            // Each split's progress is in the part of the instance that
            // read it.
            resume.progress.extend(progress);
        }
        self.resume = resume;
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let mut emitted = 0;
        while emitted < self.lines_per_poll {
            if self.reading.is_none() {
                let Some(split) = self.todo.pop_front() else {
                    return Ok(SourcePoll::Finished);
                };
                self.open_split(split)?;
            }
            let Some(reading) = self.reading.as_mut() else {
                continue;
            };
            let split = self.splits[reading.split];
            if reading.offset >= split.end {
                // Its last line is read: the next one starts the next split.
                self.progress.insert(
                    reading.split,
                    Progress {
                        offset: reading.offset,
                        index: reading.index,
                        done: true,
                    },
                );
                self.last_end = Some(SplitEnd {
                    file: split.file,
                    byte: reading.offset,
                    index: reading.index,
                    file_base: reading.file_base,
                });
                self.reading = None;
                continue;
            }
            self.buf.clear();
            let path = &self.plan[split.file].0;
            let n = reading
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| ConnectorError::io(format!("reading {}", path.display()), e))?;
            if n == 0 {
                // The file is shorter than it was listed: what is there is read.
                reading.offset = split.end;
                continue;
            }
            reading.offset += n as u64;
            let (index, line_no) = (reading.index, reading.index - reading.file_base + 1);
            reading.index += 1;
            if line_no == 1 && self.lines.wants_header() {
                // The header, read when the split was opened.
                continue;
            }
            let raw = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
            if let Some(record) = self
                .lines
                .decode(raw, index, || format!("{}:{line_no}", path.display()))?
            {
                out.emit(record);
            }
            emitted += 1;
        }
        Ok(SourcePoll::Emitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_round_trips_and_a_damaged_one_is_refused() {
        let plan = vec![("a.txt".to_string(), 10), ("b/c.txt".to_string(), 0)];
        let mut progress = BTreeMap::new();
        progress.insert(
            3,
            Progress {
                offset: 7,
                index: 2,
                done: false,
            },
        );
        progress.insert(
            5,
            Progress {
                offset: 10,
                index: 4,
                done: true,
            },
        );
        let bytes = codec::encode(4, &plan, &progress);
        assert_eq!(codec::decode(&bytes), Some((4, plan, progress)));
        for cut in 0..bytes.len() {
            assert_eq!(codec::decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn splits_cover_every_byte_once() {
        let plan = vec![
            (PathBuf::from("a"), 10),
            (PathBuf::from("b"), 0),
            (PathBuf::from("c"), 3),
        ];
        let kinds = [Compression::None, Compression::None, Compression::None];
        let splits = splits_of(&plan, &kinds, 4);
        assert_eq!(
            splits,
            [
                Split {
                    file: 0,
                    start: 0,
                    end: 4
                },
                Split {
                    file: 0,
                    start: 4,
                    end: 8
                },
                Split {
                    file: 0,
                    start: 8,
                    end: 10
                },
                Split {
                    file: 2,
                    start: 0,
                    end: 3
                },
            ]
        );
    }
}
