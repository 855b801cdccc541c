//! A checkpoint store whose writes a test makes fail or hang: what a job,
//! or the scale-out runner's lease, does when its store stops answering or
//! refuses this process (another one took the partition over).
//!
//! ```
//! use std::sync::Arc;
//! use streamwork::state::testkit::{FaultyStore, WriteFault};
//! use streamwork::state::{CheckpointStore, DirectoryStore};
//!
//! let dir = std::env::temp_dir().join(format!("sw-faulty-doc-{}", std::process::id()));
//! let store = FaultyStore::new(Arc::new(DirectoryStore::new(&dir)));
//! store.upload("a", b"1".to_vec()).unwrap();
//! store.set(WriteFault::Refuse);
//! assert!(store.upload("a", b"2".to_vec()).is_err());
//! assert_eq!(store.refusals(), 1);
//! assert_eq!(store.download("a").unwrap(), b"1");
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use crate::{CheckpointStore, StateError};

/// What a [`FaultyStore`]'s writes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WriteFault {
    /// They reach the store.
    None,
    /// They are refused with a [`StateError::Store`] whose reason says so.
    Refuse,
    /// They wait until the fault is set to another value.
    Hang,
}

/// A [`CheckpointStore`] whose writes (`upload`, `delete`, `write_if`) fail
/// or hang as the test [`set`](Self::set)s; reads always reach the store.
/// Its [`child`](CheckpointStore::child) stores share its fault.
#[derive(Clone, Debug)]
pub struct FaultyStore {
    inner: Arc<dyn CheckpointStore>,
    fault: Arc<AtomicU8>,
    refused: Arc<AtomicU64>,
}

impl FaultyStore {
    /// `inner`, with no fault yet.
    pub fn new(inner: Arc<dyn CheckpointStore>) -> Self {
        FaultyStore {
            inner,
            fault: Arc::new(AtomicU8::new(WriteFault::None as u8)),
            refused: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many writes it has refused (its children's included): what a
    /// test waits for before it lifts the fault.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// What writes do from now on (a write that hangs goes on when the
    /// fault is set to another value).
    pub fn set(&self, fault: WriteFault) {
        self.fault.store(fault as u8, Ordering::Relaxed);
    }

    fn before_write(&self, name: &str) -> Result<(), StateError> {
        loop {
            match self.fault.load(Ordering::Relaxed) {
                f if f == WriteFault::Hang as u8 => std::thread::sleep(Duration::from_millis(10)),
                f if f == WriteFault::Refuse as u8 => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(StateError::Store {
                        store: format!("{:?}", self.inner),
                        action: "write",
                        object: name.to_string(),
                        reason: "refused by the test's fault (WriteFault::Refuse)".to_string(),
                    });
                }
                _ => return Ok(()),
            }
        }
    }
}

impl CheckpointStore for FaultyStore {
    fn list(&self) -> Result<Vec<(String, u64)>, StateError> {
        self.inner.list()
    }

    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        self.before_write(name)?;
        self.inner.upload(name, bytes)
    }

    fn download(&self, name: &str) -> Result<Vec<u8>, StateError> {
        self.inner.download(name)
    }

    fn delete(&self, name: &str) -> Result<(), StateError> {
        self.before_write(name)?;
        self.inner.delete(name)
    }

    fn child(&self, prefix: &str) -> Result<Arc<dyn CheckpointStore>, StateError> {
        Ok(Arc::new(FaultyStore {
            inner: self.inner.child(prefix)?,
            fault: self.fault.clone(),
            refused: self.refused.clone(),
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
        self.before_write(name)?;
        self.inner.write_if(name, bytes, expected)
    }
}
