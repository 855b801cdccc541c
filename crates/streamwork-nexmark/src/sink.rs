//! Where result rows go: JSON lines to a file or stdout, or nowhere (the
//! blackhole of the published benchmarks, which counts rows without
//! formatting them).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use streamwork::prelude::*;

/// A result row: a typed value that formats itself as one JSON object.
/// Queries emit rows unformatted; the sink formats them only when it writes
/// them.
pub trait Row: Data {
    /// Appends the row as one JSON object, without a newline.
    fn write_json(&self, out: &mut Vec<u8>);
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
    rows: Arc<AtomicU64>,
}

impl RowOutput {
    /// Rows go to `target`.
    pub fn new(target: RowTarget) -> Self {
        RowOutput {
            target,
            rows: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The sink of a query whose rows are `R`.
    pub fn sink<R: Row>(&self) -> RowSink<R> {
        RowSink {
            target: self.target.clone(),
            writer: None,
            line: Vec::new(),
            pending: 0,
            rows: self.rows.clone(),
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

    /// Rows consumed so far.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
}

/// The sink of every query: formats and writes rows (or drops them, into
/// the blackhole) and counts them.
pub struct RowSink<R> {
    target: RowTarget,
    writer: Option<Box<dyn Write + Send>>,
    line: Vec<u8>,
    /// Rows not yet added to the shared count.
    pending: u64,
    rows: Arc<AtomicU64>,
    _rows: PhantomData<fn(R)>,
}

impl<R> Clone for RowSink<R> {
    fn clone(&self) -> Self {
        RowSink {
            target: self.target.clone(),
            writer: None,
            line: Vec::new(),
            pending: 0,
            rows: self.rows.clone(),
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

    fn open(&mut self, _: &InstanceContext) -> Result<(), ConnectorError> {
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
        self.pending += 1;
        if let Some(writer) = self.writer.as_mut() {
            self.line.clear();
            record.value.write_json(&mut self.line);
            self.line.push(b'\n');
            writer
                .write_all(&self.line)
                .map_err(|e| ConnectorError::io("writing a result row", e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.count_pending();
        if let Some(writer) = self.writer.as_mut() {
            writer
                .flush()
                .map_err(|e| ConnectorError::io("writing result rows", e))?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.flush()
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
