//! A [`CheckpointStore`] on object storage through the `object_store`
//! crate: S3 and S3-compatible servers (MinIO, Ceph, moto), or any other
//! `ObjectStore` a caller builds. Feature `s3`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::error::StateError;
use crate::mirror::CheckpointStore;

/// Checkpoint files as the objects under one prefix of an object store.
///
/// ```no_run
/// # fn main() -> Result<(), streamwork::state::StateError> {
/// use std::sync::Arc;
/// use streamwork::state::{Mirror, ObjectStoreCheckpoints};
/// // Credentials and region from the AWS_* environment variables.
/// let store = ObjectStoreCheckpoints::s3(Some("http://127.0.0.1:9000"), "jobs", "word-count/checkpoints")?;
/// let mirror = Mirror::new(Arc::new(store));
/// # let _ = mirror;
/// # Ok(())
/// # }
/// ```
pub struct ObjectStoreCheckpoints {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The store's client is asynchronous; the checkpoint coordinator is a
    /// thread of its own, which waits on this runtime.
    runtime: tokio::runtime::Runtime,
}

impl fmt::Debug for ObjectStoreCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.store, self.prefix)
    }
}

impl ObjectStoreCheckpoints {
    /// The objects under `prefix` of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Self, StateError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StateError::Store {
                store: store.to_string(),
                action: "start a client for",
                object: prefix.to_string(),
                reason: e.to_string(),
            })?;
        Ok(ObjectStoreCheckpoints {
            store,
            prefix: ObjectPath::from(prefix),
            runtime,
        })
    }

    /// The objects under `prefix` of S3 bucket `bucket`, at `endpoint` (an
    /// S3-compatible server; `None`: AWS, or `AWS_ENDPOINT`), with the
    /// credentials and region of the `AWS_*` environment variables.
    pub fn s3(endpoint: Option<&str>, bucket: &str, prefix: &str) -> Result<Self, StateError> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(endpoint) = endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let store = builder.build().map_err(|e| StateError::Store {
            store: format!("s3://{bucket}"),
            action: "configure",
            object: prefix.to_string(),
            reason: e.to_string(),
        })?;
        Self::new(Arc::new(store), prefix)
    }

    fn run<T>(
        &self,
        action: &'static str,
        object: &str,
        work: impl Future<Output = object_store::Result<T>>,
    ) -> Result<T, StateError> {
        self.runtime
            .block_on(work)
            .map_err(|e| self.error(action, object, e))
    }

    fn error(&self, action: &'static str, object: &str, error: object_store::Error) -> StateError {
        StateError::Store {
            store: format!("{self:?}"),
            action,
            object: object.to_string(),
            reason: error.to_string(),
        }
    }
}

impl CheckpointStore for ObjectStoreCheckpoints {
    fn child(&self, prefix: &str) -> Result<Arc<dyn CheckpointStore>, StateError> {
        let path = prefix
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.prefix.clone(), |path, part| path.join(part));
        Ok(Arc::new(Self::new(self.store.clone(), path.as_ref())?))
    }

    fn list(&self) -> Result<Vec<(String, u64)>, StateError> {
        let listed = self.run(
            "list",
            self.prefix.as_ref(),
            self.store.list_with_delimiter(Some(&self.prefix)),
        )?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|meta| Some((meta.location.filename()?.to_string(), meta.size)))
            .collect())
    }

    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        let location = self.prefix.clone().join(name);
        self.run(
            "upload",
            name,
            self.store.put(&location, PutPayload::from(bytes)),
        )
        .map(drop)
    }

    fn read_versioned(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, StateError> {
        let location = self.prefix.clone().join(name);
        let read = self.runtime.block_on(async {
            let got = self.store.get(&location).await?;
            let version = got.meta.e_tag.clone();
            Ok::<_, object_store::Error>((got.bytes().await?, version))
        });
        match read {
            Ok((bytes, Some(version))) => Ok(Some((bytes.to_vec(), version))),
            Ok((_, None)) => Err(StateError::Store {
                store: format!("{self:?}"),
                action: "read the version of",
                object: name.to_string(),
                reason: "the store gives no ETag".to_string(),
            }),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("read", name, e)),
        }
    }

    /// A conditional put: `If-None-Match: *` to create, `If-Match: ETAG` to
    /// replace (S3 has both since 2024; moto and MinIO too). A refusal is
    /// checked against what the object holds: the client retries a put
    /// whose answer was lost, and the retry of one that landed is refused.
    fn write_if(
        &self,
        name: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> Result<Option<String>, StateError> {
        let location = self.prefix.clone().join(name);
        let mode = match expected {
            None => PutMode::Create,
            Some(e_tag) => PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag.to_string()),
                version: None,
            }),
        };
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let put = self.runtime.block_on(self.store.put_opts(
            &location,
            PutPayload::from(bytes.clone()),
            options,
        ));
        match put {
            Ok(result) => Ok(Some(result.e_tag.unwrap_or_default())),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Ok(self
                .read_versioned(name)?
                .and_then(|(held, version)| (held == bytes).then_some(version))),
            Err(e) => Err(self.error("write", name, e)),
        }
    }

    fn download(&self, name: &str) -> Result<Vec<u8>, StateError> {
        let location = self.prefix.clone().join(name);
        self.run("download", name, async {
            self.store.get(&location).await?.bytes().await
        })
        .map(|bytes| bytes.to_vec())
    }

    fn delete(&self, name: &str) -> Result<(), StateError> {
        let location = self.prefix.clone().join(name);
        match self.runtime.block_on(self.store.delete(&location)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", name, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landed_conditional_write_sent_again_is_kept() {
        let memory = Arc::new(object_store::memory::InMemory::new());
        let store = ObjectStoreCheckpoints::new(memory, "group").unwrap();
        crate::mirror::tests::a_landed_conditional_write_sent_again_is_kept(&store);
    }
}
