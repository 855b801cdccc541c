//! A run: one immutable, sorted batch of a stored state's entries, as it
//! lies in the checkpoint log, read in place. It is written as a stream
//! (it need not fit in memory): the key groups' archives first, then the
//! table of where each lies, then a fixed trailer.
//!
//! | bytes                | field                                           |
//! |----------------------|-------------------------------------------------|
//! | ...                  | each key group's archive, 16-byte aligned, and its Bloom filter |
//! | table .. table+40g   | each key group's archive and filter: offset and length of each, and their CRC-32s |
//! | end-32 .. end-28     | magic `SWRN`                                    |
//! | end-28 .. end-24     | layout version (1)                              |
//! | end-24 .. end-20     | key groups of the job                           |
//! | end-20 .. end-16     | CRC-32 of the table                             |
//! | end-16 .. end-8      | entries (tombstones included)                   |
//! | end-8 .. end         | the table's offset                              |
//!
//! The log does not check a run whole when a checkpoint loads (that would
//! read all of it): the table is checked when the run is opened, a key
//! group's filter and archive against their CRC-32s the first time each is
//! read. A key group's archive is an rkyv `Vec<(hash, key, Option<value>)>`
//! sorted by hash (`None`: the key was removed). Its Bloom filter (Bloom,
//! 1970: 10 bits a key, 4 probes, about 1% false positives) answers most
//! lookups of a key the run does not hold without touching the archive: in
//! a log-structured store most lookups miss most runs. A group is validated by
//! rkyv the first time it is read, and then read without validation: a
//! restored instance starts at once and pays for the groups it touches.

use std::io::Write;
use std::sync::OnceLock;

use rkyv::Archived;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use rkyv::vec::ArchivedVec;
use streamwork_core::KeyGroups;
use streamwork_core::checkpoint::SharedBytes;

use crate::state_data::StateData;

/// One entry of a run: the key's stable hash, the key, and its value
/// (`None`: removed).
pub(crate) type RunEntry<K, V> = (u64, K, Option<V>);

/// A key group's archived entries.
pub(crate) type ArchivedEntries<K, V> = ArchivedVec<Archived<RunEntry<K, V>>>;

const MAGIC: &[u8; 4] = b"SWRN";
const VERSION: u32 = 1;
const TRAILER: usize = 32;
const ALIGN: usize = 16;
/// Bytes of the table per key group: archive offset and length, filter
/// offset and length, their CRC-32s.
const SLOT: usize = 40;
const FILTER_BITS_PER_KEY: u64 = 10;
const FILTER_PROBES: u64 = 4;

/// The bits a key of hash `hash` sets in a filter of `bits` bits.
fn filter_bits(hash: u64, bits: u64) -> impl Iterator<Item = u64> {
    let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let (h1, h2) = (mixed, mixed.rotate_left(32) | 1);
    (0..FILTER_PROBES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
}

/// A Bloom filter of `hashes`.
fn build_filter(hashes: impl ExactSizeIterator<Item = u64>) -> Vec<u8> {
    let bits = (hashes.len() as u64 * FILTER_BITS_PER_KEY)
        .max(64)
        .next_multiple_of(8);
    let mut filter = vec![0u8; (bits / 8) as usize];
    for hash in hashes {
        for bit in filter_bits(hash, bits) {
            filter[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }
    filter
}

/// Whether `filter` may hold `hash` (false: it certainly does not).
fn filter_may_hold(filter: &[u8], hash: u64) -> bool {
    let bits = filter.len() as u64 * 8;
    bits == 0
        || filter_bits(hash, bits).all(|bit| filter[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
}

/// What a run's bytes failed to be, or why they could not be written.
#[derive(Clone, Debug)]
pub(crate) struct BadRun(pub(crate) String);

impl BadRun {
    /// The run failed with `error`.
    pub(crate) fn of(error: impl std::fmt::Display) -> Self {
        BadRun(error.to_string())
    }
}

impl std::fmt::Display for BadRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes a run to a stream, one key group at a time in increasing order.
pub(crate) struct RunWriter<'w> {
    out: &'w mut dyn Write,
    written: u64,
    /// Per key group: offset and length of its archive and of its filter,
    /// and their CRC-32s (zeros: none).
    table: Vec<[u64; 5]>,
    next_group: u32,
    entries: u64,
}

impl<'w> RunWriter<'w> {
    pub(crate) fn new(key_groups: KeyGroups, out: &'w mut dyn Write) -> Self {
        RunWriter {
            out,
            written: 0,
            table: vec![[0; 5]; key_groups.count() as usize],
            next_group: 0,
            entries: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Adds key group `group`'s entries, sorted by hash (groups in order).
    pub(crate) fn group<K, V>(
        &mut self,
        group: u32,
        entries: &Vec<RunEntry<K, V>>,
    ) -> Result<(), BadRun>
    where
        Vec<RunEntry<K, V>>: StateData,
    {
        if group < self.next_group || group as usize >= self.table.len() {
            return Err(BadRun(format!("key group {group} written out of order")));
        }
        self.next_group = group + 1;
        if entries.is_empty() {
            return Ok(());
        }
        let archive: AlignedVec = rkyv::to_bytes::<rancor::Error>(entries).map_err(BadRun::of)?;
        let padding = (self.written.next_multiple_of(ALIGN as u64) - self.written) as usize;
        self.put(&[0u8; ALIGN][..padding]).map_err(BadRun::of)?;
        let at = self.written;
        self.put(&archive).map_err(BadRun::of)?;
        let filter = build_filter(entries.iter().map(|e| e.0));
        let filter_at = self.written;
        self.put(&filter).map_err(BadRun::of)?;
        let crcs =
            u64::from(crc32fast::hash(&archive)) | (u64::from(crc32fast::hash(&filter)) << 32);
        self.table[group as usize] = [
            at,
            archive.len() as u64,
            filter_at,
            filter.len() as u64,
            crcs,
        ];
        self.entries += entries.len() as u64;
        Ok(())
    }

    /// Writes the table and the trailer.
    pub(crate) fn finish(mut self) -> Result<(), BadRun> {
        let table_offset = self.written;
        let mut table = Vec::with_capacity(SLOT * self.table.len());
        for slot in &self.table {
            for field in slot {
                table.extend_from_slice(&field.to_le_bytes());
            }
        }
        let mut trailer = [0u8; TRAILER];
        trailer[0..4].copy_from_slice(MAGIC);
        trailer[4..8].copy_from_slice(&VERSION.to_le_bytes());
        trailer[8..12].copy_from_slice(&(self.table.len() as u32).to_le_bytes());
        trailer[12..16].copy_from_slice(&crc32fast::hash(&table).to_le_bytes());
        trailer[16..24].copy_from_slice(&self.entries.to_le_bytes());
        trailer[24..32].copy_from_slice(&table_offset.to_le_bytes());
        self.put(&table)
            .and_then(|()| self.put(&trailer))
            .map_err(BadRun::of)
    }
}

/// A run read in place from shared (mapped) bytes.
pub(crate) struct Run {
    bytes: SharedBytes,
    /// Where the table of key groups starts.
    table: usize,
    entries: u64,
    /// Per key group: validated by rkyv (true), or found invalid (false).
    checked: Box<[OnceLock<bool>]>,
    /// Per key group: its Bloom filter, copied into memory the first time
    /// it is used (every lookup that reaches the run reads it).
    filters: Box<[OnceLock<Box<[u8]>>]>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Run({} entries, {} bytes)",
            self.entries,
            self.bytes.bytes().len()
        )
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

impl Run {
    /// Checks the framing of a run written for `key_groups`.
    pub(crate) fn open(bytes: SharedBytes, key_groups: KeyGroups) -> Result<Run, BadRun> {
        let b = bytes.bytes();
        if b.len() < TRAILER || &b[b.len() - TRAILER..b.len() - TRAILER + 4] != MAGIC {
            return Err(BadRun("not a run of stored state".into()));
        }
        let trailer = &b[b.len() - TRAILER..];
        let version = u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]);
        if version != VERSION {
            return Err(BadRun(format!(
                "run layout {version}, this build reads {VERSION}"
            )));
        }
        let groups = u32::from_le_bytes([trailer[8], trailer[9], trailer[10], trailer[11]]);
        if groups != key_groups.count() {
            return Err(BadRun(format!(
                "written for {groups} key groups, the job has {}",
                key_groups.count()
            )));
        }
        let entries = u64_at(trailer, 16);
        let table = u64_at(trailer, 24);
        if table.checked_add(SLOT as u64 * u64::from(groups)) != Some((b.len() - TRAILER) as u64) {
            return Err(BadRun("its table of key groups is out of place".into()));
        }
        let table = table as usize;
        let table_crc = u32::from_le_bytes([trailer[12], trailer[13], trailer[14], trailer[15]]);
        if crc32fast::hash(&b[table..b.len() - TRAILER]) != table_crc {
            return Err(BadRun("its table of key groups fails its checksum".into()));
        }
        let fits = |offset: u64, len: u64| {
            offset
                .checked_add(len)
                .is_some_and(|end| end <= table as u64)
        };
        for g in 0..groups as usize {
            let slot = table + SLOT * g;
            let (offset, len) = (u64_at(b, slot), u64_at(b, slot + 8));
            let (filter, filter_len) = (u64_at(b, slot + 16), u64_at(b, slot + 24));
            if len > 0 && (!fits(offset, len) || !offset.is_multiple_of(ALIGN as u64)) {
                return Err(BadRun(format!("key group {g} lies out of place")));
            }
            if filter_len > 0 && !fits(filter, filter_len) {
                return Err(BadRun(format!(
                    "the filter of key group {g} lies out of place"
                )));
            }
        }
        let checked = (0..groups).map(|_| OnceLock::new()).collect();
        let filters = (0..groups).map(|_| OnceLock::new()).collect();
        Ok(Run {
            bytes,
            table,
            entries,
            checked,
            filters,
        })
    }

    /// A run this instance wrote (its own serialiser's bytes, made durable
    /// and mapped back): its key groups need no validation.
    pub(crate) fn open_own(bytes: SharedBytes, key_groups: KeyGroups) -> Result<Run, BadRun> {
        let run = Run::open(bytes, key_groups)?;
        for checked in run.checked.iter() {
            let _ = checked.set(true);
        }
        Ok(run)
    }

    /// Entries in the run, tombstones included.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    fn group_bytes(&self, group: u32) -> &[u8] {
        self.slice(group, 0)
    }

    /// Field `field` (0: archive, 16: filter) of key group `group`'s slot.
    fn slice(&self, group: u32, field: usize) -> &[u8] {
        let b = self.bytes.bytes();
        let at = self.table + SLOT * group as usize + field;
        let (start, len) = (u64_at(b, at) as usize, u64_at(b, at + 8) as usize);
        &b[start..start + len]
    }

    /// CRC-32 `which` (0: the archive's, 1: the filter's) of key group
    /// `group`.
    fn crc(&self, group: u32, which: u32) -> u32 {
        let crcs = u64_at(self.bytes.bytes(), self.table + SLOT * group as usize + 32);
        (crcs >> (32 * which)) as u32
    }

    /// Whether key group `group` may hold a key of hash `hash` (false: it
    /// certainly does not), by its Bloom filter, checked and copied into
    /// memory the first time.
    pub(crate) fn may_hold(&self, group: u32, hash: u64) -> Result<bool, BadRun> {
        if group as usize >= self.checked.len() {
            return Ok(false);
        }
        let archive_len = u64_at(self.bytes.bytes(), self.table + SLOT * group as usize + 8);
        if archive_len == 0 {
            return Ok(false);
        }
        let filter = self.filters[group as usize].get_or_init(|| {
            let filter = self.slice(group, 16);
            if crc32fast::hash(filter) == self.crc(group, 1) {
                filter.into()
            } else {
                // Damaged: an empty filter, refused below and every time.
                Box::default()
            }
        });
        if filter.is_empty() {
            return Err(BadRun(format!(
                "the filter of key group {group} fails its checksum"
            )));
        }
        Ok(filter_may_hold(filter, hash))
    }

    /// Key group `group`'s entries (`None`: it has none), validated the
    /// first time.
    #[allow(unsafe_code)]
    pub(crate) fn group<K, V>(&self, group: u32) -> Result<Option<&ArchivedEntries<K, V>>, BadRun>
    where
        K: StateData,
        V: StateData,
        Vec<RunEntry<K, V>>: StateData,
    {
        if group as usize >= self.checked.len() {
            return Ok(None);
        }
        let bytes = self.group_bytes(group);
        if bytes.is_empty() {
            return Ok(None);
        }
        let valid = *self.checked[group as usize].get_or_init(|| {
            crc32fast::hash(bytes) == self.crc(group, 0)
                && rkyv::access::<ArchivedEntries<K, V>, rancor::Error>(bytes).is_ok()
        });
        if !valid {
            return Err(BadRun(format!(
                "key group {group} fails its checksum or does not hold this state's entries"
            )));
        }
        // SAFETY: these bytes are a valid `ArchivedEntries<K, V>`: either
        // they passed their checksum and `rkyv::access` validated them just
        // above (or on an earlier call:
        // the flag is set once, for these very bytes), or this process's
        // own serialiser wrote them for these very types (`open_own`: a run
        // this instance wrote, made durable and mapped back, with no other
        // writer to the file). They are immutable and outlive the returned
        // reference, which borrows `self` and so the `SharedBytes` that
        // keeps them mapped.
        Ok(Some(unsafe {
            rkyv::access_unchecked::<ArchivedEntries<K, V>>(bytes)
        }))
    }
}

/// The entry for `key` (hash `hash`) in `entries`: `Some(None)` if the run
/// says it was removed, `None` if the run does not mention it.
pub(crate) fn find<'a, K, V>(
    entries: &'a ArchivedEntries<K, V>,
    hash: u64,
    key: &K,
) -> Result<Option<&'a Archived<Option<V>>>, rancor::Error>
where
    K: StateData + PartialEq,
    V: StateData,
    Vec<RunEntry<K, V>>: StateData,
{
    let start = entries.partition_point(|e| e.0.to_native() < hash);
    for entry in entries[start..]
        .iter()
        .take_while(|e| e.0.to_native() == hash)
    {
        let candidate: K = rkyv::deserialize::<K, rancor::Error>(&entry.1)?;
        if candidate == *key {
            return Ok(Some(&entry.2));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// `bytes` copied into 16-aligned memory, shared.
    fn shared(bytes: &[u8]) -> SharedBytes {
        let mut aligned = AlignedVec::<16>::new();
        aligned.extend_from_slice(bytes);
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(aligned);
        SharedBytes::new(owner, 0..bytes.len()).unwrap()
    }

    /// A run of `groups` written into memory by `write`.
    fn written(groups: KeyGroups, write: impl FnOnce(&mut RunWriter<'_>)) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut writer = RunWriter::new(groups, &mut bytes);
        write(&mut writer);
        writer.finish().unwrap();
        bytes
    }

    #[test]
    fn a_run_reads_back_by_key_group_and_hash() {
        let groups = KeyGroups::DEFAULT;
        let entries: Vec<RunEntry<u64, i64>> =
            vec![(5, 1, Some(10)), (9, 2, None), (9, 3, Some(30))];
        let seven: Vec<RunEntry<u64, i64>> = vec![(u64::MAX, 4, Some(40))];
        let bytes = written(groups, |w| {
            w.group(3, &entries).unwrap();
            w.group(7, &seven).unwrap();
            // Groups go in order.
            assert!(w.group(5, &seven).is_err());
        });
        let run = Run::open(shared(&bytes), groups).unwrap();
        assert_eq!(run.entries(), 4);
        let three = run
            .group::<u64, i64>(3)
            .unwrap()
            .expect("group 3 has entries");
        assert_eq!(three.len(), 3);
        let value = |hash, key| {
            find::<u64, i64>(three, hash, &key)
                .unwrap()
                .map(|v| rkyv::deserialize::<Option<i64>, rancor::Error>(v).unwrap())
        };
        assert_eq!(value(5, 1), Some(Some(10)));
        assert_eq!(value(9, 2), Some(None));
        assert_eq!(value(9, 3), Some(Some(30)));
        assert_eq!(value(9, 4), None);
        assert!(run.group::<u64, i64>(4).unwrap().is_none());
        assert_eq!(run.group::<u64, i64>(7).unwrap().map(|g| g.len()), Some(1));
        // The filters: what the run holds may be there, and most of what
        // it does not hold is not.
        let may = |g, h| run.may_hold(g, h).unwrap();
        assert!(may(3, 5) && may(3, 9) && may(7, u64::MAX));
        assert!(!may(4, 5), "group 4 is empty");
        // Read as another type, a group is refused rather than misread.
        let other = Run::open(shared(&bytes), groups).unwrap();
        assert!(other.group::<u64, i32>(3).is_err());
    }

    #[test]
    fn filters_answer_most_lookups_of_absent_keys() {
        let groups = KeyGroups::DEFAULT;
        let hashes =
            |range: std::ops::Range<u64>| range.map(|i| i.wrapping_mul(0xA24B_AED4_963E_E407));
        let mut entries: Vec<RunEntry<u64, u64>> =
            hashes(0..10_000).map(|h| (h, h, Some(1))).collect();
        entries.sort_unstable_by_key(|e| e.0);
        let bytes = written(groups, |w| w.group(0, &entries).unwrap());
        let run = Run::open(shared(&bytes), groups).unwrap();
        assert!(
            hashes(0..10_000).all(|h| run.may_hold(0, h).unwrap()),
            "no false negative"
        );
        let false_positives = hashes(10_000..110_000)
            .filter(|&h| run.may_hold(0, h).unwrap())
            .count();
        // 10 bits a key and 4 probes: about 1.2%.
        assert!(false_positives < 2_000, "{false_positives} of 100000");
    }

    #[test]
    fn damaged_framing_is_refused() {
        let groups = KeyGroups::DEFAULT;
        let bytes = written(groups, |w| {
            w.group(3, &vec![(5u64, 1u64, Some(10u64))]).unwrap();
        });
        assert!(Run::open(shared(&bytes), groups).is_ok());
        assert!(Run::open(shared(&bytes[..20]), groups).is_err());
        assert!(Run::open(shared(&bytes[1..]), groups).is_err());
        assert!(Run::open(shared(&bytes), KeyGroups::new(64).unwrap()).is_err());
        // A table entry pointing past the table.
        let table = bytes.len() - TRAILER - SLOT * 128;
        let mut bad = bytes.clone();
        bad[table + SLOT * 3..table + SLOT * 3 + 8].copy_from_slice(&(table as u64).to_le_bytes());
        assert!(Run::open(shared(&bad), groups).is_err());
        // A misaligned one.
        let mut bad = bytes.clone();
        bad[table + SLOT * 3] += 1;
        assert!(Run::open(shared(&bad), groups).is_err());
        // A damaged table.
        let mut bad = bytes.clone();
        bad[table + SLOT * 3 + 24] = 0xff;
        assert!(Run::open(shared(&bad), groups).is_err());
        // A damaged archive or filter opens, and is refused when read.
        let slot = table + SLOT * 3;
        let archive_at = u64::from_le_bytes(bytes[slot..slot + 8].try_into().unwrap()) as usize;
        let filter_at =
            u64::from_le_bytes(bytes[slot + 16..slot + 24].try_into().unwrap()) as usize;
        let mut bad = bytes.clone();
        bad[archive_at + 2] ^= 1;
        let run = Run::open(shared(&bad), groups).unwrap();
        assert!(run.group::<u64, u64>(3).is_err());
        let mut bad = bytes;
        bad[filter_at] ^= 1;
        let run = Run::open(shared(&bad), groups).unwrap();
        assert!(run.may_hold(3, 5).is_err());
    }
}
