//! W3 written by hand on `P` threads, with a keyed exchange between them:
//! what the job's parallelism costs without a framework, the comparison
//! that gives W3's per-core figure at parallelism 2 its meaning.
//!
//! Thread `w` generates the events `i` with `i % P == w` (as the job's
//! source instances do), routes each by its key's stable hash and key group
//! (as the job's keyed edge does), counts the records it owns per key in
//! 1000 ms windows, and sends the others' in batches of 1024 through a
//! bounded channel of four batches (which keeps the threads within a few
//! seconds of event time of each other, as the job's aligned sources are),
//! their emptied buffers coming back. A thread closes a
//! window once every thread has sent everything before its end.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use streamwork::core::KeyGroups;
use streamwork::core::hash::{FastHashMap, stable_hash};

use crate::{Outcome, key};

const BATCH: usize = 1024;
const WINDOW_MS: u64 = 1000;
/// How far ahead of the others in event time a thread may run.
const ALIGN_MS: u64 = 5000;

/// What travels between threads: a batch of `(key, time)` for the
/// receiver, or none, and that its sender has sent every record of the
/// receiver's with a time before `upto`.
struct Message {
    from: usize,
    records: Vec<(u64, u64)>,
    upto: u64,
}

/// One thread's counts of the windows still open, by window start (a few:
/// the threads are close in event time), the newest last.
#[derive(Default)]
struct Windows {
    open: VecDeque<(u64, FastHashMap<u64, u64>)>,
    outcome: Outcome,
}

impl Windows {
    #[inline]
    fn count(&mut self, key: u64, time: u64) {
        let start = time - time % WINDOW_MS;
        if let Some((last, counts)) = self.open.back_mut()
            && *last == start
        {
            *counts.entry(key).or_insert(0) += 1;
            return;
        }
        let at = match self.open.iter().rposition(|(s, _)| *s <= start) {
            Some(at) if self.open[at].0 == start => at,
            Some(at) => {
                self.open.insert(at + 1, (start, window_table()));
                at + 1
            }
            None => {
                self.open.push_front((start, window_table()));
                0
            }
        };
        *self.open[at].1.entry(key).or_insert(0) += 1;
    }

    /// Emits every window that ends at or before `upto`.
    fn close_before(&mut self, upto: u64) {
        while let Some((start, _)) = self.open.front() {
            if *start + WINDOW_MS > upto {
                return;
            }
            let Some((start, counts)) = self.open.pop_front() else {
                return;
            };
            let window = start / WINDOW_MS + 1;
            for (key, count) in counts {
                self.outcome.records += 1;
                self.outcome.checksum = self
                    .outcome
                    .checksum
                    .wrapping_add(window.wrapping_mul(key + 1).wrapping_mul(count));
            }
        }
    }
}

/// A window's table, sized for a window's events (1000).
fn window_table() -> FastHashMap<u64, u64> {
    FastHashMap::with_capacity_and_hasher(1024, Default::default())
}

/// One thread of the hand-written W3.
struct Thread {
    me: usize,
    parallelism: usize,
    to: Vec<SyncSender<Message>>,
    from: Receiver<Message>,
    /// Where this thread's emptied buffers come back, per sender.
    returns: Vec<SyncSender<Vec<(u64, u64)>>>,
    spare: Receiver<Vec<(u64, u64)>>,
    buffers: Vec<Vec<(u64, u64)>>,
    /// Per sender: everything it sent here is before this time.
    upto: Vec<u64>,
    ended: usize,
    windows: Windows,
}

impl Thread {
    fn run(mut self, events: u64, keys: u64) -> Outcome {
        let groups = KeyGroups::DEFAULT;
        let p = self.parallelism as u64;
        let mut i = self.me as u64;
        let mut generated = 0usize;
        while i < events {
            let (k, time) = std::hint::black_box((key(i, keys), i));
            // One thread routes nothing (as a job fuses its one instance).
            let target = match p {
                1 => 0,
                _ => groups.route(stable_hash(&k), p as u32) as usize,
            };
            if target == self.me {
                self.windows.count(k, time);
            } else {
                self.buffers[target].push((k, time));
                if self.buffers[target].len() >= BATCH {
                    self.upto[self.me] = time;
                    self.send(target, time + 1);
                }
            }
            generated += 1;
            if generated.is_multiple_of(BATCH) {
                // Every record of its own before `time` is counted.
                self.upto[self.me] = time;
                self.receive();
                // Within 5 s of event time of the others, as the job's
                // aligned sources: a thread ahead waits for them.
                if time > self.others_upto().saturating_add(ALIGN_MS) {
                    // Tell the others how far this one is (they may wait
                    // for it too), then wait for them.
                    for target in 0..self.parallelism {
                        if target != self.me {
                            self.send(target, time);
                        }
                    }
                    while time > self.others_upto().saturating_add(ALIGN_MS) {
                        self.wait_a_little();
                        self.receive();
                    }
                }
            }
            i += p;
        }
        for target in 0..self.parallelism {
            if target != self.me {
                self.send(target, u64::MAX);
            }
        }
        self.upto[self.me] = u64::MAX;
        while self.ended < self.parallelism - 1 {
            match self.from.recv() {
                Ok(message) => self.take(message),
                Err(_) => break,
            }
            self.close();
        }
        self.windows.close_before(u64::MAX);
        self.windows.outcome
    }

    /// Sends `target` its buffered records and that it has all of its
    /// records before `upto`, taking in what arrives while its channel is
    /// full (two threads sending to each other never wait for each other).
    fn send(&mut self, target: usize, upto: u64) {
        let spare = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let records = std::mem::replace(&mut self.buffers[target], spare);
        let mut message = Message {
            from: self.me,
            records,
            upto,
        };
        loop {
            match self.to[target].try_send(message) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) => {
                    message = back;
                    self.wait_a_little();
                    self.receive();
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }

    /// Waits a little for what others send, rather than spin.
    fn wait_a_little(&mut self) {
        if let Ok(incoming) = self.from.recv_timeout(Duration::from_micros(50)) {
            self.take(incoming);
        }
    }

    /// How far every other thread has sent this one everything.
    fn others_upto(&self) -> u64 {
        (0..self.parallelism)
            .filter(|&s| s != self.me)
            .map(|s| self.upto[s])
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Takes in what has arrived, and closes the windows it allows.
    fn receive(&mut self) {
        while let Ok(message) = self.from.try_recv() {
            self.take(message);
        }
        self.close();
    }

    fn take(&mut self, mut message: Message) {
        for (k, time) in message.records.drain(..) {
            self.windows.count(k, time);
        }
        self.upto[message.from] = message.upto;
        if message.upto == u64::MAX {
            self.ended += 1;
        }
        let _ = self.returns[message.from].try_send(message.records);
    }

    fn close(&mut self) {
        let upto = self.upto.iter().copied().min().unwrap_or(u64::MAX);
        self.windows.close_before(upto);
    }
}

/// W3 by hand on `parallelism` threads (one: no exchange at all), with
/// `keys` distinct keys.
pub fn w3_exchange_job(events: u64, parallelism: u32, keys: u64) -> Outcome {
    let p = parallelism.max(1) as usize;
    let (to, from): (Vec<_>, Vec<_>) = (0..p).map(|_| sync_channel::<Message>(4)).unzip();
    let (returns, spares): (Vec<_>, Vec<_>) =
        (0..p).map(|_| sync_channel::<Vec<(u64, u64)>>(8)).unzip();
    let threads: Vec<Thread> = from
        .into_iter()
        .zip(spares)
        .enumerate()
        .map(|(me, (from, spare))| Thread {
            me,
            parallelism: p,
            to: to.clone(),
            from,
            returns: returns.clone(),
            spare,
            buffers: (0..p).map(|_| Vec::with_capacity(BATCH)).collect(),
            upto: vec![0; p],
            ended: 0,
            windows: Windows::default(),
        })
        .collect();
    drop((to, returns));
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = threads
            .into_iter()
            .map(|thread| scope.spawn(move || thread.run(events, keys)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a W3 thread"))
            .collect()
    });
    outcomes
        .into_iter()
        .fold(Outcome::default(), |total, o| Outcome {
            records: total.records + o.records,
            checksum: total.checksum.wrapping_add(o.checksum),
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hand_written_exchange_computes_w3() {
        for parallelism in 1..=3 {
            assert_eq!(
                super::w3_exchange_job(300_000, parallelism, 10_000),
                crate::w3_baseline(300_000, 10_000),
                "{parallelism} threads"
            );
        }
    }
}
