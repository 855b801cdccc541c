//! Checkpoints beyond the local directory: a [`CheckpointStore`] holds a
//! copy of the checkpoint directory that any process can restore from, so a
//! job's state follows it to another machine without a shared file system.
//!
//! The local log stays the working copy: written, memory-mapped and loaded
//! as ever. A [`Mirror`] copies it into the store at every commit, before
//! the checkpoint counts as complete (no transactional sink publishes a
//! checkpoint the store does not hold), and copies the store back into the
//! directory before a restore, so that a process with an empty working
//! directory, or one whose directory is behind the store, restores the
//! store's newest checkpoint. What is copied is the log's own files:
//! segments whose length changed (a segment is append-only, so its length
//! tells), then a manifest of every segment with its length and CRC-32 (a
//! fetch keeps a local segment only if it is the same file), then the
//! `RESERVED` marker, then the `COMPLETE` marker, last, so that the store
//! never names a checkpoint whose records it lacks; then what the directory
//! no longer holds is removed from the store.
//!
//! One job writes a store's prefix at a time. A segment is copied whole each
//! time it grows: the cost of a commit is the size of the segments it
//! appended to, not of the changes alone.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::StateError;
use crate::log::{complete_marker, is_log_file, reserved_marker};

/// Where copies of a checkpoint directory's files live: an object store (see
/// `ObjectStoreCheckpoints`, feature `s3`) or another directory
/// ([`DirectoryStore`]). Names are file names, without directories.
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// Every object in the store, with its length in bytes.
    fn list(&self) -> Result<Vec<(String, u64)>, StateError>;
    /// Writes `bytes` as `name`, replacing what was there, all or nothing.
    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError>;
    /// Reads `name` whole.
    fn download(&self, name: &str) -> Result<Vec<u8>, StateError>;
    /// Removes `name` (gone already is not an error).
    fn delete(&self, name: &str) -> Result<(), StateError>;
    /// The store of the objects under `prefix/` of this one: one job's
    /// checkpoints among several (a scale-out runner's partitions).
    fn child(&self, prefix: &str) -> Result<std::sync::Arc<dyn CheckpointStore>, StateError>;
    /// `name`'s bytes and its version (which every write changes), if it
    /// exists.
    fn read_versioned(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, StateError>;
    /// Writes `name` only if its version is still `expected` (`None`: only
    /// if it does not exist), as one step no other writer can come between;
    /// returns the new version, or `None` when another write came first.
    /// What a lease in the store is built on.
    ///
    /// A write that finds `name` already holding exactly `bytes` succeeds:
    /// an object store's client retries a request whose answer was lost,
    /// and the retry of a conditional write that landed is refused by its
    /// own condition. So writers make their bytes their own (a lease names
    /// its holder and counts its writes; a layout is written under a lock,
    /// after checking the version it replaces).
    fn write_if(
        &self,
        name: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> Result<Option<String>, StateError>;
}

/// A directory store's version of a file: its length and CRC-32.
fn version_of(bytes: &[u8]) -> String {
    format!("{}-{:08x}", bytes.len(), crc32fast::hash(bytes))
}

/// A [`CheckpointStore`] in another directory, such as a volume mounted
/// from elsewhere: what the object store does, with files.
#[derive(Clone, Debug)]
pub struct DirectoryStore {
    dir: PathBuf,
}

impl DirectoryStore {
    /// The store in `dir` (created at the first upload).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirectoryStore { dir: dir.into() }
    }
}

impl CheckpointStore for DirectoryStore {
    fn child(&self, prefix: &str) -> Result<std::sync::Arc<dyn CheckpointStore>, StateError> {
        Ok(std::sync::Arc::new(DirectoryStore::new(
            self.dir.join(prefix),
        )))
    }

    fn list(&self) -> Result<Vec<(String, u64)>, StateError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StateError::io("list", &self.dir, e)),
        };
        let mut objects = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StateError::io("list", &self.dir, e))?;
            let meta = entry
                .metadata()
                .map_err(|e| StateError::io("inspect", entry.path(), e))?;
            if let (true, Some(name)) = (meta.is_file(), entry.file_name().to_str())
                && !name.ends_with(".uploading")
                && !name.starts_with('.')
            {
                objects.push((name.to_string(), meta.len()));
            }
        }
        Ok(objects)
    }

    fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| StateError::io("create", &self.dir, e))?;
        write_replacing(&self.dir, name, &bytes, "uploading")
    }

    fn read_versioned(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, StateError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let version = version_of(&bytes);
                Ok(Some((bytes, version)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StateError::io("read", path, e)),
        }
    }

    /// Compares and writes under an exclusive lock of `.NAME.lock` (an
    /// advisory file lock: every process that writes the directory through
    /// a `DirectoryStore` takes it).
    fn write_if(
        &self,
        name: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> Result<Option<String>, StateError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| StateError::io("create", &self.dir, e))?;
        let lock_path = self.dir.join(format!(".{name}.lock"));
        let lock = std::fs::File::create(&lock_path)
            .and_then(|file| file.lock().map(|()| file))
            .map_err(|e| StateError::io("lock", &lock_path, e))?;
        let current = self.read_versioned(name)?;
        let outcome = match current {
            Some((held, version)) if expected != Some(version.as_str()) => {
                (held == bytes).then_some(version)
            }
            None if expected.is_some() => None,
            _ => {
                write_replacing(&self.dir, name, &bytes, "uploading")?;
                Some(version_of(&bytes))
            }
        };
        drop(lock);
        Ok(outcome)
    }

    fn download(&self, name: &str) -> Result<Vec<u8>, StateError> {
        let path = self.dir.join(name);
        std::fs::read(&path).map_err(|e| StateError::io("read", path, e))
    }

    fn delete(&self, name: &str) -> Result<(), StateError> {
        let path = self.dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StateError::io("remove", path, e)),
        }
    }
}

/// Writes `dir/name` aside, flushes it, and renames it over the old one.
fn write_replacing(dir: &Path, name: &str, bytes: &[u8], aside: &str) -> Result<(), StateError> {
    use std::io::Write;
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.{aside}"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)
    };
    write().map_err(|e| StateError::io("write", &path, e))
}

/// Keeps a [`CheckpointStore`] a copy of a checkpoint directory (see the
/// module docs): [`fetch`](Self::fetch) before a restore,
/// [`publish`](Self::publish) after every commit.
///
/// ```
/// # fn main() -> Result<(), streamwork::state::StateError> {
/// use std::sync::Arc;
/// use streamwork::core::{InstanceIdx, OperatorId};
/// use streamwork::state::{CheckpointLog, DirectoryStore, LogOptions, Mirror, archive, load_latest};
/// let base = std::env::temp_dir().join(format!("mirror-doc-{}", std::process::id()));
/// let mirror = Mirror::new(Arc::new(DirectoryStore::new(base.join("store"))));
/// let mut log = CheckpointLog::open(base.join("here"), LogOptions::default())?;
/// let id = log.next_checkpoint_id()?;
/// log.append_snapshot(id, OperatorId(7), InstanceIdx(0), 1, &archive(&vec![1u64, 2, 3])?)?;
/// log.commit(id, 1)?;
/// mirror.publish(&base.join("here"))?;
/// // Another process, with an empty directory of its own:
/// let elsewhere = Mirror::new(Arc::new(DirectoryStore::new(base.join("store"))));
/// assert!(elsewhere.fetch(&base.join("there"))?);
/// assert_eq!(load_latest(base.join("there"))?.id(), id);
/// # std::fs::remove_dir_all(&base).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Mirror {
    store: Arc<dyn CheckpointStore>,
    /// What the store holds, as this mirror last saw or made it.
    copied: Mutex<BTreeMap<String, Copied>>,
    /// The `RESERVED` marker the store holds, as this mirror last saw or
    /// made it.
    reserved: Mutex<Vec<u8>>,
}

/// A file the store holds: its length, and for a segment its CRC-32 (none
/// when only a listing told of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Copied {
    len: u64,
    crc: Option<u32>,
}

/// The store's list of its segments, one `name length crc32` line each,
/// written after the segments and before `COMPLETE`: a fetch keeps a local
/// segment only if it is the same file, not merely one of the same name and
/// length (two processes can each have written a segment of that name).
const MANIFEST: &str = "MANIFEST";

fn is_segment(name: &str) -> bool {
    is_log_file(name) && name.ends_with(".swlog")
}

fn crc_of(path: &Path) -> Result<u32, StateError> {
    let bytes = std::fs::read(path).map_err(|e| StateError::io("read", path, e))?;
    Ok(crc32fast::hash(&bytes))
}

impl Mirror {
    /// A mirror into `store`, which it has not looked at yet.
    pub fn new(store: Arc<dyn CheckpointStore>) -> Self {
        Mirror {
            store,
            copied: Mutex::new(BTreeMap::new()),
            reserved: Mutex::new(Vec::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn CheckpointStore> {
        &self.store
    }

    /// The segments the store's manifest lists, or, in a store written
    /// without one, those its listing shows (lengths only).
    fn manifest(
        &self,
        listed: &BTreeMap<String, u64>,
    ) -> Result<BTreeMap<String, Copied>, StateError> {
        if !listed.contains_key(MANIFEST) {
            return Ok(listed
                .iter()
                .filter(|(name, _)| is_segment(name))
                .map(|(name, &len)| (name.clone(), Copied { len, crc: None }))
                .collect());
        }
        let bytes = self.store.download(MANIFEST)?;
        let text = String::from_utf8_lossy(&bytes);
        let mut segments = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut fields = line.split(' ');
            let entry = match (fields.next(), fields.next(), fields.next()) {
                (Some(name), Some(len), Some(crc)) if is_segment(name) => {
                    len.parse().ok().zip(crc.parse().ok()).map(|(len, crc)| {
                        (
                            name.to_string(),
                            Copied {
                                len,
                                crc: Some(crc),
                            },
                        )
                    })
                }
                _ => None,
            };
            let Some((name, copied)) = entry else {
                return Err(StateError::Store {
                    store: format!("{:?}", self.store),
                    action: "read",
                    object: MANIFEST.to_string(),
                    reason: format!("line `{line}` is not `segment length crc32`"),
                });
            };
            segments.insert(name, copied);
        }
        Ok(segments)
    }

    /// Makes `dir` hold what the store holds, if the store holds a complete
    /// checkpoint (`true`); otherwise leaves `dir` as it is (`false`). Log
    /// files of `dir` that the store does not have are removed: the store is
    /// the truth, and a directory ahead of it holds a checkpoint no sink
    /// published.
    pub fn fetch(&self, dir: &Path) -> Result<bool, StateError> {
        let listed: BTreeMap<String, u64> = self
            .store
            .list()?
            .into_iter()
            .filter(|(name, _)| is_log_file(name) || name == MANIFEST)
            .collect();
        let mut copied = self.copied.lock().unwrap_or_else(|p| p.into_inner());
        // Whatever the store lists, this mirror now knows of (and removes
        // at its next publish what the directory does not hold).
        *copied = listed
            .iter()
            .map(|(name, &len)| (name.clone(), Copied { len, crc: None }))
            .collect();
        if !listed.contains_key(complete_marker()) {
            return Ok(false);
        }
        let segments = self.manifest(&listed)?;
        std::fs::create_dir_all(dir).map_err(|e| StateError::io("create", dir, e))?;
        let local = log_files(dir)?;
        for (name, wanted) in &segments {
            let same = local.get(name) == Some(&wanted.len)
                && match wanted.crc {
                    Some(crc) => crc_of(&dir.join(name))? == crc,
                    None => true,
                };
            if !same {
                let mut bytes = self.store.download(name)?;
                // A process that died between uploading a segment that grew
                // and uploading the manifest left the store a longer copy:
                // segments are append-only, so the manifest's length of it
                // is what the store's checkpoints cover.
                if let Some(crc) = wanted.crc
                    && bytes.len() as u64 > wanted.len
                    && crc32fast::hash(&bytes[..wanted.len as usize]) == crc
                {
                    bytes.truncate(wanted.len as usize);
                }
                let got = (bytes.len() as u64, crc32fast::hash(&bytes));
                if let Some(crc) = wanted.crc
                    && got != (wanted.len, crc)
                {
                    return Err(StateError::Store {
                        store: format!("{:?}", self.store),
                        action: "restore from",
                        object: name.clone(),
                        reason: format!(
                            "the store's copy has {} bytes and CRC-32 {}, its manifest says {} bytes and {crc}: the object is damaged, and the store's newest checkpoint cannot be restored until it is replaced from a backup",
                            got.0, got.1, wanted.len
                        ),
                    });
                }
                write_replacing(dir, name, &bytes, "fetching")?;
            }
            copied.insert(name.clone(), *wanted);
        }
        // The markers are small and may keep their length while changing.
        let markers: Vec<&String> = listed
            .keys()
            .filter(|name| is_log_file(name) && !is_segment(name))
            .collect();
        for name in &markers {
            let bytes = self.store.download(name)?;
            write_replacing(dir, name, &bytes, "fetching")?;
            if name.as_str() == reserved_marker() {
                *self.reserved.lock().unwrap_or_else(|p| p.into_inner()) = bytes;
            }
        }
        for name in local
            .keys()
            .filter(|name| !segments.contains_key(*name) && !markers.contains(name))
        {
            let path = dir.join(name);
            std::fs::remove_file(&path).map_err(|e| StateError::io("remove", path, e))?;
        }
        Ok(true)
    }

    /// Reads `dir/name` and uploads it; returns what the store now holds.
    fn upload_file(&self, dir: &Path, name: &str) -> Result<Copied, StateError> {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| StateError::io("read", path, e))?;
        let copy = Copied {
            len: bytes.len() as u64,
            crc: Some(crc32fast::hash(&bytes)),
        };
        let reserved = (name == reserved_marker()).then(|| bytes.clone());
        self.store.upload(name, bytes)?;
        if let Some(bytes) = reserved {
            *self.reserved.lock().unwrap_or_else(|p| p.into_inner()) = bytes;
        }
        Ok(copy)
    }

    /// Copies `dir`'s `RESERVED` marker into the store if it changed: called
    /// when a checkpoint id is taken, so that an id this process may use is
    /// reserved in the store before its first use, and a process that
    /// carries on from the store never hands out the same id for another
    /// checkpoint (a transactional sink's staged output is known by id).
    pub fn publish_reserved(&self, dir: &Path) -> Result<(), StateError> {
        let path = dir.join(reserved_marker());
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StateError::io("read", path, e)),
        };
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if *reserved != bytes {
            self.store.upload(reserved_marker(), bytes.clone())?;
            *reserved = bytes;
        }
        Ok(())
    }

    /// Copies what changed in `dir` since the last copy into the store:
    /// the segments that grew, the manifest, `RESERVED`, and `COMPLETE`
    /// last; then removes from the store what `dir` no longer holds. Called
    /// after a commit: the checkpoint is complete once this returns.
    pub fn publish(&self, dir: &Path) -> Result<(), StateError> {
        let local = log_files(dir)?;
        let mut copied = self.copied.lock().unwrap_or_else(|p| p.into_inner());
        for (name, &len) in local.iter().filter(|(name, _)| is_segment(name)) {
            let known = copied
                .get(name)
                .is_some_and(|c| c.len == len && c.crc.is_some());
            if !known {
                copied.insert(name.clone(), self.upload_file(dir, name)?);
            }
        }
        let mut manifest = String::new();
        for (name, copy) in local
            .keys()
            .filter(|name| is_segment(name))
            .filter_map(|name| Some((name, copied.get(name)?)))
        {
            manifest.push_str(&format!("{name} {} {}\n", copy.len, copy.crc.unwrap_or(0)));
        }
        self.store.upload(MANIFEST, manifest.into_bytes())?;
        let marker = complete_marker();
        let mut markers: Vec<&String> = local.keys().filter(|name| !is_segment(name)).collect();
        markers.sort_by_key(|name| name.as_str() == marker);
        for name in markers {
            copied.insert(name.clone(), self.upload_file(dir, name)?);
        }
        let gone: Vec<String> = copied
            .keys()
            .filter(|name| !local.contains_key(*name) && name.as_str() != MANIFEST)
            .cloned()
            .collect();
        for name in gone {
            self.store.delete(&name)?;
            copied.remove(&name);
        }
        Ok(())
    }
}

/// The log files of `dir` (segments and markers), with their lengths.
fn log_files(dir: &Path) -> Result<BTreeMap<String, u64>, StateError> {
    let mut files = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(StateError::io("list", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StateError::io("list", dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if is_log_file(&name) {
            let meta = entry
                .metadata()
                .map_err(|e| StateError::io("inspect", entry.path(), e))?;
            files.insert(name, meta.len());
        }
    }
    Ok(files)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{CheckpointLog, LogOptions, archive, load_latest};
    use streamwork_core::{CheckpointId, InstanceIdx, OperatorId};

    fn temp(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("mirror-{name}-{}-{nanos}", std::process::id()))
    }

    /// `store`'s conditional writes when a write that landed is sent
    /// again (a client's retry after a lost answer): the retry is the
    /// writer's; other bytes, or a stale version, are still refused.
    pub(crate) fn a_landed_conditional_write_sent_again_is_kept(store: &dyn CheckpointStore) {
        let first = store
            .write_if("layout", b"generation 0".to_vec(), None)
            .unwrap();
        let first = first.expect("a create of a new object");
        let again = store
            .write_if("layout", b"generation 0".to_vec(), None)
            .unwrap();
        assert_eq!(
            again.as_deref(),
            Some(first.as_str()),
            "the create, retried"
        );
        assert_eq!(
            store.write_if("layout", b"other".to_vec(), None).unwrap(),
            None
        );
        let second = store
            .write_if("layout", b"generation 1".to_vec(), Some(&first))
            .unwrap()
            .expect("a replace of the version read");
        let retried = store
            .write_if("layout", b"generation 1".to_vec(), Some(&first))
            .unwrap();
        assert_eq!(
            retried.as_deref(),
            Some(second.as_str()),
            "the replace, retried"
        );
        let stale = store.write_if("layout", b"generation 2".to_vec(), Some(&first));
        assert_eq!(stale.unwrap(), None, "a replace of a version gone");
        assert_eq!(store.download("layout").unwrap(), b"generation 1");
        let missing = store.write_if("nothing", b"x".to_vec(), Some(&first));
        assert_eq!(missing.unwrap(), None, "a replace of an object gone");
    }

    #[test]
    fn a_directory_store_keeps_a_landed_conditional_write_sent_again() {
        let dir = temp("retried");
        a_landed_conditional_write_sent_again_is_kept(&DirectoryStore::new(&dir));
        std::fs::remove_dir_all(&dir).ok();
    }

    fn open(dir: &Path) -> CheckpointLog {
        CheckpointLog::open(dir, LogOptions::default()).unwrap()
    }

    fn commit(log: &mut CheckpointLog, value: u64) -> CheckpointId {
        let id = log.next_checkpoint_id().unwrap();
        log.append_snapshot(
            id,
            OperatorId(1),
            InstanceIdx(0),
            1,
            &archive(&vec![value; 100]).unwrap(),
        )
        .unwrap();
        log.commit(id, 1).unwrap();
        id
    }

    fn value(dir: &Path) -> (CheckpointId, u64) {
        let checkpoint = load_latest(dir).unwrap();
        let values = checkpoint
            .snapshot(OperatorId(1), InstanceIdx(0))
            .unwrap()
            .access::<Vec<u64>>()
            .unwrap();
        (checkpoint.id(), values[0].to_native())
    }

    /// A store under `base`, and process A's directory `base/a` with its
    /// log open, checkpoint 1 (value 1) committed and published.
    fn published_once(base: &Path) -> (Arc<DirectoryStore>, Mirror, PathBuf, CheckpointLog) {
        let store = Arc::new(DirectoryStore::new(base.join("store")));
        let a = base.join("a");
        let mirror = Mirror::new(store.clone());
        let mut log = open(&a);
        commit(&mut log, 1);
        mirror.publish(&a).unwrap();
        (store, mirror, a, log)
    }

    #[test]
    fn a_fresh_directory_restores_the_newest_published_checkpoint() {
        let base = temp("fresh");
        let store = Arc::new(DirectoryStore::new(base.join("store")));
        let here = base.join("here");
        let mirror = Mirror::new(store.clone());
        assert!(!mirror.fetch(&here).unwrap(), "an empty store");
        let mut log = CheckpointLog::open(
            &here,
            LogOptions {
                segment_bytes: 512,
                retain: 2,
            },
        )
        .unwrap();
        let mut last = CheckpointId::NONE;
        for v in 1..=6 {
            last = commit(&mut log, v);
            mirror.publish(&here).unwrap();
        }
        let there = base.join("there");
        assert!(Mirror::new(store.clone()).fetch(&there).unwrap());
        assert_eq!(value(&there), (last, 6));
        // The store keeps what the directory keeps: old segments go.
        let mut names: Vec<String> = store
            .list()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n != MANIFEST)
            .collect();
        let mut local: Vec<String> = log_files(&here).unwrap().into_keys().collect();
        names.sort();
        local.sort();
        assert_eq!(names, local);
        std::fs::remove_dir_all(&base).ok();
    }

    #[test]
    fn a_directory_ahead_of_the_store_is_brought_back_to_it() {
        let base = temp("ahead");
        let (store, _, here, mut log) = published_once(&base);
        let published = load_latest(&here).unwrap().id();
        // Committed here but never published (the process died before).
        commit(&mut log, 2);
        drop(log);
        assert!(Mirror::new(store).fetch(&here).unwrap());
        assert_eq!(value(&here), (published, 1));
        std::fs::remove_dir_all(&base).ok();
    }

    /// A's second writer commits checkpoint X into a new segment and dies
    /// before publishing it; B, from the store, writes a segment of the
    /// same name and length (and, from the same reservation, the same
    /// checkpoint id) and publishes it. A, back, must take B's segment,
    /// not keep its own because the name and length match.
    #[test]
    fn a_segment_of_the_same_name_and_length_is_fetched_when_it_differs() {
        let base = temp("same-name");
        let (store, _, a, log) = published_once(&base);
        let b = base.join("b");
        drop(log);
        let mut log = open(&a);
        let unpublished = commit(&mut log, 2);
        drop(log);
        let second = Mirror::new(store.clone());
        assert!(second.fetch(&b).unwrap());
        let mut log = open(&b);
        let published = commit(&mut log, 3);
        second.publish(&b).unwrap();
        drop(log);
        assert_eq!(
            log_files(&a).unwrap(),
            log_files(&b).unwrap(),
            "the precondition: the same names and lengths ({unpublished} and {published})"
        );
        assert!(Mirror::new(store).fetch(&a).unwrap());
        assert_eq!(value(&a), (published, 3));
        std::fs::remove_dir_all(&base).ok();
    }

    /// The coordinator publishes `RESERVED` when it takes an id: a process
    /// carrying on from the store after this one died never hands out an
    /// id this one may have used.
    #[test]
    fn ids_one_process_took_are_never_handed_out_by_the_next() {
        let base = temp("ids");
        let (store, mirror, a, log) = published_once(&base);
        let b = base.join("b");
        drop(log);
        let mut log = open(&a);
        let taken = log.next_checkpoint_id().unwrap();
        mirror.publish_reserved(&a).unwrap();
        drop(log);
        assert!(Mirror::new(store).fetch(&b).unwrap());
        let mut log = open(&b);
        let next = log.next_checkpoint_id().unwrap();
        assert!(next > taken, "{next} after {taken}");
        std::fs::remove_dir_all(&base).ok();
    }

    /// A segment damaged in the store is refused by name when fetched, and
    /// not written into the directory.
    #[test]
    fn a_damaged_segment_in_the_store_is_refused_by_name() {
        let base = temp("damaged");
        let (store, _, _, log) = published_once(&base);
        drop(log);
        let (segment, _) = store
            .list()
            .unwrap()
            .into_iter()
            .find(|(name, _)| is_segment(name))
            .unwrap();
        let mut bytes = store.download(&segment).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        store.upload(&segment, bytes).unwrap();
        let error = Mirror::new(store).fetch(&base.join("there")).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(&segment), "{text}");
        assert!(text.contains("damaged"), "{text}");
        assert!(
            log_files(&base.join("there")).unwrap().is_empty(),
            "nothing was written"
        );
        std::fs::remove_dir_all(&base).ok();
    }

    /// A process killed between uploading a segment that grew (a
    /// checkpoint appended to it) and uploading the manifest leaves the
    /// store a copy longer than the manifest says; the next process
    /// restores the manifest's checkpoint from the copy's first bytes (a
    /// segment is append-only), rather than refuse the store as damaged.
    /// Found by killing processes of a staged job at random moments.
    #[test]
    fn a_segment_uploaded_without_its_manifest_restores_the_manifests_checkpoint() {
        let base = temp("grown");
        let (store, _, a, mut log) = published_once(&base);
        let published = load_latest(&a).unwrap().id();
        commit(&mut log, 2);
        drop(log);
        let segment = log_files(&a)
            .unwrap()
            .into_keys()
            .find(|name| is_segment(name))
            .unwrap();
        let grown = std::fs::read(a.join(&segment)).unwrap();
        store.upload(&segment, grown).unwrap();
        let there = base.join("there");
        assert!(Mirror::new(store.clone()).fetch(&there).unwrap());
        assert_eq!(value(&there), (published, 1));
        // A copy that differs within the manifest's length is still refused.
        let mut bytes = store.download(&segment).unwrap();
        bytes[8] ^= 0xff;
        store.upload(&segment, bytes).unwrap();
        let text = Mirror::new(store)
            .fetch(&base.join("elsewhere"))
            .unwrap_err()
            .to_string();
        assert!(text.contains("damaged"), "{text}");
        std::fs::remove_dir_all(&base).ok();
    }

    #[test]
    fn a_directory_behind_the_store_catches_up() {
        let base = temp("behind");
        let (store, _, a, log) = published_once(&base);
        let b = base.join("b");
        drop(log);
        // B takes over from the store, and goes on.
        let second = Mirror::new(store.clone());
        assert!(second.fetch(&b).unwrap());
        let mut log = open(&b);
        let newer = commit(&mut log, 2);
        second.publish(&b).unwrap();
        drop(log);
        // A, back with its old directory, restores B's checkpoint.
        assert!(Mirror::new(store).fetch(&a).unwrap());
        assert_eq!(value(&a), (newer, 2));
        std::fs::remove_dir_all(&base).ok();
    }
}
