//! Who runs a partition's job when its checkpoints are in a store and each
//! process has a directory of its own: an object `OWNER` beside the
//! partition's checkpoints in the store, naming the process, written only
//! by conditional writes ([`CheckpointStore::write_if`]: S3's
//! `If-None-Match` and `If-Match`).
//!
//! A process takes the lease when there is none, when it is its own, or
//! when its version has not changed for the stale time while the process
//! watched it ([`Silence`]: by the watcher's own clock; no two machines'
//! clocks are compared). Two processes racing for it both write
//! conditionally on the version they read, and one of them wins.
//!
//! The holder refreshes it twice a second, on the version it wrote last,
//! and counts it as its own only for a while after each refresh
//! ([`Holding`]). From then on, or as soon as a refresh is refused
//! (another process took it over), the lease is **lost**: the partition's
//! store is [`Fenced`] and refuses every write, so the process never
//! publishes a checkpoint over its successor's, and what
//! [`StoreLease::on_lost`] registered is called (the group runner stops the
//! partition's job there, so its sinks stop writing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use streamwork_state::{CheckpointStore, GuardedStore, StateError, WriteGuard};

use crate::lease_clock::{Holding, Kept, LOOK, Silence};

/// The lease object's name in the partition's store.
const OWNER: &str = "OWNER";

/// A lease held in a store, refreshed by a thread of its own (the keeper)
/// and watched by another (the watchdog, which finds it lost even while a
/// refresh hangs) until released.
pub(crate) struct StoreLease {
    store: Arc<dyn CheckpointStore>,
    kept: Kept,
}

/// `MEMBER UNIX_MS.WRITE`: the time is for people reading the store (no
/// process compares it with its own clock); the number of the write, new
/// for each, makes every refresh change the lease's version even when the
/// clock did not move (a version is a digest of the content for a
/// directory, and an S3 `ETag` is one too), since a successor counts an
/// unchanged version as silence.
fn content(member: &str) -> Vec<u8> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    format!("{member} {ms}.{write}").into_bytes()
}

/// The holder a lease's content names.
fn holder(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (member, _ms) = text.trim().rsplit_once(' ')?;
    Some(member.to_string())
}

impl StoreLease {
    /// Takes the lease of the partition whose checkpoints `store` holds,
    /// waiting while another process holds it (until its version stayed
    /// unchanged for `stale` while this process watched); `None` if
    /// `stopped` is raised while waiting.
    pub(crate) fn acquire(
        store: Arc<dyn CheckpointStore>,
        member: &str,
        stale: Duration,
        stopped: &AtomicBool,
    ) -> Result<Option<StoreLease>, StateError> {
        let mut silence = Silence::default();
        let (version, started) = loop {
            let (current, expected) = match store.read_versioned(OWNER)? {
                None => (None, None),
                Some((bytes, version)) => (holder(&bytes), Some(version)),
            };
            let free = match (&current, &expected) {
                (Some(other), Some(version)) if other != member => {
                    let silent = silence.observe(version, Instant::now());
                    if silent >= stale {
                        tracing::warn!(
                            "{store:?}: taking over from `{other}`, silent for {silent:?}"
                        );
                    }
                    silent >= stale
                }
                // Free, this process's own, or unreadable (taken over).
                _ => true,
            };
            if free {
                let started = Instant::now();
                if let Some(version) =
                    store.write_if(OWNER, content(member), expected.as_deref())?
                {
                    break (version, started);
                }
                // Another process wrote first: look again.
                continue;
            }
            if stopped.load(Ordering::Relaxed) {
                return Ok(None);
            }
            std::thread::sleep(LOOK);
        };
        let kept = Kept::start(Holding::new(member, started, stale), {
            let (store, mut version) = (store.clone(), version);
            move |holding| refresh(&*store, &mut version, holding)
        })
        .map_err(|e| StateError::Store {
            store: "partition lease".to_string(),
            action: "start a thread of",
            object: OWNER.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Some(StoreLease { store, kept }))
    }

    /// The partition's store, refusing writes once the lease is lost.
    pub(crate) fn fenced(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(Fenced::with_guard(
            self.store.clone(),
            Fence(self.kept.holding().clone()),
        ))
    }

    /// The lease as held: whether it was lost, and what to do when it is.
    pub(crate) fn holding(&self) -> &Holding {
        self.kept.holding()
    }

    /// Gives the lease up (after the job's final checkpoint).
    pub(crate) fn release(mut self) {
        let Some(member) = self.kept.stop_held() else {
            return;
        };
        // Removed only if still this process's.
        if let Ok(Some((bytes, _))) = self.store.read_versioned(OWNER)
            && holder(&bytes).is_some_and(|holder| holder == member)
            && let Err(error) = self.store.delete(OWNER)
        {
            tracing::warn!("releasing the partition lease: {error}");
        }
    }
}

/// Refreshes the lease once, on the version written last; marks it lost
/// when the refresh is refused (another process took it over).
fn refresh(store: &dyn CheckpointStore, version: &mut String, holding: &Holding) {
    let started = Instant::now();
    match store.write_if(OWNER, content(holding.member()), Some(version)) {
        Ok(Some(next)) => {
            *version = next;
            holding.refreshed(started);
        }
        Ok(None) => holding.lose(&format!("{store:?}: taken over by another process")),
        Err(error) => tracing::warn!("{store:?}: refreshing the partition lease: {error}"),
    }
}

/// What makes a partition's store refuse writes once its lease is lost.
#[derive(Debug)]
struct Fence(Arc<Holding>);

impl WriteGuard for Fence {
    fn before_write(&self, store: &dyn CheckpointStore, object: &str) -> Result<(), StateError> {
        if self.0.held(Instant::now()) {
            return Ok(());
        }
        Err(StateError::Store {
            store: format!("{store:?}"),
            action: "write",
            object: object.to_string(),
            reason: format!(
                "`{}` lost the partition's lease (another process took it over, or the lease could not be refreshed for most of the stale time): it publishes no more checkpoints of it",
                self.0.member()
            ),
        })
    }
}

/// A partition's store that refuses writes once its lease is lost.
type Fenced = GuardedStore<Fence>;

#[cfg(test)]
mod tests {
    use streamwork_state::DirectoryStore;
    use streamwork_state::testkit::{FaultyStore, WriteFault};

    use super::*;

    /// A flag raised by the lease's loss, as the runner stops the job.
    fn flag_on_loss(lease: &StoreLease) -> Arc<AtomicBool> {
        let lost = Arc::new(AtomicBool::new(false));
        lease.holding().on_lost({
            let lost = lost.clone();
            move || lost.store(true, Ordering::Relaxed)
        });
        lost
    }

    /// The member the lease in `store` names now.
    fn holder_now(store: &dyn CheckpointStore) -> String {
        let (bytes, _) = store.read_versioned(OWNER).unwrap().unwrap();
        holder(&bytes).unwrap()
    }

    fn store(name: &str) -> (std::path::PathBuf, Arc<dyn CheckpointStore>) {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-store-lease-{name}-{}",
            crate::lease::member_name()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        (dir.clone(), Arc::new(DirectoryStore::new(dir)))
    }

    #[test]
    fn every_refresh_changes_the_lease_even_within_one_millisecond() {
        let (first, second) = (content("a"), content("a"));
        assert_ne!(first, second);
        assert_eq!(holder(&first).unwrap(), "a");
        assert_eq!(holder(b"a b c 1000.7").unwrap(), "a b c");
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
        assert_eq!(holder_now(&*store), "b");
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
        let stopped_job = flag_on_loss(&lease);
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
        assert!(lease.holding().is_lost());
        assert!(
            stopped_job.load(Ordering::Relaxed),
            "what was registered for the loss was not called"
        );
        // The successor's lease stays: releasing a lost lease removes nothing.
        lease.release();
        assert_eq!(holder_now(&*store), "successor");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_live_holder_whose_clock_is_decades_behind_is_not_taken_for_dead() {
        let (dir, store) = store("skewed");
        // The holder refreshes the lease with times from its own clock
        // (in 1970 here), and a waiting process watches it for a while.
        let waiting_stopped = Arc::new(AtomicBool::new(false));
        let first = store
            .write_if(OWNER, b"behind 1000".to_vec(), None)
            .unwrap();
        let refresher = {
            let (store, waiting_stopped) = (store.clone(), waiting_stopped.clone());
            std::thread::spawn(move || {
                let mut version = first;
                for refresh in 1..40 {
                    let content = format!("behind {}", 1_000 + refresh).into_bytes();
                    version = store.write_if(OWNER, content, version.as_deref()).unwrap();
                    assert!(version.is_some(), "the holder's refresh was refused");
                    std::thread::sleep(LOOK);
                }
                waiting_stopped.store(true, Ordering::Relaxed);
            })
        };
        let taken = StoreLease::acquire(
            store.clone(),
            "waiting",
            Duration::from_secs(60),
            &waiting_stopped,
        )
        .unwrap();
        refresher.join().unwrap();
        assert!(taken.is_none(), "a live holder's lease was taken over");
        assert_eq!(holder_now(&*store), "behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_holder_whose_refreshes_hang_counts_the_lease_lost_before_a_successor_may_take_it() {
        let (dir, inner) = store("hanging");
        let store = FaultyStore::new(inner);
        let never = AtomicBool::new(false);
        let stale = Duration::from_millis(400);
        let lease = StoreLease::acquire(Arc::new(store.clone()), "stuck", stale, &never)
            .unwrap()
            .unwrap();
        let stopped_job = flag_on_loss(&lease);
        let fenced = lease.fenced();
        // The next refresh hangs (the store stopped answering this
        // process): the watchdog finds the lease lost though the keeper
        // never returns, and the store is fenced.
        store.set(WriteFault::Hang);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stopped_job.load(Ordering::Relaxed) && Instant::now() < deadline {
            std::thread::sleep(LOOK);
        }
        let found_lost = lease.holding().is_lost();
        let refused = fenced.upload("COMPLETE", b"late".to_vec());
        // Unhung before asserting, so that the keeper can end.
        store.set(WriteFault::None);
        lease.release();
        assert!(found_lost, "the lease was never found lost");
        assert!(
            stopped_job.load(Ordering::Relaxed),
            "what was registered for the loss was not called"
        );
        let refused = refused.unwrap_err();
        assert!(
            refused.to_string().contains("lost the partition's lease"),
            "{refused}"
        );
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
        let lease = StoreLease::acquire(store.clone(), "alive", Duration::from_millis(300), &never)
            .unwrap()
            .unwrap();
        assert_eq!(holder_now(&*store), "alive");
        lease.release();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
