//! Where result rows go: JSON lines to a file or stdout, or nowhere (the
//! blackhole of the published benchmarks, which counts rows without
//! formatting them).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use streamwork::connectors::file::TransactionalFileSink;

use serde::Serialize;
use streamwork::prelude::*;

/// A result row: a typed value that formats itself as one JSON object.
/// Queries emit rows unformatted; the sink formats them only when it writes
/// them.
pub trait Row: Data {
    /// Appends the row as one JSON object, without a newline.
    fn write_json(&self, out: &mut Vec<u8>);

    /// Whether the row enters the result or leaves it (an update stream's
    /// `"op"`): it enters, unless it is a [`Change`] that says otherwise.
    fn op(&self) -> Op {
        Op::Insert
    }
}

/// What a line of an update stream does to the result.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The row enters the result (`"op":"+"`).
    Insert,
    /// The row leaves it (`"op":"-"`): one copy of an equal row.
    Retract,
}

/// A change of a query's result, for queries whose rows change as input
/// arrives: a row that enters it or leaves it. An update is the retraction
/// of the old row, then the insertion of the new. Written without its op
/// as a final row.
#[derive(Clone, Debug)]
pub struct Change<R> {
    /// Enters or leaves.
    pub op: Op,
    /// The row.
    pub row: R,
}

impl<R> Change<R> {
    /// `row` enters the result.
    pub fn insert(row: R) -> Self {
        Change {
            op: Op::Insert,
            row,
        }
    }

    /// `row` leaves the result.
    pub fn retract(row: R) -> Self {
        Change {
            op: Op::Retract,
            row,
        }
    }

    /// At the end of the input, a query's `rows` as final rows; or, when
    /// every change was emitted as it came (`updates`), nothing. The rows
    /// are consumed either way.
    pub fn finals(updates: bool, rows: impl Iterator<Item = R>, out: &mut Collector<Change<R>>)
    where
        Change<R>: Data,
    {
        if updates {
            rows.for_each(drop);
        } else {
            out.extend(rows.map(Change::insert));
        }
    }
}

impl<R: Row> Row for Change<R> {
    fn write_json(&self, out: &mut Vec<u8>) {
        self.row.write_json(out);
    }

    fn op(&self) -> Op {
        self.op
    }
}

/// Appends `row`'s line, without a newline: its JSON object, with its
/// `"op"` field in an update stream.
fn write_line<R: Row>(row: &R, updates: bool, line: &mut Vec<u8>) {
    row.write_json(line);
    if updates && line.last() == Some(&b'}') {
        line.pop();
        let op = match row.op() {
            Op::Insert => "+",
            Op::Retract => "-",
        };
        // An object with fields gets a comma before the op.
        if line.last() != Some(&b'{') {
            line.push(b',');
        }
        line.extend_from_slice(b"\"op\":\"");
        line.extend_from_slice(op.as_bytes());
        line.extend_from_slice(b"\"}");
    }
}

/// Appends `value`'s serde form as JSON: the usual body of [`Row::write_json`].
pub fn serde_row<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing to a `Vec` fails only on a value serde cannot represent
    // (none of the rows here): then nothing is appended and the row is
    // an empty line, never a panic.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Where rows go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowTarget {
    /// Standard output.
    Stdout,
    /// A file, created (or truncated) when the sink opens.
    File(PathBuf),
    /// Nowhere: rows are counted and dropped, never formatted (`--output none`).
    Blackhole,
}

/// Where a run's rows go, and how many there were: each query makes its
/// typed [`RowSink`] from it.
#[derive(Clone, Debug)]
pub struct RowOutput {
    target: RowTarget,
    /// Rows are written as an update stream (with their `"op"`).
    updates: bool,
    rows: Arc<AtomicU64>,
    /// Rows are published per completed checkpoint (`Some`), with each
    /// instance's count of published rows.
    transactional: Option<Arc<Mutex<Vec<u64>>>>,
}

impl RowOutput {
    /// Rows go to `target`.
    pub fn new(target: RowTarget) -> Self {
        RowOutput {
            target,
            updates: false,
            rows: Arc::new(AtomicU64::new(0)),
            transactional: None,
        }
    }

    /// Writes an update stream: each change of the result as it happens,
    /// with its `"op"` (`"+"` or `"-"`), rather than final rows. The
    /// queries whose rows change (q4, q6, q15-q19) emit every change; the
    /// others' rows never change, and each is a `"+"`.
    pub fn with_updates(mut self, updates: bool) -> Self {
        self.updates = updates;
        self
    }

    /// Whether rows are written as an update stream.
    pub fn updates(&self) -> bool {
        self.updates
    }

    /// Rows go to `target` exactly once: a file's rows are appended when
    /// the checkpoint that covers them completes (the framework's
    /// transactional single-file sink), and rows are counted then, the
    /// blackhole's too. Standard output cannot take rows back: refused.
    pub fn exactly_once(target: RowTarget) -> Result<Self, ConnectorError> {
        if target == RowTarget::Stdout {
            return Err(ConnectorError::user(
                "rows written to standard output cannot be taken back after a failure, so they cannot be exactly once: give --output FILE (or --output none), or run at most once".to_string(),
            ));
        }
        Ok(RowOutput {
            transactional: Some(Arc::new(Mutex::new(Vec::new()))),
            ..RowOutput::new(target)
        })
    }

    /// The sink of a query whose rows are `R`.
    pub fn sink<R: Row>(&self) -> RowSink<R> {
        let updates = self.updates;
        let committed = self.transactional.as_ref().map(|published| Committed {
            published: published.clone(),
            file: match &self.target {
                RowTarget::File(path) => Some(
                    FileSink::new(path, move |row: &R, line: &mut Vec<u8>| {
                        write_line(row, updates, line);
                    })
                    .single_file()
                    .transactional(),
                ),
                _ => None,
            },
            instance: 0,
            staged: 0,
            pending: VecDeque::new(),
            committed: 0,
        });
        RowSink {
            target: self.target.clone(),
            updates,
            writer: None,
            line: Vec::new(),
            pending: 0,
            rows: self.rows.clone(),
            committed,
            _rows: PhantomData,
        }
    }

    /// The sink's parallelism for a query at `parallelism`: one writer, or,
    /// into the blackhole, one per instance (fused with the query's last
    /// step, as a published benchmark's blackhole sink is).
    pub fn parallelism(&self, parallelism: u32) -> u32 {
        if self.target == RowTarget::Blackhole {
            parallelism
        } else {
            1
        }
    }

    /// Rows consumed so far (exactly once: rows published, counting those
    /// an earlier run published before the checkpoint this one resumed).
    pub fn rows(&self) -> u64 {
        match &self.transactional {
            Some(published) => published
                .lock()
                .map_or(0, |counts| counts.iter().sum::<u64>()),
            None => self.rows.load(Ordering::Relaxed),
        }
    }
}

/// How a sink run exactly once publishes: rows staged per checkpoint,
/// written (to a file) and counted when it completes.
struct Committed<R> {
    /// Each instance's rows published so far.
    published: Arc<Mutex<Vec<u64>>>,
    /// The file rows go to, exactly once.
    file: Option<TransactionalFileSink<R>>,
    instance: usize,
    /// Rows since the last checkpoint.
    staged: u64,
    /// Rows of checkpoints not known to be complete yet.
    pending: VecDeque<(CheckpointId, u64)>,
    /// Rows published by this instance, and by the instances of earlier
    /// runs whose count it took over.
    committed: u64,
}

impl<R> Clone for Committed<R> {
    fn clone(&self) -> Self {
        Committed {
            published: self.published.clone(),
            file: self.file.clone(),
            instance: 0,
            staged: 0,
            pending: VecDeque::new(),
            committed: 0,
        }
    }
}

/// The layout of a sink's checkpointed count: rows published once its
/// checkpoint completes (a `u64`, little-endian), counted from the start
/// of the job.
const COUNT_SCHEMA: u32 = 1;

impl<R> Committed<R> {
    fn publish(&mut self) {
        if let Ok(mut counts) = self.published.lock() {
            if counts.len() <= self.instance {
                counts.resize(self.instance + 1, 0);
            }
            counts[self.instance] = self.committed;
        }
    }

    fn commit(&mut self, checkpoint: CheckpointId) {
        while let Some(&(at, rows)) = self.pending.front() {
            if checkpoint != CheckpointId::FINAL && at > checkpoint {
                break;
            }
            self.committed += rows;
            self.pending.pop_front();
        }
        if checkpoint == CheckpointId::FINAL {
            self.committed += std::mem::take(&mut self.staged);
        }
        self.publish();
    }

    /// Rows published once the checkpoint just staged completes.
    fn through_staged(&self) -> u64 {
        self.committed + self.pending.iter().map(|(_, rows)| rows).sum::<u64>()
    }

    /// What the run restored from had published: the count of every old
    /// instance, taken over by instance 0 (at any parallelism).
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut total = 0u64;
        for part in &restore.parts {
            let count = (part.schema == COUNT_SCHEMA)
                .then(|| <[u8; 8]>::try_from(part.bytes).ok())
                .flatten()
                .map(u64::from_le_bytes);
            let Some(count) = count else {
                return Err(ConnectorError::user(format!(
                    "Nexmark sink `{}`: the checkpointed row count of instance {} is damaged or of an unknown schema ({}, {} bytes; this version reads schema {COUNT_SCHEMA}, 8 bytes): start over without restoring",
                    restore.component,
                    part.part.0,
                    part.schema,
                    part.bytes.len()
                )));
            };
            total = total.saturating_add(count);
        }
        self.staged = 0;
        self.pending.clear();
        self.committed = if restore.instance.0 == 0 { total } else { 0 };
        self.publish();
        Ok(())
    }
}

/// The sink of every query: formats and writes rows (or drops them, into
/// the blackhole) and counts them.
pub struct RowSink<R> {
    target: RowTarget,
    updates: bool,
    writer: Option<Box<dyn Write + Send>>,
    line: Vec<u8>,
    /// Rows not yet added to the shared count.
    pending: u64,
    rows: Arc<AtomicU64>,
    /// Exactly once: how rows are published.
    committed: Option<Committed<R>>,
    _rows: PhantomData<fn(R)>,
}

impl<R> Clone for RowSink<R> {
    fn clone(&self) -> Self {
        RowSink {
            target: self.target.clone(),
            updates: self.updates,
            writer: None,
            line: Vec::new(),
            pending: 0,
            rows: self.rows.clone(),
            committed: self.committed.clone(),
            _rows: PhantomData,
        }
    }
}

impl<R> RowSink<R> {
    fn count_pending(&mut self) {
        self.rows
            .fetch_add(std::mem::take(&mut self.pending), Ordering::Relaxed);
    }
}

impl<R: Row> Sink for RowSink<R> {
    type In = R;

    /// Writes local files: never waits on anything outside the job.
    fn may_block(&self) -> bool {
        false
    }

    fn exactly_once(&self) -> bool {
        self.committed.is_some()
    }

    fn stages_locally(&self) -> Option<String> {
        self.committed
            .as_ref()
            .and_then(|c| c.file.as_ref())
            .and_then(Sink::stages_locally)
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        if let Some(committed) = self.committed.as_mut() {
            committed.instance = ctx.instance().0 as usize;
            if let Some(file) = committed.file.as_mut() {
                file.open(ctx)?;
            }
            return Ok(());
        }
        self.writer = match &self.target {
            RowTarget::Stdout => Some(Box::new(BufWriter::with_capacity(
                1 << 16,
                std::io::stdout(),
            ))),
            RowTarget::File(path) => {
                let file = File::create(path)
                    .map_err(|e| ConnectorError::io(format!("creating {}", path.display()), e))?;
                Some(Box::new(BufWriter::with_capacity(1 << 20, file)))
            }
            RowTarget::Blackhole => None,
        };
        Ok(())
    }

    #[inline]
    fn write(&mut self, record: Record<R>) -> Result<(), ConnectorError> {
        if let Some(committed) = self.committed.as_mut() {
            committed.staged += 1;
            return match committed.file.as_mut() {
                Some(file) => file.write(record),
                None => Ok(()),
            };
        }
        self.pending += 1;
        if let Some(writer) = self.writer.as_mut() {
            self.line.clear();
            write_line(&record.value, self.updates, &mut self.line);
            self.line.push(b'\n');
            writer
                .write_all(&self.line)
                .map_err(|e| ConnectorError::io("writing a result row", e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Some(file) = self.committed.as_mut().and_then(|c| c.file.as_mut()) {
            return file.flush();
        }
        self.count_pending();
        if let Some(writer) = self.writer.as_mut() {
            writer
                .flush()
                .map_err(|e| ConnectorError::io("writing result rows", e))?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if let Some(file) = self.committed.as_mut().and_then(|c| c.file.as_mut()) {
            return file.close();
        }
        self.flush()
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let Some(committed) = self.committed.as_mut() else {
            return self.flush();
        };
        let staged = std::mem::take(&mut committed.staged);
        committed.pending.push_back((checkpoint, staged));
        match committed.file.as_mut() {
            Some(file) => file.pre_commit(checkpoint),
            None => Ok(()),
        }
    }

    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        Ok(self.committed.as_ref().map(|committed| {
            StateBytes::new(
                COUNT_SCHEMA,
                committed.through_staged().to_le_bytes().to_vec(),
            )
        }))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let Some(committed) = self.committed.as_mut() else {
            return Ok(());
        };
        if let Some(file) = committed.file.as_mut() {
            file.commit(checkpoint)?;
        }
        committed.commit(checkpoint);
        Ok(())
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let Some(committed) = self.committed.as_mut() else {
            return Ok(());
        };
        if let Some(file) = committed.file.as_mut() {
            file.restore(restore)?;
        }
        committed.restore(restore)
    }
}

impl<R> Drop for RowSink<R> {
    fn drop(&mut self) {
        self.count_pending();
    }
}

/// Implements [`Row`] for types whose serde form is their row.
macro_rules! serde_rows {
    ($($row:ty),* $(,)?) => {
        $(impl $crate::sink::Row for $row {
            fn write_json(&self, out: &mut Vec<u8>) {
                $crate::sink::serde_row(self, out);
            }
        })*
    };
}
pub(crate) use serde_rows;
