//! Files on object storage (feature `s3`): line and Parquet files written
//! as objects under a prefix exactly once, in parts as they are written
//! ([`StoreFileSink`]), and objects read as a file source's input.

mod sink;
mod upload;

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use streamwork_core::ConnectorError;

pub use sink::StoreFileSink;

/// The smallest part S3 accepts (but for an object's last).
pub const MIN_PART_BYTES: usize = 5 << 20;

/// A prefix of an object store: where a [`StoreFileSink`] writes or a
/// file source reads.
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
    /// Multipart uploads, for a sink (`None`: a store to read only).
    uploads: Option<Arc<dyn MultipartStore>>,
    prefix: String,
    part_bytes: usize,
}

impl std::fmt::Debug for StorePrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.store, self.prefix)
    }
}

impl StorePrefix {
    /// `prefix` of `store` (any `object_store` implementation), to read
    /// from: a sink needs multipart uploads ([`StorePrefix::with_uploads`]).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        StorePrefix {
            store,
            uploads: None,
            prefix: prefix.trim_matches('/').to_string(),
            part_bytes: 8 << 20,
        }
    }

    /// `prefix` of `store`, a store with multipart uploads (S3, GCS, Azure,
    /// `InMemory`), to read from or write to.
    pub fn with_uploads<S: ObjectStore + MultipartStore>(store: Arc<S>, prefix: &str) -> Self {
        let uploads: Arc<dyn MultipartStore> = store.clone();
        StorePrefix {
            uploads: Some(uploads),
            ..StorePrefix::new(store, prefix)
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
        Ok(StorePrefix::with_uploads(Arc::new(store), prefix))
    }

    /// The prefix an object-store URL names: `s3://bucket/prefix`, with
    /// the endpoint (`AWS_ENDPOINT_URL` or `AWS_ENDPOINT`; AWS without
    /// either), credentials and region of the `AWS_*` environment
    /// variables. A file source given such a URL as its path reads it.
    ///
    /// ```no_run
    /// use streamwork::connectors::FileSink;
    /// use streamwork::connectors::file::StorePrefix;
    /// #[derive(Clone, serde::Serialize)]
    /// struct Count { word: String, count: u64 }
    /// let out = FileSink::<Count>::json("").into_store(StorePrefix::url("s3://analytics/counts")?);
    /// # let _ = out;
    /// # Ok::<(), streamwork::core::ConnectorError>(())
    /// ```
    pub fn url(url: &str) -> Result<Self, ConnectorError> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(ConnectorError::user(format!(
                "`{url}` is not an object-store URL this version reads: write `s3://bucket/prefix`"
            )));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(ConnectorError::user(format!(
                "`{url}` names no bucket: write `s3://bucket/prefix`"
            )));
        }
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .ok();
        StorePrefix::s3(endpoint.as_deref(), bucket, prefix)
    }

    /// The size of the parts a sink uploads (8 MiB by default; at least
    /// [`MIN_PART_BYTES`], which smaller sizes are raised to). A sink holds
    /// about a part per object it is writing, and two more on their way.
    pub fn part_bytes(mut self, bytes: usize) -> Self {
        self.part_bytes = bytes.max(MIN_PART_BYTES);
        self
    }

    /// The objects under the prefix and its sub-prefixes (hidden names,
    /// `.name` and `_name`, left out), by name relative to the prefix,
    /// with their sizes: what a sink made visible, what a source reads.
    pub fn list(&self) -> Result<Vec<(String, u64)>, ConnectorError> {
        self.list_under(&client_runtime()?, "")
    }

    /// The objects a sink is uploading (begun, not yet completed nor
    /// aborted), by name relative to the prefix: the output of
    /// checkpoints not yet complete, or what a failed run left for the
    /// next one to complete or abort.
    pub fn uploads_in_progress(&self) -> Result<Vec<String>, ConnectorError> {
        let listed = self.list_under(&client_runtime()?, upload::MARKERS)?;
        Ok(listed
            .into_iter()
            .filter_map(|(marker, _)| Some(marker.rsplit_once('/')?.0.to_string()))
            .collect())
    }

    fn object(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix))
        }
    }

    /// Every object under `PREFIX/under` and its sub-prefixes (hidden
    /// names, `.name` and `_name`, left out below it), by name relative to
    /// `PREFIX/under` as stored (encoded), with its size, in name order.
    fn list_under(
        &self,
        runtime: &tokio::runtime::Runtime,
        under: &str,
    ) -> Result<Vec<(String, u64)>, ConnectorError> {
        let root = match (self.prefix.as_str(), under) {
            (prefix, "") => ObjectPath::from(prefix),
            ("", under) => ObjectPath::from(under),
            (prefix, under) => ObjectPath::from(format!("{prefix}/{under}")),
        };
        let io = |e: object_store::Error| {
            ConnectorError::io(
                format!("listing {root} of {self:?}"),
                std::io::Error::other(e),
            )
        };
        let hidden = |path: &ObjectPath| {
            path.filename()
                .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
        };
        let mut files = Vec::new();
        let mut todo = vec![root.clone()];
        while let Some(prefix) = todo.pop() {
            let listed = runtime
                .block_on(self.store.list_with_delimiter(Some(&prefix)))
                .map_err(io)?;
            todo.extend(listed.common_prefixes.into_iter().filter(|p| !hidden(p)));
            for meta in listed.objects {
                if hidden(&meta.location) {
                    continue;
                }
                let full = meta.location.as_ref();
                let relative = full
                    .strip_prefix(root.as_ref())
                    .map(|rest| rest.trim_start_matches('/'))
                    .unwrap_or(full)
                    .to_string();
                files.push((relative, meta.size));
            }
        }
        files.sort();
        Ok(files)
    }
}

/// A runtime for an object-store client on the calling thread.
fn client_runtime() -> Result<tokio::runtime::Runtime, ConnectorError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConnectorError::io("starting an object-store client", e))
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
            self.runtime = Some(Arc::new(client_runtime()?));
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
        let runtime = self
            .runtime()
            .map_err(|e| ConnectorError::io("listing objects", e))?;
        Ok(self
            .prefix
            .list_under(runtime, "")?
            .into_iter()
            .map(|(name, size)| (std::path::PathBuf::from(name), size))
            .collect())
    }

    /// The stored location of object `name` (relative to the prefix,
    /// encoded as listed), and its size.
    fn locate(&self, name: &std::path::Path) -> std::io::Result<(ObjectPath, u64)> {
        let runtime = self.runtime()?;
        let full = format!("{}/{}", self.prefix.prefix, name.to_string_lossy());
        let location = ObjectPath::parse(full.trim_start_matches('/'))
            .map_err(|e| std::io::Error::other(format!("{}: {e}", name.display())))?;
        let head = runtime
            .block_on(self.prefix.store.head(&location))
            .map_err(|e| std::io::Error::other(format!("{location}: {e}")))?;
        Ok((location, head.size))
    }

    /// Object `name` (relative to the prefix), read in ranges.
    pub(super) fn open(&self, name: &std::path::Path) -> std::io::Result<ObjectReader> {
        let (location, size) = self.locate(name)?;
        Ok(ObjectReader {
            store: self.prefix.store.clone(),
            location,
            size,
            position: 0,
            chunk: bytes::Bytes::new(),
            runtime: self.runtime()?.clone(),
        })
    }

    /// Object `name` (relative to the prefix), for a Parquet reader that
    /// fetches the footer and the column chunks it needs.
    #[cfg(feature = "parquet")]
    pub(super) fn chunks(&self, name: &std::path::Path) -> std::io::Result<ObjectChunks> {
        let (location, size) = self.locate(name)?;
        Ok(ObjectChunks {
            store: self.prefix.store.clone(),
            location,
            size,
            runtime: self.runtime()?.clone(),
        })
    }
}

/// An object as ranges for a Parquet reader.
#[cfg(feature = "parquet")]
pub(super) struct ObjectChunks {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    size: u64,
    runtime: Arc<tokio::runtime::Runtime>,
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::Length for ObjectChunks {
    fn len(&self) -> u64 {
        self.size
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::ChunkReader for ObjectChunks {
    type T = ObjectReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<ObjectReader> {
        Ok(ObjectReader {
            store: self.store.clone(),
            location: self.location.clone(),
            size: self.size,
            position: start,
            chunk: bytes::Bytes::new(),
            runtime: self.runtime.clone(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let end = start.saturating_add(length as u64);
        self.runtime
            .block_on(self.store.get_range(&self.location, start..end))
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// An object read and sought in ranges of [`READ_CHUNK`].
pub(super) struct ObjectReader {
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
