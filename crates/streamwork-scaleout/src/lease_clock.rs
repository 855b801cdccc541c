//! How a partition lease is judged held, by its holder, and dead, by a
//! process waiting for it: each by its own monotonic clock, so that no two
//! machines' clocks are ever compared.
//!
//! * A waiting process counts a holder dead once the lease has stayed
//!   unchanged for the stale time while it watched ([`Silence`]): a holder
//!   changes it at every refresh.
//! * A holder counts the lease as its own only until three quarters of the
//!   stale time after the **start** of its last successful refresh
//!   ([`Holding`]). A successor first sees that refresh after it was
//!   written, and waits the whole stale time from then, so the holder has
//!   stopped counting the lease as its own before anyone else may take it,
//!   even when a refresh hangs. A watchdog thread ([`Kept`]) finds the
//!   lease lost when that time has passed, whatever the refreshing thread
//!   is doing, and calls what was registered for the loss.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a held lease is refreshed at most, and how often a waiting
/// process or a watchdog looks.
pub(crate) const REFRESH: Duration = Duration::from_millis(500);
pub(crate) const LOOK: Duration = Duration::from_millis(50);

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

/// What to do when a lease is lost.
type OnLost = Box<dyn FnOnce() + Send>;

/// A holder's view of its lease: until when it counts as its own, whether
/// it was lost, and what to do then.
pub(crate) struct Holding {
    member: String,
    /// Until when the lease counts as the holder's.
    held_until: Mutex<Instant>,
    /// How long after the start of a successful refresh it counts as held.
    hold: Duration,
    /// Set once a refresh was refused, or the lease was not refreshed in
    /// time: another process may hold it now.
    lost: AtomicBool,
    /// Called once, when the lease is found lost.
    on_lost: Mutex<Option<OnLost>>,
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holding")
            .field("member", &self.member)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

impl Holding {
    /// A lease `member` took by a write that started at `started`, judged
    /// stale by others after `stale`.
    pub(crate) fn new(member: &str, started: Instant, stale: Duration) -> Self {
        // Three quarters of the stale time: a quarter is left for the two
        // clocks' rates and the successor's looking interval.
        let hold = stale * 3 / 4;
        Holding {
            member: member.to_string(),
            held_until: Mutex::new(started + hold),
            hold,
            lost: AtomicBool::new(false),
            on_lost: Mutex::new(None),
        }
    }

    /// The process holding it.
    pub(crate) fn member(&self) -> &str {
        &self.member
    }

    /// How often to refresh it: at least three times in each holding time,
    /// and at most every [`REFRESH`].
    pub(crate) fn refresh_every(&self) -> Duration {
        (self.hold / 3).clamp(LOOK, REFRESH)
    }

    /// A refresh that started at `started` succeeded.
    pub(crate) fn refreshed(&self, started: Instant) {
        let mut held_until = self.held_until.lock().unwrap_or_else(|p| p.into_inner());
        *held_until = (*held_until).max(started + self.hold);
    }

    /// Whether the lease is this process's `now`; marks it lost if not.
    pub(crate) fn held(&self, now: Instant) -> bool {
        if self.is_lost() {
            return false;
        }
        if now < *self.held_until.lock().unwrap_or_else(|p| p.into_inner()) {
            return true;
        }
        self.lose("the lease was not refreshed in time: another process may hold it");
        false
    }

    /// Whether the lease was lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Marks the lease lost (once) and calls what was registered for it.
    pub(crate) fn lose(&self, why: &str) {
        if self.lost.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::error!("`{}`: partition lease lost: {why}", self.member);
        let on_lost = self
            .on_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(on_lost) = on_lost {
            on_lost();
        }
    }

    /// Registers what to do when the lease is lost (done at once if it
    /// already is).
    pub(crate) fn on_lost(&self, on_lost: impl FnOnce() + Send + 'static) {
        let mut slot = self.on_lost.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_lost() {
            drop(slot);
            on_lost();
        } else {
            *slot = Some(Box::new(on_lost));
        }
    }
}

/// A held lease's two threads, until it is released (or dropped): the
/// keeper, which calls `refresh` (one attempt, which reports through the
/// [`Holding`]) about every [`Holding::refresh_every`] until the lease is
/// lost, and the watchdog, which finds it lost when it was not refreshed in
/// time, whatever the keeper is doing (a refresh may hang).
pub(crate) struct Kept {
    holding: Arc<Holding>,
    done: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Kept {
    /// Starts both threads for `holding`.
    pub(crate) fn start(
        holding: Holding,
        mut refresh: impl FnMut(&Holding) + Send + 'static,
    ) -> std::io::Result<Kept> {
        // Dropped on an error below, it stops the threads it has.
        let mut kept = Kept {
            holding: Arc::new(holding),
            done: Arc::new(AtomicBool::new(false)),
            threads: Vec::with_capacity(2),
        };
        let keeper = {
            let (holding, done) = (kept.holding.clone(), kept.done.clone());
            move || {
                let every = holding.refresh_every();
                let mut since = Duration::ZERO;
                while !done.load(Ordering::Relaxed) && !holding.is_lost() {
                    std::thread::sleep(LOOK);
                    since += LOOK;
                    if since >= every {
                        since = Duration::ZERO;
                        refresh(&holding);
                    }
                }
            }
        };
        kept.threads.push(spawn("partition-lease", keeper)?);
        let watchdog = {
            let (holding, done) = (kept.holding.clone(), kept.done.clone());
            move || {
                while !done.load(Ordering::Relaxed) && holding.held(Instant::now()) {
                    std::thread::sleep(LOOK);
                }
            }
        };
        kept.threads.push(spawn("lease-watchdog", watchdog)?);
        Ok(kept)
    }

    /// The lease as its holder sees it.
    pub(crate) fn holding(&self) -> &Arc<Holding> {
        &self.holding
    }

    /// Stops both threads, then names the member that still holds the
    /// lease: `None` if it was lost (its releasing is not this member's).
    pub(crate) fn stop_held(&mut self) -> Option<&str> {
        self.stop();
        (!self.holding.is_lost()).then(|| self.holding.member())
    }

    /// Stops both threads (waiting for a refresh under way).
    pub(crate) fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a thread of a lease.
fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(work)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_holding_ends_three_quarters_of_the_stale_time_after_its_last_refresh_started() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let holding = Holding::new("a", at(0), Duration::from_millis(800));
        let called = Arc::new(AtomicBool::new(false));
        holding.on_lost({
            let called = called.clone();
            move || called.store(true, Ordering::Relaxed)
        });
        assert!(holding.held(at(599)));
        holding.refreshed(at(500));
        // A refresh that started earlier than the last one moves nothing.
        holding.refreshed(at(100));
        assert!(holding.held(at(1_099)));
        assert!(!called.load(Ordering::Relaxed));
        assert!(!holding.held(at(1_100)));
        assert!(holding.is_lost() && called.load(Ordering::Relaxed));
        // Lost for good: a late refresh does not bring it back.
        holding.refreshed(at(1_200));
        assert!(!holding.held(at(1_201)));
    }
}
