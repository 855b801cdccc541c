//! Timers: callbacks at a point of event time or processing time, per key.
//!
//! [`Timers`] is the primitive windows are built on: an operator registers
//! `(time, key)` pairs and, when its event time (watermark) or the wall clock
//! passes them, takes them back in time order (ties in registration order).
//! Registering the same pair twice fires it once. The queues are plain data
//! owned by the operator, so they are part of its state.

use std::collections::BTreeMap;

/// Event-time and processing-time timers, each for a key `K` (`()` when unkeyed).
///
/// ```
/// use streamwork::core::timer::Timers;
/// use streamwork::core::Timestamp;
/// let mut timers = Timers::new();
/// timers.register_event(Timestamp::from_millis(20), "b");
/// timers.register_event(Timestamp::from_millis(10), "a");
/// let fired: Vec<_> = timers.fire_event(Timestamp::from_millis(15)).collect();
/// assert_eq!(fired, vec![(Timestamp::from_millis(10), "a")]);
/// ```
#[derive(Clone, Debug)]
pub struct Timers<K> {
    event: BTreeMap<crate::Timestamp, Vec<K>>,
    processing: BTreeMap<crate::Timestamp, Vec<K>>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            event: BTreeMap::new(),
            processing: BTreeMap::new(),
        }
    }
}

fn register<K: PartialEq>(
    queue: &mut BTreeMap<crate::Timestamp, Vec<K>>,
    time: crate::Timestamp,
    key: K,
) -> bool {
    let keys = queue.entry(time).or_default();
    if keys.contains(&key) {
        return false;
    }
    keys.push(key);
    true
}

fn delete<K: PartialEq>(
    queue: &mut BTreeMap<crate::Timestamp, Vec<K>>,
    time: crate::Timestamp,
    key: &K,
) -> bool {
    let Some(keys) = queue.get_mut(&time) else {
        return false;
    };
    let Some(position) = keys.iter().position(|k| k == key) else {
        return false;
    };
    keys.remove(position);
    if keys.is_empty() {
        queue.remove(&time);
    }
    true
}

/// Takes the timers at or before `until`, in order.
fn fire<K>(
    queue: &mut BTreeMap<crate::Timestamp, Vec<K>>,
    until: crate::Timestamp,
) -> impl Iterator<Item = (crate::Timestamp, K)> + '_ {
    std::iter::from_fn(move || {
        let mut entry = queue.first_entry()?;
        if *entry.key() > until {
            return None;
        }
        let time = *entry.key();
        let keys = entry.get_mut();
        let key = keys.remove(0);
        if keys.is_empty() {
            entry.remove();
        }
        Some((time, key))
    })
}

impl<K: PartialEq> Timers<K> {
    /// No timers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires `key` once event time reaches `time`. Returns false if that timer
    /// was already registered.
    pub fn register_event(&mut self, time: crate::Timestamp, key: K) -> bool {
        register(&mut self.event, time, key)
    }

    /// Fires `key` once the wall clock reaches `time` (milliseconds since the epoch).
    pub fn register_processing(&mut self, time: crate::Timestamp, key: K) -> bool {
        register(&mut self.processing, time, key)
    }

    /// Cancels an event-time timer; returns whether it existed.
    pub fn delete_event(&mut self, time: crate::Timestamp, key: &K) -> bool {
        delete(&mut self.event, time, key)
    }

    /// Cancels a processing-time timer; returns whether it existed.
    pub fn delete_processing(&mut self, time: crate::Timestamp, key: &K) -> bool {
        delete(&mut self.processing, time, key)
    }

    /// Takes, in order, the event-time timers at or before `watermark`.
    pub fn fire_event(
        &mut self,
        watermark: crate::Timestamp,
    ) -> impl Iterator<Item = (crate::Timestamp, K)> + '_ {
        fire(&mut self.event, watermark)
    }

    /// Takes, in order, the processing-time timers at or before `now`.
    pub fn fire_processing(
        &mut self,
        now: crate::Timestamp,
    ) -> impl Iterator<Item = (crate::Timestamp, K)> + '_ {
        fire(&mut self.processing, now)
    }

    /// The earliest event-time timer.
    pub fn next_event(&self) -> Option<crate::Timestamp> {
        self.event.keys().next().copied()
    }

    /// The earliest processing-time timer.
    pub fn next_processing(&self) -> Option<crate::Timestamp> {
        self.processing.keys().next().copied()
    }

    /// Number of pending timers of both kinds.
    pub fn len(&self) -> usize {
        self.event
            .values()
            .chain(self.processing.values())
            .map(Vec::len)
            .sum()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.event.is_empty() && self.processing.is_empty()
    }

    /// Every pending timer, event-time ones first, each kind in time order:
    /// what a checkpoint of the timers holds.
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, crate::Timestamp, &K)> {
        fn of<K>(
            domain: TimeDomain,
            queue: &BTreeMap<crate::Timestamp, Vec<K>>,
        ) -> impl Iterator<Item = (TimeDomain, crate::Timestamp, &K)> {
            queue
                .iter()
                .flat_map(move |(time, keys)| keys.iter().map(move |key| (domain, *time, key)))
        }
        of(TimeDomain::Event, &self.event).chain(of(TimeDomain::Processing, &self.processing))
    }

    /// Registers a timer of either kind (as [`iter`](Self::iter) names it).
    pub fn register(&mut self, domain: TimeDomain, time: crate::Timestamp, key: K) -> bool
    where
        K: PartialEq,
    {
        match domain {
            TimeDomain::Event => self.register_event(time, key),
            TimeDomain::Processing => self.register_processing(time, key),
        }
    }
}

/// Which clock a timer follows.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Event time: fires when the watermark reaches it.
    Event,
    /// Processing time: fires when the wall clock reaches it.
    Processing,
}

/// The wall clock as a [`Timestamp`](crate::Timestamp), for processing time.
pub fn wall_clock() -> crate::Timestamp {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    crate::Timestamp::from_millis(millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn fire_in_time_order_then_registration_order_and_once() {
        let mut timers = Timers::new();
        assert!(timers.register_event(t(5), 'x'));
        assert!(timers.register_event(t(1), 'y'));
        assert!(timers.register_event(t(5), 'z'));
        assert!(!timers.register_event(t(5), 'x'));
        assert_eq!(timers.len(), 3);
        assert_eq!(timers.fire_event(t(0)).count(), 0);
        let fired: Vec<_> = timers.fire_event(t(5)).collect();
        assert_eq!(fired, vec![(t(1), 'y'), (t(5), 'x'), (t(5), 'z')]);
        assert!(timers.is_empty());
    }

    #[test]
    fn deleted_timers_do_not_fire() {
        let mut timers = Timers::new();
        timers.register_processing(t(3), 1);
        timers.register_processing(t(4), 2);
        assert!(timers.delete_processing(t(3), &1));
        assert!(!timers.delete_processing(t(3), &1));
        assert_eq!(timers.next_processing(), Some(t(4)));
        assert_eq!(
            timers.fire_processing(t(10)).collect::<Vec<_>>(),
            vec![(t(4), 2)]
        );
    }
}
