//! Parquet files (feature `parquet`): a sink writing a file per instance
//! and checkpoint, exactly once, and a source reading a directory of them
//! in parallel, replayably.
//!
//! Records become Arrow arrays through serde_arrow, which takes the schema
//! from the record type's serde shape (`i64` an `Int64` column, `String` a
//! `Utf8` one, `Option` a nullable one, a struct a struct column), and the
//! Arrow project's `parquet` crate writes and reads the files (zstd pages,
//! row groups of [`DEFAULT_ROW_GROUP_ROWS`], the size DuckDB writes, which
//! DuckDB, Spark, pandas and pyarrow all read in parallel).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{FieldRef, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_arrow::schema::{SchemaLike, TracingOptions};
use streamwork_core::checkpoint::{CheckpointId, Transactional};
use streamwork_core::{
    Collector, ConnectorError, Data, FormatError, InstanceContext, Record, Restore, Sink, Source,
    SourcePoll, StateBytes, Timestamp,
};

use super::staging::Staging;

/// Rows per row group by default: DuckDB's.
pub const DEFAULT_ROW_GROUP_ROWS: usize = 122_880;

/// Records converted to Arrow at a time.
const BATCH_ROWS: usize = 8_192;

/// The Arrow fields of record type `T`, by its serde shape.
fn fields_of<T: DeserializeOwned>(what: &str) -> Result<Vec<FieldRef>, ConnectorError> {
    let options = TracingOptions::default().strings_as_large_utf8(false);
    Vec::<FieldRef>::from_type::<T>(options).map_err(|e| {
        ConnectorError::user(format!(
            "{what}: the record type `{}` has no Parquet schema: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// Writes records into Parquet files, exactly once: each instance writes
/// a file per checkpoint, staged hidden in the directory and visible as
/// `DIR/part-INSTANCE-CHECKPOINT.parquet` once the checkpoint is complete
/// (a bulk format rolls at every checkpoint, as Flink's does); a restarted
/// job commits what its restored checkpoint staged and discards the rest,
/// as [`FileSink::transactional`](crate::FileSink::transactional) does.
/// Fit for a job declared `delivery exactly_once`.
///
/// ```no_run
/// use streamwork::connectors::FileSink;
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Sale { id: i64, customer: String, amount: f64 }
/// let sales = FileSink::<Sale>::parquet("sales");
/// # let _ = sales;
/// ```
pub struct ParquetSink<T> {
    dir: PathBuf,
    row_group_rows: usize,
    partition: Option<PartitionFn<T>>,
    open: Option<OpenSink<T>>,
}

/// The folder (`date=2026-12-04/hour=13`) a record and its event time go
/// into.
type PartitionFn<T> = Arc<dyn Fn(&T, Option<Timestamp>) -> String + Send + Sync>;

struct OpenSink<T> {
    dir: PathBuf,
    instance: u32,
    component: String,
    fields: Vec<FieldRef>,
    schema: SchemaRef,
    /// The output of each partition folder ("" without partitions).
    partitions: BTreeMap<String, Partition<T>>,
}

/// One folder's output of one instance.
struct Partition<T> {
    staging: Staging,
    rows: Vec<T>,
    /// The checkpoint's file: its writer and a handle to sync it.
    writer: Option<(ArrowWriter<File>, File)>,
}

impl<T> Clone for ParquetSink<T> {
    fn clone(&self) -> Self {
        ParquetSink {
            dir: self.dir.clone(),
            row_group_rows: self.row_group_rows,
            partition: self.partition.clone(),
            open: None,
        }
    }
}

impl<T: Data + Serialize + DeserializeOwned> ParquetSink<T> {
    /// Writes into directory `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        ParquetSink {
            dir: dir.as_ref().to_path_buf(),
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
            partition: None,
            open: None,
        }
    }

    /// Writes each record into the Hive-style folder `partition` names for
    /// it and its event time (`Some` once a watermark strategy stamped it),
    /// below the sink's directory: `country=fr/date=2026-12-04`. Each folder
    /// holds its own files per instance and checkpoint, exactly once as
    /// without partitions; DuckDB, Spark and pyarrow read the folders'
    /// names back as columns. A folder name must be relative and plain (no
    /// empty segment, none beginning with `.` or `_`): another is a user
    /// error naming it. [`hive_date_hour`] makes the usual event-time one.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSink;
    /// use streamwork::connectors::file::hive_date_hour;
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Sale { id: i64, country: String, amount: f64 }
    /// let sales = FileSink::<Sale>::parquet("sales").partition_by(|sale: &Sale, time| {
    ///     let hour = time.map_or("date=none".to_string(), hive_date_hour);
    ///     format!("country={}/{hour}", sale.country)
    /// });
    /// # let _ = sales;
    /// ```
    pub fn partition_by(
        mut self,
        partition: impl Fn(&T, Option<Timestamp>) -> String + Send + Sync + 'static,
    ) -> Self {
        self.partition = Some(Arc::new(partition));
        self
    }

    /// Rows per row group ([`DEFAULT_ROW_GROUP_ROWS`] by default; at least 1).
    pub fn row_group_rows(mut self, rows: usize) -> Self {
        self.row_group_rows = rows.max(1);
        self
    }

    fn open_mut(&mut self) -> Result<&mut OpenSink<T>, ConnectorError> {
        let dir = &self.dir;
        self.open.as_mut().ok_or_else(|| {
            ConnectorError::user(format!(
                "Parquet sink into {} used before it was opened",
                dir.display()
            ))
        })
    }
}

/// What a Parquet sink writes with.
struct Format<'a> {
    component: &'a str,
    fields: &'a [FieldRef],
    schema: &'a SchemaRef,
    row_group_rows: usize,
}

impl<T: Serialize> Partition<T> {
    fn io(&self, format: &Format<'_>, what: &str, e: impl std::fmt::Display) -> ConnectorError {
        ConnectorError::user(format!(
            "Parquet sink `{}`: {what} {}: {e}",
            format.component,
            self.staging.target().display()
        ))
    }

    /// Writes the rows held into the checkpoint's file.
    fn write_rows(&mut self, format: &Format<'_>) -> Result<(), ConnectorError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let batch = serde_arrow::to_record_batch(format.fields, &self.rows)
            .map_err(|e| self.io(format, "converting records for", e))?;
        if self.writer.is_none() {
            let file = self.staging.start()?;
            let handle = file
                .try_clone()
                .map_err(|e| self.io(format, "opening", e))?;
            let properties = WriterProperties::builder()
                .set_max_row_group_size(format.row_group_rows)
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .build();
            let writer = ArrowWriter::try_new(file, format.schema.clone(), Some(properties))
                .map_err(|e| self.io(format, "writing", e))?;
            self.writer = Some((writer, handle));
        }
        let result = match self.writer.as_mut() {
            Some((writer, _)) => writer.write(&batch),
            None => Ok(()),
        };
        result.map_err(|e| self.io(format, "writing", e))?;
        self.rows.clear();
        Ok(())
    }

    /// Makes what was written since the last barrier `checkpoint`'s.
    fn stage(
        &mut self,
        format: &Format<'_>,
        checkpoint: CheckpointId,
    ) -> Result<(), ConnectorError> {
        self.write_rows(format)?;
        let Some((writer, handle)) = self.writer.take() else {
            return Ok(());
        };
        writer
            .close()
            .map_err(|e| self.io(format, "finishing", e))?;
        self.staging.stage_written(&handle, checkpoint)
    }
}

/// `partition` as a relative folder, or why it cannot be one.
fn partition_folder(partition: &str) -> Result<PathBuf, FormatError> {
    let mut folder = PathBuf::new();
    for segment in partition.split('/') {
        let plain = !segment.is_empty()
            && !segment.starts_with('.')
            && !segment.starts_with('_')
            && !segment.contains(['\\', '\0']);
        if !plain {
            return Err(FormatError::new(format!(
                "partition `{partition}` is not a plain relative folder (no empty segment, none beginning with `.` or `_`)"
            )));
        }
        folder.push(segment);
    }
    Ok(folder)
}

/// Every folder below `dir` (itself included) that holds files a sink
/// instance staged or wrote: hidden `.part-*` files.
fn staging_folders(dir: &Path) -> Result<Vec<PathBuf>, ConnectorError> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(folder) = todo.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(ConnectorError::io(
                    format!("listing {}", folder.display()),
                    e,
                ));
            }
        };
        let mut stages = false;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".part-") {
                stages = true;
            } else if !name.starts_with('.') && entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(entry.path());
            }
        }
        if stages {
            found.push(folder);
        }
    }
    Ok(found)
}

/// The Hive-style folder of an event time: `date=YYYY-MM-DD/hour=HH`
/// (UTC), for [`ParquetSink::partition_by`].
///
/// ```
/// use streamwork::connectors::file::hive_date_hour;
/// use streamwork::core::Timestamp;
/// assert_eq!(
///     hive_date_hour(Timestamp::from_millis(1_796_385_600_000)),
///     "date=2026-12-04/hour=12"
/// );
/// assert_eq!(hive_date_hour(Timestamp::from_millis(-1)), "date=1969-12-31/hour=23");
/// ```
pub fn hive_date_hour(time: Timestamp) -> String {
    let (year, month, day, hour) = time.civil();
    format!("date={year:04}-{month:02}-{day:02}/hour={hour:02}")
}

impl<T: Data + Serialize + DeserializeOwned> Transactional for ParquetSink<T> {}

impl<T: Data + Serialize + DeserializeOwned> Sink for ParquetSink<T> {
    type In = T;

    /// Writes local files: never waits on anything outside the job.
    fn may_block(&self) -> bool {
        false
    }

    fn exactly_once(&self) -> bool {
        true
    }

    fn stages_locally(&self) -> Option<String> {
        Some(format!("Parquet files in {}", self.dir.display()))
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        super::sink::refuse_store_url(&self.dir, ctx.component())?;
        let what = format!("Parquet sink `{}`", ctx.component());
        let fields = fields_of::<T>(&what)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            ConnectorError::io(format!("creating directory {}", self.dir.display()), e)
        })?;
        self.open = Some(OpenSink {
            dir: self.dir.clone(),
            instance: ctx.instance().0,
            component: ctx.component().to_string(),
            schema: Arc::new(Schema::new(fields.clone())),
            fields,
            partitions: BTreeMap::new(),
        });
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let row_group_rows = self.row_group_rows;
        let (key, partitioned) = match &self.partition {
            Some(partition) => (partition(&record.value, record.time), true),
            None => (String::new(), false),
        };
        let open = self.open_mut()?;
        if !open.partitions.contains_key(&key) {
            let folder = if !partitioned {
                PathBuf::new()
            } else {
                partition_folder(&key).map_err(|e| {
                    ConnectorError::user(format!("Parquet sink `{}`: {e}", open.component))
                })?
            };
            let dir = open.dir.join(folder);
            std::fs::create_dir_all(&dir).map_err(|e| {
                ConnectorError::io(format!("creating directory {}", dir.display()), e)
            })?;
            let target = dir.join(format!("part-{}", open.instance));
            open.partitions.insert(
                key.clone(),
                Partition {
                    staging: Staging::new(target, false).with_extension(".parquet"),
                    rows: Vec::with_capacity(BATCH_ROWS),
                    writer: None,
                },
            );
        }
        let format = Format {
            component: &open.component,
            fields: &open.fields,
            schema: &open.schema,
            row_group_rows,
        };
        let Some(partition) = open.partitions.get_mut(&key) else {
            return Ok(());
        };
        partition.rows.push(record.value);
        if partition.rows.len() >= BATCH_ROWS {
            partition.write_rows(&format)?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let row_group_rows = self.row_group_rows;
        let open = self.open_mut()?;
        let format = Format {
            component: &open.component,
            fields: &open.fields,
            schema: &open.schema,
            row_group_rows,
        };
        for partition in open.partitions.values_mut() {
            partition.stage(&format, checkpoint)?;
        }
        Ok(())
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let open = self.open_mut()?;
        for partition in open.partitions.values() {
            partition
                .staging
                .commit_up_to(checkpoint, checkpoint.is_final())?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if self.open.is_some() {
            crate::commit::commit_at_end(self)?;
        }
        Ok(())
    }

    /// In every folder that holds staged output (each partition's), commits
    /// what the restored checkpoint covers and discards the rest, for this
    /// instance and the removed instances it inherits.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let instance = self.open_mut()?.instance;
        for folder in staging_folders(&self.dir)? {
            let target = folder.join(format!("part-{instance}"));
            Staging::new(target, false)
                .with_extension(".parquet")
                .restore(&folder, restore)?;
        }
        Ok(())
    }
}

/// Reads the records of a Parquet file, or of a directory's Parquet files
/// (in name order; names beginning with `.` or `_` are left out), file `j`
/// by instance `j % parallelism`. Replayable: the checkpoint keeps the
/// input's plan (names and sizes) and the rows read of each file begun, so
/// a restore at any parallelism reads every row once; an input that changed
/// since is refused.
///
/// ```no_run
/// use streamwork::connectors::FileSource;
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Sale { id: i64, customer: String, amount: f64 }
/// let sales = FileSource::<Sale>::parquet("sales");
/// # let _ = sales;
/// ```
pub struct ParquetSource<T> {
    path: PathBuf,
    input: super::input::Input,
    plan: Vec<(PathBuf, u64)>,
    /// This instance's files not yet done, in order.
    todo: std::collections::VecDeque<usize>,
    /// Rows read of each begun file, and whether it is done.
    progress: BTreeMap<usize, (u64, bool)>,
    reading: Option<(usize, ParquetRecordBatchReader)>,
    /// What a checkpoint says: its plan and every file's progress.
    resume: Option<Checkpointed>,
    component: String,
    /// Rows a poll reads at most: the job's batch size.
    batch_rows: usize,
    _records: std::marker::PhantomData<fn() -> T>,
}

/// A Parquet source's checkpointed part (schema 1, JSON).
#[derive(serde::Serialize, serde::Deserialize)]
struct Checkpointed {
    plan: Vec<(String, u64)>,
    /// Per file: rows read, done.
    progress: BTreeMap<usize, (u64, bool)>,
}

const SOURCE_SCHEMA: u32 = 1;

/// Cloning gives an unopened source of the same input.
impl<T: Data + DeserializeOwned> Clone for ParquetSource<T> {
    fn clone(&self) -> Self {
        ParquetSource {
            input: self.input.clone(),
            ..ParquetSource::new(&self.path)
        }
    }
}

impl<T: Data + DeserializeOwned> ParquetSource<T> {
    /// Reads `path`, a Parquet file or a directory of them.
    pub fn new(path: impl AsRef<Path>) -> Self {
        ParquetSource {
            path: path.as_ref().to_path_buf(),
            input: super::input::Input::Local,
            plan: Vec::new(),
            todo: Default::default(),
            progress: Default::default(),
            reading: None,
            resume: None,
            component: String::new(),
            batch_rows: streamwork_core::collector::DEFAULT_BATCH_SIZE,
            _records: std::marker::PhantomData,
        }
    }

    /// Reads the Parquet objects under `prefix` of an object store (and
    /// its sub-prefixes, as Hive-style folders; hidden names left out),
    /// fetching each file's footer and the column chunks it needs in
    /// ranged reads, in the same files per instance, progress and restore
    /// as a directory's. The path the source was made with is not used.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSource;
    /// use streamwork::connectors::file::StorePrefix;
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Sale { id: i64, amount: f64 }
    /// let prefix = StorePrefix::s3(None, "analytics", "sales")?;
    /// let sales = FileSource::<Sale>::parquet("").from_store(prefix);
    /// # let _ = sales;
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    #[cfg(feature = "s3")]
    pub fn from_store(mut self, prefix: super::StorePrefix) -> Self {
        self.input = super::input::Input::Store(super::store::StoreInput::new(prefix));
        self
    }

    /// Opens file `file` at its progress.
    fn open_file(&mut self, file: usize, batch_rows: usize) -> Result<(), ConnectorError> {
        let path = &self.plan[file].0;
        let refuse = |e: &dyn std::fmt::Display| {
            ConnectorError::user(format!(
                "Parquet source `{}`: {} cannot be read as Parquet: {e}",
                self.component,
                path.display()
            ))
        };
        let (rows, _) = self.progress.get(&file).copied().unwrap_or((0, false));
        let opening = |e| ConnectorError::io(format!("opening {}", path.display()), e);
        let reader = match &self.input {
            super::input::Input::Local => {
                batches(File::open(path).map_err(opening)?, batch_rows, rows)
            }
            #[cfg(feature = "s3")]
            super::input::Input::Store(store) => {
                batches(store.chunks(path).map_err(opening)?, batch_rows, rows)
            }
        }
        .map_err(|e| refuse(&e))?;
        self.progress.insert(file, (rows, false));
        self.reading = Some((file, reader));
        Ok(())
    }
}

/// A reader of `file`'s rows from row `offset`, `batch_rows` at a time.
fn batches(
    file: impl parquet::file::reader::ChunkReader + 'static,
    batch_rows: usize,
    offset: u64,
) -> Result<ParquetRecordBatchReader, parquet::errors::ParquetError> {
    ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(batch_rows)
        .with_offset(usize::try_from(offset).unwrap_or(usize::MAX))
        .build()
}

impl<T: Data + DeserializeOwned> streamwork_core::checkpoint::Replayable for ParquetSource<T> {}

impl<T: Data + DeserializeOwned> Source for ParquetSource<T> {
    type Out = Collector<T>;

    fn replayable(&self) -> bool {
        true
    }

    /// Local files are read without waiting; an object store is not.
    fn may_block(&self) -> bool {
        !self.input.is_local(&self.path)
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.component = ctx.component().to_string();
        self.batch_rows = ctx.batch_size().max(1);
        self.input.start(&self.path)?;
        self.plan = self.input.list(&self.path)?;
        if let Some(resume) = self.resume.take() {
            let now = super::input::plan_names(self.input.root(&self.path), &self.plan);
            if resume.plan != now {
                return Err(ConnectorError::user(format!(
                    "Parquet source `{}`: the input {} changed since the checkpoint ({}): restore it with the input it read, or start over without restoring",
                    ctx.component(),
                    self.path.display(),
                    super::input::describe_change(&resume.plan, &now)
                )));
            }
            self.progress = resume.progress;
        }
        let (me, parallelism) = (ctx.instance().0 as usize, ctx.parallelism().max(1) as usize);
        self.progress.retain(|&file, _| file % parallelism == me);
        self.todo = (0..self.plan.len())
            .filter(|&file| file % parallelism == me)
            .filter(|file| !self.progress.get(file).is_some_and(|&(_, done)| done))
            .collect();
        Ok(())
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        let part = Checkpointed {
            plan: super::input::plan_names(self.input.root(&self.path), &self.plan),
            progress: self.progress.clone(),
        };
        Some(StateBytes::new(
            SOURCE_SCHEMA,
            serde_json::to_vec(&part).unwrap_or_default(),
        ))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut resume: Option<Checkpointed> = None;
        for part in &restore.parts {
            let decoded = (part.schema == SOURCE_SCHEMA)
                .then(|| serde_json::from_slice::<Checkpointed>(part.bytes).ok())
                .flatten();
            let Some(part) = decoded else {
                return Err(ConnectorError::user(format!(
                    "Parquet source `{}`: the checkpointed position of instance {} has schema {} or is damaged, and this version reads schema {SOURCE_SCHEMA}: resume it with the version that wrote it, or start over without restoring",
                    restore.component, part.part.0, part.schema
                )));
            };
            let resume = resume.get_or_insert_with(|| Checkpointed {
                plan: part.plan.clone(),
                progress: Default::default(),
            });
            // Each file's progress is in the part of the instance that read it.
            resume.progress.extend(part.progress);
        }
        self.resume = resume;
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        loop {
            if self.reading.is_none() {
                let Some(file) = self.todo.pop_front() else {
                    return Ok(SourcePoll::Finished);
                };
                self.open_file(file, self.batch_rows)?;
            }
            let Some((file, reader)) = self.reading.as_mut() else {
                continue;
            };
            let file = *file;
            let Some(batch) = reader.next() else {
                self.progress.entry(file).or_default().1 = true;
                self.reading = None;
                continue;
            };
            let path = &self.plan[file].0;
            let batch = batch.map_err(|e| {
                ConnectorError::user(format!(
                    "Parquet source `{}`: reading {}: {e}",
                    self.component,
                    path.display()
                ))
            })?;
            let records: Vec<T> = serde_arrow::from_record_batch(&batch).map_err(|e| {
                ConnectorError::user(format!(
                    "Parquet source `{}`: the rows of {} are not records of type `{}`: {e}",
                    self.component,
                    path.display(),
                    std::any::type_name::<T>()
                ))
            })?;
            self.progress.entry(file).or_default().0 += records.len() as u64;
            for record in records {
                out.emit(record);
            }
            return Ok(SourcePoll::Emitted);
        }
    }
}

/// Parquet as an object's bytes, for a sink writing to object storage.
#[cfg(feature = "s3")]
pub(super) struct ParquetBytes<T> {
    row_group_rows: usize,
    partition: Option<PartitionFn<T>>,
    fields: Vec<FieldRef>,
    schema: Option<SchemaRef>,
    trace: fn(&str) -> Result<Vec<FieldRef>, ConnectorError>,
    to_batch: ToBatch<T>,
}

/// Records to an Arrow batch, or why not.
#[cfg(feature = "s3")]
type ToBatch<T> = fn(&[FieldRef], &[T]) -> Result<arrow_array::RecordBatch, FormatError>;

/// One object's Parquet being written: the file in memory, and rows not
/// yet converted.
#[cfg(feature = "s3")]
pub(super) struct ParquetWriter<T> {
    writer: ArrowWriter<Vec<u8>>,
    rows: Vec<T>,
}

#[cfg(feature = "s3")]
impl<T> Clone for ParquetBytes<T> {
    fn clone(&self) -> Self {
        ParquetBytes {
            row_group_rows: self.row_group_rows,
            partition: self.partition.clone(),
            fields: self.fields.clone(),
            schema: self.schema.clone(),
            trace: self.trace,
            to_batch: self.to_batch,
        }
    }
}

#[cfg(feature = "s3")]
impl<T> ParquetBytes<T> {
    /// Traces the schema.
    pub(super) fn open(&mut self, component: &str) -> Result<(), ConnectorError> {
        self.fields = (self.trace)(&format!("Parquet sink `{component}`"))?;
        self.schema = Some(Arc::new(Schema::new(self.fields.clone())));
        Ok(())
    }

    /// The folder (relative, `/`-separated; "" without partitions) a
    /// record and its event time go into.
    pub(super) fn folder(&self, value: &T, time: Option<Timestamp>) -> Result<String, FormatError> {
        let Some(partition) = &self.partition else {
            return Ok(String::new());
        };
        let folder = partition_folder(&partition(value, time))?;
        let segments: Vec<String> = folder
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Ok(segments.join("/"))
    }

    /// The file's bytes written so far and not yet taken.
    pub(super) fn encoded<'w>(&self, writer: &'w mut ParquetWriter<T>) -> &'w mut Vec<u8> {
        writer.writer.inner_mut()
    }

    pub(super) fn writer(&self) -> Result<ParquetWriter<T>, FormatError> {
        let schema = self
            .schema
            .clone()
            .ok_or_else(|| FormatError::new("the sink is not open"))?;
        let properties = WriterProperties::builder()
            .set_max_row_group_size(self.row_group_rows)
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let writer = ArrowWriter::try_new(Vec::new(), schema, Some(properties))
            .map_err(|e| FormatError::new(e.to_string()))?;
        Ok(ParquetWriter {
            writer,
            rows: Vec::with_capacity(BATCH_ROWS),
        })
    }

    pub(super) fn push(&self, writer: &mut ParquetWriter<T>, value: T) -> Result<(), FormatError> {
        writer.rows.push(value);
        if writer.rows.len() >= BATCH_ROWS {
            self.convert(writer)?;
        }
        Ok(())
    }

    fn convert(&self, writer: &mut ParquetWriter<T>) -> Result<(), FormatError> {
        if writer.rows.is_empty() {
            return Ok(());
        }
        let batch = (self.to_batch)(&self.fields, &writer.rows)?;
        writer
            .writer
            .write(&batch)
            .map_err(|e| FormatError::new(e.to_string()))?;
        writer.rows.clear();
        Ok(())
    }

    pub(super) fn finish(&self, mut writer: ParquetWriter<T>) -> Result<Vec<u8>, FormatError> {
        self.convert(&mut writer)?;
        writer
            .writer
            .into_inner()
            .map_err(|e| FormatError::new(e.to_string()))
    }
}

#[cfg(feature = "s3")]
impl<T: Data + Serialize + DeserializeOwned> ParquetSink<T> {
    /// Writes the Parquet files as objects under `prefix` of an object
    /// store, a file per instance, checkpoint and partition folder, exactly
    /// once, uploaded in parts as they are written, with nothing on local
    /// disk: see [`StoreFileSink`](super::StoreFileSink).
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSink;
    /// use streamwork::connectors::file::StorePrefix;
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Sale { id: i64, amount: f64 }
    /// let prefix = StorePrefix::s3(None, "analytics", "sales")?;
    /// let out = FileSink::<Sale>::parquet("").into_store(prefix);
    /// # let _ = out;
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    pub fn into_store(self, prefix: super::StorePrefix) -> super::StoreFileSink<T> {
        super::StoreFileSink::parquet(
            prefix,
            ParquetBytes {
                row_group_rows: self.row_group_rows,
                partition: self.partition,
                fields: Vec::new(),
                schema: None,
                trace: fields_of::<T>,
                to_batch: |fields, rows| {
                    serde_arrow::to_record_batch(fields, &rows)
                        .map_err(|e| FormatError::new(e.to_string()))
                },
            },
        )
    }
}
