//! Writes records to standard output, one line each.

use std::io::Write;
use std::sync::Arc;

use streamwork_core::{ConnectorError, Data, Record, Sink};

type Format<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// Prints each record as one line on stdout. Lines are buffered per instance
/// and written when the instance flushes, so lines of parallel instances never
/// interleave mid-line.
///
/// ```
/// use streamwork::connectors::StdoutSink;
/// let sink = StdoutSink::display::<u64>();
/// # let _ = sink;
/// ```
pub struct StdoutSink<T> {
    format: Format<T>,
    buffer: Vec<u8>,
}

impl<T> Clone for StdoutSink<T> {
    fn clone(&self) -> Self {
        StdoutSink {
            format: self.format.clone(),
            buffer: Vec::new(),
        }
    }
}

impl StdoutSink<()> {
    /// Prints records with their `Display` form.
    pub fn display<T: Data + std::fmt::Display>() -> StdoutSink<T> {
        StdoutSink::new(|value: &T, line: &mut Vec<u8>| {
            let _ = write!(line, "{value}");
        })
    }
}

impl<T: Data> StdoutSink<T> {
    /// Prints records formatted by `format` (which appends the line, without
    /// its newline, to the buffer it is given).
    pub fn new(format: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static) -> Self {
        StdoutSink {
            format: Arc::new(format),
            buffer: Vec::new(),
        }
    }
}

const FLUSH_AT: usize = 64 * 1024;

impl<T: Data> Sink for StdoutSink<T> {
    type In = T;

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        (self.format)(&record.value, &mut self.buffer);
        self.buffer.push(b'\n');
        if self.buffer.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(&self.buffer)
            .and_then(|()| stdout.flush())
            .map_err(|e| ConnectorError::io("writing to stdout", e))?;
        self.buffer.clear();
        Ok(())
    }
}
