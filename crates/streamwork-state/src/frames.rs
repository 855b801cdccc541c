//! Records written as a sequence of archives: [`FrameWriter`] and
//! [`frames`].
//!
//! rkyv's relative pointers are 32-bit, so one archive spans at most
//! 2 GiB, and rkyv panics past it. Keyed state can be larger than that in
//! one instance, so a keyed field's record is a sequence of *frames*, each
//! an archive of some of its entries, sized from the bytes an entry took
//! in the frames before (about [`FRAME_BUDGET`] each). Each frame is
//! followed by a trailer (its length and a magic number), so that frames
//! are written as they are archived, with no buffer, and found again from
//! the record's end.
//!
//! ```text
//! | archive | zeros to 16 | len: u64 LE | magic: u64 LE | archive | ... |
//! ```

use std::io::Write;

use crate::error::StateError;
use crate::lent::archive_into;
use crate::state_data::StreamWriter;
use rkyv::Serialize;
use rkyv::api::high::HighSerializer;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;

/// What a frame of entries aims at: an eighth of what one archive can
/// span, so that entries up to eight times larger than those before them
/// still fit.
const FRAME_BUDGET: u64 = 256 << 20;

/// The most entries in a frame, however small they were so far.
const MOST_ENTRIES: usize = 1 << 16;

/// The entries of the first frame, before any size is known.
const FIRST_ENTRIES: usize = 64;

/// Ends every frame's trailer.
const MAGIC: u64 = u64::from_le_bytes(*b"SWframe1");

/// A frame's trailer: its length, then [`MAGIC`].
const TRAILER: usize = 16;

/// Writes a record as frames of entries.
pub(crate) struct FrameWriter<'o> {
    out: &'o mut dyn Write,
    /// Entries and bytes written so far, and in the last frame.
    entries: u64,
    bytes: u64,
    last: (u64, u64),
}

impl<'o> FrameWriter<'o> {
    pub(crate) fn new(out: &'o mut dyn Write) -> Self {
        FrameWriter {
            out,
            entries: 0,
            bytes: 0,
            last: (0, 0),
        }
    }

    /// How many entries the next frame should hold: [`FRAME_BUDGET`] at
    /// the larger of the bytes per entry so far and in the last frame.
    pub(crate) fn chunk(&self) -> usize {
        if self.entries == 0 {
            return FIRST_ENTRIES;
        }
        let mean = self.bytes / self.entries;
        let recent = self.last.1 / self.last.0.max(1);
        let per_entry = mean.max(recent).max(1);
        usize::try_from(FRAME_BUDGET / per_entry)
            .unwrap_or(MOST_ENTRIES)
            .clamp(1, MOST_ENTRIES)
    }

    /// Writes `items` as frames of [`chunk`](Self::chunk) items each,
    /// `frame` making each frame from its items.
    pub(crate) fn write_chunks<I, T>(
        &mut self,
        items: impl IntoIterator<Item = I>,
        mut frame: impl FnMut(Vec<I>) -> T,
    ) -> Result<(), StateError>
    where
        T: for<'a, 'w> Serialize<HighSerializer<StreamWriter<'w>, ArenaHandle<'a>, rancor::Error>>,
    {
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let chunk: Vec<I> = items.by_ref().take(self.chunk()).collect();
            let len = chunk.len();
            self.write(&frame(chunk), len)?;
        }
        Ok(())
    }

    /// Archives `frame`, which holds `entries` entries, and its trailer.
    pub(crate) fn write<T>(&mut self, frame: &T, entries: usize) -> Result<(), StateError>
    where
        T: for<'a, 'w> Serialize<HighSerializer<StreamWriter<'w>, ArenaHandle<'a>, rancor::Error>>,
    {
        let mut counted = Counted {
            out: &mut *self.out,
            len: 0,
        };
        archive_into(frame, &mut counted)?;
        let len = counted.len;
        let padding = (len.next_multiple_of(16) - len) as usize;
        let mut trailer = [0u8; 16 + TRAILER];
        trailer[16..24].copy_from_slice(&len.to_le_bytes());
        trailer[24..].copy_from_slice(&MAGIC.to_le_bytes());
        self.out
            .write_all(&trailer[16 - padding..])
            .map_err(|e| StateError::Serialize {
                type_name: std::any::type_name::<T>(),
                reason: format!("writing a frame's trailer: {e}"),
            })?;
        let entries = entries as u64;
        self.entries += entries;
        self.bytes += len;
        self.last = (entries, len);
        Ok(())
    }
}

/// Counts what passes through it.
struct Counted<'a> {
    out: &'a mut dyn Write,
    len: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(buf)?;
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Why a record's frames cannot be found: the record is damaged, or not
/// written as frames.
#[derive(Debug, thiserror::Error)]
#[error("its frames do not read: {0}")]
pub(crate) struct FrameError(String);

/// The frames of `record`, in the order they were written; each starts
/// where the record does modulo 16 (aligned if the record is).
pub(crate) fn frames(record: &[u8]) -> Result<Vec<&[u8]>, FrameError> {
    let mut found = Vec::new();
    let mut end = record.len();
    while end > 0 {
        let Some(at) = end.checked_sub(TRAILER) else {
            return Err(FrameError(format!(
                "{end} bytes before a frame are too few for its trailer"
            )));
        };
        let word = |from: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&record[from..from + 8]);
            u64::from_le_bytes(bytes)
        };
        if word(at + 8) != MAGIC {
            return Err(FrameError(format!("no frame ends at byte {end}")));
        }
        let len = usize::try_from(word(at))
            .map_err(|_| FrameError("a frame's length overflows".to_string()))?;
        let start = len
            .checked_next_multiple_of(16)
            .and_then(|padded| at.checked_sub(padded))
            .ok_or_else(|| {
                FrameError(format!(
                    "a frame of {len} bytes does not fit before byte {at}"
                ))
            })?;
        found.push(&record[start..start + len]);
        end = start;
    }
    found.reverse();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_in_order_and_damage_is_named() {
        let mut record = rkyv::util::AlignedVec::<16>::new();
        let values: Vec<Vec<u64>> = vec![vec![1, 2, 3], Vec::new(), (0..1000).collect()];
        {
            let mut out: Vec<u8> = Vec::new();
            let mut writer = FrameWriter::new(&mut out);
            for value in &values {
                writer.write(value, value.len()).unwrap();
            }
            record.extend_from_slice(&out);
        }
        let read = frames(&record).unwrap();
        assert_eq!(read.len(), 3);
        for (frame, value) in read.iter().zip(&values) {
            assert!((frame.as_ptr() as usize).is_multiple_of(16));
            let mut aligned = rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(frame);
            let back = rkyv::from_bytes::<Vec<u64>, rancor::Error>(&aligned).unwrap();
            assert_eq!(&back, value);
        }
        assert!(frames(&[]).unwrap().is_empty());
        assert!(frames(&record[..record.len() - 1]).is_err());
        assert!(frames(&record[8..]).is_err());
        let mut lying = record.to_vec();
        let at = lying.len() - TRAILER;
        lying[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(frames(&lying).is_err());
    }

    #[test]
    fn frames_hold_about_their_budget_of_entries() {
        let mut out: Vec<u8> = Vec::new();
        let mut writer = FrameWriter::new(&mut out);
        assert_eq!(writer.chunk(), FIRST_ENTRIES);
        let big: Vec<u8> = vec![7; 1 << 20];
        writer.write(&big, 1).unwrap();
        // A megabyte an entry: about 256 entries a frame.
        assert!((250..=256).contains(&writer.chunk()), "{}", writer.chunk());
        let small: Vec<u8> = vec![1; 1000];
        writer.write(&small, 1000).unwrap();
        // About a kilobyte an entry on the whole: as many as a frame takes.
        assert_eq!(writer.chunk(), MOST_ENTRIES);
        // Large entries again: the last frame's size counts at once.
        let pair: Vec<u8> = vec![3; 2 << 20];
        writer.write(&pair, 2).unwrap();
        assert!((250..=256).contains(&writer.chunk()), "{}", writer.chunk());
    }
}
