//! Writes result rows, one JSON object per line, to a file or stdout.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use streamwork::prelude::*;

/// Where rows go.
#[derive(Clone, Debug)]
pub enum RowTarget {
    /// Standard output.
    Stdout,
    /// A file, created (or truncated) when the sink opens.
    File(PathBuf),
}

/// The sink of every query: writes rows and counts them. Runs at parallelism 1.
pub struct RowSink {
    target: RowTarget,
    writer: Option<Box<dyn Write + Send>>,
    rows: Arc<AtomicU64>,
}

impl Clone for RowSink {
    fn clone(&self) -> Self {
        RowSink {
            target: self.target.clone(),
            writer: None,
            rows: self.rows.clone(),
        }
    }
}

impl RowSink {
    /// A sink writing to `target`.
    pub fn new(target: RowTarget) -> Self {
        RowSink {
            target,
            writer: None,
            rows: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
}

impl Sink for RowSink {
    type In = String;

    fn open(&mut self, _: &InstanceContext) -> Result<(), ConnectorError> {
        let writer: Box<dyn Write + Send> = match &self.target {
            RowTarget::Stdout => Box::new(BufWriter::with_capacity(1 << 16, std::io::stdout())),
            RowTarget::File(path) => {
                let file = File::create(path)
                    .map_err(|e| ConnectorError::io(format!("creating {}", path.display()), e))?;
                Box::new(BufWriter::with_capacity(1 << 20, file))
            }
        };
        self.writer = Some(writer);
        Ok(())
    }

    fn write(&mut self, record: Record<String>) -> Result<(), ConnectorError> {
        if let Some(writer) = self.writer.as_mut() {
            writer
                .write_all(record.value.as_bytes())
                .and_then(|()| writer.write_all(b"\n"))
                .map_err(|e| ConnectorError::io("writing a result row", e))?;
        }
        self.rows.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Some(writer) = self.writer.as_mut() {
            writer
                .flush()
                .map_err(|e| ConnectorError::io("writing result rows", e))?;
        }
        Ok(())
    }
}
