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
    Collector, ConnectorError, Data, InstanceContext, Record, Restore, Sink, Source, SourcePoll,
    StateBytes,
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
    open: Option<OpenSink<T>>,
}

struct OpenSink<T> {
    staging: Staging,
    component: String,
    fields: Vec<FieldRef>,
    schema: SchemaRef,
    rows: Vec<T>,
    /// The checkpoint's file: its writer and a handle to sync it.
    writer: Option<(ArrowWriter<File>, File)>,
}

impl<T> Clone for ParquetSink<T> {
    fn clone(&self) -> Self {
        ParquetSink {
            dir: self.dir.clone(),
            row_group_rows: self.row_group_rows,
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
            open: None,
        }
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

impl<T: Serialize> OpenSink<T> {
    fn io(&self, what: &str, e: impl std::fmt::Display) -> ConnectorError {
        ConnectorError::user(format!(
            "Parquet sink `{}`: {what} {}: {e}",
            self.component,
            self.staging.target().display()
        ))
    }

    /// Writes the rows held into the checkpoint's file.
    fn write_rows(&mut self, row_group_rows: usize) -> Result<(), ConnectorError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let batch = serde_arrow::to_record_batch(&self.fields, &self.rows)
            .map_err(|e| self.io("converting records for", e))?;
        if self.writer.is_none() {
            let file = self.staging.start()?;
            let handle = file.try_clone().map_err(|e| self.io("opening", e))?;
            let properties = WriterProperties::builder()
                .set_max_row_group_size(row_group_rows)
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .build();
            let writer = ArrowWriter::try_new(file, self.schema.clone(), Some(properties))
                .map_err(|e| self.io("writing", e))?;
            self.writer = Some((writer, handle));
        }
        let result = match self.writer.as_mut() {
            Some((writer, _)) => writer.write(&batch),
            None => Ok(()),
        };
        result.map_err(|e| self.io("writing", e))?;
        self.rows.clear();
        Ok(())
    }
}

impl<T: Data + Serialize + DeserializeOwned> Transactional for ParquetSink<T> {}

impl<T: Data + Serialize + DeserializeOwned> Sink for ParquetSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn stages_locally(&self) -> Option<String> {
        Some(format!("Parquet files in {}", self.dir.display()))
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let what = format!("Parquet sink `{}`", ctx.component());
        let fields = fields_of::<T>(&what)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            ConnectorError::io(format!("creating directory {}", self.dir.display()), e)
        })?;
        let target = self.dir.join(format!("part-{}", ctx.instance().0));
        self.open = Some(OpenSink {
            staging: Staging::new(target, false).with_extension(".parquet"),
            component: ctx.component().to_string(),
            schema: Arc::new(Schema::new(fields.clone())),
            fields,
            rows: Vec::with_capacity(BATCH_ROWS),
            writer: None,
        });
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let row_group_rows = self.row_group_rows;
        let open = self.open_mut()?;
        open.rows.push(record.value);
        if open.rows.len() >= BATCH_ROWS {
            open.write_rows(row_group_rows)?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let row_group_rows = self.row_group_rows;
        let open = self.open_mut()?;
        open.write_rows(row_group_rows)?;
        let Some((writer, handle)) = open.writer.take() else {
            return Ok(());
        };
        writer.close().map_err(|e| open.io("finishing", e))?;
        open.staging.stage_written(&handle, checkpoint)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let open = self.open_mut()?;
        open.staging.commit_up_to(checkpoint, checkpoint.is_final())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        // Without checkpoints everything commits at the end; with them, the
        // final checkpoint has already staged and committed it all.
        if self.open.is_some() {
            self.pre_commit(CheckpointId::FINAL)?;
            self.commit(CheckpointId::FINAL)?;
        }
        Ok(())
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let dir = self.dir.clone();
        self.open_mut()?.staging.restore(&dir, restore)
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
    plan: Vec<(PathBuf, u64)>,
    /// This instance's files not yet done, in order.
    todo: std::collections::VecDeque<usize>,
    /// Rows read of each begun file, and whether it is done.
    progress: std::collections::BTreeMap<usize, (u64, bool)>,
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
    progress: std::collections::BTreeMap<usize, (u64, bool)>,
}

const SOURCE_SCHEMA: u32 = 1;

impl<T> Clone for ParquetSource<T> {
    fn clone(&self) -> Self {
        ParquetSource {
            path: self.path.clone(),
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
}

impl<T: Data + DeserializeOwned> ParquetSource<T> {
    /// Reads `path`, a Parquet file or a directory of them.
    pub fn new(path: impl AsRef<Path>) -> Self {
        ParquetSource {
            path: path.as_ref().to_path_buf(),
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
        let handle = File::open(path)
            .map_err(|e| ConnectorError::io(format!("opening {}", path.display()), e))?;
        let (rows, _) = self.progress.get(&file).copied().unwrap_or((0, false));
        let builder = ParquetRecordBatchReaderBuilder::try_new(handle).map_err(|e| refuse(&e))?;
        let reader = builder
            .with_batch_size(batch_rows)
            .with_offset(rows as usize)
            .build()
            .map_err(|e| refuse(&e))?;
        self.progress.insert(file, (rows, false));
        self.reading = Some((file, reader));
        Ok(())
    }
}

impl<T: Data + DeserializeOwned> streamwork_core::checkpoint::Replayable for ParquetSource<T> {}

impl<T: Data + DeserializeOwned> Source for ParquetSource<T> {
    type Out = Collector<T>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.component = ctx.component().to_string();
        self.batch_rows = ctx.batch_size().max(1);
        self.plan = super::source::list_input(&self.path)?;
        if let Some(resume) = self.resume.take() {
            let now = super::source::plan_names(&self.path, &self.plan);
            if resume.plan != now {
                return Err(ConnectorError::user(format!(
                    "Parquet source `{}`: the input {} changed since the checkpoint ({}): restore it with the input it read, or start over without restoring",
                    ctx.component(),
                    self.path.display(),
                    super::source::describe_change(&resume.plan, &now)
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
            plan: super::source::plan_names(&self.path, &self.plan),
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
