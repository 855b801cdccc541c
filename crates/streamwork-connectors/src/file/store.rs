//! Files on object storage (feature `s3`): a sink writing line files
//! (JSON, CSV; plain, gzip or zstd) as objects under a prefix, exactly
//! once, with nothing on local disk.
//!
//! Write-ahead, as the exchanges and the transactional Kafka sink: what an
//! instance writes between two barriers is encoded in memory, kept in the
//! checkpoint (the sink's part, so it lives wherever the checkpoints live),
//! and put as the object `PREFIX/part-INSTANCE-CHECKPOINT[.gz|.zst]` once
//! the checkpoint is complete. Whoever restores the checkpoint, on any
//! machine, puts again what it holds: the same bytes under the same name,
//! so a put the failure cut short or that already happened changes
//! nothing. A run restored from before an object it finds is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use streamwork_core::checkpoint::{CheckpointId, Transactional};
use streamwork_core::{
    ConnectorError, Data, InstanceContext, InstanceIdx, Record, Restore, Sink, StateBytes,
};

use super::compression::{Compression, Encoder};
use super::sink::LineFormat;

/// A prefix of an object store: where a [`StoreFileSink`] writes.
///
/// ```no_run
/// use streamwork::connectors::file::StorePrefix;
/// // Credentials and region from the AWS_* environment variables.
/// let out = StorePrefix::s3(Some("http://127.0.0.1:9000"), "analytics", "sales/2026")?;
/// # let _ = out;
/// # Ok::<(), streamwork::core::ConnectorError>(())
/// ```
#[derive(Clone)]
pub struct StorePrefix {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl std::fmt::Debug for StorePrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.store, self.prefix)
    }
}

impl StorePrefix {
    /// `prefix` of `store` (any `object_store` implementation).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        StorePrefix {
            store,
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    /// `prefix` of S3 bucket `bucket`, at `endpoint` (an S3-compatible
    /// server; `None`: AWS, or `AWS_ENDPOINT`), with the credentials and
    /// region of the `AWS_*` environment variables.
    pub fn s3(endpoint: Option<&str>, bucket: &str, prefix: &str) -> Result<Self, ConnectorError> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(endpoint) = endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let store = builder.build().map_err(|e| {
            ConnectorError::user(format!("configuring S3 bucket {bucket} for {prefix}: {e}"))
        })?;
        Ok(StorePrefix::new(Arc::new(store), prefix))
    }

    fn object(&self, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{name}", self.prefix))
    }
}

/// Writes records as line files into an object store, exactly once (see
/// the module docs); made by [`FileSink::into_store`](crate::FileSink::into_store).
/// Fit for a job declared `delivery exactly_once`, on any number of
/// machines that share nothing but the checkpoint store.
pub struct StoreFileSink<T> {
    prefix: StorePrefix,
    format: ObjectFormat<T>,
    open: Option<OpenStore<T>>,
}

/// How records become an object's bytes.
enum ObjectFormat<T> {
    Lines(LineFormat<T>, Compression),
    #[cfg(feature = "parquet")]
    Parquet(super::parquet::ParquetBytes<T>),
}

impl<T> Clone for ObjectFormat<T> {
    fn clone(&self) -> Self {
        match self {
            ObjectFormat::Lines(format, compression) => {
                ObjectFormat::Lines(format.clone(), *compression)
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => ObjectFormat::Parquet(format.clone()),
        }
    }
}

/// A checkpoint's object being encoded.
enum ObjectWriter<T> {
    Lines(Encoder<Vec<u8>>),
    #[cfg(feature = "parquet")]
    Parquet(super::parquet::ParquetWriter<T>),
    #[cfg(not(feature = "parquet"))]
    #[allow(dead_code)]
    Never(std::marker::PhantomData<T>),
}

impl<T> Clone for StoreFileSink<T> {
    fn clone(&self) -> Self {
        StoreFileSink {
            prefix: self.prefix.clone(),
            format: self.format.clone(),
            open: None,
        }
    }
}

struct OpenStore<T> {
    runtime: tokio::runtime::Runtime,
    instance: u32,
    component: String,
    /// What the objects' names end with.
    extension: &'static str,
    /// What this checkpoint's records encode to, once one came.
    writer: Option<ObjectWriter<T>>,
    line: Vec<u8>,
    /// The header line, once a record gave it.
    header: Option<Vec<u8>>,
    /// Encoded and not yet put, by checkpoint.
    staged: BTreeMap<u64, bytes::Bytes>,
}

/// The layout of the sink's part of a checkpoint.
const SCHEMA: u32 = 1;

impl<T: Data> StoreFileSink<T> {
    pub(super) fn new(
        prefix: StorePrefix,
        format: LineFormat<T>,
        compression: Compression,
    ) -> Self {
        StoreFileSink {
            prefix,
            format: ObjectFormat::Lines(format, compression),
            open: None,
        }
    }

    #[cfg(feature = "parquet")]
    pub(super) fn parquet(prefix: StorePrefix, format: super::parquet::ParquetBytes<T>) -> Self {
        StoreFileSink {
            prefix,
            format: ObjectFormat::Parquet(format),
            open: None,
        }
    }

    /// The object name of old instance `instance`'s output of `checkpoint`.
    fn name(instance: u32, checkpoint: u64, extension: &str) -> String {
        let checkpoint = match CheckpointId::new(checkpoint) {
            c if c.is_final() => "final".to_string(),
            c => format!("{:020}", c.get()),
        };
        format!("part-{instance}-{checkpoint}{extension}")
    }

    /// Puts `bytes` as old instance `instance`'s output of `checkpoint`.
    fn put(
        prefix: &StorePrefix,
        open: &OpenStore<T>,
        instance: u32,
        checkpoint: u64,
        bytes: bytes::Bytes,
    ) -> Result<(), ConnectorError> {
        let name = Self::name(instance, checkpoint, open.extension);
        let object = prefix.object(&name);
        let payload = PutPayload::from(bytes);
        open.runtime
            .block_on(prefix.store.put(&object, payload))
            .map(drop)
            .map_err(|e| {
                ConnectorError::io(
                    format!("putting {object} into {prefix:?}"),
                    std::io::Error::other(e),
                )
            })
    }

    /// The objects under the prefix: name, instance and checkpoint.
    fn published(
        &self,
        open: &OpenStore<T>,
    ) -> Result<Vec<(String, u32, CheckpointId)>, ConnectorError> {
        let prefix = ObjectPath::from(self.prefix.prefix.as_str());
        let listed = open
            .runtime
            .block_on(self.prefix.store.list_with_delimiter(Some(&prefix)))
            .map_err(|e| {
                ConnectorError::io(
                    format!("listing {:?}", self.prefix),
                    std::io::Error::other(e),
                )
            })?;
        Ok(listed
            .objects
            .iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?.to_string();
                let rest = name.strip_prefix("part-")?;
                let rest = rest.strip_suffix(open.extension).unwrap_or(rest);
                let (instance, checkpoint) = rest.split_once('-')?;
                let id = match checkpoint {
                    "final" => CheckpointId::FINAL,
                    digits => CheckpointId::new(digits.parse().ok()?),
                };
                let instance = instance.parse().ok()?;
                Some((name, instance, id))
            })
            .collect())
    }
}

/// The refusal of a sink used before it was opened.
fn not_open() -> ConnectorError {
    ConnectorError::user("object-store file sink used before it was opened".to_string())
}

/// The staged output of a part: `count`, then per entry `checkpoint`,
/// `length` and the bytes (little endian).
fn encode(staged: &BTreeMap<u64, bytes::Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(staged.len() as u64).to_le_bytes());
    for (checkpoint, bytes) in staged {
        out.extend_from_slice(&checkpoint.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

fn decode(mut bytes: &[u8]) -> Option<BTreeMap<u64, bytes::Bytes>> {
    let mut take = |n: usize| -> Option<&[u8]> {
        let head = bytes.get(..n)?;
        bytes = &bytes[n..];
        Some(head)
    };
    let number = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let count = number(take(8)?);
    let mut staged = BTreeMap::new();
    for _ in 0..count {
        let checkpoint = number(take(8)?);
        let len = usize::try_from(number(take(8)?)).ok()?;
        staged.insert(checkpoint, bytes::Bytes::copy_from_slice(take(len)?));
    }
    bytes.is_empty().then_some(staged)
}

impl<T: Data> Transactional for StoreFileSink<T> {}

impl<T: Data> Sink for StoreFileSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let extension = match &mut self.format {
            ObjectFormat::Lines(format, compression) => {
                format.check(&format!("object-store file sink `{}`", ctx.component()))?;
                compression.extension()
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => {
                format.open(ctx.component())?;
                ".parquet"
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConnectorError::io("starting an object-store client", e))?;
        self.open = Some(OpenStore {
            runtime,
            instance: ctx.instance().0,
            component: ctx.component().to_string(),
            extension,
            writer: None,
            line: Vec::new(),
            header: None,
            staged: BTreeMap::new(),
        });
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let StoreFileSink { format, open, .. } = self;
        let open = open.as_mut().ok_or_else(not_open)?;
        let cannot = |reason: String| {
            ConnectorError::user(format!(
                "object-store file sink `{}`: cannot encode a record: {reason}",
                open.component
            ))
        };
        match format {
            ObjectFormat::Lines(format, compression) => {
                use std::io::Write;
                open.line.clear();
                format
                    .encode(&record.value, &mut open.line, &mut open.header)
                    .map_err(cannot)?;
                let io = |e| ConnectorError::io("encoding output", e);
                if open.writer.is_none() {
                    let mut encoder = compression.encoder(Vec::new()).map_err(io)?;
                    if let Some(header) = &open.header {
                        encoder.write_all(header).map_err(io)?;
                    }
                    open.writer = Some(ObjectWriter::Lines(encoder));
                }
                if let Some(ObjectWriter::Lines(encoder)) = open.writer.as_mut() {
                    encoder.write_all(&open.line).map_err(io)?;
                }
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => {
                if open.writer.is_none() {
                    open.writer = Some(ObjectWriter::Parquet(format.writer().map_err(cannot)?));
                }
                if let Some(ObjectWriter::Parquet(writer)) = open.writer.as_mut() {
                    format.push(writer, record.value).map_err(cannot)?;
                }
            }
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let StoreFileSink { format, open, .. } = self;
        let open = open.as_mut().ok_or_else(not_open)?;
        let bytes = match (open.writer.take(), &*format) {
            (None, _) => return Ok(()),
            (Some(ObjectWriter::Lines(encoder)), _) => encoder
                .finish()
                .map_err(|e| ConnectorError::io("encoding output", e))?,
            #[cfg(feature = "parquet")]
            (Some(ObjectWriter::Parquet(writer)), ObjectFormat::Parquet(format)) => {
                format.finish(writer).map_err(|reason| {
                    ConnectorError::user(format!(
                        "object-store file sink `{}`: cannot encode Parquet: {reason}",
                        open.component
                    ))
                })?
            }
            #[allow(unreachable_patterns)]
            _ => {
                return Err(ConnectorError::user(
                    "object-store file sink: a writer of another format".to_string(),
                ));
            }
        };
        open.staged.insert(checkpoint.get(), bytes.into());
        Ok(())
    }

    /// What is staged and not yet put: kept in the checkpoint.
    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let open = self.open.as_ref().ok_or_else(not_open)?;
        Ok(Some(StateBytes::new(SCHEMA, encode(&open.staged))))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let StoreFileSink { prefix, open, .. } = self;
        let open = open.as_mut().ok_or_else(not_open)?;
        let due: Vec<(u64, bytes::Bytes)> = open
            .staged
            .range(..=checkpoint.get())
            .map(|(c, bytes)| (*c, bytes.clone()))
            .collect();
        for (c, bytes) in due {
            // Kept staged until the put succeeds.
            Self::put(prefix, open, open.instance, c, bytes)?;
            open.staged.remove(&c);
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if self.open.is_some() {
            crate::commit::commit_at_end(self)?;
        }
        Ok(())
    }

    /// Puts what the restored checkpoint holds staged for this instance's
    /// share of the old instances (`k % parallelism`), and refuses a run
    /// from before an object it finds.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let open = self.open.as_ref().ok_or_else(not_open)?;
        {
            let parallelism = restore.parallelism.max(1);
            for part in &restore.parts {
                if part.part.0 % parallelism != restore.instance.0 {
                    continue;
                }
                let staged = (part.schema == SCHEMA)
                    .then(|| decode(part.bytes))
                    .flatten()
                    .ok_or_else(|| {
                        ConnectorError::user(format!(
                            "object-store file sink `{}`: the checkpointed output of instance {} has schema {} or is damaged (this version reads {SCHEMA}): restore with the version that wrote it",
                            restore.component, part.part.0, part.schema
                        ))
                    })?;
                for (checkpoint, bytes) in staged {
                    Self::put(&self.prefix, open, part.part.0, checkpoint, bytes)?;
                }
            }
            // Only the objects of the instances this one answers for: its
            // own and the removed ones it inherits (`k % parallelism`). The
            // others' are theirs to check, and this run's other instances
            // may already have written past the restored checkpoint.
            if let Some((name, _, _)) =
                self.published(open)?
                    .into_iter()
                    .find(|(_, instance, checkpoint)| {
                        // An old instance that had ended is covered to its end.
                        instance % parallelism == restore.instance.0
                            && *checkpoint > restore.covers(InstanceIdx(*instance))
                    })
            {
                let from = if restore.is_fresh() {
                    "no checkpoint".to_string()
                } else {
                    format!("checkpoint {}", restore.checkpoint)
                };
                return Err(ConnectorError::user(format!(
                    "object-store file sink `{}` finds {name} under {:?}, written after {from}, which this run starts from: it would be written twice. Point the job at the checkpoints it was written with, or remove the prefix's objects to start over",
                    restore.component, self.prefix
                )));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_round_trips_and_a_cut_one_is_refused() {
        let mut staged = BTreeMap::new();
        staged.insert(3, bytes::Bytes::from_static(b"a\nb\n"));
        staged.insert(u64::MAX, bytes::Bytes::new());
        let bytes = encode(&staged);
        assert_eq!(decode(&bytes), Some(staged));
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }
}

/// The objects under a prefix, as a file source's input.
#[derive(Clone)]
pub(super) struct StoreInput {
    prefix: StorePrefix,
    /// The client's runtime, once started (shared by the open readers).
    runtime: Option<Arc<tokio::runtime::Runtime>>,
}

/// Bytes a ranged read of an object fetches at a time.
const READ_CHUNK: u64 = 8 << 20;

impl StoreInput {
    pub(super) fn new(prefix: StorePrefix) -> Self {
        StoreInput {
            prefix,
            runtime: None,
        }
    }

    pub(super) fn start(&mut self) -> Result<(), ConnectorError> {
        if self.runtime.is_none() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ConnectorError::io("starting an object-store client", e))?;
            self.runtime = Some(Arc::new(runtime));
        }
        Ok(())
    }

    fn runtime(&self) -> std::io::Result<&Arc<tokio::runtime::Runtime>> {
        self.runtime
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the object-store input is not started"))
    }

    /// Every object under the prefix and its sub-prefixes (hidden names,
    /// `.name` and `_name`, left out), by name relative to the prefix,
    /// with its size.
    pub(super) fn list(&self) -> Result<Vec<(std::path::PathBuf, u64)>, ConnectorError> {
        let io = |e: object_store::Error| {
            ConnectorError::io(
                format!("listing {:?}", self.prefix),
                std::io::Error::other(e),
            )
        };
        let runtime = self
            .runtime()
            .map_err(|e| ConnectorError::io("listing objects", e))?;
        let root = ObjectPath::from(self.prefix.prefix.as_str());
        let mut files = Vec::new();
        let mut todo = vec![root.clone()];
        while let Some(prefix) = todo.pop() {
            let listed = runtime
                .block_on(self.prefix.store.list_with_delimiter(Some(&prefix)))
                .map_err(io)?;
            let hidden = |path: &ObjectPath| {
                path.filename()
                    .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
            };
            todo.extend(listed.common_prefixes.into_iter().filter(|p| !hidden(p)));
            for meta in listed.objects {
                if hidden(&meta.location) {
                    continue;
                }
                // The location as stored (encoded), after the prefix.
                let full = meta.location.as_ref();
                let relative = full
                    .strip_prefix(root.as_ref())
                    .map(|rest| rest.trim_start_matches('/'))
                    .unwrap_or(full)
                    .to_string();
                files.push((std::path::PathBuf::from(relative), meta.size));
            }
        }
        files.sort();
        Ok(files)
    }

    /// Object `name` (relative to the prefix), read in ranges.
    pub(super) fn open(
        &self,
        name: &std::path::Path,
    ) -> std::io::Result<Box<dyn super::input::InputFile>> {
        let runtime = self.runtime()?.clone();
        // `name` is the stored (encoded) location after the prefix.
        let location =
            ObjectPath::parse(format!("{}/{}", self.prefix.prefix, name.to_string_lossy()))
                .map_err(|e| std::io::Error::other(format!("{}: {e}", name.display())))?;
        let head = runtime
            .block_on(self.prefix.store.head(&location))
            .map_err(|e| std::io::Error::other(format!("{location}: {e}")))?;
        Ok(Box::new(ObjectReader {
            store: self.prefix.store.clone(),
            location,
            size: head.size,
            position: 0,
            chunk: bytes::Bytes::new(),
            runtime,
        }))
    }
}

/// An object read and sought in ranges of [`READ_CHUNK`].
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    size: u64,
    /// Where `chunk` ends in the object: the next byte to fetch.
    position: u64,
    chunk: bytes::Bytes,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl std::io::Read for ObjectReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.chunk.is_empty() {
            if self.position >= self.size {
                return Ok(0);
            }
            let end = (self.position + READ_CHUNK).min(self.size);
            self.chunk = self
                .runtime
                .block_on(self.store.get_range(&self.location, self.position..end))
                .map_err(|e| std::io::Error::other(format!("{}: {e}", self.location)))?;
            self.position = end;
        }
        let n = out.len().min(self.chunk.len());
        out[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

impl std::io::Seek for ObjectReader {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let here = self.position - self.chunk.len() as u64;
        let target = match to {
            std::io::SeekFrom::Start(at) => Some(at),
            std::io::SeekFrom::End(delta) => self.size.checked_add_signed(delta),
            std::io::SeekFrom::Current(delta) => here.checked_add_signed(delta),
        }
        .ok_or_else(|| std::io::Error::other("seek before the start of the object"))?;
        self.position = target;
        self.chunk = bytes::Bytes::new();
        Ok(target)
    }
}
