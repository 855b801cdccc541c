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
//! Whether a holder died is judged by the waiting process's own clock, and
//! whether the lease is still its own by the holder's (see `lease_clock`):
//! no two machines' clocks are compared. A holder that finds the file
//! naming another process, or could not refresh it in time, has lost it,
//! and what [`Lease::on_lost`] registered is called (the group runner stops
//! the partition's job there).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::lease_clock::{Holding, Kept, LOOK, Silence};

/// A held lease: refreshed by a thread of its own (the keeper) and
/// watched by another (the watchdog) until released.
pub(crate) struct Lease {
    path: PathBuf,
    kept: Kept,
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
        let started = Instant::now();
        let staging = dir.join(format!("OWNER.{member}"));
        fs::write(&staging, member)?;
        fs::rename(&staging, &path)?;
        let kept = Kept::start(Holding::new(member, started, stale), {
            let path = path.clone();
            move |holding| refresh(&path, holding)
        })?;
        Ok(Some(Lease { path, kept }))
    }

    /// The lease as held: whether it was lost, and what to do when it is.
    pub(crate) fn holding(&self) -> &Holding {
        self.kept.holding()
    }

    /// Gives the lease up (if it is still this member's).
    pub(crate) fn release(mut self) {
        let Some(member) = self.kept.stop_held() else {
            return;
        };
        if matches!(fs::read_to_string(&self.path), Ok(m) if m.trim() == member) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Refreshes the lease's time once; marks it lost when the file names
/// another process, or is gone (it was taken over).
fn refresh(path: &Path, holding: &Holding) {
    let started = Instant::now();
    match fs::read_to_string(path) {
        Ok(named) if named.trim() != holding.member() => {
            let taker = named.trim().to_string();
            holding.lose(&format!("{}: taken over by `{taker}`", path.display()));
            return;
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            holding.lose(&format!("{}: removed by another process", path.display()));
            return;
        }
        _ => {}
    }
    match File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(SystemTime::now()))
    {
        Ok(()) => holding.refreshed(started),
        Err(error) => tracing::warn!("{}: refreshing the lease: {error}", path.display()),
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
    use std::sync::Arc;

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

    /// `member`'s lease of `dir`, waited for as long as it takes.
    fn taken(dir: &Path, member: &str, stale: Duration) -> Lease {
        Lease::acquire(dir, member, stale, &AtomicBool::new(false))
            .unwrap()
            .expect("waited for until taken")
    }

    #[test]
    fn a_held_lease_keeps_others_waiting_until_released() {
        let dir = dir("held");
        let first = taken(&dir, "a", Duration::from_secs(3600));
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
        let second = taken(&dir, "b", Duration::from_secs(3600));
        assert_eq!(fs::read_to_string(dir.join("OWNER")).unwrap(), "b");
        second.release();
        assert!(!dir.join("OWNER").exists());
        let _ = fs::remove_dir_all(&dir);
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
    fn a_lease_another_process_took_over_is_lost_and_says_so() {
        let dir = dir("taken");
        let lease = taken(&dir, "first", Duration::from_secs(3600));
        let lost = Arc::new(AtomicBool::new(false));
        lease.holding().on_lost({
            let lost = lost.clone();
            move || lost.store(true, Ordering::Relaxed)
        });
        // Another process took it over (as after the stale time).
        let aside = dir.join("OWNER.taking");
        fs::write(&aside, "second").unwrap();
        fs::rename(&aside, dir.join("OWNER")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lost.load(Ordering::Relaxed) {
            assert!(Instant::now() < deadline, "the lease was never found lost");
            std::thread::sleep(LOOK);
        }
        assert!(lease.holding().is_lost());
        // Releasing a lost lease leaves the successor's.
        lease.release();
        assert_eq!(fs::read_to_string(dir.join("OWNER")).unwrap(), "second");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_lease_is_taken_over() {
        let dir = dir("stale");
        fs::create_dir_all(&dir).unwrap();
        // A holder that died: its lease is never refreshed.
        fs::write(dir.join("OWNER"), "dead").unwrap();
        let lease = taken(&dir, "alive", Duration::from_millis(300));
        assert_eq!(fs::read_to_string(dir.join("OWNER")).unwrap(), "alive");
        lease.release();
        let _ = fs::remove_dir_all(&dir);
    }
}
