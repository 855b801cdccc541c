//! Keeping exchange topics bounded: records every reader is past are
//! deleted (Kafka's `DeleteRecords`).
//!
//! Each partition of an exchange topic is read by one stage partition at a
//! time, and a stage partition restores from its newest complete
//! checkpoint: it never reads before the position that checkpoint holds,
//! nor does a rescale (it moves what lies after the readers' checkpointed
//! positions). The runner still keeps a margin: a partition is purged to
//! the oldest of the last [`KEEP`] positions it saw completed, so the
//! records behind each of the reader's retained checkpoints stay readable.
//!
//! Deleting is done on a thread of its own (a broker that is slow to
//! answer must not hold up the group's rebalances), and a broker that
//! refuses is reported once per topic: the job goes on, exact, with topics
//! that keep growing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use streamwork_connectors::kafka::RecordPurger;

/// Completed positions of a partition kept before purging to the oldest
/// (the checkpoints a stage partition retains, by default).
pub(crate) const KEEP: usize = 3;

/// The wait before asking brokers that refused to delete again, doubled
/// at each refusal up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(60);
const LAST_RETRY: Duration = Duration::from_secs(3600);

/// Partition → the first offset to keep, by topic.
pub(crate) type PurgeTo = BTreeMap<String, BTreeMap<i32, i64>>;

/// The positions seen completed, per exchange partition, and where each
/// may be purged to.
#[derive(Debug, Default)]
pub(crate) struct PurgeHistory {
    seen: BTreeMap<(String, i32), VecDeque<i64>>,
}

impl PurgeHistory {
    /// Notes that the reader of `topic` partition `partition` completed a
    /// checkpoint at `next` (the next offset it reads). Positions only
    /// move forward; one that did not is not a new one.
    pub(crate) fn observe(&mut self, topic: &str, partition: i32, next: i64) {
        let seen = self.seen.entry((topic.to_string(), partition)).or_default();
        if seen.back().is_some_and(|&last| next <= last) {
            return;
        }
        seen.push_back(next);
        while seen.len() > KEEP {
            seen.pop_front();
        }
    }

    /// Where each partition seen at [`KEEP`] positions may be purged to:
    /// the oldest of them.
    pub(crate) fn due(&self) -> PurgeTo {
        let mut due = PurgeTo::new();
        for ((topic, partition), seen) in &self.seen {
            if seen.len() == KEEP
                && let Some(&oldest) = seen.front()
            {
                due.entry(topic.clone())
                    .or_default()
                    .insert(*partition, oldest);
            }
        }
        due
    }
}

/// The thread that deletes records: asked through [`Purging::ask`],
/// stopped when dropped.
pub(crate) struct Purging {
    asks: Option<SyncSender<PurgeTo>>,
    thread: Option<JoinHandle<()>>,
}

impl Purging {
    /// Starts the thread, deleting through `purger`; `group` names the
    /// job in its reports.
    pub(crate) fn start(purger: RecordPurger, group: String) -> std::io::Result<Self> {
        let (asks, asked) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("{group}-purge"))
            .spawn(move || purge_loop(&purger, &group, &asked))?;
        Ok(Purging {
            asks: Some(asks),
            thread: Some(thread),
        })
    }

    /// Asks for `to` to be purged; dropped if the thread is still busy
    /// with the last ask (the next covers it).
    pub(crate) fn ask(&self, to: PurgeTo) {
        if to.is_empty() {
            return;
        }
        if let Some(asks) = &self.asks
            && let Err(TrySendError::Disconnected(_)) = asks.try_send(to)
        {
            tracing::debug!("exchange purge: the purging thread is gone");
        }
    }
}

impl Drop for Purging {
    fn drop(&mut self) {
        self.asks.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn purge_loop(purger: &RecordPurger, group: &str, asked: &Receiver<PurgeTo>) {
    let mut done: BTreeMap<(String, i32), i64> = BTreeMap::new();
    // Per topic the brokers refused: when to try again, and the wait after.
    let mut refused: BTreeMap<String, (Instant, Duration)> = BTreeMap::new();
    while let Ok(to) = asked.recv() {
        for (topic, partitions) in to {
            if refused
                .get(&topic)
                .is_some_and(|(again, _)| Instant::now() < *again)
            {
                continue;
            }
            let fresh: BTreeMap<i32, i64> = partitions
                .into_iter()
                .filter(|(p, offset)| done.get(&(topic.clone(), *p)).is_none_or(|d| offset > d))
                .collect();
            if fresh.is_empty() {
                continue;
            }
            match purger.purge(&topic, &fresh) {
                Ok(()) => {
                    tracing::debug!(
                        "kafka group `{group}`: exchange `{topic}`: records before {fresh:?} deleted"
                    );
                    for (p, offset) in fresh {
                        done.insert((topic.clone(), p), offset);
                    }
                    refused.remove(&topic);
                }
                Err(error) => {
                    let wait = match refused.get(&topic) {
                        None => {
                            tracing::warn!(
                                "kafka group `{group}`: exchange `{topic}`: read records cannot be deleted ({error}); the topic grows until the brokers' retention removes them: use brokers that answer DeleteRecords (Kafka, Redpanda; tansu 0.6 does not), or give the topic a retention longer than any reader's lag"
                            );
                            FIRST_RETRY
                        }
                        Some((_, wait)) => {
                            tracing::debug!("kafka group `{group}`: exchange `{topic}`: {error}");
                            (*wait * 2).min(LAST_RETRY)
                        }
                    };
                    refused.insert(topic, (Instant::now() + wait, wait));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_partition_is_purged_to_the_oldest_of_its_last_positions() {
        let mut history = PurgeHistory::default();
        history.observe("x", 0, 10);
        history.observe("x", 0, 20);
        assert!(history.due().is_empty(), "two positions are not enough");
        history.observe("x", 0, 20);
        assert!(history.due().is_empty(), "a position repeated is not new");
        history.observe("x", 0, 30);
        assert_eq!(history.due()["x"][&0], 10);
        history.observe("x", 0, 40);
        assert_eq!(history.due()["x"][&0], 20);
        history.observe("x", 1, 5);
        assert!(!history.due()["x"].contains_key(&1));
    }

    proptest! {
        /// Whatever positions a reader completes, in whatever order they
        /// are seen (sampled, repeated, or stale from a partition's former
        /// owner), nothing at or after any of its last `KEEP` completed
        /// positions is ever purged.
        #[test]
        fn nothing_a_retained_checkpoint_reads_is_purged(
            steps in proptest::collection::vec((0u8..3, 0i64..1_000), 1..200),
        ) {
            let mut history = PurgeHistory::default();
            let mut completed: Vec<i64> = Vec::new();
            for (kind, offset) in steps {
                match kind {
                    // The reader completes a checkpoint further on.
                    0 | 1 => {
                        let next = completed.last().copied().unwrap_or(0) + offset;
                        completed.push(next);
                        if kind == 0 {
                            history.observe("x", 0, next);
                        }
                    }
                    // A stale report of an older position.
                    _ => {
                        if let Some(&old) = completed.get(offset as usize % completed.len().max(1)) {
                            history.observe("x", 0, old);
                        }
                    }
                }
                let retained_from = completed
                    .iter()
                    .rev()
                    .take(KEEP)
                    .min()
                    .copied()
                    .unwrap_or(0);
                if let Some(to) = history.due().get("x").and_then(|x| x.get(&0)) {
                    prop_assert!(*to <= retained_from, "purged to {to}, a retained checkpoint reads from {retained_from}");
                }
            }
        }
    }
}
