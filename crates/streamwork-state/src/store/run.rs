//! A run: one immutable, sorted batch of a stored state's entries, as it
//! lies in the checkpoint log, read in place.
//!
//! | bytes            | field                                               |
//! |------------------|-----------------------------------------------------|
//! | 0..4             | magic `SWRN`                                        |
//! | 4..8             | layout version (1)                                  |
//! | 8..12            | key groups of the job                               |
//! | 12..16           | reserved, zero                                      |
//! | 16..24           | entries (tombstones included)                       |
//! | 24..32           | reserved, zero                                      |
//! | 32..32+16g       | each key group's archive: its offset and length     |
//! | ...              | the archives, each 16-byte aligned                  |
//!
//! A key group's archive is an rkyv `Vec<(hash, key, Option<value>)>`
//! sorted by hash (`None`: the key was removed). A group is validated by
//! rkyv the first time it is read, and then read without validation: a
//! restored instance starts at once and pays for the groups it touches.

use std::sync::OnceLock;

use rkyv::Archived;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use rkyv::vec::ArchivedVec;
use streamwork_core::KeyGroups;
use streamwork_core::checkpoint::SharedBytes;

use crate::codec::StateData;

/// One entry of a run: the key's stable hash, the key, and its value
/// (`None`: removed).
pub(crate) type RunEntry<K, V> = (u64, K, Option<V>);

/// A key group's archived entries.
pub(crate) type ArchivedEntries<K, V> = ArchivedVec<Archived<RunEntry<K, V>>>;

const MAGIC: &[u8; 4] = b"SWRN";
const VERSION: u32 = 1;
const HEADER: usize = 32;
const ALIGN: usize = 16;

/// What a run's bytes failed to be.
#[derive(Debug)]
pub(crate) struct BadRun(pub(crate) String);

/// Builds a run's bytes, one key group at a time in increasing order.
pub(crate) struct RunWriter {
    bytes: Vec<u8>,
    groups: u32,
    next_group: u32,
    entries: u64,
}

impl RunWriter {
    pub(crate) fn new(key_groups: KeyGroups) -> Self {
        let groups = key_groups.count();
        let table = 16 * groups as usize;
        let mut bytes = vec![0u8; (HEADER + table).next_multiple_of(ALIGN)];
        bytes[0..4].copy_from_slice(MAGIC);
        bytes[4..8].copy_from_slice(&VERSION.to_le_bytes());
        bytes[8..12].copy_from_slice(&groups.to_le_bytes());
        RunWriter {
            bytes,
            groups,
            next_group: 0,
            entries: 0,
        }
    }

    fn set_place(&mut self, group: u32, offset: usize, len: usize) {
        let at = HEADER + 16 * group as usize;
        self.bytes[at..at + 8].copy_from_slice(&(offset as u64).to_le_bytes());
        self.bytes[at + 8..at + 16].copy_from_slice(&(len as u64).to_le_bytes());
    }

    /// Adds key group `group`'s entries, sorted by hash (groups in order).
    pub(crate) fn group<K, V>(
        &mut self,
        group: u32,
        entries: &Vec<RunEntry<K, V>>,
    ) -> Result<(), rancor::Error>
    where
        Vec<RunEntry<K, V>>: StateData,
    {
        debug_assert!(group >= self.next_group && group < self.groups);
        self.next_group = group + 1;
        if entries.is_empty() {
            return Ok(());
        }
        // The archive's root is at its end: it is stored exactly, and
        // padding goes before the next one.
        let archive: AlignedVec = rkyv::to_bytes::<rancor::Error>(entries)?;
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&archive);
        self.set_place(group, start, archive.len());
        let padded = self.bytes.len().next_multiple_of(ALIGN);
        self.bytes.resize(padded, 0);
        self.entries += entries.len() as u64;
        Ok(())
    }

    /// The run's bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let entries = self.entries;
        self.bytes[16..24].copy_from_slice(&entries.to_le_bytes());
        self.bytes
    }
}

/// A run read in place from shared (mapped) bytes.
pub(crate) struct Run {
    bytes: SharedBytes,
    groups: u32,
    entries: u64,
    /// Per key group: validated by rkyv (true), or found invalid (false).
    checked: Box<[OnceLock<bool>]>,
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
        if b.len() < HEADER || &b[0..4] != MAGIC {
            return Err(BadRun("not a run of stored state".into()));
        }
        let version = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if version != VERSION {
            return Err(BadRun(format!(
                "run layout {version}, this build reads {VERSION}"
            )));
        }
        let groups = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if groups != key_groups.count() {
            return Err(BadRun(format!(
                "written for {groups} key groups, the job has {}",
                key_groups.count()
            )));
        }
        let table_end = HEADER + 16 * groups as usize;
        if b.len() < table_end {
            return Err(BadRun("its table of key groups is cut short".into()));
        }
        for g in 0..groups as usize {
            let offset = u64_at(b, HEADER + 16 * g);
            let len = u64_at(b, HEADER + 16 * g + 8);
            let fits = offset
                .checked_add(len)
                .is_some_and(|end| end <= b.len() as u64);
            if len > 0
                && (!fits || offset < table_end as u64 || !offset.is_multiple_of(ALIGN as u64))
            {
                return Err(BadRun(format!("key group {g} lies out of place")));
            }
        }
        let entries = u64_at(b, 16);
        let checked = (0..groups).map(|_| OnceLock::new()).collect();
        Ok(Run {
            bytes,
            groups,
            entries,
            checked,
        })
    }

    /// Entries in the run, tombstones included.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    fn group_bytes(&self, group: u32) -> &[u8] {
        let b = self.bytes.bytes();
        let at = HEADER + 16 * group as usize;
        let (start, len) = (u64_at(b, at) as usize, u64_at(b, at + 8) as usize);
        &b[start..start + len]
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
        if group >= self.groups {
            return Ok(None);
        }
        let bytes = self.group_bytes(group);
        if bytes.is_empty() {
            return Ok(None);
        }
        let valid = *self.checked[group as usize]
            .get_or_init(|| rkyv::access::<ArchivedEntries<K, V>, rancor::Error>(bytes).is_ok());
        if !valid {
            return Err(BadRun(format!(
                "key group {group} does not hold this state's entries"
            )));
        }
        // SAFETY: these bytes were validated as `ArchivedEntries<K, V>` by
        // `rkyv::access` just above (or on an earlier call: the flag is set
        // once, for these very bytes). They are immutable and outlive the
        // returned reference, which borrows `self` and so the
        // `SharedBytes` that keeps them mapped.
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

    #[test]
    fn a_run_reads_back_by_key_group_and_hash() {
        let groups = KeyGroups::DEFAULT;
        let mut writer = RunWriter::new(groups);
        let entries: Vec<RunEntry<u64, i64>> =
            vec![(5, 1, Some(10)), (9, 2, None), (9, 3, Some(30))];
        writer.group(3, &entries).unwrap();
        let seven: Vec<RunEntry<u64, i64>> = vec![(u64::MAX, 4, Some(40))];
        writer.group(7, &seven).unwrap();
        let run = Run::open(shared(&writer.finish()), groups).unwrap();
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
        // Read as another type, a group is refused rather than misread.
        let other = Run::open(
            shared(&{
                let mut w = RunWriter::new(groups);
                w.group(3, &entries).unwrap();
                w.finish()
            }),
            groups,
        )
        .unwrap();
        assert!(other.group::<u64, i32>(3).is_err());
        assert_eq!(run.group::<u64, i64>(7).unwrap().map(|g| g.len()), Some(1));
    }

    #[test]
    fn damaged_framing_is_refused() {
        let groups = KeyGroups::DEFAULT;
        let bytes = RunWriter::new(groups).finish();
        assert!(Run::open(shared(&bytes), groups).is_ok());
        assert!(Run::open(shared(&bytes[..20]), groups).is_err());
        assert!(Run::open(shared(&bytes), KeyGroups::new(64).unwrap()).is_err());
        let mut bad = bytes.clone();
        bad[HEADER + 8] = 3;
        bad[HEADER] = 200;
        assert!(Run::open(shared(&bad), groups).is_err());
    }
}
