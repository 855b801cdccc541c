//! An idempotent sink: a directory holding one file per key, whose content is
//! the key's latest value. Writing a record again (a replay after a restore)
//! overwrites its key with the same value, so a job whose sources replay and
//! whose other results are deterministic ends with the same files as a run
//! without failure: fit for `delivery exactly_once`.

use std::collections::HashMap;
use std::hash::Hash;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork_core::{CheckpointId, ConnectorError, Data, InstanceContext, Record, Sink};

type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;
type FormatFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// Upserts records by key into `DIR/KEY` files: each holds its key's latest
/// value, and a replay overwrites it with the same.
/// Each flush writes the latest value of every key changed since the last
/// one, each through a temporary file renamed over the old one, so a reader
/// sees a key's old value or its new one, never a mix.
///
/// ```
/// use streamwork::connectors::UpsertFileSink;
/// let sink = UpsertFileSink::new(
///     "target/word-counts",
///     |(word, _): &(String, u64)| word.clone(),
///     |(_, count): &(String, u64), out: &mut Vec<u8>| out.extend_from_slice(count.to_string().as_bytes()),
/// );
/// # let _ = sink;
/// ```
pub struct UpsertFileSink<T, K> {
    dir: PathBuf,
    key: KeyFn<T, K>,
    format: FormatFn<T>,
    /// The latest value of each key changed since the last flush.
    dirty: HashMap<K, T>,
    bytes: Vec<u8>,
}

impl<T, K> Clone for UpsertFileSink<T, K> {
    fn clone(&self) -> Self {
        UpsertFileSink {
            dir: self.dir.clone(),
            key: self.key.clone(),
            format: self.format.clone(),
            dirty: HashMap::new(),
            bytes: Vec::new(),
        }
    }
}

impl<T: Data, K: Hash + Eq + ToString + Send + 'static> UpsertFileSink<T, K> {
    /// Upserts into directory `dir`: record `r` goes to `dir/key(r)`, as the
    /// bytes `format` writes. A key must make a valid file name (no `/`, not
    /// `.` or `..`, not empty): a record whose key does not fails the job.
    pub fn new(
        dir: impl AsRef<Path>,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        format: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        UpsertFileSink {
            dir: dir.as_ref().to_path_buf(),
            key: Arc::new(key),
            format: Arc::new(format),
            dirty: HashMap::new(),
            bytes: Vec::new(),
        }
    }

    fn io(&self, action: &str, path: &Path, e: std::io::Error) -> ConnectorError {
        ConnectorError::io(format!("{action} {}", path.display()), e)
    }
}

/// Whether `name` can be a file name of its own in a directory.
fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with(".upsert-")
        && !name.contains(['/', '\\', '\0'])
}

impl<T: Data, K: Hash + Eq + ToString + Send + 'static> Sink for UpsertFileSink<T, K> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, _ctx: &InstanceContext) -> Result<(), ConnectorError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io("creating directory", &self.dir, e))
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let key = (self.key)(&record.value);
        self.dirty.insert(key, record.value);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        let dirty = std::mem::take(&mut self.dirty);
        for (key, value) in dirty {
            let name = key.to_string();
            if !valid_file_name(&name) {
                return Err(ConnectorError::user(format!(
                    "upsert sink into {}: the key {name:?} is not a file name: map keys to names without `/`, other than `.` and `..`",
                    self.dir.display()
                )));
            }
            self.bytes.clear();
            (self.format)(&value, &mut self.bytes);
            let target = self.dir.join(&name);
            let temporary = self.dir.join(format!(".upsert-{name}"));
            let mut file = std::fs::File::create(&temporary)
                .map_err(|e| self.io("creating", &temporary, e))?;
            file.write_all(&self.bytes)
                .map_err(|e| self.io("writing", &temporary, e))?;
            std::fs::rename(&temporary, &target).map_err(|e| self.io("replacing", &target, e))?;
        }
        Ok(())
    }

    /// Everything written up to a checkpoint is on disk before it completes.
    fn pre_commit(&mut self, _checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.flush()
    }
}

/// Upserts are idempotent: a replay rewrites the same values.
impl<T: Data, K: Hash + Eq + ToString + Send + 'static> streamwork_core::checkpoint::Transactional
    for UpsertFileSink<T, K>
{
}

#[cfg(test)]
mod tests {
    use streamwork_core::KeyGroups;

    use super::*;

    #[test]
    fn a_replay_leaves_the_same_files_and_bad_keys_are_refused() {
        let dir = std::env::temp_dir().join(format!("streamwork-upsert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sink = || {
            UpsertFileSink::new(
                &dir,
                |(k, _): &(String, u64)| k.clone(),
                |(_, v): &(String, u64), out: &mut Vec<u8>| {
                    out.extend_from_slice(v.to_string().as_bytes())
                },
            )
        };
        let ctx = InstanceContext::new(
            "counts",
            streamwork_core::InstanceIdx(0),
            1,
            KeyGroups::DEFAULT,
        );
        let records = [("a", 1), ("b", 1), ("a", 2), ("c", 5), ("a", 3)];
        // A run, then a restart that replays from the second record.
        for replay_from in [0, 1] {
            let mut s = sink();
            s.open(&ctx).unwrap();
            for (k, v) in &records[replay_from..] {
                s.write(Record::new((k.to_string(), *v))).unwrap();
            }
            s.close().unwrap();
        }
        let read = |k: &str| std::fs::read_to_string(dir.join(k)).unwrap();
        assert_eq!(
            (read("a"), read("b"), read("c")),
            ("3".into(), "1".into(), "5".into())
        );
        let hidden = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .count();
        assert_eq!(hidden, 0, "no temporary file is left behind");
        let mut s = sink();
        s.open(&ctx).unwrap();
        s.write(Record::new(("../escape".to_string(), 1))).unwrap();
        let error = s.flush().unwrap_err();
        assert!(error.to_string().contains("not a file name"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
