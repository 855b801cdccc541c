//! The frames of an exchange: the head of every record's value on the
//! topic ([`FrameHead`]), and the records a writer stages between two
//! barriers ([`Frames`]).

use streamwork_core::{Record, Timestamp};
use streamwork_runtime::cut::Envelope;

/// The first byte of every exchange frame.
pub(super) const MAGIC: u8 = 0xE2;
/// A frame holding a record.
pub(super) const RECORD: u8 = 0;
/// A marker frame, which readers skip.
pub(super) const MARKER: u8 = 1;
/// The frame's head: magic, kind, writer, checkpoint, number.
pub(super) const HEAD: usize = 2 + 4 + 8 + 8;
/// The writer of marker frames.
pub(super) const MARKER_WRITER: u32 = u32::MAX;

/// The head of an exchange frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameHead {
    pub(super) kind: u8,
    pub(super) writer: u32,
    pub(super) checkpoint: u64,
    pub(super) seq: u64,
}

impl FrameHead {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.push(MAGIC);
        out.push(self.kind);
        out.extend_from_slice(&self.writer.to_le_bytes());
        out.extend_from_slice(&self.checkpoint.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
    }

    /// The head of `value`, if it is an exchange frame.
    pub(super) fn read(value: &[u8]) -> Option<FrameHead> {
        let head = value.get(..HEAD)?;
        if head[0] != MAGIC || head[1] > MARKER {
            return None;
        }
        Some(FrameHead {
            kind: head[1],
            writer: u32::from_le_bytes(head[2..6].try_into().ok()?),
            checkpoint: u64::from_le_bytes(head[6..14].try_into().ok()?),
            seq: u64::from_le_bytes(head[14..22].try_into().ok()?),
        })
    }
}

/// The records one writer stages between two barriers: for each, its
/// partition, number, key hash, event time and bytes, one after another in
/// one buffer (no allocation per record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Frames(pub(super) Vec<u8>);

/// One staged record, read back from [`Frames`].
pub(super) struct Staged<'a> {
    pub(super) partition: u32,
    pub(super) seq: u64,
    pub(super) key_hash: u64,
    pub(super) time: Option<i64>,
    pub(super) payload: &'a [u8],
}

impl Frames {
    pub(super) fn push(&mut self, partition: u32, seq: u64, record: &Record<Envelope>) {
        let out = &mut self.0;
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&record.value.key_hash.to_le_bytes());
        let time = record.time.map_or(i64::MIN, Timestamp::millis);
        out.extend_from_slice(&time.to_le_bytes());
        out.extend_from_slice(&(record.value.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&record.value.payload);
    }

    /// Every staged record, or `None` if the bytes are torn.
    pub(super) fn iter(&self) -> impl Iterator<Item = Option<Staged<'_>>> {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let staged = (|| {
                let (partition, after) = rest.split_first_chunk::<4>()?;
                let (seq, after) = after.split_first_chunk::<8>()?;
                let (key_hash, after) = after.split_first_chunk::<8>()?;
                let (time, after) = after.split_first_chunk::<8>()?;
                let (len, after) = after.split_first_chunk::<4>()?;
                let len = u32::from_le_bytes(*len) as usize;
                let payload = after.get(..len)?;
                rest = &after[len..];
                let time = i64::from_le_bytes(*time);
                Some(Staged {
                    partition: u32::from_le_bytes(*partition),
                    seq: u64::from_le_bytes(*seq),
                    key_hash: u64::from_le_bytes(*key_hash),
                    time: (time != i64::MIN).then_some(time),
                    payload,
                })
            })();
            if staged.is_none() {
                rest = &[];
            }
            Some(staged)
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The head of record `seq` of `writer`, covered by `checkpoint`.
    pub(in crate::exchange) fn head(writer: u32, checkpoint: u64, seq: u64) -> FrameHead {
        FrameHead {
            kind: RECORD,
            writer,
            checkpoint,
            seq,
        }
    }

    #[test]
    fn frame_heads_read_back_and_other_bytes_are_not_frames() {
        let mut bytes = Vec::new();
        let written = head(7, u64::MAX, 1 << 40);
        written.write(&mut bytes);
        bytes.extend_from_slice(b"payload");
        assert_eq!(FrameHead::read(&bytes), Some(written));
        assert_eq!(FrameHead::read(&bytes[..HEAD - 1]), None, "torn");
        assert_eq!(FrameHead::read(b"a line of text, not a frame"), None);
        bytes[1] = 9;
        assert_eq!(FrameHead::read(&bytes), None, "an unknown kind");
    }
}
