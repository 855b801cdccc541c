//! Who runs a partition's job: a file in the partition's checkpoint
//! directory naming the process, kept fresh while its job runs.
//!
//! The consumer group decides who owns a partition, but a broker may hand a
//! partition to its next owner while the last one is still draining it (a
//! coordinator that does not wait for every member to rejoin, or a member
//! that missed its poll deadline). The lease closes that gap: the next
//! owner starts only once the last one released the partition, after its
//! final checkpoint, or once the lease went stale (its holder died), so two
//! processes never run a partition's job, or write its checkpoints, at once.
//!
//! Whether a holder died is judged by the waiting process's own clock
//! ([`Silence`]): the lease must stay unchanged for the stale time while it
//! watches. No two machines' clocks are compared, so a holder whose clock
//! is behind is not taken for dead.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How often a held lease is refreshed, and how often a waiting one looks.
const REFRESH: Duration = Duration::from_millis(500);
const LOOK: Duration = Duration::from_millis(50);

/// A held lease: refreshed by a thread of its own until released.
pub(crate) struct Lease {
    path: PathBuf,
    member: String,
    done: Arc<AtomicBool>,
    keeper: Option<JoinHandle<()>>,
}

/// How long a lease held by another process has stayed unchanged, by the
/// watching process's own monotonic clock: the holder changes it at every
/// refresh (its version, or its time of modification), and a lease that
/// stays as it was for the stale time has a holder that died or lost its
/// way to the lease. Comparing the holder's clock with this one's would
/// take a live holder whose clock is behind for dead.
#[derive(Debug, Default)]
pub(crate) struct Silence {
    seen: Option<(String, Instant)>,
}

impl Silence {
    /// Records the lease as it is `now` (`token` changes at every
    /// refresh); returns for how long it has stayed as it is.
    pub(crate) fn observe(&mut self, token: &str, now: Instant) -> Duration {
        match &self.seen {
            Some((seen, since)) if seen == token => now.saturating_duration_since(*since),
            _ => {
                self.seen = Some((token.to_string(), now));
                Duration::ZERO
            }
        }
    }
}

/// What holds the lease of `path` now, if another holds it.
enum Holder {
    Free,
    /// `token` changes at every refresh.
    Other {
        member: String,
        token: String,
    },
}

fn holder(path: &Path, member: &str) -> io::Result<Holder> {
    let content = match fs::read_to_string(path) {
        Ok(content) => content,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Holder::Free),
        Err(e) => return Err(e),
    };
    let other = content.trim();
    if other == member || other.is_empty() {
        return Ok(Holder::Free);
    }
    let modified = fs::metadata(path)?.modified()?;
    Ok(Holder::Other {
        member: other.to_string(),
        token: format!("{other} {modified:?}"),
    })
}

impl Lease {
    /// Waits until the lease in `dir` is free, or has stayed unchanged for
    /// `stale` while this process watched it, then takes it for `member`;
    /// `None` if `stopped` is set while waiting.
    pub(crate) fn acquire(
        dir: &Path,
        member: &str,
        stale: Duration,
        stopped: &AtomicBool,
    ) -> io::Result<Option<Lease>> {
        fs::create_dir_all(dir)?;
        let path = dir.join("OWNER");
        let mut silence = Silence::default();
        loop {
            match holder(&path, member)? {
                Holder::Free => break,
                Holder::Other {
                    member: other,
                    token,
                } => {
                    let silent = silence.observe(&token, Instant::now());
                    if silent >= stale {
                        tracing::warn!(
                            "{}: taking over from `{other}`, silent for {silent:?}",
                            dir.display()
                        );
                        break;
                    }
                    if stopped.load(Ordering::Relaxed) {
                        return Ok(None);
                    }
                    std::thread::sleep(LOOK);
                }
            }
        }
        let staging = dir.join(format!("OWNER.{member}"));
        fs::write(&staging, member)?;
        fs::rename(&staging, &path)?;
        let done = Arc::new(AtomicBool::new(false));
        let keeper = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::Builder::new()
                .name("partition-lease".to_string())
                .spawn(move || keep(&path, &done))?
        };
        Ok(Some(Lease {
            path,
            member: member.to_string(),
            done,
            keeper: Some(keeper),
        }))
    }

    /// Gives the lease up (if it is still this member's).
    pub(crate) fn release(mut self) {
        self.stop_keeper();
        if matches!(fs::read_to_string(&self.path), Ok(m) if m.trim() == self.member) {
            let _ = fs::remove_file(&self.path);
        }
    }

    fn stop_keeper(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_keeper();
    }
}

/// Refreshes the lease's time until `done`.
fn keep(path: &Path, done: &AtomicBool) {
    let mut since = Duration::ZERO;
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK);
        since += LOOK;
        if since >= REFRESH {
            since = Duration::ZERO;
            if let Err(error) = File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_modified(SystemTime::now()))
            {
                tracing::warn!("{}: refreshing the lease: {error}", path.display());
            }
        }
    }
}

/// This process's name in leases: host, process id and start time.
pub(crate) fn member_name() -> String {
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{}-{nanos:x}", host.trim(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-lease-{name}-{}-{}",
            std::process::id(),
            member_name()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_held_lease_keeps_others_waiting_until_released() {
        let dir = dir("held");
        let never = AtomicBool::new(false);
        let first = Lease::acquire(&dir, "a", Duration::from_secs(3600), &never)
            .unwrap()
            .unwrap();
        // Another member gives up only when told to stop.
        let stop = AtomicBool::new(true);
        assert!(
            Lease::acquire(&dir, "b", Duration::from_secs(3600), &stop)
                .unwrap()
                .is_none()
        );
        assert!(
            matches!(holder(&dir.join("OWNER"), "b").unwrap(), Holder::Other { member, .. } if member == "a")
        );
        first.release();
        let second = Lease::acquire(&dir, "b", Duration::from_secs(3600), &never)
            .unwrap()
            .unwrap();
        assert_eq!(fs::read_to_string(dir.join("OWNER")).unwrap(), "b");
        second.release();
        assert!(!dir.join("OWNER").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn silence_is_measured_by_the_watchers_clock_from_the_last_change() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut silence = Silence::default();
        assert_eq!(silence.observe("v1", at(0)), Duration::ZERO);
        assert_eq!(silence.observe("v1", at(700)), Duration::from_millis(700));
        // A refresh starts the count again, whatever time the lease names.
        assert_eq!(silence.observe("v2", at(900)), Duration::ZERO);
        assert_eq!(silence.observe("v2", at(1_000)), Duration::from_millis(100));
        assert_eq!(silence.observe("v1", at(1_100)), Duration::ZERO);
    }

    #[test]
    fn a_live_holder_whose_clock_is_an_hour_behind_is_not_taken_for_dead() {
        let dir = dir("skewed");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("OWNER");
        fs::write(&path, "behind").unwrap();
        // The holder refreshes the lease with its own clock, an hour behind
        // this one's, and a waiting process watches it for a while.
        let waiting_stopped = Arc::new(AtomicBool::new(false));
        let refresher = {
            let (path, waiting_stopped) = (path.clone(), waiting_stopped.clone());
            std::thread::spawn(move || {
                let behind = SystemTime::now() - Duration::from_secs(3600);
                for refresh in 0..40u64 {
                    File::options()
                        .write(true)
                        .open(&path)
                        .unwrap()
                        .set_modified(behind + Duration::from_millis(refresh * 50))
                        .unwrap();
                    std::thread::sleep(LOOK);
                }
                waiting_stopped.store(true, Ordering::Relaxed);
            })
        };
        let taken =
            Lease::acquire(&dir, "waiting", Duration::from_secs(60), &waiting_stopped).unwrap();
        refresher.join().unwrap();
        assert!(taken.is_none(), "a live holder's lease was taken over");
        assert_eq!(fs::read_to_string(&path).unwrap(), "behind");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_lease_is_taken_over() {
        let dir = dir("stale");
        fs::create_dir_all(&dir).unwrap();
        // A holder that died: its lease is never refreshed.
        fs::write(dir.join("OWNER"), "dead").unwrap();
        let never = AtomicBool::new(false);
        let lease = Lease::acquire(&dir, "alive", Duration::from_millis(300), &never)
            .unwrap()
            .unwrap();
        assert_eq!(fs::read_to_string(dir.join("OWNER")).unwrap(), "alive");
        lease.release();
        let _ = fs::remove_dir_all(&dir);
    }
}
