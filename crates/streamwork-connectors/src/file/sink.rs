//! Writes records as lines to files: one file per instance, or, made
//! transactional, one committed file per instance and checkpoint.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork_core::checkpoint::CheckpointId;
use streamwork_core::{ConnectorError, Data, FormatError, InstanceContext, Record, Restore, Sink};

use super::compression::Compression;
use super::staging::{Output, Roll, Staging};

/// Appends a record's line (without its newline), or says why it cannot.
type Format<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<(), FormatError> + Send + Sync>;

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
    lines: LineFormat<T>,
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
            lines: self.lines.clone(),
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
        sink.lines.csv = true;
        sink
    }

    /// Writes records into Parquet files in directory `dir`, a file per
    /// instance and checkpoint, exactly once: see [`ParquetSink`](super::ParquetSink).
    #[cfg(feature = "parquet")]
    pub fn parquet(dir: impl AsRef<Path>) -> super::ParquetSink<T>
    where
        T: serde::de::DeserializeOwned,
    {
        super::ParquetSink::new(dir)
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
        self.lines.header = Some(Arc::new(crate::formats::csv_header));
        self
    }
}

impl<T: Data> FileSink<T> {
    /// Writes into directory `dir`, formatting each record with `format`.
    pub fn new(
        dir: impl AsRef<Path>,
        format: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        FileSink::encoded(dir, move |value: &T, line: &mut Vec<u8>| {
            format(value, line);
            Ok::<(), FormatError>(())
        })
    }

    /// Writes into directory `dir`, encoding each record with `encode`; a
    /// record it cannot encode fails the write with its reason (a user
    /// error), never a panic.
    pub fn encoded<E: Into<FormatError>>(
        dir: impl AsRef<Path>,
        encode: impl Fn(&T, &mut Vec<u8>) -> Result<(), E> + Send + Sync + 'static,
    ) -> Self {
        FileSink {
            path: dir.as_ref().to_path_buf(),
            single: false,
            transactional: false,
            roll: None,
            lines: LineFormat {
                format: Arc::new(move |value: &T, line: &mut Vec<u8>| {
                    encode(value, line).map_err(Into::into)
                }),
                csv: false,
                header: None,
            },
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

    /// Writes into objects under `prefix` of an object store instead of
    /// files, exactly once, with this sink's format, header and
    /// compression: see [`StoreFileSink`](super::StoreFileSink). The local
    /// path the sink was made with is not used.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSink;
    /// use streamwork::connectors::file::StorePrefix;
    /// #[derive(Clone, serde::Serialize)]
    /// struct Count { word: String, count: u64 }
    /// let prefix = StorePrefix::s3(None, "analytics", "counts")?;
    /// let out = FileSink::<Count>::json("").into_store(prefix);
    /// # let _ = out;
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    #[cfg(feature = "s3")]
    pub fn into_store(self, prefix: super::StorePrefix) -> super::StoreFileSink<T> {
        super::StoreFileSink::new(
            prefix,
            self.lines,
            self.compression.unwrap_or_default(),
            self.roll,
        )
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

    /// Writes local files: never waits on anything outside the job.
    fn may_block(&self) -> bool {
        false
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        refuse_store_url(&self.path, ctx.component())?;
        self.lines
            .check(&format!("file sink `{}`", ctx.component()))?;
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
        let cannot = |reason: FormatError| {
            ConnectorError::user(format!(
                "{}: cannot encode a record: {reason}",
                self.path.display()
            ))
        };
        let first = self.header_line.is_none();
        self.lines
            .encode(&record.value, &mut self.line, &mut self.header_line)
            .map_err(cannot)?;
        if first
            && let Some(header) = self.header_line.as_ref()
            && let Some(files) = self.files.as_ref().filter(|files| files.appends())
        {
            // Commits write it at the start of the file they append to.
            let compressed = self.kind.compress(header).map_err(|e| {
                ConnectorError::io(format!("compressing {}", self.path.display()), e)
            })?;
            files.keep_header(&compressed)?;
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
            return crate::commit::commit_at_end(self);
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
        files.restore(&self.path, restore)
    }
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

    /// Writes local files: never waits on anything outside the job.
    fn may_block(&self) -> bool {
        false
    }

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

/// How a line sink turns records into lines: the line format and, for
/// CSV, the header.
pub(super) struct LineFormat<T> {
    format: Format<T>,
    /// Set for CSV records.
    csv: bool,
    /// Writes the header line of a record's kind, if files have one.
    header: Option<Format<T>>,
}

impl<T> Clone for LineFormat<T> {
    fn clone(&self) -> Self {
        LineFormat {
            format: self.format.clone(),
            csv: self.csv,
            header: self.header.clone(),
        }
    }
}

impl<T> LineFormat<T> {
    /// Refuses a header for lines that are not CSV; `sink` names the sink.
    pub(super) fn check(&self, sink: &str) -> Result<(), ConnectorError> {
        if self.header.is_some() && !self.csv {
            return Err(ConnectorError::user(format!(
                "{sink} is told to write a header line (`has_headers()`), but it does not write CSV: drop `has_headers()`, or write with `FileSink::csv`"
            )));
        }
        Ok(())
    }

    /// Appends `value`'s line and its newline to `line`; the first time,
    /// also sets `header` (with its newline) if files have one.
    pub(super) fn encode(
        &self,
        value: &T,
        line: &mut Vec<u8>,
        header: &mut Option<Vec<u8>>,
    ) -> Result<(), FormatError> {
        (self.format)(value, line)?;
        line.push(b'\n');
        if header.is_none()
            && let Some(write_header) = &self.header
        {
            let mut text = Vec::new();
            write_header(value, &mut text)?;
            text.push(b'\n');
            *header = Some(text);
        }
        Ok(())
    }
}

/// The refusal of a sink's local path that is an object-store URL: the
/// sink would write a local folder named `s3:`.
pub(super) fn refuse_store_url(path: &Path, component: &str) -> Result<(), ConnectorError> {
    match super::input::store_url(path) {
        None => Ok(()),
        Some(url) => Err(ConnectorError::user(format!(
            "file sink `{component}` is given {url}, an object-store URL, as a local path: write `.into_store(StorePrefix::url(\"{url}\")?)` (feature `s3`)"
        ))),
    }
}
