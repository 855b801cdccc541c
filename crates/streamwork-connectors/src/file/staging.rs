//! The hidden files of a transactional file sink: staged per checkpoint
//! beside the target, committed (renamed, or appended to one file) once the
//! checkpoint is complete, recovered by whoever restores.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use streamwork_core::checkpoint::CheckpointId;
use streamwork_core::{ConnectorError, Restore};

use super::compression::Encoder;

/// What a sink writes into: its file, through its compression.
pub(super) type Output = Encoder<BufWriter<File>>;

/// Instances `>= parallelism` with staged or in-progress files in `dir`:
/// instances of an earlier run at a higher parallelism.
fn orphaned_instances(dir: &Path, parallelism: u32) -> Result<Vec<u32>, ConnectorError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))?;
    let mut found: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(".part-")?;
            let (index, kind) = rest.split_once('.')?;
            let hidden = kind.starts_with("staged-") || kind == "inprogress" || kind == "open";
            hidden.then(|| index.parse::<u32>().ok()).flatten()
        })
        .filter(|&index| index >= parallelism)
        .collect();
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// The hidden files of one transactional sink instance next to its target:
/// `.NAME.inprogress`, `.NAME.staged-CHECKPOINT` (or `.NAME.staged-final`)
/// and, for a single file, `.NAME.commit-CHECKPOINT` while appending.
pub(super) struct Staging {
    target: PathBuf,
    dir: PathBuf,
    name: String,
    single: bool,
    /// Rolling: commits append to `.NAME.open`, closed into a visible file
    /// by size or age.
    roll: Option<Roll>,
    /// What committed files' names end with (`.gz`, say).
    extension: &'static str,
}

/// When a rolling sink closes its open file.
#[derive(Copy, Clone, Debug)]
pub(super) struct Roll {
    pub(super) max_bytes: u64,
    pub(super) max_age: std::time::Duration,
}

/// A staged file's checkpoint: its id, or the final one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Staged {
    At(CheckpointId),
    Final,
}

impl Staged {
    /// Whether checkpoint `checkpoint` covers it (with `final_too`, the
    /// job's final checkpoint too).
    fn covered_by(self, checkpoint: CheckpointId, final_too: bool) -> bool {
        match self {
            Staged::At(id) => id <= checkpoint,
            Staged::Final => final_too,
        }
    }
}

impl Staging {
    pub(super) fn new(target: PathBuf, single: bool) -> Self {
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Staging {
            target,
            dir,
            name,
            single,
            roll: None,
            extension: "",
        }
    }

    /// The file this instance's output is named after.
    #[cfg(feature = "parquet")]
    pub(super) fn target(&self) -> &Path {
        &self.target
    }

    pub(super) fn rolling(mut self, roll: Option<Roll>) -> Self {
        self.roll = roll;
        self
    }

    pub(super) fn with_extension(mut self, extension: &'static str) -> Self {
        self.extension = extension;
        self
    }

    /// Keeps the (encoded) header line that commits write at the start of
    /// the file they append to, before any staged output needs it.
    pub(super) fn keep_header(&self, bytes: &[u8]) -> Result<(), ConnectorError> {
        self.write_whole("header", bytes)
    }

    /// Writes hidden file `suffix` whole or not at all: a crash (or a
    /// power cut: it is flushed before it is renamed) leaves the old file
    /// (or none) and a `.partial` beside it, never a torn one (a torn
    /// append marker would undo committed output).
    fn write_whole(&self, suffix: &str, bytes: &[u8]) -> Result<(), ConnectorError> {
        let path = self.hidden(suffix);
        let partial = self.hidden(&format!("{suffix}.partial"));
        File::create(&partial)
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.sync_data()
            })
            .map_err(|e| io("writing", &partial, e))?;
        std::fs::rename(&partial, &path).map_err(|e| io("writing", &path, e))
    }

    /// The header line kept by [`keep_header`](Self::keep_header), if any.
    fn kept_header(&self) -> Result<Vec<u8>, ConnectorError> {
        let path = self.hidden("header");
        match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io("reading", &path, e)),
        }
    }

    /// Whether commits append to one file (the target, or the open file of
    /// a rolling sink) rather than publish a file each.
    pub(super) fn appends(&self) -> bool {
        self.single || self.roll.is_some()
    }

    /// The file commits append to.
    fn append_target(&self) -> PathBuf {
        match self.roll {
            Some(_) => self.hidden("open"),
            None => self.target.clone(),
        }
    }

    /// Closes a rolling sink's open file into the visible file named after
    /// `staged`, if it is due (`force`: the end of its input, or an
    /// instance that is gone).
    pub(super) fn roll(&self, staged: Staged, force: bool) -> Result<(), ConnectorError> {
        let Some(roll) = self.roll else {
            return Ok(());
        };
        let open = self.hidden("open");
        let Ok(meta) = std::fs::metadata(&open) else {
            return Ok(());
        };
        let since = std::fs::read_to_string(self.hidden("open-since"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let age = std::time::Duration::from_millis(unix_millis().saturating_sub(since));
        if force || meta.len() >= roll.max_bytes || age >= roll.max_age {
            let visible = self.committed_path(staged);
            std::fs::rename(&open, &visible).map_err(|e| io("closing", &visible, e))?;
            // Stale after a crash here: the next open file writes it anew.
            let _ = std::fs::remove_file(self.hidden("open-since"));
            self.sync_dir()?;
        }
        Ok(())
    }

    fn hidden(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!(".{}.{suffix}", self.name))
    }

    fn staged_path(&self, staged: Staged) -> PathBuf {
        match staged {
            Staged::At(id) => self.hidden(&format!("staged-{:020}", id.get())),
            Staged::Final => self.hidden("staged-final"),
        }
    }

    fn committed_path(&self, staged: Staged) -> PathBuf {
        let extension = self.extension;
        match staged {
            Staged::At(id) => (self.dir).join(format!("{}-{:020}{extension}", self.name, id.get())),
            Staged::Final => self.dir.join(format!("{}-final{extension}", self.name)),
        }
    }

    /// A fresh in-progress file.
    pub(super) fn start(&self) -> Result<File, ConnectorError> {
        let path = self.hidden("inprogress");
        File::create(&path).map_err(|e| io("creating", &path, e))
    }

    /// Makes the in-progress file durable as the output of `checkpoint`
    /// (a whole member or frame, if compressed).
    pub(super) fn stage(
        &self,
        writer: Option<Output>,
        checkpoint: CheckpointId,
    ) -> Result<(), ConnectorError> {
        let Some(writer) = writer else {
            return Ok(());
        };
        let inprogress = self.hidden("inprogress");
        let file = writer
            .finish()
            .map_err(|e| io("writing", &inprogress, e))?
            .into_inner()
            .map_err(|e| io("writing", &inprogress, e.into_error()))?;
        self.stage_written(&file, checkpoint)
    }

    /// Makes the in-progress file, written whole through `file`, durable as
    /// the output of `checkpoint`.
    pub(super) fn stage_written(
        &self,
        file: &File,
        checkpoint: CheckpointId,
    ) -> Result<(), ConnectorError> {
        let inprogress = self.hidden("inprogress");
        file.sync_data()
            .map_err(|e| io("flushing", &inprogress, e))?;
        let staged = if checkpoint.is_final() {
            Staged::Final
        } else {
            Staged::At(checkpoint)
        };
        let path = self.staged_path(staged);
        std::fs::rename(&inprogress, &path).map_err(|e| io("staging", &path, e))?;
        self.sync_dir()
    }

    /// Every staged file of this instance, in checkpoint order.
    fn staged(&self) -> Result<Vec<Staged>, ConnectorError> {
        let prefix = format!(".{}.staged-", self.name);
        let mut found = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            if rest == "final" {
                found.push(Staged::Final);
            } else if let Ok(id) = rest.parse::<u64>() {
                found.push(Staged::At(CheckpointId::new(id)));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Commits the files staged for checkpoints up to `checkpoint` (and the
    /// final one if `final_too`).
    pub(super) fn commit_up_to(
        &self,
        checkpoint: CheckpointId,
        final_too: bool,
    ) -> Result<(), ConnectorError> {
        for staged in self.staged()? {
            if staged.covered_by(checkpoint, final_too) {
                self.commit(staged)?;
            }
        }
        if final_too {
            // The end of the input closes a rolling sink's open file, even
            // when nothing was staged since the last commit (a run restored
            // at its end, say): committed output never stays hidden.
            self.roll(Staged::Final, true)?;
        }
        Ok(())
    }

    fn commit(&self, staged: Staged) -> Result<(), ConnectorError> {
        let path = self.staged_path(staged);
        if !self.appends() {
            let committed = self.committed_path(staged);
            std::fs::rename(&path, &committed).map_err(|e| io("committing", &committed, e))?;
            return self.sync_dir();
        }
        // One file: append, remembering its length before so that an append
        // a crash cut short is undone before it is redone.
        let name = staged_name(staged);
        let marker_name = format!("commit-{name}");
        let marker = self.hidden(&marker_name);
        let target = self.append_target();
        // Only a file that is not there yet is empty: a length that cannot
        // be read must not be taken for 0 (the append starts by cutting the
        // file to it).
        let before = match std::fs::metadata(&target) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io("reading the length of", &target, e)),
        };
        if before == 0 && self.roll.is_some() {
            // A new open file: its age counts from now.
            self.write_whole("open-since", unix_millis().to_string().as_bytes())?;
        }
        self.write_whole(&marker_name, before.to_string().as_bytes())?;
        // A file's first commit begins it with the header, if it has one.
        let header = if before == 0 {
            self.kept_header()?
        } else {
            Vec::new()
        };
        self.append(&target, &header, &path, before)?;
        // Published before the staged file goes: a crash in between leaves
        // the record ahead of the file, never behind it.
        self.write_whole("published", name.as_bytes())?;
        std::fs::remove_file(&path).map_err(|e| io("removing", &path, e))?;
        self.sync_dir()?;
        std::fs::remove_file(&marker).map_err(|e| io("removing", &marker, e))?;
        self.roll(staged, staged == Staged::Final)
    }

    fn append(
        &self,
        target: &Path,
        header: &[u8],
        staged: &Path,
        length_before: u64,
    ) -> Result<(), ConnectorError> {
        let bytes = std::fs::read(staged).map_err(|e| io("reading", staged, e))?;
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(target)
            .map_err(|e| io("opening", target, e))?;
        file.set_len(length_before)
            .map_err(|e| io("truncating", target, e))?;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(length_before))
            .map_err(|e| io("seeking", target, e))?;
        file.write_all(header)
            .and_then(|()| file.write_all(&bytes))
            .map_err(|e| io("appending to", target, e))?;
        file.sync_data().map_err(|e| io("flushing", target, e))
    }

    /// The newest checkpoint whose output this instance published: by the
    /// names of its committed files, or, for one file, by the record its
    /// commits keep. One file that is no longer there was removed, with
    /// what it published (the fix the refusal names): its record no longer
    /// counts.
    fn published(&self) -> Result<Option<Staged>, ConnectorError> {
        if self.appends() {
            if self.roll.is_none() {
                match std::fs::metadata(&self.target) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(io("reading the length of", &self.target, e)),
                }
            }
            let path = self.hidden("published");
            return match std::fs::read_to_string(&path) {
                Ok(text) => Ok(parse_staged(text.trim())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io("reading", &path, e)),
            };
        }
        let prefix = format!("{}-", self.name);
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix(&prefix)?;
                parse_staged(rest.strip_suffix(self.extension)?)
            })
            .max())
    }

    /// Refuses a run that starts before output this instance has already
    /// published: replaying it would publish it twice.
    fn refuse_published_after(&self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let Some(published) = self.published()? else {
            return Ok(());
        };
        let covered = if restore.finished() {
            Staged::Final
        } else {
            Staged::At(restore.checkpoint)
        };
        if published <= covered {
            return Ok(());
        }
        let from = if restore.is_fresh() {
            "no checkpoint".to_string()
        } else {
            format!("checkpoint {}", restore.checkpoint)
        };
        let what = match published {
            Staged::At(id) => format!("checkpoint {id}"),
            Staged::Final => "the final checkpoint".to_string(),
        };
        Err(ConnectorError::user(format!(
            "transactional file sink `{}` has published the output of {what} to {}, but this run starts from {from}: that output would be published twice. The job is not using the checkpoint directory this output was written with, or that directory lost its newest checkpoints: point the job at it, or remove {} to start over",
            restore.component,
            self.target.display(),
            if self.single { &self.target } else { &self.dir }.display(),
        )))
    }

    /// After a restart from checkpoint `restored`: commits what checkpoints
    /// up to it staged (the final one too if it is final), finishes a commit
    /// a crash interrupted, and discards what later checkpoints staged.
    fn recover(&self, restored: CheckpointId, is_final: bool) -> Result<(), ConnectorError> {
        self.discard_cut_short_writes()?;
        if self.appends() {
            self.finish_interrupted_appends()?;
        }
        for staged in self.staged()? {
            if staged.covered_by(restored, is_final) {
                self.commit(staged)?;
            } else {
                let path = self.staged_path(staged);
                std::fs::remove_file(&path).map_err(|e| io("discarding", &path, e))?;
            }
        }
        let inprogress = self.hidden("inprogress");
        if inprogress.exists() {
            std::fs::remove_file(&inprogress).map_err(|e| io("discarding", &inprogress, e))?;
        }
        if is_final {
            // A crash between the final commit and its roll.
            self.roll(Staged::Final, true)?;
        }
        self.sync_dir()
    }

    /// Removes what a crash left of hidden files being written whole
    /// (`.NAME.SUFFIX.partial`, see [`write_whole`](Self::write_whole)): the
    /// file each was to replace, or its absence, is still the one in force.
    /// A commit marker cut short this way means its append never began.
    fn discard_cut_short_writes(&self) -> Result<(), ConnectorError> {
        let prefix = format!(".{}.", self.name);
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name.ends_with(".partial") {
                let partial = entry.path();
                std::fs::remove_file(&partial).map_err(|e| io("removing", &partial, e))?;
            }
        }
        Ok(())
    }

    /// A single-file append cut short: if its staged file is still there,
    /// the append is redone by `recover`'s commit (which truncates back to
    /// the recorded length first); if not, the append was complete.
    fn finish_interrupted_appends(&self) -> Result<(), ConnectorError> {
        let prefix = format!(".{}.commit-", self.name);
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("listing", &self.dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let staged = if rest == "final" {
                Staged::Final
            } else {
                match rest.parse::<u64>() {
                    Ok(id) => Staged::At(CheckpointId::new(id)),
                    Err(_) => continue,
                }
            };
            let marker = entry.path();
            if self.staged_path(staged).exists() {
                let text =
                    std::fs::read_to_string(&marker).map_err(|e| io("reading", &marker, e))?;
                let target = self.append_target();
                let Ok(before) = text.trim().parse::<u64>() else {
                    return Err(ConnectorError::user(format!(
                        "{} should hold the length {} had before an append a crash interrupted, and holds {text:?}: the append cannot be undone safely (the file was damaged). Compare the end of {} with {}, cut what of it the file already ends with, then remove the marker and run again",
                        marker.display(),
                        target.display(),
                        target.display(),
                        self.staged_path(staged).display(),
                    )));
                };
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&target)
                    .map_err(|e| io("opening", &target, e))?;
                file.set_len(before)
                    .map_err(|e| io("truncating", &target, e))?;
            }
            std::fs::remove_file(&marker).map_err(|e| io("removing", &marker, e))?;
        }
        Ok(())
    }

    /// After a restart: commits what the restored checkpoint covers and
    /// discards the rest, refusing a run that starts before output this
    /// instance published; scaled down, also recovers the staged output of
    /// the old instances that are gone (old instance `j` by new instance
    /// `j % parallelism`, so each exactly once). `dir` holds every
    /// instance's files (unless the sink writes a single file).
    pub(super) fn restore(&self, dir: &Path, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.refuse_published_after(restore)?;
        self.recover(restore.checkpoint, restore.finished())?;
        if self.single {
            return Ok(());
        }
        for old in orphaned_instances(dir, restore.parallelism)? {
            if old % restore.parallelism == restore.instance.0 {
                let target = dir.join(format!("part-{old}"));
                let orphan = Staging::new(target, false)
                    .rolling(self.roll)
                    .with_extension(self.extension);
                orphan.refuse_published_after(restore)?;
                orphan.recover(
                    restore.checkpoint,
                    restore.had_ended(streamwork_core::InstanceIdx(old)),
                )?;
                // No instance appends to its open file any more: close it.
                orphan.roll(Staged::At(restore.checkpoint), true)?;
            }
        }
        Ok(())
    }

    fn sync_dir(&self) -> Result<(), ConnectorError> {
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

fn staged_name(staged: Staged) -> String {
    match staged {
        Staged::At(id) => format!("{:020}", id.get()),
        Staged::Final => "final".to_string(),
    }
}

/// The checkpoint a staged or committed file name ends with.
fn parse_staged(suffix: &str) -> Option<Staged> {
    if suffix == "final" {
        return Some(Staged::Final);
    }
    let digits = suffix.len() == 20 && suffix.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| suffix.parse().ok())
        .flatten()
        .map(|id| Staged::At(CheckpointId::new(id)))
}

fn io(action: &str, path: &Path, e: std::io::Error) -> ConnectorError {
    ConnectorError::io(format!("{action} {}", path.display()), e)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
