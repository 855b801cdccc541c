//! Who runs a partition's job when its checkpoints are in a store and each
//! process has a directory of its own: an object `OWNER` beside the
//! partition's checkpoints in the store, naming the process and when it
//! last refreshed it, written only by conditional writes
//! ([`CheckpointStore::write_if`]: S3's `If-None-Match` and `If-Match`).
//!
//! A process takes the lease when there is none, when it is its own, or
//! when its holder has not refreshed it for the stale time (it died); two
//! processes racing for it both write conditionally on the version they
//! read, and one of them wins. The holder refreshes it twice a second, on
//! the version it wrote last: if another process took it over (this one
//! was silent too long), the refresh is refused and the lease is **lost**.
//! The partition's store is then [`Fenced`]: it refuses every write, so a
//! process that lost its lease never publishes a checkpoint over its
//! successor's (its job fails at its next checkpoint instead).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use streamwork_state::{CheckpointStore, StateError};

/// How often a held lease is refreshed, and how often a waiting one looks.
const REFRESH: Duration = Duration::from_millis(500);
const LOOK: Duration = Duration::from_millis(50);

/// The lease object's name in the partition's store.
const OWNER: &str = "OWNER";

/// What the holder and its fenced store share.
#[derive(Debug)]
pub(crate) struct LeaseState {
    member: String,
    /// The version of the holder's last write.
    version: Mutex<String>,
    /// Set once a refresh was refused, or none succeeded for the stale
    /// time: another process may hold it now.
    lost: AtomicBool,
}

impl LeaseState {
    /// Whether the lease is still this process's.
    fn check(&self, store: &dyn CheckpointStore, object: &str) -> Result<(), StateError> {
        if self.lost.load(Ordering::Relaxed) {
            return Err(StateError::Store {
                store: format!("{store:?}"),
                action: "write",
                object: object.to_string(),
                reason: format!(
                    "`{}` lost the partition's lease to another process (it was silent for longer than the stale time): it publishes no more checkpoints of it",
                    self.member
                ),
            });
        }
        Ok(())
    }
}

/// A lease held in a store, refreshed by a thread of its own until
/// released.
pub(crate) struct StoreLease {
    store: Arc<dyn CheckpointStore>,
    state: Arc<LeaseState>,
    done: Arc<AtomicBool>,
    keeper: Option<JoinHandle<()>>,
}

/// `MEMBER UNIX_MS`.
fn content(member: &str) -> Vec<u8> {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{member} {ms}").into_bytes()
}

/// The holder and how long ago it refreshed, by the wall clock.
fn holder(bytes: &[u8]) -> Option<(String, Duration)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (member, ms) = text.trim().rsplit_once(' ')?;
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(ms.parse().ok()?);
    let age = SystemTime::now().duration_since(at).unwrap_or_default();
    Some((member.to_string(), age))
}

impl StoreLease {
    /// Takes the lease of the partition whose checkpoints `store` holds,
    /// waiting while another process holds it fresh; `None` if `stopped`
    /// is raised while waiting.
    pub(crate) fn acquire(
        store: Arc<dyn CheckpointStore>,
        member: &str,
        stale: Duration,
        stopped: &AtomicBool,
    ) -> Result<Option<StoreLease>, StateError> {
        let version = loop {
            let (current, expected) = match store.read_versioned(OWNER)? {
                None => (None, None),
                Some((bytes, version)) => (holder(&bytes), Some(version)),
            };
            let free = match &current {
                None => true,
                Some((other, _)) if other == member => true,
                Some((other, age)) if *age >= stale => {
                    tracing::warn!("{store:?}: taking over from `{other}`, silent for {age:?}");
                    true
                }
                Some(_) => false,
            };
            if free {
                if let Some(version) =
                    store.write_if(OWNER, content(member), expected.as_deref())?
                {
                    break version;
                }
                // Another process wrote first: look again.
                continue;
            }
            if stopped.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(LOOK);
        };
        let state = Arc::new(LeaseState {
            member: member.to_string(),
            version: Mutex::new(version),
            lost: AtomicBool::new(false),
        });
        let done = Arc::new(AtomicBool::new(false));
        let keeper = {
            let (store, state, done) = (store.clone(), state.clone(), done.clone());
            std::thread::Builder::new()
                .name("partition-lease".to_string())
                .spawn(move || keep(&*store, &state, &done, stale))
                .map_err(|e| StateError::Store {
                    store: "partition lease".to_string(),
                    action: "start the keeper of",
                    object: OWNER.to_string(),
                    reason: e.to_string(),
                })?
        };
        Ok(Some(StoreLease {
            store,
            state,
            done,
            keeper: Some(keeper),
        }))
    }

    /// The partition's store, refusing writes once the lease is lost.
    pub(crate) fn fenced(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(Fenced {
            inner: self.store.clone(),
            lease: self.state.clone(),
        })
    }

    /// Gives the lease up (after the job's final checkpoint).
    pub(crate) fn release(mut self) {
        self.stop_keeper();
        if self.state.lost.load(Ordering::Relaxed) {
            return;
        }
        // Removed only if still this process's.
        if let Ok(Some((bytes, _))) = self.store.read_versioned(OWNER)
            && holder(&bytes).is_some_and(|(member, _)| member == self.state.member)
            && let Err(error) = self.store.delete(OWNER)
        {
            tracing::warn!("releasing the partition lease: {error}");
        }
    }

    fn stop_keeper(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

impl Drop for StoreLease {
    fn drop(&mut self) {
        self.stop_keeper();
    }
}

/// Refreshes the lease every [`REFRESH`] until `done`; marks it lost when a
/// refresh is refused, or none succeeded for `stale`.
fn keep(store: &dyn CheckpointStore, state: &LeaseState, done: &AtomicBool, stale: Duration) {
    let mut last_refresh = Instant::now();
    let mut since = Duration::ZERO;
    while !done.load(Ordering::Relaxed) && !state.lost.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK);
        since += LOOK;
        if since < REFRESH {
            continue;
        }
        since = Duration::ZERO;
        let version = state
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match store.write_if(OWNER, content(&state.member), Some(&version)) {
            Ok(Some(next)) => {
                *state.version.lock().unwrap_or_else(|p| p.into_inner()) = next;
                last_refresh = Instant::now();
            }
            Ok(None) => {
                tracing::error!("{store:?}: the partition lease was taken over by another process");
                state.lost.store(true, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!("{store:?}: refreshing the partition lease: {error}");
                if last_refresh.elapsed() >= stale {
                    tracing::error!(
                        "{store:?}: the partition lease was not refreshed for {stale:?}: another process may hold it"
                    );
                    state.lost.store(true, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A partition's store that refuses writes once its lease is lost.
#[derive(Debug)]
struct Fenced {
    inner: Arc<dyn CheckpointStore>,
    lease: Arc<LeaseState>,
}

impl CheckpointStore for Fenced {
    fn list(&self) -> Result<Vec<(String, u64)>, StateError> {
        self.inner.list()
    }

    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        self.lease.check(&*self.inner, name)?;
        self.inner.upload(name, bytes)
    }

    fn download(&self, name: &str) -> Result<Vec<u8>, StateError> {
        self.inner.download(name)
    }

    fn delete(&self, name: &str) -> Result<(), StateError> {
        self.lease.check(&*self.inner, name)?;
        self.inner.delete(name)
    }

    fn child(&self, prefix: &str) -> Result<Arc<dyn CheckpointStore>, StateError> {
        Ok(Arc::new(Fenced {
            inner: self.inner.child(prefix)?,
            lease: self.lease.clone(),
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
        self.lease.check(&*self.inner, name)?;
        self.inner.write_if(name, bytes, expected)
    }
}

#[cfg(test)]
mod tests {
    use streamwork_state::DirectoryStore;

    use super::*;

    fn store(name: &str) -> (std::path::PathBuf, Arc<dyn CheckpointStore>) {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-store-lease-{name}-{}",
            crate::lease::member_name()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        (dir.clone(), Arc::new(DirectoryStore::new(dir)))
    }

    #[test]
    fn a_held_lease_keeps_others_waiting_until_released() {
        let (dir, store) = store("held");
        let never = AtomicBool::new(false);
        let hour = Duration::from_secs(3600);
        let first = StoreLease::acquire(store.clone(), "a", hour, &never)
            .unwrap()
            .unwrap();
        let stop = AtomicBool::new(true);
        assert!(
            StoreLease::acquire(store.clone(), "b", hour, &stop)
                .unwrap()
                .is_none(),
            "taken while held"
        );
        first.release();
        let second = StoreLease::acquire(store.clone(), "b", hour, &never)
            .unwrap()
            .unwrap();
        let (bytes, _) = store.read_versioned(OWNER).unwrap().unwrap();
        assert_eq!(holder(&bytes).unwrap().0, "b");
        second.release();
        assert_eq!(store.read_versioned(OWNER).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_taken_over_lease_is_lost_and_fences_the_store() {
        let (dir, store) = store("taken");
        let never = AtomicBool::new(false);
        let lease = StoreLease::acquire(store.clone(), "silent", Duration::from_secs(3600), &never)
            .unwrap()
            .unwrap();
        let fenced = lease.fenced();
        fenced.upload("COMPLETE", b"1".to_vec()).unwrap();
        // Another process takes it over (as after a stale time): the
        // holder's next refresh is refused.
        let (_, version) = store.read_versioned(OWNER).unwrap().unwrap();
        store
            .write_if(OWNER, content("successor"), Some(&version))
            .unwrap()
            .expect("taken over");
        let deadline = Instant::now() + Duration::from_secs(30);
        while fenced.upload("COMPLETE", b"2".to_vec()).is_ok() {
            assert!(Instant::now() < deadline, "the lease was never found lost");
            std::thread::sleep(LOOK);
        }
        let refused = fenced.upload("COMPLETE", b"3".to_vec()).unwrap_err();
        assert!(
            refused.to_string().contains("lost the partition's lease"),
            "{refused}"
        );
        assert!(fenced.delete("COMPLETE").is_err());
        // The successor's lease stays: releasing a lost lease removes nothing.
        lease.release();
        let (bytes, _) = store.read_versioned(OWNER).unwrap().unwrap();
        assert_eq!(holder(&bytes).unwrap().0, "successor");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_lease_is_taken_over() {
        let (dir, store) = store("stale");
        store
            .write_if(OWNER, b"dead 1000".to_vec(), None)
            .unwrap()
            .unwrap();
        let never = AtomicBool::new(false);
        let lease = StoreLease::acquire(store.clone(), "alive", Duration::from_secs(10), &never)
            .unwrap()
            .unwrap();
        let (bytes, _) = store.read_versioned(OWNER).unwrap().unwrap();
        assert_eq!(holder(&bytes).unwrap().0, "alive");
        lease.release();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
