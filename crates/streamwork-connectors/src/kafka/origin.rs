//! Exactly-once through an intermediate topic without transactions: every
//! record written to it carries its origin (the input partition, offset and
//! index within what that input record produced), and the reader drops what
//! it has already seen.
//!
//! Why it is enough: the origins one input partition produces into one
//! intermediate partition increase strictly, and the idempotent producer
//! keeps them in order and without duplicates within a session. A writer
//! that crashes and resumes from its checkpoint writes the same sequence
//! again from an earlier point; whatever of it the reader has already seen
//! has an origin no greater than the last one it admitted from that input
//! partition.

use std::collections::BTreeMap;

/// The header under which [`KafkaSink::origin`](super::KafkaSink::origin)
/// writes a record's origin (16 bytes, little endian: partition `i32`,
/// offset `i64`, index `u32`).
pub const ORIGIN_HEADER: &str = "streamwork-origin";

/// Where an intermediate record came from: the input record's partition and
/// offset, and its index among the records derived from it.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Origin {
    /// The input record's partition.
    pub partition: i32,
    /// The input record's offset.
    pub offset: i64,
    /// Its index among the records derived from the input record.
    pub index: u32,
}

impl Origin {
    /// The header bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..4].copy_from_slice(&self.partition.to_le_bytes());
        bytes[4..12].copy_from_slice(&self.offset.to_le_bytes());
        bytes[12..].copy_from_slice(&self.index.to_le_bytes());
        bytes
    }

    /// Reads header bytes; `None` unless they are 16.
    pub fn from_bytes(bytes: &[u8]) -> Option<Origin> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let mut partition = [0; 4];
        let mut offset = [0; 8];
        let mut index = [0; 4];
        partition.copy_from_slice(&bytes[..4]);
        offset.copy_from_slice(&bytes[4..12]);
        index.copy_from_slice(&bytes[12..]);
        Some(Origin {
            partition: i32::from_le_bytes(partition),
            offset: i64::from_le_bytes(offset),
            index: u32::from_le_bytes(index),
        })
    }
}

/// The last origin admitted per input partition, for one reader of one
/// intermediate partition: a record whose origin is not past it is a
/// duplicate. Part of the reader's checkpointed state.
///
/// ```
/// use streamwork::connectors::kafka::{Origin, OriginFilter};
/// let mut filter = OriginFilter::default();
/// let at = |offset, index| Origin { partition: 0, offset, index };
/// assert!(filter.admit(at(7, 0)));
/// assert!(filter.admit(at(7, 1)));
/// assert!(!filter.admit(at(7, 0)), "a replayed record");
/// assert!(filter.admit(at(8, 0)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginFilter {
    last: BTreeMap<i32, (i64, u32)>,
}

impl OriginFilter {
    /// Whether a record of this origin is new (and remembers it if so).
    pub fn admit(&mut self, origin: Origin) -> bool {
        let at = (origin.offset, origin.index);
        match self.last.get_mut(&origin.partition) {
            Some(last) if *last >= at => false,
            Some(last) => {
                *last = at;
                true
            }
            None => {
                self.last.insert(origin.partition, at);
                true
            }
        }
    }

    /// Takes in what `other` has seen: the later origin of each partition.
    pub fn merge(&mut self, other: &OriginFilter) {
        for (&partition, &at) in &other.last {
            let last = self.last.entry(partition).or_insert(at);
            *last = (*last).max(at);
        }
    }

    /// Appends the filter to `bytes` (16 bytes per input partition, after a
    /// `u32` count).
    pub fn write_to(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&(self.last.len() as u32).to_le_bytes());
        for (&partition, &(offset, index)) in &self.last {
            bytes.extend_from_slice(
                &Origin {
                    partition,
                    offset,
                    index,
                }
                .to_bytes(),
            );
        }
    }

    /// Reads a filter written by [`write_to`](Self::write_to) from the start
    /// of `bytes`; returns it and the bytes after it, or `None` if they are
    /// cut short.
    pub fn read_from(bytes: &[u8]) -> Option<(OriginFilter, &[u8])> {
        let (count, mut rest) = bytes.split_first_chunk::<4>()?;
        let mut filter = OriginFilter::default();
        for _ in 0..u32::from_le_bytes(*count) {
            let (entry, after) = rest.split_first_chunk::<16>()?;
            let origin = Origin::from_bytes(entry)?;
            filter
                .last
                .insert(origin.partition, (origin.offset, origin.index));
            rest = after;
        }
        Some((filter, rest))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_filter_round_trips_through_bytes() {
        let mut filter = OriginFilter::default();
        for (partition, offset, index) in [(0, 5, 1), (3, 9, 0), (-1, i64::MAX, u32::MAX)] {
            filter.admit(Origin {
                partition,
                offset,
                index,
            });
        }
        let mut bytes = Vec::new();
        filter.write_to(&mut bytes);
        bytes.push(42);
        let (read, rest) = OriginFilter::read_from(&bytes).unwrap();
        assert_eq!(read, filter);
        assert_eq!(rest, [42]);
        assert!(OriginFilter::read_from(&bytes[..bytes.len() - 2]).is_none());
    }

    proptest! {
        /// A writer that replays from any earlier point any number of times:
        /// the filter admits every record exactly once, in order.
        #[test]
        fn replays_are_admitted_once(
            lengths in proptest::collection::vec(0u32..4, 1..40),
            restarts in proptest::collection::vec((0usize..40, 0usize..40), 0..5),
        ) {
            let sequence: Vec<Origin> = lengths
                .iter()
                .enumerate()
                .flat_map(|(offset, &n)| {
                    (0..n).map(move |index| Origin { partition: 2, offset: offset as i64, index })
                })
                .collect();
            // What reaches the topic: prefixes cut at a crash, each resumed
            // from an earlier point.
            let mut written = Vec::new();
            let mut at = 0;
            for &(crash, back) in &restarts {
                let crash = crash.min(sequence.len()).max(at);
                written.extend_from_slice(&sequence[at..crash]);
                at = crash.saturating_sub(back);
            }
            written.extend_from_slice(&sequence[at..]);
            let mut filter = OriginFilter::default();
            let admitted: Vec<Origin> =
                written.into_iter().filter(|o| filter.admit(*o)).collect();
            prop_assert_eq!(admitted, sequence);
        }
    }
}
