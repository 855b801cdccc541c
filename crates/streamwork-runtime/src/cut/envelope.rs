//! What a cut edge carries: a record encoded, with its key's hash and its
//! writer's number for it.

/// A record on a cut edge: what the part upstream writes to what carries
/// the edge (an exchange's partitioned log), and what the part downstream
/// reads: its key's stable hash (which partition it goes to), its writer
/// and sequence number (for dropping what a replay writes again), and its
/// bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The stable hash of the record's key: records of one key go to one
    /// partition.
    pub key_hash: u64,
    /// The writing task (the upstream part's share).
    pub writer: u32,
    /// The writer's sequence number of this record: 1, 2, 3, ... across
    /// the writer's checkpoints, so that a replay writes the same numbers
    /// again and the reader drops them.
    pub seq: u64,
    /// The encoded record ([`Portable`](streamwork_core::Portable)).
    pub payload: Vec<u8>,
}
