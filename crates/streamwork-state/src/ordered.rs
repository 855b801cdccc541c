//! Decoding a checkpoint's frames on several threads, applied in order:
//! [`decode_in_order`].
//!
//! A keyed field's record is a sequence of frames (see
//! [`frames`](crate::frames)). Validating a frame and deserializing its
//! entries is most of a restore, and frames do not depend on each other:
//! threads decode them ahead while the restoring thread puts them into the
//! state one after the other, in the order of the record, so that the
//! state built is the one a single thread builds (a hash table's iteration
//! order follows the order of its inserts).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

/// Below this many bytes a restore decodes on its own thread: starting
/// threads would cost more than they save.
pub(crate) const PARALLEL_BYTES: usize = 32 << 20;

/// How many threads decode `bytes` of frames: one per core from
/// [`PARALLEL_BYTES`] on, else none besides the restoring thread (`1`).
pub(crate) fn decoding_threads(bytes: usize) -> usize {
    if bytes < PARALLEL_BYTES {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What the decoding threads and the applying thread share.
struct Shared<T, E> {
    /// Decoded items not yet applied, by index.
    slots: Vec<Option<Result<T, E>>>,
    /// Items applied so far.
    applied: usize,
    /// The applying thread is done (all applied, an error, or a panic):
    /// decoding threads stop.
    stopped: bool,
}

/// Decodes items `0..count` with `decode` on `threads` threads (none
/// started for one) and applies each with `apply` on the calling thread,
/// in index order, with at most `2 × threads` decoded items waiting. The
/// first error, of a decode or an apply, in index order, is returned and
/// stops the rest; a decode that panics is `panicked`'s error for its
/// index.
pub(crate) fn decode_in_order<T, E>(
    count: usize,
    threads: usize,
    decode: impl Fn(usize) -> Result<T, E> + Sync,
    mut apply: impl FnMut(T) -> Result<(), E>,
    panicked: impl Fn(usize) -> E + Sync,
) -> Result<(), E>
where
    T: Send,
    E: Send,
{
    let decode = |index: usize| {
        catch_unwind(AssertUnwindSafe(|| decode(index))).unwrap_or_else(|_| Err(panicked(index)))
    };
    let threads = threads.min(count);
    if threads <= 1 {
        for index in 0..count {
            apply(decode(index)?)?;
        }
        return Ok(());
    }
    let window = 2 * threads;
    let next = AtomicUsize::new(0);
    let shared = Mutex::new(Shared {
        slots: (0..count).map(|_| None).collect(),
        applied: 0,
        stopped: false,
    });
    let changed = Condvar::new();
    let lock = || shared.lock().unwrap_or_else(PoisonError::into_inner);
    std::thread::scope(|scope| {
        let work = || {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    return;
                }
                {
                    let mut state = lock();
                    while index >= state.applied + window && !state.stopped {
                        state = changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                    }
                    if state.stopped {
                        return;
                    }
                }
                let decoded = decode(index);
                lock().slots[index] = Some(decoded);
                changed.notify_all();
            }
        };
        // A thread the system refuses is one fewer; with none, the
        // applying thread decodes too.
        let spawned = (0..threads)
            .filter(|_| {
                !refused_by_test()
                    && std::thread::Builder::new()
                        .name("streamwork-restore".into())
                        .spawn_scoped(scope, work)
                        .is_ok()
            })
            .count();
        // Also when `apply` fails or panics: the decoding threads would
        // otherwise wait for it forever, and the scope with them.
        let _stop = StopOnExit {
            shared: &shared,
            changed: &changed,
        };
        (0..count).try_for_each(|index| {
            let decoded = if spawned == 0 {
                decode(index)
            } else {
                let mut state = lock();
                loop {
                    if let Some(decoded) = state.slots[index].take() {
                        break decoded;
                    }
                    state = changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
            };
            apply(decoded?)?;
            lock().applied = index + 1;
            changed.notify_all();
            Ok(())
        })
    })
}

/// Whether a test told the next thread start to fail, as the system does
/// when it is out of threads or memory (never outside tests).
#[cfg(not(test))]
fn refused_by_test() -> bool {
    false
}

#[cfg(test)]
thread_local! {
    /// How many of the next thread starts on this thread fail.
    static REFUSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn refused_by_test() -> bool {
    REFUSED.with(|refused| {
        let left = refused.get();
        refused.set(left.saturating_sub(1));
        left > 0
    })
}

/// Tells the decoding threads to stop once the applying thread is done.
struct StopOnExit<'a, T, E> {
    shared: &'a Mutex<Shared<T, E>>,
    changed: &'a Condvar,
}

impl<T, E> Drop for StopOnExit<'_, T, E> {
    fn drop(&mut self) {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stopped = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_applied_in_order_whatever_the_threads() {
        for threads in [1, 2, 3, 8] {
            let mut applied = Vec::new();
            decode_in_order(
                100,
                threads,
                |i| Ok::<_, String>(i * 3),
                |v| {
                    applied.push(v);
                    Ok(())
                },
                |i| format!("{i} panicked"),
            )
            .unwrap();
            assert_eq!(applied, (0..100).map(|i| i * 3).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_first_error_in_order_stops_the_rest() {
        for threads in [1, 2, 4] {
            let mut applied = Vec::new();
            let outcome = decode_in_order(
                50,
                threads,
                |i| {
                    if i == 7 || i == 30 {
                        Err(format!("item {i}"))
                    } else {
                        Ok(i)
                    }
                },
                |v| {
                    applied.push(v);
                    Ok(())
                },
                |i| format!("{i} panicked"),
            );
            assert_eq!(outcome, Err("item 7".to_string()));
            assert_eq!(applied, (0..7).collect::<Vec<_>>());
        }
    }

    #[test]
    fn an_apply_that_fails_stops_the_decoding() {
        let outcome = decode_in_order(
            1000,
            2,
            Ok::<_, String>,
            |v| {
                if v == 3 {
                    Err("full".to_string())
                } else {
                    Ok(())
                }
            },
            |i| format!("{i} panicked"),
        );
        assert_eq!(outcome, Err("full".to_string()));
    }

    #[test]
    fn a_decode_that_panics_is_its_error_not_a_hang() {
        for threads in [1, 2, 3] {
            let outcome = decode_in_order(
                20,
                threads,
                |i| {
                    assert!(i != 5, "a decode gave up");
                    Ok::<_, String>(i)
                },
                |_| Ok(()),
                |i| format!("decoding item {i} panicked"),
            );
            assert_eq!(outcome, Err("decoding item 5 panicked".to_string()));
        }
    }

    #[test]
    fn an_apply_that_panics_unwinds_rather_than_hangs() {
        for threads in [1, 2, 4] {
            let outcome = std::panic::catch_unwind(|| {
                decode_in_order(
                    1000,
                    threads,
                    Ok::<_, String>,
                    |v| {
                        assert!(v != 3, "an apply gave up");
                        Ok(())
                    },
                    |i| format!("{i} panicked"),
                )
            });
            assert!(outcome.is_err(), "{threads} threads");
        }
    }

    #[test]
    fn threads_the_system_refuses_leave_the_work_to_the_others_or_the_restoring_thread() {
        for refused in [1, 3, 4] {
            REFUSED.with(|r| r.set(refused));
            let decoders = Mutex::new(std::collections::HashSet::new());
            let mut applied = Vec::new();
            decode_in_order(
                200,
                4,
                |i| {
                    decoders.lock().unwrap().insert(std::thread::current().id());
                    Ok::<_, String>(i + 1)
                },
                |v| {
                    applied.push(v);
                    Ok(())
                },
                |i| format!("{i} panicked"),
            )
            .unwrap();
            assert_eq!(REFUSED.with(std::cell::Cell::get), 0, "{refused} refused");
            assert_eq!(applied, (1..=200).collect::<Vec<_>>(), "{refused} refused");
            let decoders = decoders.into_inner().unwrap();
            let here = std::thread::current().id();
            if refused == 4 {
                assert_eq!(decoders.into_iter().collect::<Vec<_>>(), [here]);
            } else {
                assert!(!decoders.contains(&here), "{refused} refused");
                assert!(decoders.len() <= 4 - refused);
            }
        }
    }

    #[test]
    fn small_records_decode_on_the_restoring_thread() {
        assert_eq!(decoding_threads(PARALLEL_BYTES - 1), 1);
        assert!(decoding_threads(PARALLEL_BYTES) >= 1);
    }
}
