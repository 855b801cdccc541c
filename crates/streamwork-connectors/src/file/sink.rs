//! Writes records as lines to files: one file per instance.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamwork_core::{ConnectorError, Data, InstanceContext, Record, Sink};

type Format<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// Writes each record as one line into `DIR/part-INSTANCE` (or into `PATH`
/// itself when the sink has parallelism 1 and [`single_file`](Self::single_file)
/// is used).
///
/// ```no_run
/// use streamwork_connectors::FileSink;
/// let sink = FileSink::new("out", |n: &u64, line: &mut Vec<u8>| line.extend_from_slice(n.to_string().as_bytes()));
/// # let _ = sink;
/// ```
pub struct FileSink<T> {
    path: PathBuf,
    single: bool,
    format: Format<T>,
    writer: Option<BufWriter<File>>,
    line: Vec<u8>,
}

/// Cloning gives an unopened sink with the same settings.
impl<T> Clone for FileSink<T> {
    fn clone(&self) -> Self {
        FileSink {
            path: self.path.clone(),
            single: self.single,
            format: self.format.clone(),
            writer: None,
            line: Vec::new(),
        }
    }
}

impl<T: Data> FileSink<T> {
    /// Writes into directory `dir`, formatting each record with `format`.
    pub fn new(
        dir: impl AsRef<Path>,
        format: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        FileSink {
            path: dir.as_ref().to_path_buf(),
            single: false,
            format: Arc::new(format),
            writer: None,
            line: Vec::new(),
        }
    }

    /// Writes into the file at the sink's path itself (parallelism 1 only).
    pub fn single_file(mut self) -> Self {
        self.single = true;
        self
    }

    fn target(&self, ctx: &InstanceContext) -> Result<PathBuf, ConnectorError> {
        if self.single {
            if ctx.parallelism() != 1 {
                return Err(ConnectorError::user(format!(
                    "file sink `{}` writes a single file but has parallelism {}: use a directory or parallelism 1",
                    ctx.component(),
                    ctx.parallelism()
                )));
            }
            return Ok(self.path.clone());
        }
        std::fs::create_dir_all(&self.path).map_err(|e| {
            ConnectorError::io(format!("creating directory {}", self.path.display()), e)
        })?;
        Ok(self.path.join(format!("part-{}", ctx.instance().0)))
    }
}

impl<T: Data> Sink for FileSink<T> {
    type In = T;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let target = self.target(ctx)?;
        let file = File::create(&target)
            .map_err(|e| ConnectorError::io(format!("creating {}", target.display()), e))?;
        self.writer = Some(BufWriter::with_capacity(256 * 1024, file));
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.line.clear();
        (self.format)(&record.value, &mut self.line);
        self.line.push(b'\n');
        if let Some(writer) = self.writer.as_mut() {
            writer
                .write_all(&self.line)
                .map_err(|e| ConnectorError::io(format!("writing {}", self.path.display()), e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Some(writer) = self.writer.as_mut() {
            writer
                .flush()
                .map_err(|e| ConnectorError::io(format!("writing {}", self.path.display()), e))?;
        }
        Ok(())
    }
}
