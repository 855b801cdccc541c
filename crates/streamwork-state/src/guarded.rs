//! A checkpoint store whose writes pass a guard first: what fences a
//! process that lost a partition's lease, and what lets a test make a
//! store's writes fail or hang ([`testkit`](crate::testkit)).

use std::sync::Arc;

use crate::{CheckpointStore, StateError};

/// Decides, before each write to a [`GuardedStore`], whether it may go on.
pub trait WriteGuard: std::fmt::Debug + Send + Sync + 'static {
    /// `Ok` lets the write of `object` into `store` go on; an error refuses
    /// it (and is what the writer gets). It may also wait.
    fn before_write(&self, store: &dyn CheckpointStore, object: &str) -> Result<(), StateError>;
}

/// A [`CheckpointStore`] that asks its [`WriteGuard`] before every write
/// (`upload`, `delete`, `write_if`); reads always reach the store. Its
/// [`child`](CheckpointStore::child) stores share the guard.
#[derive(Debug)]
pub struct GuardedStore<G> {
    inner: Arc<dyn CheckpointStore>,
    guard: Arc<G>,
}

impl<G> Clone for GuardedStore<G> {
    fn clone(&self) -> Self {
        GuardedStore {
            inner: self.inner.clone(),
            guard: self.guard.clone(),
        }
    }
}

impl<G: WriteGuard> GuardedStore<G> {
    /// `inner`, whose writes pass `guard` first.
    pub fn with_guard(inner: Arc<dyn CheckpointStore>, guard: G) -> Self {
        GuardedStore {
            inner,
            guard: Arc::new(guard),
        }
    }

    /// The guard.
    pub fn guard(&self) -> &G {
        &self.guard
    }
}

impl<G: WriteGuard> CheckpointStore for GuardedStore<G> {
    fn list(&self) -> Result<Vec<(String, u64)>, StateError> {
        self.inner.list()
    }

    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        self.guard.before_write(&*self.inner, name)?;
        self.inner.upload(name, bytes)
    }

    fn download(&self, name: &str) -> Result<Vec<u8>, StateError> {
        self.inner.download(name)
    }

    fn delete(&self, name: &str) -> Result<(), StateError> {
        self.guard.before_write(&*self.inner, name)?;
        self.inner.delete(name)
    }

    fn child(&self, prefix: &str) -> Result<Arc<dyn CheckpointStore>, StateError> {
        Ok(Arc::new(GuardedStore {
            inner: self.inner.child(prefix)?,
            guard: self.guard.clone(),
        }))
    }

    fn read_versioned(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, StateError> {
        self.inner.read_versioned(name)
    }

    fn write_if(
        &self,
        name: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> Result<Option<String>, StateError> {
        self.guard.before_write(&*self.inner, name)?;
        self.inner.write_if(name, bytes, expected)
    }
}
