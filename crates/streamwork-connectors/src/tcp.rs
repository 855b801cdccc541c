//! Reads lines from a TCP server: the book's readers of `nc -lk 9990`.

use std::io::{BufRead, BufReader, ErrorKind};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use streamwork_core::{Collector, ConnectorError, Data, InstanceContext, Source, SourcePoll};

use crate::file::Lines;

/// Connects to `addr` and emits each line received until the peer closes the
/// connection. Run `nc -lk 9990` in a terminal and type lines into it, as in
/// the book. Only instance 0 connects; other instances end at once.
///
/// ```no_run
/// use streamwork::connectors::TcpLineSource;
/// let lines = TcpLineSource::text("127.0.0.1:9990");
/// # let _ = lines;
/// ```
pub struct TcpLineSource<T> {
    addr: String,
    lines: Lines<T>,
    stream: Option<BufReader<TcpStream>>,
    buf: Vec<u8>,
    line_no: u64,
}

/// Cloning gives an unconnected source with the same settings: templates are
/// cloned per instance before they connect.
impl<T> Clone for TcpLineSource<T> {
    fn clone(&self) -> Self {
        TcpLineSource {
            addr: self.addr.clone(),
            lines: self.lines.clone(),
            stream: None,
            buf: Vec::new(),
            line_no: 0,
        }
    }
}

impl TcpLineSource<String> {
    /// Each line as a `String`.
    pub fn text(addr: impl Into<String>) -> Self {
        TcpLineSource::with_lines(addr, Lines::text())
    }
}

impl<T: Data + serde::de::DeserializeOwned> TcpLineSource<T> {
    /// Each line read from `addr` a JSON value; see
    /// [`Lines::json`](crate::file::Lines::json).
    pub fn json(addr: impl Into<String>) -> Self {
        TcpLineSource::with_lines(addr, crate::file::Lines::json())
    }

    /// Each line read from `addr` a CSV record; see
    /// [`Lines::csv`](crate::file::Lines::csv).
    pub fn csv(addr: impl Into<String>) -> Self {
        TcpLineSource::with_lines(addr, crate::file::Lines::csv())
    }
}

impl<T: Data> TcpLineSource<T> {
    /// Lines decoded as `lines` says.
    pub fn with_lines(addr: impl Into<String>, lines: Lines<T>) -> Self {
        TcpLineSource {
            addr: addr.into(),
            lines,
            stream: None,
            buf: Vec::new(),
            line_no: 0,
        }
    }

    /// Each line through `parse`.
    pub fn parsed<E: Into<streamwork_core::FormatError>>(
        addr: impl Into<String>,
        parse: impl Fn(&str) -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        TcpLineSource::with_lines(addr, Lines::parsed(parse))
    }

    /// Changes how lines are decoded.
    pub fn map_lines(mut self, f: impl FnOnce(Lines<T>) -> Lines<T>) -> Self {
        self.lines = f(self.lines);
        self
    }
}

impl<T: Data> Source for TcpLineSource<T> {
    type Out = Collector<T>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.lines.check(ctx.component())?;
        if ctx.instance().0 != 0 {
            return Ok(());
        }
        let addrs: Vec<_> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| ConnectorError::user(format!("bad address `{}`: {e}", self.addr)))?
            .collect();
        let stream = TcpStream::connect(&addrs[..]).map_err(|e| {
            ConnectorError::io(
                format!("connecting to {} (is `nc -lk PORT` running?)", self.addr),
                e,
            )
        })?;
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| ConnectorError::io("configuring the TCP socket", e))?;
        self.stream = Some(BufReader::new(stream));
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let Some(reader) = self.stream.as_mut() else {
            return Ok(SourcePoll::Finished);
        };
        for _ in 0..1024 {
            // A timeout may leave a partial line in `buf`: it is kept and
            // completed by the next poll.
            match reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => {
                    self.stream = None;
                    return Ok(SourcePoll::Finished);
                }
                Ok(_) => {
                    if self.buf.last() != Some(&b'\n') {
                        continue;
                    }
                    self.line_no += 1;
                    let raw = &self.buf[..self.buf.len() - 1];
                    let (addr, line_no) = (&self.addr, self.line_no);
                    if line_no == 1 && self.lines.wants_header() {
                        // A CSV header (`Lines::has_headers`): the connection's first line.
                        self.lines.read_header(raw, || format!("{addr} line 1"))?;
                        self.buf.clear();
                        continue;
                    }
                    if let Some(record) = self
                        .lines
                        .decode(raw, line_no - 1, || format!("{addr} line {line_no}"))?
                    {
                        out.emit(record);
                    }
                    self.buf.clear();
                    if reader.buffer().is_empty() {
                        // Nothing more has arrived: let the runtime flush now
                        // rather than block in the next read (adaptive flushing).
                        return Ok(SourcePoll::Idle);
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(SourcePoll::Idle);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ConnectorError::io(format!("reading from {}", self.addr), e)),
            }
        }
        Ok(SourcePoll::Emitted)
    }
}
