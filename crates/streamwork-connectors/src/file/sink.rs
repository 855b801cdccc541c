//! Writes records as lines to files: one file per instance, or, made
//! transactional, one committed file per instance and checkpoint.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork_core::checkpoint::CheckpointId;
use streamwork_core::{ConnectorError, Data, InstanceContext, Record, Restore, Sink};

use super::compression::{Compression, Encoder};

/// Appends a record's line (without its newline), or says why it cannot.
type Format<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync>;

/// What the sink writes into: its file, through its compression.
type Output = Encoder<BufWriter<File>>;

/// Writes each record as one line into `DIR/part-INSTANCE` (or into `PATH`
/// itself when the sink has parallelism 1 and [`single_file`](Self::single_file)
/// is used).
///
/// [`transactional`](Self::transactional) makes it the exactly-once file
/// sink of chapter 10: lines are staged in hidden files per checkpoint and
/// become visible, as `DIR/part-INSTANCE-CHECKPOINT` (or appended to the
/// single file), only once their checkpoint is complete; a restarted job
/// commits what its last complete checkpoint staged and discards the rest.
///
/// Compressed output ([`compression`](Self::compression), or a single
/// file named `.gz` or `.zst`) gets the extension in its file names
/// (`part-0.gz`, `part-0-00000000000000000003.zst`). Each commit ends a
/// gzip member or zstd frame, so that appended commits stay one valid
/// file, which `gzip -d`, `zstd -d` and [`FileSource`](crate::FileSource)
/// read whole.
///
/// ```no_run
/// use streamwork::connectors::FileSink;
/// let sink = FileSink::new("out", |n: &u64, line: &mut Vec<u8>| line.extend_from_slice(n.to_string().as_bytes()));
/// let exactly_once = sink.clone().transactional();
/// # let _ = (sink, exactly_once);
/// ```
pub struct FileSink<T> {
    path: PathBuf,
    single: bool,
    transactional: bool,
    roll: Option<Roll>,
    format: Format<T>,
    /// Set for CSV records.
    csv: bool,
    /// Writes the header line of a record's kind, if files have one.
    header: Option<Format<T>>,
    /// The header line (with its newline), once a record gave it.
    header_line: Option<Vec<u8>>,
    /// The compression asked for, if not by the file name.
    compression: Option<Compression>,
    /// The compression written, once open.
    kind: Compression,
    writer: Option<Output>,
    /// Whether nothing has been written into `writer` yet.
    at_start: bool,
    line: Vec<u8>,
    /// The transactional sink's files, once open.
    files: Option<Staging>,
}

/// Cloning gives an unopened sink with the same settings.
impl<T> Clone for FileSink<T> {
    fn clone(&self) -> Self {
        FileSink {
            path: self.path.clone(),
            single: self.single,
            transactional: self.transactional,
            roll: self.roll,
            format: self.format.clone(),
            csv: self.csv,
            header: self.header.clone(),
            header_line: None,
            compression: self.compression,
            kind: Compression::None,
            writer: None,
            at_start: false,
            line: Vec::new(),
            files: None,
        }
    }
}

impl<T: Data + serde::Serialize> FileSink<T> {
    /// Writes each record into directory `dir` as one JSON line.
    ///
    /// ```
    /// use streamwork::connectors::FileSink;
    /// #[derive(Clone, serde::Serialize)]
    /// struct Count { word: String, count: u64 }
    /// let out = FileSink::<Count>::json("counts").transactional();
    /// # let _ = out;
    /// ```
    pub fn json(dir: impl AsRef<Path>) -> Self {
        FileSink::encoded(dir, crate::formats::json_line)
    }

    /// Writes each record into directory `dir` as one CSV record, with a
    /// header line after [`has_headers`](Self::has_headers).
    pub fn csv(dir: impl AsRef<Path>) -> Self {
        let mut sink = FileSink::encoded(dir, crate::formats::csv_line);
        sink.csv = true;
        sink
    }

    /// Begins every file with a CSV header line naming the record's fields
    /// (as [`FileSource::has_headers`](crate::FileSource::has_headers)
    /// reads them back). A file to which commits append (a single file, a
    /// rolling sink's file) has it once, at its start. Only for CSV sinks
    /// of structs with named fields: another record fails its first write
    /// with the reason, and a sink of other lines refuses to start.
    ///
    /// ```
    /// use streamwork::connectors::{Compression, FileSink};
    /// #[derive(Clone, serde::Serialize)]
    /// struct Count { word: String, count: u64 }
    /// // out/part-I-CHECKPOINT.csv.gz, each beginning `word,count`.
    /// let out = FileSink::<Count>::csv("out")
    ///     .has_headers()
    ///     .compression(Compression::Gzip)
    ///     .transactional();
    /// # let _ = out;
    /// ```
    pub fn has_headers(mut self) -> Self {
        self.header = Some(Arc::new(crate::formats::csv_header));
        self
    }
}

impl<T: Data> FileSink<T> {
    /// Writes into directory `dir`, formatting each record with `format`.
    pub fn new(
        dir: impl AsRef<Path>,
        format: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        FileSink {
            path: dir.as_ref().to_path_buf(),
            single: false,
            transactional: false,
            roll: None,
            format: Arc::new(move |value: &T, line: &mut Vec<u8>| {
                format(value, line);
                Ok(())
            }),
            csv: false,
            header: None,
            header_line: None,
            compression: None,
            kind: Compression::None,
            writer: None,
            at_start: false,
            line: Vec::new(),
            files: None,
        }
    }

    /// Writes into directory `dir`, encoding each record with `encode`; a
    /// record it cannot encode fails the write with its reason (a user
    /// error), never a panic.
    pub fn encoded(
        dir: impl AsRef<Path>,
        encode: impl Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        FileSink {
            path: dir.as_ref().to_path_buf(),
            single: false,
            transactional: false,
            roll: None,
            format: Arc::new(encode),
            csv: false,
            header: None,
            header_line: None,
            compression: None,
            kind: Compression::None,
            writer: None,
            at_start: false,
            line: Vec::new(),
            files: None,
        }
    }

    /// Rolls each instance's output into files of about `max_bytes` (a
    /// file is closed at the first commit that takes it past `max_bytes`,
    /// or that comes `max_age` after it was started): `part-I-CHECKPOINT`,
    /// named after the checkpoint whose commit closed it, and visible only
    /// once whole. Until then committed output is kept in the hidden
    /// `.part-I.open`; the end of the input closes it. Commits append to it
    /// as a single file's do (undone and redone if a crash cuts them
    /// short), so the output is exactly once, in files of a useful size
    /// rather than one per checkpoint. Makes the sink commit at checkpoints
    /// (or, without them, at the end), as [`transactional`](Self::transactional).
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamwork::connectors::FileSink;
    /// let out = FileSink::<u64>::csv("out")
    ///     .rolling(64 << 20, Duration::from_secs(600))
    ///     .transactional();
    /// # let _ = out;
    /// ```
    pub fn rolling(mut self, max_bytes: u64, max_age: std::time::Duration) -> Self {
        self.roll = Some(Roll {
            max_bytes: max_bytes.max(1),
            max_age,
        });
        self.transactional = true;
        self.single = false;
        self
    }

    /// Compresses what it writes (by default a single file is compressed
    /// as its name says, `.gz` or `.zst`, and a directory's files are
    /// plain).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = Some(compression);
        self
    }

    /// Writes into the file at the sink's path itself (parallelism 1 only).
    pub fn single_file(mut self) -> Self {
        self.single = true;
        self
    }

    /// Makes output visible only when its checkpoint is complete (see the
    /// type's documentation). Without checkpoints, output becomes visible at
    /// the end of input.
    pub fn transactional(mut self) -> TransactionalFileSink<T> {
        self.transactional = true;
        TransactionalFileSink(self)
    }

    fn target(&self, ctx: &InstanceContext) -> Result<PathBuf, ConnectorError> {
        if self.single {
            if ctx.parallelism() != 1 {
                return Err(ConnectorError::user(format!(
                    "file sink `{}` writes a single file but has parallelism {}: use a directory or parallelism 1",
                    ctx.component(),
                    ctx.parallelism()
                )));
            }
            if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    ConnectorError::io(format!("creating directory {}", parent.display()), e)
                })?;
            }
            return Ok(self.path.clone());
        }
        std::fs::create_dir_all(&self.path).map_err(|e| {
            ConnectorError::io(format!("creating directory {}", self.path.display()), e)
        })?;
        // A transactional sink's committed files add their checkpoint and
        // the extension to this name.
        let extension = if self.transactional {
            ""
        } else {
            self.kind.extension()
        };
        Ok(self
            .path
            .join(format!("part-{}{extension}", ctx.instance().0)))
    }

    /// The file names' extension for committed files: the compression's,
    /// unless the user named the single file.
    fn committed_extension(&self) -> &'static str {
        if self.single {
            ""
        } else {
            self.kind.extension()
        }
    }

    /// A new file's writer, through the sink's compression.
    fn output(&mut self, file: File) -> Result<Output, ConnectorError> {
        self.at_start = true;
        self.kind
            .encoder(BufWriter::with_capacity(256 * 1024, file))
            .map_err(|e| ConnectorError::io(format!("compressing {}", self.path.display()), e))
    }

    fn staging(&mut self, ctx: &InstanceContext) -> Result<&mut Staging, ConnectorError> {
        if self.files.is_none() {
            let target = self.target(ctx)?;
            let extension = self.committed_extension();
            self.files = Some(
                Staging::new(target, self.single)
                    .rolling(self.roll)
                    .with_extension(extension),
            );
        }
        Ok(self
            .files
            .as_mut()
            .unwrap_or_else(|| unreachable!("just set")))
    }
}

impl<T: Data> Sink for FileSink<T> {
    type In = T;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        if self.header.is_some() && !self.csv {
            return Err(ConnectorError::user(format!(
                "file sink `{}` is told to write a header line (`has_headers()`), but it does not write CSV: drop `has_headers()`, or write with `FileSink::csv`",
                ctx.component()
            )));
        }
        self.kind = self.compression.unwrap_or_else(|| {
            if self.single {
                Compression::of_path(&self.path)
            } else {
                Compression::None
            }
        });
        if self.transactional {
            self.staging(ctx)?;
            return Ok(());
        }
        let target = self.target(ctx)?;
        let file = File::create(&target)
            .map_err(|e| ConnectorError::io(format!("creating {}", target.display()), e))?;
        self.writer = Some(self.output(file)?);
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.line.clear();
        let cannot = |reason| {
            ConnectorError::user(format!(
                "{}: cannot encode a record: {reason}",
                self.path.display()
            ))
        };
        (self.format)(&record.value, &mut self.line).map_err(cannot)?;
        self.line.push(b'\n');
        if self.header_line.is_none()
            && let Some(header) = self.header.as_ref()
        {
            let mut line = Vec::new();
            header(&record.value, &mut line).map_err(cannot)?;
            line.push(b'\n');
            if let Some(files) = self.files.as_ref().filter(|files| files.appends()) {
                // Commits write it at the start of the file they append to.
                let compressed = self.kind.compress(&line).map_err(|e| {
                    ConnectorError::io(format!("compressing {}", self.path.display()), e)
                })?;
                files.keep_header(&compressed)?;
            }
            self.header_line = Some(line);
        }
        if self.writer.is_none()
            && let Some(files) = self.files.as_ref()
        {
            // Transactional: a new in-progress file after each checkpoint.
            let file = files.start()?;
            self.writer = Some(self.output(file)?);
        }
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let io = |e| ConnectorError::io(format!("writing {}", self.path.display()), e);
        if std::mem::take(&mut self.at_start)
            && let Some(header) = self.header_line.as_ref()
            && !self.files.as_ref().is_some_and(Staging::appends)
        {
            writer.write_all(header).map_err(io)?;
        }
        writer.write_all(&self.line).map_err(io)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Some(writer) = self.writer.as_mut() {
            writer
                .flush()
                .map_err(|e| ConnectorError::io(format!("writing {}", self.path.display()), e))?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if self.files.is_some() {
            // Without checkpoints everything commits at the end; with them,
            // the final checkpoint has already staged and committed it all.
            self.pre_commit(CheckpointId::FINAL)?;
            return self.commit(CheckpointId::FINAL);
        }
        if let Some(writer) = self.writer.take() {
            // The end of the compressed stream, then the file's buffer.
            writer
                .finish()
                .and_then(|mut file| file.flush())
                .map_err(|e| ConnectorError::io(format!("writing {}", self.path.display()), e))?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.flush()?;
        let writer = self.writer.take();
        match self.files.as_ref() {
            Some(files) => files.stage(writer, checkpoint),
            None => {
                self.writer = writer;
                Ok(())
            }
        }
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        match self.files.as_ref() {
            Some(files) => files.commit_up_to(checkpoint, checkpoint.is_final()),
            None => Ok(()),
        }
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        if !self.transactional {
            return Ok(());
        }
        // Commit what complete checkpoints staged; discard everything else.
        let Some(files) = self.files.as_ref() else {
            return Err(ConnectorError::user(
                "a transactional file sink restored before it was opened".to_string(),
            ));
        };
        files.refuse_published_after(restore)?;
        files.recover(restore.checkpoint, restore.finished())?;
        if self.single {
            return Ok(());
        }
        // Scaled down: the instances that are gone left staged output too.
        // Instance `j` of the old run is recovered by instance
        // `j % parallelism` of this one, so each is recovered exactly once.
        for old in orphaned_instances(&self.path, restore.parallelism)? {
            if old % restore.parallelism == restore.instance.0 {
                let target = self.path.join(format!("part-{old}"));
                let orphan = Staging::new(target, false)
                    .rolling(self.roll)
                    .with_extension(self.committed_extension());
                orphan.refuse_published_after(restore)?;
                orphan.recover(restore.checkpoint, ended(restore, old))?;
                // No instance appends to its open file any more: close it.
                orphan.roll(Staged::At(restore.checkpoint), true)?;
            }
        }
        Ok(())
    }
}

/// Instances `>= parallelism` with staged or in-progress files in `dir`:
/// instances of an earlier run at a higher parallelism.
fn orphaned_instances(dir: &Path, parallelism: u32) -> Result<Vec<u32>, ConnectorError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))?;
    let mut found: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(".part-")?;
            let (index, kind) = rest.split_once('.')?;
            let hidden = kind.starts_with("staged-") || kind == "inprogress" || kind == "open";
            hidden.then(|| index.parse::<u32>().ok()).flatten()
        })
        .filter(|&index| index >= parallelism)
        .collect();
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// A [`FileSink`] made [`transactional`](FileSink::transactional): fit for
/// a job declared `delivery exactly_once`.
pub struct TransactionalFileSink<T>(FileSink<T>);

impl<T> Clone for TransactionalFileSink<T> {
    fn clone(&self) -> Self {
        TransactionalFileSink(self.0.clone())
    }
}

impl<T: Data> streamwork_core::checkpoint::Transactional for TransactionalFileSink<T> {}

impl<T: Data> Sink for TransactionalFileSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    /// Its part files wait in its directory until their checkpoint
    /// completes.
    fn stages_locally(&self) -> Option<String> {
        Some(format!("part files in {}", self.0.path.display()))
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.0.open(ctx)
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.0.write(record)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.0.flush()
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.0.close()
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.0.pre_commit(checkpoint)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.0.commit(checkpoint)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.0.restore(restore)
    }
}

/// The hidden files of one transactional sink instance next to its target:
/// `.NAME.inprogress`, `.NAME.staged-CHECKPOINT` (or `.NAME.staged-final`)
/// and, for a single file, `.NAME.commit-CHECKPOINT` while appending.
struct Staging {
    target: PathBuf,
    dir: PathBuf,
    name: String,
    single: bool,
    /// Rolling: commits append to `.NAME.open`, closed into a visible file
    /// by size or age.
    roll: Option<Roll>,
    /// What committed files' names end with (`.gz`, say).
    extension: &'static str,
}

/// When a rolling sink closes its open file.
#[derive(Copy, Clone, Debug)]
struct Roll {
    max_bytes: u64,
    max_age: std::time::Duration,
}

/// A staged file's checkpoint: its id, or the final one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Staged {
    At(CheckpointId),
    Final,
}

impl Staging {
    fn new(target: PathBuf, single: bool) -> Self {
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Staging {
            target,
            dir,
            name,
            single,
            roll: None,
            extension: "",
        }
    }

    fn rolling(mut self, roll: Option<Roll>) -> Self {
        self.roll = roll;
        self
    }

    fn with_extension(mut self, extension: &'static str) -> Self {
        self.extension = extension;
        self
    }

    /// Keeps the (encoded) header line that commits write at the start of
    /// the file they append to, before any staged output needs it.
    fn keep_header(&self, bytes: &[u8]) -> Result<(), ConnectorError> {
        let path = self.hidden("header");
        let partial = self.hidden("header.partial");
        std::fs::write(&partial, bytes).map_err(|e| io("writing", &partial, e))?;
        std::fs::rename(&partial, &path).map_err(|e| io("writing", &path, e))
    }

    /// The header line kept by [`keep_header`](Self::keep_header), if any.
    fn kept_header(&self) -> Result<Vec<u8>, ConnectorError> {
        let path = self.hidden("header");
        match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io("reading", &path, e)),
        }
    }

    /// Whether commits append to one file (the target, or the open file of
    /// a rolling sink) rather than publish a file each.
    fn appends(&self) -> bool {
        self.single || self.roll.is_some()
    }

    /// The file commits append to.
    fn append_target(&self) -> PathBuf {
        match self.roll {
            Some(_) => self.hidden("open"),
            None => self.target.clone(),
        }
    }

    /// Closes a rolling sink's open file into the visible file named after
    /// `staged`, if it is due (`force`: the end of its input, or an
    /// instance that is gone).
    fn roll(&self, staged: Staged, force: bool) -> Result<(), ConnectorError> {
        let Some(roll) = self.roll else {
            return Ok(());
        };
        let open = self.hidden("open");
        let Ok(meta) = std::fs::metadata(&open) else {
            return Ok(());
        };
        let since = std::fs::read_to_string(self.hidden("open-since"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let age = std::time::Duration::from_millis(unix_millis().saturating_sub(since));
        if force || meta.len() >= roll.max_bytes || age >= roll.max_age {
            let visible = self.committed_path(staged);
            std::fs::rename(&open, &visible).map_err(|e| io("closing", &visible, e))?;
            // Stale after a crash here: the next open file writes it anew.
            let _ = std::fs::remove_file(self.hidden("open-since"));
            self.sync_dir()?;
        }
        Ok(())
    }

    fn hidden(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!(".{}.{suffix}", self.name))
    }

    fn staged_path(&self, staged: Staged) -> PathBuf {
        match staged {
            Staged::At(id) => self.hidden(&format!("staged-{:020}", id.get())),
            Staged::Final => self.hidden("staged-final"),
        }
    }

    fn committed_path(&self, staged: Staged) -> PathBuf {
        let extension = self.extension;
        match staged {
            Staged::At(id) => (self.dir).join(format!("{}-{:020}{extension}", self.name, id.get())),
            Staged::Final => self.dir.join(format!("{}-final{extension}", self.name)),
        }
    }

    /// A fresh in-progress file.
    fn start(&self) -> Result<File, ConnectorError> {
        let path = self.hidden("inprogress");
        File::create(&path).map_err(|e| io("creating", &path, e))
    }

    /// Makes the in-progress file durable as the output of `checkpoint`
    /// (a whole member or frame, if compressed).
    fn stage(
        &self,
        writer: Option<Output>,
        checkpoint: CheckpointId,
    ) -> Result<(), ConnectorError> {
        let Some(writer) = writer else {
            return Ok(());
        };
        let inprogress = self.hidden("inprogress");
        let file = writer
            .finish()
            .map_err(|e| io("writing", &inprogress, e))?
            .into_inner()
            .map_err(|e| io("writing", &inprogress, e.into_error()))?;
        file.sync_data()
            .map_err(|e| io("flushing", &inprogress, e))?;
        let staged = if checkpoint.is_final() {
            Staged::Final
        } else {
            Staged::At(checkpoint)
        };
        let path = self.staged_path(staged);
        std::fs::rename(&inprogress, &path).map_err(|e| io("staging", &path, e))?;
        self.sync_dir()
    }

    /// Every staged file of this instance, in checkpoint order.
    fn staged(&self) -> Result<Vec<Staged>, ConnectorError> {
        let prefix = format!(".{}.staged-", self.name);
        let mut found = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            if rest == "final" {
                found.push(Staged::Final);
            } else if let Ok(id) = rest.parse::<u64>() {
                found.push(Staged::At(CheckpointId::new(id)));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Commits the files staged for checkpoints up to `checkpoint` (and the
    /// final one if `final_too`).
    fn commit_up_to(
        &self,
        checkpoint: CheckpointId,
        final_too: bool,
    ) -> Result<(), ConnectorError> {
        for staged in self.staged()? {
            let due = match staged {
                Staged::At(id) => id <= checkpoint,
                Staged::Final => final_too,
            };
            if due {
                self.commit(staged)?;
            }
        }
        if final_too {
            // The end of the input closes a rolling sink's open file, even
            // when nothing was staged since the last commit (a run restored
            // at its end, say): committed output never stays hidden.
            self.roll(Staged::Final, true)?;
        }
        Ok(())
    }

    fn commit(&self, staged: Staged) -> Result<(), ConnectorError> {
        let path = self.staged_path(staged);
        if !self.appends() {
            let committed = self.committed_path(staged);
            std::fs::rename(&path, &committed).map_err(|e| io("committing", &committed, e))?;
            return self.sync_dir();
        }
        // One file: append, remembering its length before so that an append
        // a crash cut short is undone before it is redone.
        let marker = self.hidden(&format!("commit-{}", staged_name(staged)));
        let target = self.append_target();
        let before = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
        if before == 0 && self.roll.is_some() {
            // A new open file: its age counts from now.
            let since = self.hidden("open-since");
            std::fs::write(&since, unix_millis().to_string())
                .map_err(|e| io("writing", &since, e))?;
        }
        std::fs::write(&marker, before.to_string()).map_err(|e| io("writing", &marker, e))?;
        // A file's first commit begins it with the header, if it has one.
        let header = if before == 0 {
            self.kept_header()?
        } else {
            Vec::new()
        };
        self.append(&target, &header, &path, before)?;
        // Published before the staged file goes: a crash in between leaves
        // the record ahead of the file, never behind it.
        let published = self.hidden("published");
        std::fs::write(&published, staged_name(staged))
            .map_err(|e| io("writing", &published, e))?;
        std::fs::remove_file(&path).map_err(|e| io("removing", &path, e))?;
        self.sync_dir()?;
        std::fs::remove_file(&marker).map_err(|e| io("removing", &marker, e))?;
        self.roll(staged, staged == Staged::Final)
    }

    fn append(
        &self,
        target: &Path,
        header: &[u8],
        staged: &Path,
        length_before: u64,
    ) -> Result<(), ConnectorError> {
        let bytes = std::fs::read(staged).map_err(|e| io("reading", staged, e))?;
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(target)
            .map_err(|e| io("opening", target, e))?;
        file.set_len(length_before)
            .map_err(|e| io("truncating", target, e))?;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(length_before))
            .map_err(|e| io("seeking", target, e))?;
        file.write_all(header)
            .and_then(|()| file.write_all(&bytes))
            .map_err(|e| io("appending to", target, e))?;
        file.sync_data().map_err(|e| io("flushing", target, e))
    }

    /// The newest checkpoint whose output this instance published: by the
    /// names of its committed files, or, for one file, by the record its
    /// commits keep.
    fn published(&self) -> Result<Option<Staged>, ConnectorError> {
        if self.appends() {
            let path = self.hidden("published");
            return match std::fs::read_to_string(&path) {
                Ok(text) => Ok(parse_staged(text.trim())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io("reading", &path, e)),
            };
        }
        let prefix = format!("{}-", self.name);
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix(&prefix)?;
                parse_staged(rest.strip_suffix(self.extension)?)
            })
            .max())
    }

    /// Refuses a run that starts before output this instance has already
    /// published: replaying it would publish it twice.
    fn refuse_published_after(&self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let Some(published) = self.published()? else {
            return Ok(());
        };
        let covered = if restore.finished() {
            Staged::Final
        } else {
            Staged::At(restore.checkpoint)
        };
        if published <= covered {
            return Ok(());
        }
        let from = if restore.is_fresh() {
            "no checkpoint".to_string()
        } else {
            format!("checkpoint {}", restore.checkpoint)
        };
        let what = match published {
            Staged::At(id) => format!("checkpoint {id}"),
            Staged::Final => "the final checkpoint".to_string(),
        };
        Err(ConnectorError::user(format!(
            "transactional file sink `{}` has published the output of {what} to {}, but this run starts from {from}: that output would be published twice. The job is not using the checkpoint directory this output was written with, or that directory lost its newest checkpoints: point the job at it, or remove {} to start over",
            restore.component,
            self.target.display(),
            if self.single { &self.target } else { &self.dir }.display(),
        )))
    }

    /// After a restart from checkpoint `restored`: commits what checkpoints
    /// up to it staged (the final one too if it is final), finishes a commit
    /// a crash interrupted, and discards what later checkpoints staged.
    fn recover(&self, restored: CheckpointId, is_final: bool) -> Result<(), ConnectorError> {
        if self.appends() {
            self.finish_interrupted_appends()?;
        }
        for staged in self.staged()? {
            let keep = match staged {
                Staged::At(id) => id <= restored,
                Staged::Final => is_final,
            };
            if keep {
                self.commit(staged)?;
            } else {
                let path = self.staged_path(staged);
                std::fs::remove_file(&path).map_err(|e| io("discarding", &path, e))?;
            }
        }
        let inprogress = self.hidden("inprogress");
        if inprogress.exists() {
            std::fs::remove_file(&inprogress).map_err(|e| io("discarding", &inprogress, e))?;
        }
        if is_final {
            // A crash between the final commit and its roll.
            self.roll(Staged::Final, true)?;
        }
        self.sync_dir()
    }

    /// A single-file append cut short: if its staged file is still there,
    /// the append is redone by `recover`'s commit (which truncates back to
    /// the recorded length first); if not, the append was complete.
    fn finish_interrupted_appends(&self) -> Result<(), ConnectorError> {
        let prefix = format!(".{}.commit-", self.name);
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let staged = if rest == "final" {
                Staged::Final
            } else {
                match rest.parse::<u64>() {
                    Ok(id) => Staged::At(CheckpointId::new(id)),
                    Err(_) => continue,
                }
            };
            let marker = entry.path();
            if self.staged_path(staged).exists() {
                let before: u64 = std::fs::read_to_string(&marker)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                let target = self.append_target();
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&target)
                    .map_err(|e| io("opening", &target, e))?;
                file.set_len(before)
                    .map_err(|e| io("truncating", &target, e))?;
            }
            std::fs::remove_file(&marker).map_err(|e| io("removing", &marker, e))?;
        }
        Ok(())
    }

    fn sync_dir(&self) -> Result<(), ConnectorError> {
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

fn staged_name(staged: Staged) -> String {
    match staged {
        Staged::At(id) => format!("{:020}", id.get()),
        Staged::Final => "final".to_string(),
    }
}

/// The checkpoint a staged or committed file name ends with.
fn parse_staged(suffix: &str) -> Option<Staged> {
    if suffix == "final" {
        return Some(Staged::Final);
    }
    let digits = suffix.len() == 20 && suffix.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| suffix.parse().ok())
        .flatten()
        .map(|id| Staged::At(CheckpointId::new(id)))
}

/// Whether old instance `old` had ended when the restored checkpoint was taken.
fn ended(restore: &Restore<'_>, old: u32) -> bool {
    restore.is_final || restore.ended.contains(&streamwork_core::InstanceIdx(old))
}

fn io(action: &str, path: &Path, e: std::io::Error) -> ConnectorError {
    ConnectorError::io(format!("{action} {}", path.display()), e)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
