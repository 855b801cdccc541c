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

use crate::{CheckpointStore, GuardedStore, StateError, WriteGuard};

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

/// A store whose writes (`upload`, `delete`, `write_if`) fail or hang as
/// the test [`set`](GuardedStore::set)s; reads always reach the store. Its
/// children share its fault.
pub type FaultyStore = GuardedStore<Faults>;

/// The guard of a [`FaultyStore`]: its fault, and the writes it refused.
#[derive(Debug, Default)]
pub struct Faults {
    fault: AtomicU8,
    refused: AtomicU64,
}

impl WriteGuard for Faults {
    fn before_write(&self, store: &dyn CheckpointStore, object: &str) -> Result<(), StateError> {
        loop {
            match self.fault.load(Ordering::Relaxed) {
                f if f == WriteFault::Hang as u8 => std::thread::sleep(Duration::from_millis(10)),
                f if f == WriteFault::Refuse as u8 => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(StateError::Store {
                        store: format!("{store:?}"),
                        action: "write",
                        object: object.to_string(),
                        reason: "refused by the test's fault (WriteFault::Refuse)".to_string(),
                    });
                }
                _ => return Ok(()),
            }
        }
    }
}

impl GuardedStore<Faults> {
    /// `inner`, with no fault yet.
    pub fn new(inner: Arc<dyn CheckpointStore>) -> Self {
        GuardedStore::with_guard(inner, Faults::default())
    }

    /// What writes do from now on (a write that hangs goes on when the
    /// fault is set to another value).
    pub fn set(&self, fault: WriteFault) {
        self.guard().fault.store(fault as u8, Ordering::Relaxed);
    }

    /// How many writes it has refused (its children's included): what a
    /// test waits for before it lifts the fault.
    pub fn refusals(&self) -> u64 {
        self.guard().refused.load(Ordering::Relaxed)
    }
}
