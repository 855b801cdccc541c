//! The framing of one record of the checkpoint log.
//!
//! A record is a 48-byte header followed by its payload, padded so that the
//! next record starts on a 16-byte boundary (segments are mapped at a page
//! boundary, so every payload is 16-byte aligned, as rkyv archives need):
//!
//! | bytes  | field                                                  |
//! |--------|--------------------------------------------------------|
//! | 0..4   | magic `SWCL`                                           |
//! | 4      | format version (1)                                     |
//! | 5      | kind: 1 snapshot, 2 commit, 3 dependency               |
//! | 6      | flags: bit 0, the payload is checked by its reader, a part at a time (a run of the state store), not whole on load |
//! | 7      | reserved, zero                                         |
//! | 8..16  | checkpoint id                                          |
//! | 16..24 | operator id (a snapshot) / zero (a commit) / the checkpoint depended on (a dependency) |
//! | 24..28 | part: instance index or first key group (a snapshot); number of snapshots (a commit) |
//! | 28..32 | schema version of the payload                          |
//! | 32..40 | payload length in bytes                                |
//! | 40..44 | CRC-32 of the payload                                  |
//! | 44..48 | CRC-32 of bytes 0..44                                  |
//!
//! Integers are little-endian. The header's own checksum lets a reader trust
//! the length (and so find the next record) even when a payload is damaged.

use streamwork_core::{CheckpointId, InstanceIdx, OperatorId};

/// Bytes of a record header.
pub(crate) const HEADER_LEN: usize = 48;
/// Alignment of every record, hence of every payload.
pub(crate) const ALIGN: usize = 16;
const MAGIC: [u8; 4] = *b"SWCL";
const FORMAT_VERSION: u8 = 1;

/// What a record holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One instance's (or key-group range's) snapshot of one operator.
    Snapshot,
    /// A checkpoint is complete: every snapshot it names was written before.
    Commit,
    /// A checkpoint reads records of an earlier one (state written in
    /// increments): the earlier one's records are kept while it is.
    Depends,
}

/// A decoded record header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) checkpoint: u64,
    pub(crate) operator: u64,
    pub(crate) part: u32,
    pub(crate) schema: u32,
    pub(crate) len: u64,
    pub(crate) payload_crc: u32,
    /// The payload is checked by its reader, a part at a time, rather than
    /// whole when the checkpoint is loaded.
    pub(crate) checked_by_reader: bool,
}

/// Why bytes are not a record header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum BadHeader {
    /// Fewer bytes than a header.
    Short,
    /// Not a header of this format (or damaged).
    Invalid,
}

impl Header {
    /// A header of `kind` for `checkpoint`, of an empty payload, every
    /// other field 0.
    pub(crate) fn new(kind: Kind, checkpoint: CheckpointId) -> Header {
        Header {
            kind,
            checkpoint: checkpoint.get(),
            operator: 0,
            part: 0,
            schema: 0,
            len: 0,
            payload_crc: crc32fast::hash(&[]),
            checked_by_reader: false,
        }
    }

    /// The header of a snapshot of `operator`'s `part` for `checkpoint`,
    /// of an empty payload laid out by `schema`.
    pub(crate) fn snapshot(
        checkpoint: CheckpointId,
        operator: OperatorId,
        part: InstanceIdx,
        schema: u32,
    ) -> Header {
        Header {
            operator: operator.0,
            part: part.0,
            schema,
            ..Header::new(Kind::Snapshot, checkpoint)
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = FORMAT_VERSION;
        out[5] = match self.kind {
            Kind::Snapshot => 1,
            Kind::Commit => 2,
            Kind::Depends => 3,
        };
        out[6] = u8::from(self.checked_by_reader);
        out[8..16].copy_from_slice(&self.checkpoint.to_le_bytes());
        out[16..24].copy_from_slice(&self.operator.to_le_bytes());
        out[24..28].copy_from_slice(&self.part.to_le_bytes());
        out[28..32].copy_from_slice(&self.schema.to_le_bytes());
        out[32..40].copy_from_slice(&self.len.to_le_bytes());
        out[40..44].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&out[..44]);
        out[44..48].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, BadHeader> {
        let bytes = bytes.get(..HEADER_LEN).ok_or(BadHeader::Short)?;
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if bytes[0..4] != MAGIC
            || bytes[4] != FORMAT_VERSION
            || crc32fast::hash(&bytes[..44]) != u32_at(44)
        {
            return Err(BadHeader::Invalid);
        }
        let kind = match bytes[5] {
            1 => Kind::Snapshot,
            2 => Kind::Commit,
            3 => Kind::Depends,
            _ => return Err(BadHeader::Invalid),
        };
        Ok(Header {
            kind,
            checkpoint: u64_at(8),
            operator: u64_at(16),
            part: u32_at(24),
            schema: u32_at(28),
            len: u64_at(32),
            payload_crc: u32_at(40),
            checked_by_reader: bytes[6] & 1 != 0,
        })
    }

    /// Bytes the whole record takes, padding included (`None` if absurd).
    pub(crate) fn record_len(&self) -> Option<u64> {
        let unpadded = (HEADER_LEN as u64).checked_add(self.len)?;
        unpadded.checked_next_multiple_of(ALIGN as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            kind: Kind::Snapshot,
            checkpoint: 7,
            operator: 0xdead_beef_0bad_f00d,
            part: 3,
            schema: 2,
            len: 100,
            payload_crc: 0x1234_5678,
            checked_by_reader: true,
        }
    }

    #[test]
    fn a_header_round_trips() {
        let h = header();
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(h.record_len(), Some(160));
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let bytes = header().encode();
        for bit in 0..HEADER_LEN * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                Header::decode(&damaged),
                Err(BadHeader::Invalid),
                "bit {bit}"
            );
        }
        assert_eq!(Header::decode(&bytes[..47]), Err(BadHeader::Short));
    }
}
