//! Reading a topic whose offsets have no holes: [`OffsetHoles`].
//!
//! A partition written without transactions and never compacted holds
//! every offset from its start to its end. A fetch that answers a later
//! offset than the one asked for then shows a broker that made later
//! records readable before earlier ones: tansu 0.6 raises a partition's
//! high watermark before it stores the batch, so that of two batches
//! produced at the same moment the second can be fetched while the first
//! is not yet there, and a consumer that took the fetch as it came would
//! pass over the first for good. A reader that knows its topic has no
//! holes reads again from the offset it expected, until the records there
//! can be read, for a bounded wait.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to do with a record read from a partition whose offsets have no
/// holes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoleVerdict {
    /// It is the next one (or the hole before it outlasted the wait): take it.
    Take,
    /// Offsets before it were passed over: read again from this offset
    /// (the record is left to be read again after them).
    ReadAgainFrom(i64),
}

/// The holes open in each partition: where each began and since when.
///
/// ```
/// use std::time::{Duration, Instant};
/// use streamwork::connectors::kafka::{HoleVerdict, OffsetHoles};
///
/// let mut holes = OffsetHoles::new(Duration::from_secs(10));
/// let now = Instant::now();
/// assert_eq!(holes.check(0, Some(100), 100, || now), HoleVerdict::Take);
/// // Offsets 101..136 were passed over: read again from 101.
/// assert_eq!(holes.check(0, Some(101), 136, || now), HoleVerdict::ReadAgainFrom(101));
/// assert_eq!(holes.check(0, Some(101), 101, || now), HoleVerdict::Take);
/// ```
#[derive(Clone, Debug)]
pub struct OffsetHoles {
    wait: Duration,
    open: BTreeMap<i32, (i64, Instant)>,
}

impl OffsetHoles {
    /// Holes are read again for up to `wait` each; one still there after it
    /// is taken as the partition's (the records after it are read).
    pub fn new(wait: Duration) -> Self {
        OffsetHoles {
            wait,
            open: BTreeMap::new(),
        }
    }

    /// Whether to take the record at `offset` of `partition` when the next
    /// offset expected there is `expected` (`None`: not known yet, as before
    /// the first record of a partition read from its start). `now` is asked
    /// only at a hole, so the next record's path reads no clock.
    pub fn check(
        &mut self,
        partition: i32,
        expected: Option<i64>,
        offset: i64,
        now: impl FnOnce() -> Instant,
    ) -> HoleVerdict {
        let Some(expected) = expected.filter(|&expected| offset > expected) else {
            if !self.open.is_empty() {
                self.open.remove(&partition);
            }
            return HoleVerdict::Take;
        };
        let now = now();
        match self.open.get(&partition) {
            Some(&(at, since)) if at == expected => {
                if now.saturating_duration_since(since) < self.wait {
                    return HoleVerdict::ReadAgainFrom(expected);
                }
                self.open.remove(&partition);
                tracing::warn!(
                    "partition {partition}: offsets {expected}..{offset} could not be read for {:?}: the records after them are read (a topic written with transactions, or compacted, has holes; read it without `expect_no_holes`)",
                    self.wait
                );
                HoleVerdict::Take
            }
            _ => {
                tracing::debug!(
                    "partition {partition}: the broker answered offset {offset} before {expected}: reading again from {expected}"
                );
                self.open.insert(partition, (expected, now));
                HoleVerdict::ReadAgainFrom(expected)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hole_is_read_again_until_it_fills_or_its_wait_is_over() {
        let wait = Duration::from_secs(10);
        let mut holes = OffsetHoles::new(wait);
        let start = Instant::now();
        assert_eq!(holes.check(3, None, 40, || start), HoleVerdict::Take);
        assert_eq!(holes.check(3, Some(41), 41, || start), HoleVerdict::Take);
        assert_eq!(
            holes.check(3, Some(42), 50, || start),
            HoleVerdict::ReadAgainFrom(42)
        );
        // Another partition's hole is its own.
        assert_eq!(
            holes.check(4, Some(7), 9, || start + wait),
            HoleVerdict::ReadAgainFrom(7)
        );
        // Still there just before the wait is over; then taken.
        let almost = start + wait - Duration::from_millis(1);
        assert_eq!(
            holes.check(3, Some(42), 50, || almost),
            HoleVerdict::ReadAgainFrom(42)
        );
        assert_eq!(
            holes.check(3, Some(42), 50, || start + wait),
            HoleVerdict::Take
        );
        // A later hole waits afresh.
        assert_eq!(
            holes.check(3, Some(51), 60, || start + wait),
            HoleVerdict::ReadAgainFrom(51)
        );
        // Filled: the record expected came.
        assert_eq!(
            holes.check(3, Some(51), 51, || start + wait),
            HoleVerdict::Take
        );
        assert_eq!(
            holes.check(3, Some(52), 60, || start + wait * 2),
            HoleVerdict::ReadAgainFrom(52),
            "a filled hole does not count toward the next one's wait"
        );
    }

    #[test]
    fn an_offset_before_the_one_expected_is_taken() {
        let mut holes = OffsetHoles::new(Duration::ZERO);
        assert_eq!(holes.check(0, Some(10), 4, Instant::now), HoleVerdict::Take);
    }
}
