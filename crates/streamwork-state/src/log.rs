//! The checkpoint log: append-only segment files in a checkpoint directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use streamwork_core::checkpoint::{SharedBytes, SideCheck};
use streamwork_core::{CheckpointId, InstanceIdx, OperatorId};

use crate::error::StateError;
use crate::record::{ALIGN, BadHeader, HEADER_LEN, Header, Kind};
use crate::snapshot::{Checkpoint, Entry};

const SEGMENT_SUFFIX: &str = "swlog";

/// The file naming the newest complete checkpoint, replaced atomically at
/// every commit: the evidence that a checkpoint completed even if its
/// segment is later damaged or lost.
const COMPLETE_MARKER: &str = "COMPLETE";

/// The file naming the first checkpoint id no run has handed out yet: a
/// run reserves ids in blocks, so that an id triggered by a run that
/// crashed before its checkpoint completed (and therefore never reached
/// the log) is never handed out again.
const RESERVED_MARKER: &str = "RESERVED";

/// Whether `name` is one of the files a checkpoint log writes and reads:
/// a segment or a marker (not a marker being replaced).
pub(crate) fn is_log_file(name: &str) -> bool {
    name == COMPLETE_MARKER
        || name == RESERVED_MARKER
        || name
            .strip_suffix(SEGMENT_SUFFIX)
            .is_some_and(|stem| stem.ends_with('.'))
}

/// The marker naming the newest complete checkpoint, which a copy of the
/// directory must receive after every segment it names.
pub(crate) const fn complete_marker() -> &'static str {
    COMPLETE_MARKER
}

/// The marker naming the first checkpoint id no run has handed out yet.
pub(crate) const fn reserved_marker() -> &'static str {
    RESERVED_MARKER
}

/// Ids reserved at a time: one durable write per block.
const RESERVED_BLOCK: u64 = 1024;

/// How a [`CheckpointLog`] writes.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A segment file is closed and a new one started once it would exceed
    /// this size (a single larger snapshot gets a segment of its own).
    pub segment_bytes: u64,
    /// Complete checkpoints kept; segments holding only older ones are deleted.
    pub retain: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
            retain: 3,
        }
    }
}

/// The writing end of a checkpoint directory.
///
/// Instances' snapshots are appended as they arrive; [`commit`](Self::commit)
/// makes them durable and then appends the commit record that makes the
/// checkpoint complete. A writer never appends to a segment it did not
/// create, so whatever a crash left at the end of an older segment is never
/// built upon.
///
/// ```
/// # fn main() -> Result<(), streamwork::state::StateError> {
/// use streamwork::core::{InstanceIdx, OperatorId};
/// use streamwork::state::{CheckpointLog, LogOptions, archive, load_latest};
/// let dir = std::env::temp_dir().join(format!("swlog-doc-{}", std::process::id()));
/// let mut log = CheckpointLog::open(&dir, LogOptions::default())?;
/// let id = log.next_checkpoint_id()?;
/// log.append_snapshot(id, OperatorId(42), InstanceIdx(0), 1, &archive(&vec![1u64, 2, 3])?)?;
/// log.commit(id, 1)?;
/// let checkpoint = load_latest(&dir)?;
/// let counts = checkpoint.snapshot(OperatorId(42), InstanceIdx(0)).unwrap().access::<Vec<u64>>()?;
/// assert_eq!(counts.len(), 3);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
pub struct CheckpointLog {
    dir: PathBuf,
    options: LogOptions,
    /// Every segment, oldest first, with the checkpoints it has records of.
    segments: Vec<SegmentInfo>,
    active: Option<Active>,
    complete: BTreeSet<u64>,
    /// Checkpoint → the earlier checkpoints whose records it reads.
    depends: BTreeMap<u64, BTreeSet<u64>>,
    /// The segment last mapped for [`map_written`](Self::map_written).
    mapped: Option<(PathBuf, Arc<Mmap>)>,
    next_id: u64,
    /// Ids below this one are reserved for this writer.
    reserved: u64,
    next_seq: u64,
}

struct Active {
    file: File,
    path: PathBuf,
    len: u64,
}

/// A segment of the log and the checkpoints it holds records of.
struct SegmentInfo {
    path: PathBuf,
    checkpoints: BTreeSet<u64>,
}

impl SegmentInfo {
    fn newest(&self) -> Option<u64> {
        self.checkpoints.last().copied()
    }
}

/// Where a record's payload was written: see
/// [`CheckpointLog::map_written`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordAt {
    path: PathBuf,
    offset: usize,
    len: usize,
}

impl RecordAt {
    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl CheckpointLog {
    /// Opens (creating it if need be) the checkpoint directory `dir`.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Self, StateError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| StateError::io("create", &dir, e))?;
        let scan = scan(&dir)?;
        let complete: BTreeSet<u64> = scan.commits.keys().copied().collect();
        let newest = scan
            .entries
            .iter()
            .map(|e| e.checkpoint)
            .chain(scan.commits.keys().copied())
            .max();
        let next_seq = scan.segments.iter().map(|s| s.seq + 1).max().unwrap_or(0);
        let reserved = read_id(&dir.join(RESERVED_MARKER))?.unwrap_or(0);
        let next_id = newest.map_or(1, |n| n + 1).max(reserved).max(1);
        Ok(CheckpointLog {
            dir,
            options,
            segments: scan
                .segments
                .into_iter()
                .map(|s| SegmentInfo {
                    path: s.path,
                    checkpoints: s.checkpoints,
                })
                .collect(),
            active: None,
            complete,
            depends: scan.depends,
            mapped: None,
            next_id,
            // Nothing reserved yet: the first id taken reserves a block.
            reserved: next_id,
            next_seq,
        })
    }

    /// The directory written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An id greater than any checkpoint id handed out before from this
    /// directory, by this writer or an earlier one, complete or not (even
    /// one that never reached the log): ids never repeat, across restarts
    /// and crashes too. Ids are reserved durably in blocks, so a restart
    /// may skip some.
    pub fn next_checkpoint_id(&mut self) -> Result<CheckpointId, StateError> {
        if self.next_id >= self.reserved {
            let reserved = self.next_id + RESERVED_BLOCK;
            write_id(&self.dir, RESERVED_MARKER, reserved)?;
            self.reserved = reserved;
        }
        let id = self.next_id;
        self.next_id += 1;
        Ok(CheckpointId::new(id))
    }

    /// Hands out no id at or below `id` from now on (a log that carries on
    /// from checkpoints of other logs: its ids follow theirs).
    pub fn skip_ids_past(&mut self, id: CheckpointId) {
        self.next_id = self.next_id.max(id.get().saturating_add(1));
    }

    /// Ids of the complete checkpoints still kept, oldest first.
    pub fn complete_checkpoints(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.complete.iter().copied().map(CheckpointId::new)
    }

    /// Appends one instance's snapshot of one operator for `checkpoint`.
    /// `part` is the instance index (or the first key group of the range the
    /// snapshot covers); `schema` is the version of the payload's layout.
    /// The payload should be an rkyv archive ([`archive`](crate::archive)).
    /// Returns where it was written, to map it once the checkpoint is
    /// complete ([`map_written`](Self::map_written)).
    pub fn append_snapshot(
        &mut self,
        checkpoint: CheckpointId,
        operator: OperatorId,
        part: InstanceIdx,
        schema: u32,
        payload: &[u8],
    ) -> Result<RecordAt, StateError> {
        let header = Header {
            len: payload.len() as u64,
            payload_crc: crc32fast::hash(payload),
            ..Header::snapshot(checkpoint, operator, part, schema)
        };
        self.append(header, payload)
    }

    /// Appends a snapshot whose payload `produce` streams into the segment
    /// (a payload larger than memory: a run of the state store), framed
    /// like any other: its header, with length and checksum, is written in
    /// place once the payload is. If `produce` fails, nothing of the record
    /// is left. `check` says whether a load verifies the whole payload's
    /// checksum ([`SideCheck::OnLoad`]) or leaves it to the record's reader.
    pub fn append_streamed(
        &mut self,
        checkpoint: CheckpointId,
        operator: OperatorId,
        part: InstanceIdx,
        schema: u32,
        check: SideCheck,
        produce: impl FnOnce(&mut dyn Write) -> Result<(), StateError>,
    ) -> Result<RecordAt, StateError> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::FileExt;
        let roll = self
            .active
            .as_ref()
            .is_none_or(|a| a.len > 0 && a.len >= self.options.segment_bytes);
        if roll {
            self.sync()?;
            self.start_segment()?;
        }
        let Some(active) = self.active.as_mut() else {
            unreachable!("a segment was just started")
        };
        let start = active.len;
        let path = active.path.clone();
        let io = |e| StateError::io("write", &path, e);
        let mut framed = Framed {
            out: std::io::BufWriter::with_capacity(1 << 20, &mut active.file),
            crc: crc32fast::Hasher::new(),
            len: 0,
            unsynced: 0,
            cached_from: start + HEADER_LEN as u64,
        };
        let streamed = framed
            .out
            .write_all(&[0u8; HEADER_LEN])
            .map_err(io)
            .and_then(|()| produce(&mut framed));
        let (len, crc) = (framed.len, framed.crc.clone().finalize());
        let flushed = streamed.and_then(|()| framed.out.flush().map_err(io));
        drop(framed);
        let header = Header {
            len,
            payload_crc: crc,
            // A payload larger than memory (a run) is checked by its
            // reader a part at a time (each key group on first touch):
            // checking it whole would make every load read it all.
            checked_by_reader: check == SideCheck::ByReader,
            ..Header::snapshot(checkpoint, operator, part, schema)
        };
        let finished = flushed.and_then(|()| {
            let record_len = header.record_len().ok_or(StateError::TooLarge {
                len: usize::try_from(len).unwrap_or(usize::MAX),
            })?;
            let padding = (record_len - HEADER_LEN as u64 - len) as usize;
            active
                .file
                .write_all(&[0u8; ALIGN][..padding])
                .and_then(|()| active.file.write_all_at(&header.encode(), start))
                .map_err(io)?;
            Ok(record_len)
        });
        let record_len = match finished {
            Ok(record_len) => record_len,
            Err(error) => {
                // Leave no torn record for later ones to follow.
                let _ = active.file.set_len(start);
                let _ = active.file.seek(SeekFrom::Start(start));
                return Err(error);
            }
        };
        active.len += record_len;
        let at = RecordAt {
            path: active.path.clone(),
            offset: start as usize + HEADER_LEN,
            len: len as usize,
        };
        if let Some(segment) = self.segments.last_mut() {
            segment.checkpoints.insert(checkpoint.get());
        }
        self.next_id = self.next_id.max(checkpoint.get() + 1);
        Ok(at)
    }

    /// Records that `checkpoint` reads records of the earlier checkpoint
    /// `on` (state written in increments): `on`'s records are kept for as
    /// long as `checkpoint` is, and a load of `checkpoint` checks them.
    pub fn append_dependency(
        &mut self,
        checkpoint: CheckpointId,
        on: CheckpointId,
    ) -> Result<(), StateError> {
        let header = Header {
            operator: on.get(),
            ..Header::new(Kind::Depends, checkpoint)
        };
        self.append(header, &[])?;
        self.depends
            .entry(checkpoint.get())
            .or_default()
            .insert(on.get());
        Ok(())
    }

    /// A record this writer appended, mapped from its segment: the bytes as
    /// written, shared in place (call it once the record is durable, after
    /// [`commit`](Self::commit)).
    pub fn map_written(&mut self, at: &RecordAt) -> Result<SharedBytes, StateError> {
        let end = at.offset + at.len;
        let fresh = match &self.mapped {
            Some((path, map)) => *path != at.path || map.len() < end,
            None => true,
        };
        if fresh {
            self.mapped = Some((at.path.clone(), Arc::new(map(&at.path)?)));
        }
        let Some((_, map)) = &self.mapped else {
            unreachable!("mapped just above")
        };
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = map.clone();
        SharedBytes::new(owner, at.offset..end).ok_or_else(|| {
            StateError::io(
                "map",
                &at.path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the segment is shorter than a record written to it",
                ),
            )
        })
    }

    /// Completes `checkpoint`, made of `snapshots` snapshots appended before:
    /// flushes them durably, appends the commit record and flushes it, then
    /// reclaims the segments no retained checkpoint needs.
    pub fn commit(&mut self, checkpoint: CheckpointId, snapshots: u32) -> Result<(), StateError> {
        self.sync()?;
        let header = Header {
            part: snapshots,
            ..Header::new(Kind::Commit, checkpoint)
        };
        self.append(header, &[])?;
        self.sync()?;
        self.mark_complete(checkpoint)?;
        self.complete.insert(checkpoint.get());
        self.next_id = self.next_id.max(checkpoint.get() + 1);
        self.reclaim()
    }

    /// Replaces the completion marker with `checkpoint`.
    fn mark_complete(&self, checkpoint: CheckpointId) -> Result<(), StateError> {
        write_id(&self.dir, COMPLETE_MARKER, checkpoint.get())
    }

    fn sync(&mut self) -> Result<(), StateError> {
        if let Some(active) = &self.active {
            active
                .file
                .sync_data()
                .map_err(|e| StateError::io("flush", &active.path, e))?;
        }
        Ok(())
    }

    fn append(&mut self, header: Header, payload: &[u8]) -> Result<RecordAt, StateError> {
        let record_len = header
            .record_len()
            .ok_or(StateError::TooLarge { len: payload.len() })?;
        let roll = self
            .active
            .as_ref()
            .is_none_or(|a| a.len > 0 && a.len + record_len > self.options.segment_bytes);
        if roll {
            self.sync()?;
            self.start_segment()?;
        }
        let checkpoint = header.checkpoint;
        let Some(active) = self.active.as_mut() else {
            unreachable!("a segment was just started")
        };
        let padding = (record_len as usize) - HEADER_LEN - payload.len();
        let write = |file: &mut File| -> std::io::Result<()> {
            file.write_all(&header.encode())?;
            file.write_all(payload)?;
            file.write_all(&[0u8; ALIGN][..padding])
        };
        write(&mut active.file).map_err(|e| StateError::io("write", &active.path, e))?;
        let at = RecordAt {
            path: active.path.clone(),
            offset: active.len as usize + HEADER_LEN,
            len: payload.len(),
        };
        active.len += record_len;
        if let Some(segment) = self.segments.last_mut() {
            segment.checkpoints.insert(checkpoint);
        }
        self.next_id = self.next_id.max(checkpoint + 1);
        Ok(at)
    }

    fn start_segment(&mut self) -> Result<(), StateError> {
        let path = self
            .dir
            .join(format!("{:020}.{SEGMENT_SUFFIX}", self.next_seq));
        self.next_seq += 1;
        // Written at the end through the cursor (not `append`: a streamed
        // record's header is patched in place once its payload is written).
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(|e| StateError::io("create", &path, e))?;
        // The new name must survive a crash as much as its contents.
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        self.segments.push(SegmentInfo {
            path: path.clone(),
            checkpoints: BTreeSet::new(),
        });
        self.active = Some(Active { file, path, len: 0 });
        Ok(())
    }

    /// Deletes segments that hold nothing a retained checkpoint needs: its
    /// own records, or those of a checkpoint it builds on.
    fn reclaim(&mut self) -> Result<(), StateError> {
        let retain = self.options.retain.max(1);
        if self.complete.len() <= retain {
            return Ok(());
        }
        let oldest_kept = *self
            .complete
            .iter()
            .nth_back(retain - 1)
            .unwrap_or_else(|| unreachable!("more than `retain` complete checkpoints"));
        self.complete.retain(|&id| id >= oldest_kept);
        self.depends.retain(|&id, _| id >= oldest_kept);
        let built_on: BTreeSet<u64> = self.depends.values().flatten().copied().collect();
        let active = self.active.as_ref().map(|a| a.path.clone());
        let mut kept = Vec::with_capacity(self.segments.len());
        for segment in std::mem::take(&mut self.segments) {
            let needed = segment.newest().is_some_and(|n| n >= oldest_kept)
                || segment.checkpoints.iter().any(|c| built_on.contains(c));
            if needed || Some(&segment.path) == active.as_ref() {
                kept.push(segment);
            } else if let Err(e) = std::fs::remove_file(&segment.path) {
                tracing::warn!(
                    "checkpoint log: cannot delete {}: {e}",
                    segment.path.display()
                );
                kept.push(segment);
            }
        }
        self.segments = kept;
        Ok(())
    }
}

/// Loads the newest complete, intact checkpoint of `dir`, memory-mapped.
///
/// Every record is framed by a checksummed header; a torn or damaged tail of
/// a segment ends that segment's reading, a snapshot whose payload fails its
/// checksum makes its checkpoint unusable, and so does a commit record whose
/// snapshots are not all there. The newest checkpoint that survives all of
/// it is returned, with what was skipped on the way in
/// [`Checkpoint::skipped`] (and logged as warnings).
///
/// It never falls back past a checkpoint that completed: if the newest
/// complete checkpoint (by its commit record, or by the marker every commit
/// leaves, which survives the loss of a segment) cannot be used, the answer
/// is [`StateError::CompleteCheckpointUnusable`], since transactional sinks
/// may already have published what it covers.
pub fn load_latest(dir: impl AsRef<Path>) -> Result<Checkpoint, StateError> {
    let dir = dir.as_ref();
    let scan = scan(dir)?;
    let (newest, mut notes) = newest_complete(dir, &scan)?;
    match choose(dir, scan, |_| true) {
        Ok(checkpoint) => match newest {
            Some(newest) if newest > checkpoint.id() => {
                notes.extend(checkpoint.skipped().iter().cloned());
                Err(StateError::CompleteCheckpointUnusable {
                    dir: dir.to_path_buf(),
                    newest,
                    usable: Some(checkpoint.id()),
                    skipped: notes,
                })
            }
            _ => Ok(checkpoint),
        },
        Err(StateError::NoCheckpoint { skipped, .. }) if newest.is_some() => {
            notes.extend(skipped);
            Err(StateError::CompleteCheckpointUnusable {
                dir: dir.to_path_buf(),
                newest: newest.unwrap_or(CheckpointId::NONE),
                usable: None,
                skipped: notes,
            })
        }
        Err(StateError::NoCheckpoint { dir, mut skipped }) => {
            skipped.extend(notes);
            Err(StateError::NoCheckpoint { dir, skipped })
        }
        other => other,
    }
}

/// Replaces `dir/name` with `id`: written aside, flushed, then renamed over
/// the old file, so that it always holds one whole id.
fn write_id(dir: &Path, name: &str, id: u64) -> Result<(), StateError> {
    let path = dir.join(name);
    let aside = dir.join(format!("{name}.next"));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&aside)?;
        file.write_all(format!("{id}\n").as_bytes())?;
        file.sync_data()?;
        std::fs::rename(&aside, &path)
    };
    write().map_err(|e| StateError::io("write", &path, e))?;
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The id `path` holds: `None` if there is no such file, an error if it
/// holds something else.
fn read_id(path: &Path) -> Result<Option<u64>, StateError> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            StateError::io(
                "read",
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not a checkpoint id"),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateError::io("read", path, e)),
    }
}

/// The newest checkpoint of `dir` known to have completed, by its commit
/// records and its marker, with what could not be read on the way.
fn newest_complete(
    dir: &Path,
    scan: &Scan,
) -> Result<(Option<CheckpointId>, Vec<String>), StateError> {
    let mut notes = Vec::new();
    let marker = dir.join(COMPLETE_MARKER);
    let marked = match std::fs::read_to_string(&marker) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(id) => Some(id),
            Err(_) => {
                notes.push(format!("{}: not a checkpoint id", marker.display()));
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(StateError::io("read", &marker, e)),
    };
    let committed = scan.commits.keys().next_back().copied();
    let newest = marked.max(committed).filter(|&id| id > 0);
    Ok((newest.map(CheckpointId::new), notes))
}

/// Loads complete checkpoint `id` of `dir`, checked as [`load_latest`]
/// checks the newest.
pub fn load_checkpoint(dir: impl AsRef<Path>, id: CheckpointId) -> Result<Checkpoint, StateError> {
    let dir = dir.as_ref();
    choose(dir, scan(dir)?, |candidate| candidate == id.get())
}

/// The newest checkpoint of `scan` that `wanted` accepts and that is whole.
fn choose(dir: &Path, scan: Scan, wanted: impl Fn(u64) -> bool) -> Result<Checkpoint, StateError> {
    let mut skipped = scan.skipped;
    for (&id, &expected) in scan.commits.iter().rev().filter(|(id, _)| wanted(**id)) {
        // The last copy of a (operator, part) wins.
        let mut parts: BTreeMap<(u64, u32), &Entry> = BTreeMap::new();
        for entry in scan.entries.iter().filter(|e| e.checkpoint == id) {
            parts.insert((entry.operator, entry.part), entry);
        }
        if parts.len() != expected as usize {
            skipped.push(format!(
                "checkpoint {id}: committed with {expected} snapshots but {} are readable",
                parts.len()
            ));
            continue;
        }
        let damaged = parts
            .values()
            .find(|e| fails_checksum(&scan.maps, &scan.segments, e));
        if let Some(e) = damaged {
            skipped.push(format!(
                "checkpoint {id}: the snapshot of operator {:#x} part {} fails its checksum",
                e.operator, e.part
            ));
            continue;
        }
        // The records of the checkpoints it builds on must be there, whole.
        let mut earlier: BTreeMap<(u64, u64, u32), &Entry> = BTreeMap::new();
        let mut missing = None;
        for &on in scan.depends.get(&id).into_iter().flatten() {
            let before = earlier.len();
            for entry in scan.entries.iter().filter(|e| e.checkpoint == on) {
                earlier.insert((on, entry.operator, entry.part), entry);
            }
            if earlier.len() == before {
                missing = Some(format!(
                    "checkpoint {id}: builds on checkpoint {on}, whose records are gone"
                ));
                break;
            }
        }
        let damaged = earlier
            .values()
            .find(|e| fails_checksum(&scan.maps, &scan.segments, e));
        if let Some(e) = damaged {
            missing = Some(format!(
                "checkpoint {id}: builds on the snapshot of operator {:#x} part {} in checkpoint {}, which fails its checksum",
                e.operator, e.part, e.checkpoint
            ));
        }
        if let Some(line) = missing {
            skipped.push(line);
            continue;
        }
        for line in &skipped {
            tracing::warn!("checkpoint log {}: skipped {line}", dir.display());
        }
        let snapshots = parts.into_values().cloned().collect();
        let earlier = earlier.into_values().cloned().collect();
        return Ok(Checkpoint::new(id, scan.maps, snapshots, earlier, skipped));
    }
    Err(StateError::NoCheckpoint {
        dir: dir.to_path_buf(),
        skipped,
    })
}

struct Segment {
    seq: u64,
    path: PathBuf,
    checkpoints: BTreeSet<u64>,
}

struct Scan {
    segments: Vec<Segment>,
    maps: Vec<Arc<Mmap>>,
    entries: Vec<Entry>,
    /// Committed checkpoint id → number of snapshots.
    commits: BTreeMap<u64, u32>,
    /// Checkpoint id → the earlier checkpoints it builds on.
    depends: BTreeMap<u64, BTreeSet<u64>>,
    skipped: Vec<String>,
}

fn scan(dir: &Path) -> Result<Scan, StateError> {
    let listing = std::fs::read_dir(dir).map_err(|e| StateError::io("read", dir, e))?;
    let mut found = Vec::new();
    for item in listing {
        let item = item.map_err(|e| StateError::io("read", dir, e))?;
        let path = item.path();
        let seq = path
            .extension()
            .filter(|ext| *ext == SEGMENT_SUFFIX)
            .and_then(|_| path.file_stem())
            .and_then(|stem| stem.to_str())
            .and_then(|stem| stem.parse::<u64>().ok());
        if let Some(seq) = seq {
            found.push((seq, path));
        }
    }
    found.sort();
    let mut scan = Scan {
        segments: Vec::new(),
        maps: Vec::new(),
        entries: Vec::new(),
        commits: BTreeMap::new(),
        depends: BTreeMap::new(),
        skipped: Vec::new(),
    };
    for (seq, path) in found {
        let map = Arc::new(map(&path)?);
        let index = scan.maps.len();
        let mut checkpoints = BTreeSet::new();
        let mut offset = 0usize;
        let bytes: &[u8] = &map;
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            let header = match Header::decode(rest) {
                Ok(header) => header,
                Err(bad) => {
                    let what = match bad {
                        BadHeader::Short => "a torn record",
                        BadHeader::Invalid => "a damaged or torn record",
                    };
                    scan.skipped.push(format!(
                        "{}: {what} at byte {offset}, {} bytes unread",
                        path.display(),
                        rest.len()
                    ));
                    break;
                }
            };
            let record_len = header
                .record_len()
                .filter(|&n| n <= rest.len() as u64)
                .map(|n| n as usize);
            let Some(record_len) = record_len else {
                scan.skipped.push(format!(
                    "{}: a torn record at byte {offset} ({} of its {} payload bytes present)",
                    path.display(),
                    rest.len().saturating_sub(HEADER_LEN),
                    header.len
                ));
                break;
            };
            checkpoints.insert(header.checkpoint);
            match header.kind {
                Kind::Snapshot => scan.entries.push(Entry {
                    checkpoint: header.checkpoint,
                    operator: header.operator,
                    part: header.part,
                    schema: header.schema,
                    segment: index,
                    offset: offset + HEADER_LEN,
                    len: header.len as usize,
                    crc: header.payload_crc,
                    checked_by_reader: header.checked_by_reader,
                }),
                Kind::Commit => {
                    scan.commits.insert(header.checkpoint, header.part);
                }
                Kind::Depends => {
                    scan.depends
                        .entry(header.checkpoint)
                        .or_default()
                        .insert(header.operator);
                }
            }
            offset += record_len;
        }
        scan.maps.push(map);
        scan.segments.push(Segment {
            seq,
            path,
            checkpoints,
        });
    }
    Ok(scan)
}

/// Whether `entry`'s record fails the checksum it was written with (one
/// its reader checks, a part at a time, passes here). The record is read
/// through the file, in order, so the kernel reads ahead (the segment is
/// mapped for lookups, without read-ahead: a record of gigabytes read a
/// page fault at a time off a cold disk loaded at 58 MB/s where the disk
/// reads 1.7 GB/s); its pages are then cached for the mapping. A file
/// that cannot be read so is hashed through the mapping.
fn fails_checksum(maps: &[Arc<Mmap>], segments: &[Segment], entry: &Entry) -> bool {
    use std::os::unix::fs::FileExt;
    /// Bytes read and hashed at a time.
    const CHUNK: usize = 16 << 20;
    if entry.checked_by_reader {
        return false;
    }
    let mapped = || {
        let map = &maps[entry.segment];
        crc32fast::hash(&map[entry.offset..entry.offset + entry.len])
    };
    let read = || -> std::io::Result<u32> {
        let file = File::open(&segments[entry.segment].path)?;
        let mut crc = crc32fast::Hasher::new();
        let mut buffer = vec![0u8; CHUNK.min(entry.len)];
        let mut at = 0;
        while at < entry.len {
            let chunk = &mut buffer[..CHUNK.min(entry.len - at)];
            file.read_exact_at(chunk, (entry.offset + at) as u64)?;
            crc.update(chunk);
            at += chunk.len();
        }
        Ok(crc.finalize())
    };
    read().unwrap_or_else(|_| mapped()) != entry.crc
}

/// Maps a segment file for reading.
#[allow(unsafe_code)]
fn map(path: &Path) -> Result<Mmap, StateError> {
    let file = File::open(path).map_err(|e| StateError::io("open", path, e))?;
    // SAFETY: a segment is append-only and private to its checkpoint
    // directory: this log never rewrites or truncates bytes once written, and
    // readers only look at records whose framing they have validated. The
    // remaining hazard, another process truncating the file while it is
    // mapped, is a misuse of the directory that every mmap-based store
    // shares. (A streamed record whose producer failed is cut off, but it
    // lies past the end of every mapping made before it, and no mapping is
    // made while it is written.)
    let map = unsafe { Mmap::map(&file) }.map_err(|e| StateError::io("map", path, e))?;
    // Read by lookups here and there: no read-ahead around each.
    let _ = map.advise(memmap2::Advice::Random);
    Ok(map)
}

/// Bytes of a streamed payload written between flushes to disk.
const SYNC_EVERY: u64 = 32 << 20;

/// A payload on its way into a segment: its length and checksum as it goes.
/// Every [`SYNC_EVERY`] bytes it is flushed to disk and dropped from the
/// page cache (as RocksDB's `bytes_per_sync` does): a payload larger than
/// memory leaves neither dirty pages piling up nor clean ones crowding out
/// the job's memory.
struct Framed<'f> {
    out: std::io::BufWriter<&'f mut File>,
    crc: crc32fast::Hasher,
    len: u64,
    unsynced: u64,
    /// Where in the file the bytes not yet dropped from the cache start.
    cached_from: u64,
}

impl Write for Framed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        self.unsynced += n as u64;
        if self.unsynced >= SYNC_EVERY {
            self.out.flush()?;
            let file: &File = self.out.get_ref();
            file.sync_data()?;
            drop_cached(file, self.cached_from, self.unsynced);
            self.cached_from += self.unsynced;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Drops `len` bytes of `file` from `offset` from the page cache (they are
/// durable; a page mapped stays).
#[cfg(unix)]
fn drop_cached(file: &File, offset: u64, len: u64) {
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // Advice only: a failure leaves the pages cached, which is correct.
    let _ = posix_fadvise(file, offset, len, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
}

#[cfg(not(unix))]
fn drop_cached(_: &File, _: u64, _: u64) {}
