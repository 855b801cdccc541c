//! An upsert sink: a directory holding one file per key, whose content is
//! the key's latest value, changed only by what completed checkpoints cover
//! (write-ahead), so a job promising exactly-once ends with the files of a
//! run without failure, whatever its operators compute in a replay.

use std::collections::HashMap;
use std::hash::Hash;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork_core::{
    CheckpointId, ConnectorError, Data, InstanceContext, Record, Restore, Sink, StateBytes,
};

type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;
type FormatFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// The layout of the sink's part of a checkpoint: the upserts it staged
/// and has not written yet.
const STAGED_SCHEMA: u32 = 1;

/// Upserts records by key into `DIR/KEY` files: each holds its key's latest
/// value.
///
/// In a job that takes checkpoints, what a checkpoint covers is written when
/// that checkpoint completes, not before: the latest value of each key
/// changed since the last barrier is staged at the barrier, kept in the
/// checkpoint (the sink's part, so a process on another machine restoring
/// the checkpoint finds it), and written once the checkpoint is complete. A
/// failure therefore never leaves a value in a file that the checkpoint
/// restored from does not cover, and a replay that computes other values
/// (an operator that is not deterministic) writes those. Without
/// checkpoints, values are written at every flush. Each file is written
/// through a temporary file renamed over the old one, so a reader sees a
/// key's old value or its new one, never a mix.
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
    /// The latest value of each key changed since the last barrier (or
    /// flush, without checkpoints).
    dirty: HashMap<K, T>,
    /// Staged for checkpoints not known complete, oldest first: each key's
    /// file name and bytes, one after another.
    staged: Vec<(CheckpointId, Vec<u8>)>,
    /// Whether the job takes checkpoints.
    checkpointed: bool,
    bytes: Vec<u8>,
}

impl<T, K> Clone for UpsertFileSink<T, K> {
    fn clone(&self) -> Self {
        UpsertFileSink {
            dir: self.dir.clone(),
            key: self.key.clone(),
            format: self.format.clone(),
            dirty: HashMap::new(),
            staged: Vec::new(),
            checkpointed: false,
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
            staged: Vec::new(),
            checkpointed: false,
            bytes: Vec::new(),
        }
    }

    fn io(&self, action: &str, path: &Path, e: std::io::Error) -> ConnectorError {
        ConnectorError::io(format!("{action} {}", path.display()), e)
    }

    /// The latest value of every key changed since the last call, as file
    /// names and bytes: `u32` name length, name, `u32` length, bytes.
    fn take_dirty(&mut self) -> Result<Vec<u8>, ConnectorError> {
        let mut upserts = Vec::new();
        for (key, value) in std::mem::take(&mut self.dirty) {
            let name = key.to_string();
            if !valid_file_name(&name) {
                return Err(ConnectorError::user(format!(
                    "upsert sink into {}: the key {name:?} is not a file name: map keys to names without `/`, other than `.` and `..`",
                    self.dir.display()
                )));
            }
            self.bytes.clear();
            (self.format)(&value, &mut self.bytes);
            upserts.extend_from_slice(&(name.len() as u32).to_le_bytes());
            upserts.extend_from_slice(name.as_bytes());
            upserts.extend_from_slice(&(self.bytes.len() as u32).to_le_bytes());
            upserts.extend_from_slice(&self.bytes);
        }
        Ok(upserts)
    }

    /// Writes `upserts` (as [`take_dirty`](Self::take_dirty) lays them out)
    /// into their files.
    fn write_files(&self, upserts: &[u8]) -> Result<(), ConnectorError> {
        let torn = || {
            ConnectorError::user(format!(
                "upsert sink into {}: staged upserts are torn",
                self.dir.display()
            ))
        };
        let mut rest = upserts;
        while !rest.is_empty() {
            let (len, after) = rest.split_first_chunk::<4>().ok_or_else(torn)?;
            let (name, after) = after
                .split_at_checked(u32::from_le_bytes(*len) as usize)
                .ok_or_else(torn)?;
            let (len, after) = after.split_first_chunk::<4>().ok_or_else(torn)?;
            let (bytes, after) = after
                .split_at_checked(u32::from_le_bytes(*len) as usize)
                .ok_or_else(torn)?;
            rest = after;
            let name = std::str::from_utf8(name)
                .ok()
                .filter(|name| valid_file_name(name))
                .ok_or_else(torn)?;
            let target = self.dir.join(name);
            let temporary = self.dir.join(format!(".upsert-{name}"));
            let mut file = std::fs::File::create(&temporary)
                .map_err(|e| self.io("creating", &temporary, e))?;
            file.write_all(bytes)
                .map_err(|e| self.io("writing", &temporary, e))?;
            std::fs::rename(&temporary, &target).map_err(|e| self.io("replacing", &target, e))?;
        }
        Ok(())
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

    /// Writes local files: never waits on anything outside the job.
    fn may_block(&self) -> bool {
        false
    }

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        super::sink::refuse_store_url(&self.dir, ctx.component())?;
        self.checkpointed = ctx.checkpoints().is_some();
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io("creating directory", &self.dir, e))
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let key = (self.key)(&record.value);
        self.dirty.insert(key, record.value);
        Ok(())
    }

    /// Without checkpoints, writes what changed; with, nothing is written
    /// before the checkpoint that covers it completes.
    fn flush(&mut self) -> Result<(), ConnectorError> {
        if self.checkpointed {
            return Ok(());
        }
        let upserts = self.take_dirty()?;
        self.write_files(&upserts)
    }

    /// What changed since the last barrier is `checkpoint`'s.
    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        if !self.checkpointed {
            return self.flush();
        }
        let upserts = self.take_dirty()?;
        if !upserts.is_empty() {
            self.staged.push((checkpoint, upserts));
        }
        Ok(())
    }

    /// What it staged and has not written: whoever restores the checkpoint
    /// writes it.
    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let mut bytes = Vec::new();
        for (checkpoint, upserts) in &self.staged {
            bytes.extend_from_slice(&checkpoint.get().to_le_bytes());
            bytes.extend_from_slice(&(upserts.len() as u64).to_le_bytes());
            bytes.extend_from_slice(upserts);
        }
        Ok(Some(StateBytes::new(STAGED_SCHEMA, bytes)))
    }

    /// Writes what completed checkpoints staged, in order.
    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let ready = self
            .staged
            .iter()
            .take_while(|(id, _)| *id <= checkpoint)
            .count();
        for (_, upserts) in &self.staged[..ready] {
            self.write_files(upserts)?;
        }
        self.staged.drain(..ready);
        Ok(())
    }

    /// Writes what the checkpoint restored from holds staged: this
    /// instance's, and after a scale-down that of the old instances it
    /// stands for (old instance `k` by new instance `k % parallelism`).
    /// What a run staged after it is not in it, and is never written.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let parallelism = restore.parallelism.max(1);
        for part in &restore.parts {
            if part.part.0 % parallelism != restore.instance.0 {
                continue;
            }
            let refused = |what: &str| {
                ConnectorError::user(format!(
                    "upsert sink into {}: its part of checkpoint {} {what}",
                    self.dir.display(),
                    restore.checkpoint
                ))
            };
            if part.schema != STAGED_SCHEMA {
                return Err(refused(&format!(
                    "has layout {} (this version reads layout {STAGED_SCHEMA})",
                    part.schema
                )));
            }
            let mut rest = part.bytes;
            while !rest.is_empty() {
                let (_, after) = rest
                    .split_first_chunk::<8>()
                    .ok_or_else(|| refused("is torn"))?;
                let (len, after) = after
                    .split_first_chunk::<8>()
                    .ok_or_else(|| refused("is torn"))?;
                let len = usize::try_from(u64::from_le_bytes(*len)).unwrap_or(usize::MAX);
                let (upserts, after) = after
                    .split_at_checked(len)
                    .ok_or_else(|| refused("is torn"))?;
                self.write_files(upserts)?;
                rest = after;
            }
        }
        Ok(())
    }
}

/// Exactly once: files change only by what completed checkpoints cover.
impl<T: Data, K: Hash + Eq + ToString + Send + 'static> streamwork_core::checkpoint::Transactional
    for UpsertFileSink<T, K>
{
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use streamwork_core::checkpoint::{CheckpointView, RestoredPart};
    use streamwork_core::{InstanceIdx, KeyGroups};

    use super::*;

    /// A checkpointed job's sink, driven by hand: nothing reaches a file
    /// before its checkpoint completes; a run restored from a checkpoint
    /// writes what that checkpoint staged (even on another machine: it is
    /// in the checkpoint), never what a later, uncompleted one staged.
    #[test]
    fn only_what_completed_checkpoints_cover_reaches_the_files() {
        let dir =
            std::env::temp_dir().join(format!("streamwork-upsert-ahead-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ctx = InstanceContext::new("latest", InstanceIdx(0), 1, KeyGroups::DEFAULT)
            .with_checkpoints(CheckpointView::new(Arc::new(AtomicU64::new(0)), None));
        let open = || {
            let mut sink = UpsertFileSink::new(
                &dir,
                |(k, _): &(String, u64)| k.clone(),
                |(_, v): &(String, u64), out: &mut Vec<u8>| {
                    out.extend_from_slice(v.to_string().as_bytes())
                },
            );
            sink.open(&ctx).unwrap();
            sink
        };
        let read = |k: &str| std::fs::read_to_string(dir.join(k)).ok();
        let mut sink = open();
        sink.write(Record::new(("a".to_string(), 1))).unwrap();
        sink.write(Record::new(("b".to_string(), 1))).unwrap();
        sink.flush().unwrap();
        sink.pre_commit(CheckpointId::new(1)).unwrap();
        let part = sink.snapshot(CheckpointId::new(1)).unwrap().unwrap();
        assert_eq!(read("a"), None, "not before its checkpoint completes");
        sink.write(Record::new(("a".to_string(), 2))).unwrap();
        sink.pre_commit(CheckpointId::new(2)).unwrap();
        // The process dies with checkpoint 1 complete and 2 not.
        drop(sink);
        let mut restored = open();
        let mut restore = Restore::nothing("latest", InstanceIdx(0), 1, KeyGroups::DEFAULT);
        restore.checkpoint = CheckpointId::new(1);
        restore.parts = vec![RestoredPart {
            part: InstanceIdx(0),
            schema: part.schema,
            bytes: &part.bytes,
        }];
        restored.restore(&restore).unwrap();
        assert_eq!((read("a"), read("b")), (Some("1".into()), Some("1".into())));
        // The replay computes another value for `a`, which completes.
        restored.write(Record::new(("a".to_string(), 7))).unwrap();
        restored.pre_commit(CheckpointId::new(3)).unwrap();
        assert_eq!(read("a"), Some("1".into()));
        restored.commit(CheckpointId::new(3)).unwrap();
        assert_eq!(read("a"), Some("7".into()));
        let torn = &part.bytes[..part.bytes.len() - 1];
        restore.parts[0].bytes = torn;
        assert!(open().restore(&restore).is_err(), "a torn part is refused");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
