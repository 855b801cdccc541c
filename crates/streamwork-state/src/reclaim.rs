//! Freeing large tables off the task thread, as soon as nothing reads them.
//!
//! Dropping a table of millions of entries takes milliseconds: a task
//! thread that let go of one would pause for that long. [`release`] hands
//! it to one thread of the process that drops what it is given, in order,
//! and nothing else; if that thread cannot be started, the caller drops it.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

type Garbage = Box<dyn Send>;

/// Drops `value` on the process's reclaiming thread (started on first use).
pub(crate) fn release<T: Send + 'static>(value: T) {
    static RECLAIMER: OnceLock<Option<Mutex<Sender<Garbage>>>> = OnceLock::new();
    let reclaimer = RECLAIMER.get_or_init(|| {
        let (send, receive) = channel::<Garbage>();
        std::thread::Builder::new()
            .name("streamwork-reclaim".into())
            .spawn(move || {
                for garbage in receive {
                    drop(garbage);
                }
            })
            .ok()
            .map(|_| Mutex::new(send))
    });
    let garbage: Garbage = Box::new(value);
    let garbage = match reclaimer {
        Some(sender) => match sender.lock() {
            Ok(sender) => match sender.send(garbage) {
                Ok(()) => return,
                Err(unsent) => unsent.0,
            },
            Err(_) => garbage,
        },
        None => garbage,
    };
    drop(garbage);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            assert_eq!(
                std::thread::current().name(),
                Some("streamwork-reclaim"),
                "dropped off the caller's thread"
            );
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn what_is_released_is_dropped_on_the_reclaiming_thread() {
        let dropped = Arc::new(AtomicBool::new(false));
        release(Flag(dropped.clone()));
        // A second release queues behind the first: once the channel has
        // taken it back, the first was dropped.
        let (done, wait) = channel();
        release(DropSignal(done));
        wait.recv().expect("the reclaiming thread drops in order");
        assert!(dropped.load(Ordering::SeqCst));
    }

    struct DropSignal(Sender<()>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
}
