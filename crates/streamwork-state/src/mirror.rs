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
//! tells), then the `RESERVED` marker, then the `COMPLETE` marker, last, so
//! that the store never names a checkpoint whose records it lacks; then what
//! the directory no longer holds is removed from the store.
//!
//! One job writes a store's prefix at a time. A segment is copied whole each
//! time it grows: the cost of a commit is the size of the segments it
//! appended to, not of the changes alone.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::StateError;
use crate::log::{complete_marker, is_log_file};

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
/// use streamwork::state::{CheckpointLog, DirectoryStore, LogOptions, Mirror, archive, load_latest};
/// let base = std::env::temp_dir().join(format!("mirror-doc-{}", std::process::id()));
/// let mirror = Mirror::new(Arc::new(DirectoryStore::new(base.join("store"))));
/// let mut log = CheckpointLog::open(base.join("here"), LogOptions::default())?;
/// let id = log.next_checkpoint_id()?;
/// log.append_snapshot(id, 7, 0, 1, &archive(&vec![1u64, 2, 3])?)?;
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
    /// What the store holds, as this mirror last saw or made it: name and
    /// length.
    copied: Mutex<BTreeMap<String, u64>>,
}

impl Mirror {
    /// A mirror into `store`, which it has not looked at yet.
    pub fn new(store: Arc<dyn CheckpointStore>) -> Self {
        Mirror {
            store,
            copied: Mutex::new(BTreeMap::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn CheckpointStore> {
        &self.store
    }

    /// Makes `dir` hold what the store holds, if the store holds a complete
    /// checkpoint (`true`); otherwise leaves `dir` as it is (`false`). Log
    /// files of `dir` that the store does not have are removed: the store is
    /// the truth, and a directory ahead of it holds a checkpoint no sink
    /// published.
    pub fn fetch(&self, dir: &Path) -> Result<bool, StateError> {
        let remote: BTreeMap<String, u64> = self
            .store
            .list()?
            .into_iter()
            .filter(|(name, _)| is_log_file(name))
            .collect();
        let mut copied = self.copied.lock().unwrap_or_else(|p| p.into_inner());
        if !remote.contains_key(complete_marker()) {
            copied.clone_from(&remote);
            return Ok(false);
        }
        std::fs::create_dir_all(dir).map_err(|e| StateError::io("create", dir, e))?;
        let local = log_files(dir)?;
        for (name, &len) in &remote {
            // Markers are small and may keep their length while changing.
            if local.get(name) != Some(&len) || !name.ends_with(".swlog") {
                let bytes = self.store.download(name)?;
                write_replacing(dir, name, &bytes, "fetching")?;
            }
        }
        for name in local.keys().filter(|name| !remote.contains_key(*name)) {
            let path = dir.join(name);
            std::fs::remove_file(&path).map_err(|e| StateError::io("remove", path, e))?;
        }
        *copied = remote;
        Ok(true)
    }

    /// Copies what changed in `dir` since the last copy into the store, the
    /// `COMPLETE` marker last, then removes from the store what `dir` no
    /// longer holds. Called after a commit: the checkpoint is complete once
    /// this returns.
    pub fn publish(&self, dir: &Path) -> Result<(), StateError> {
        let local = log_files(dir)?;
        let mut copied = self.copied.lock().unwrap_or_else(|p| p.into_inner());
        let marker = complete_marker();
        let changed = local
            .iter()
            .filter(|(name, len)| copied.get(*name) != Some(len) || !name.ends_with(".swlog"));
        // Segments first, then RESERVED, then COMPLETE.
        let mut order: Vec<(&String, &u64)> = changed.collect();
        order.sort_by_key(|(name, _)| (name.as_str() == marker, !name.ends_with(".swlog")));
        for (name, _) in order {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|e| StateError::io("read", path, e))?;
            // What was read is what the store now holds.
            let len = bytes.len() as u64;
            self.store.upload(name, bytes)?;
            copied.insert(name.clone(), len);
        }
        let gone: Vec<String> = copied
            .keys()
            .filter(|name| !local.contains_key(*name))
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
mod tests {
    use super::*;
    use crate::{CheckpointLog, LogOptions, archive, load_latest};
    use streamwork_core::CheckpointId;

    fn temp(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("mirror-{name}-{}-{nanos}", std::process::id()))
    }

    fn commit(log: &mut CheckpointLog, value: u64) -> CheckpointId {
        let id = log.next_checkpoint_id().unwrap();
        log.append_snapshot(id, 1, 0, 1, &archive(&vec![value; 100]).unwrap())
            .unwrap();
        log.commit(id, 1).unwrap();
        id
    }

    fn value(dir: &Path) -> (CheckpointId, u64) {
        let checkpoint = load_latest(dir).unwrap();
        let values = checkpoint
            .snapshot(1, 0)
            .unwrap()
            .access::<Vec<u64>>()
            .unwrap();
        (checkpoint.id(), values[0].to_native())
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
        let mut names: Vec<String> = store.list().unwrap().into_iter().map(|(n, _)| n).collect();
        let mut local: Vec<String> = log_files(&here).unwrap().into_keys().collect();
        names.sort();
        local.sort();
        assert_eq!(names, local);
        std::fs::remove_dir_all(&base).ok();
    }

    #[test]
    fn a_directory_ahead_of_the_store_is_brought_back_to_it() {
        let base = temp("ahead");
        let store = Arc::new(DirectoryStore::new(base.join("store")));
        let here = base.join("here");
        let mirror = Mirror::new(store.clone());
        let mut log = CheckpointLog::open(&here, LogOptions::default()).unwrap();
        let published = commit(&mut log, 1);
        mirror.publish(&here).unwrap();
        // Committed here but never published (the process died before).
        commit(&mut log, 2);
        drop(log);
        assert!(Mirror::new(store).fetch(&here).unwrap());
        assert_eq!(value(&here), (published, 1));
        std::fs::remove_dir_all(&base).ok();
    }

    #[test]
    fn a_directory_behind_the_store_catches_up() {
        let base = temp("behind");
        let store = Arc::new(DirectoryStore::new(base.join("store")));
        let (a, b) = (base.join("a"), base.join("b"));
        let first = Mirror::new(store.clone());
        let mut log = CheckpointLog::open(&a, LogOptions::default()).unwrap();
        commit(&mut log, 1);
        first.publish(&a).unwrap();
        drop(log);
        // B takes over from the store, and goes on.
        let second = Mirror::new(store.clone());
        assert!(second.fetch(&b).unwrap());
        let mut log = CheckpointLog::open(&b, LogOptions::default()).unwrap();
        let newer = commit(&mut log, 2);
        second.publish(&b).unwrap();
        drop(log);
        // A, back with its old directory, restores B's checkpoint.
        assert!(Mirror::new(store).fetch(&a).unwrap());
        assert_eq!(value(&a), (newer, 2));
        std::fs::remove_dir_all(&base).ok();
    }
}
