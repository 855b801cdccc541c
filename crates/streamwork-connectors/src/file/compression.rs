//! Compressed files: gzip (`.gz`) and zstd (`.zst`), read and written.
//!
//! A compressed file cannot be entered in the middle, so a source reads
//! each one as a single split and resumes it by decompressing up to its
//! checkpointed position. A sink ends a gzip member or zstd frame at every
//! commit: appending committed pieces keeps the file valid (both formats
//! read concatenated members or frames as one stream), and a piece a crash
//! cut short is truncated away at a member boundary.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

/// How a file's bytes are compressed.
///
/// ```
/// use std::path::Path;
/// use streamwork::connectors::Compression;
/// assert_eq!(Compression::of_path(Path::new("bids.csv.gz")), Compression::Gzip);
/// assert_eq!(Compression::of_path(Path::new("bids.jsonl.zst")), Compression::Zstd);
/// assert_eq!(Compression::of_path(Path::new("bids.csv")), Compression::None);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// Plain bytes.
    #[default]
    None,
    /// gzip (RFC 1952); several members read as one stream.
    Gzip,
    /// Zstandard; several frames read as one stream.
    Zstd,
}

impl Compression {
    /// By the file name's extension: `.gz` is gzip, `.zst` and `.zstd`
    /// zstd, anything else plain.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("zst" | "zstd") => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// The extension a file of this compression is given (`.gz`, `.zst`),
    /// or nothing.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
        }
    }

    /// The format's name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// Whether a reader can start in the middle of such a file.
    pub(crate) fn splittable(self) -> bool {
        self == Compression::None
    }

    /// `file`'s decompressed bytes, buffered.
    pub(crate) fn reader(
        self,
        file: impl Read + Send + 'static,
    ) -> io::Result<Box<dyn BufRead + Send>> {
        const BUFFER: usize = 256 * 1024;
        Ok(match self {
            Compression::None => Box::new(BufReader::with_capacity(BUFFER, file)),
            Compression::Gzip => Box::new(BufReader::with_capacity(
                BUFFER,
                flate2::bufread::MultiGzDecoder::new(BufReader::new(file)),
            )),
            Compression::Zstd => Box::new(BufReader::with_capacity(
                BUFFER,
                zstd::stream::read::Decoder::new(file)?,
            )),
        })
    }

    /// An encoder writing this compression into `inner`.
    pub(crate) fn encoder<W: Write>(self, inner: W) -> io::Result<Encoder<W>> {
        Ok(match self {
            Compression::None => Encoder::Plain(inner),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                inner,
                flate2::Compression::default(),
            )),
            // Level 3, zstd's default: fast, and smaller than gzip's 6.
            Compression::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(inner, 3)?),
        })
    }

    /// `bytes` compressed as one member or frame.
    pub(crate) fn compress(self, bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut encoder = self.encoder(Vec::new())?;
        encoder.write_all(bytes)?;
        encoder.finish()
    }
}

/// Bytes written through a compression, ended by [`finish`](Self::finish).
pub(crate) enum Encoder<W: Write> {
    Plain(W),
    Gzip(flate2::write::GzEncoder<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Encoder<W> {
    /// The writer underneath, holding what is encoded so far (less what
    /// the compressor still buffers).
    #[cfg(feature = "s3")]
    pub(crate) fn get_mut(&mut self) -> &mut W {
        match self {
            Encoder::Plain(inner) => inner,
            Encoder::Gzip(encoder) => encoder.get_mut(),
            Encoder::Zstd(encoder) => encoder.get_mut(),
        }
    }

    /// Ends the member or frame and gives back the writer underneath.
    pub(crate) fn finish(self) -> io::Result<W> {
        match self {
            Encoder::Plain(inner) => Ok(inner),
            Encoder::Gzip(encoder) => encoder.finish(),
            Encoder::Zstd(encoder) => encoder.finish(),
        }
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Plain(inner) => inner.write(buf),
            Encoder::Gzip(encoder) => encoder.write(buf),
            Encoder::Zstd(encoder) => encoder.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Plain(inner) => inner.write_all(buf),
            Encoder::Gzip(encoder) => encoder.write_all(buf),
            Encoder::Zstd(encoder) => encoder.write_all(buf),
        }
    }

    /// Everything written so far becomes readable from the file (a sync
    /// flush: the stream stays open).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Plain(inner) => inner.flush(),
            Encoder::Gzip(encoder) => encoder.flush(),
            Encoder::Zstd(encoder) => encoder.flush(),
        }
    }
}

/// Skips `n` bytes of `reader`; the bytes skipped (fewer at its end).
pub(crate) fn skip(reader: &mut dyn BufRead, n: u64) -> io::Result<u64> {
    io::copy(&mut reader.take(n), &mut io::sink())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Read;

    fn read_all(compression: Compression, bytes: &[u8]) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!(
            "streamwork-compression-{}-{:?}",
            std::process::id(),
            compression
        ));
        std::fs::write(&dir, bytes).unwrap();
        let mut out = Vec::new();
        compression
            .reader(File::open(&dir).unwrap())
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        std::fs::remove_file(&dir).unwrap();
        out
    }

    #[test]
    fn concatenated_members_and_frames_read_as_one_stream() {
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let mut file = compression.compress(b"a\nb\n").unwrap();
            file.extend(compression.compress(b"c\n").unwrap());
            file.extend(compression.compress(b"").unwrap());
            file.extend(compression.compress(b"d").unwrap());
            assert_eq!(
                read_all(compression, &file),
                b"a\nb\nc\nd",
                "{compression:?}"
            );
        }
    }

    #[test]
    fn damaged_input_is_an_error_not_a_panic() {
        for compression in [Compression::Gzip, Compression::Zstd] {
            let mut file = compression.compress(&[7u8; 10_000]).unwrap();
            file.truncate(file.len() / 2);
            let dir = std::env::temp_dir().join(format!(
                "streamwork-damaged-{}-{compression:?}",
                std::process::id()
            ));
            std::fs::write(&dir, &file).unwrap();
            let mut out = Vec::new();
            let read = compression
                .reader(File::open(&dir).unwrap())
                .and_then(|mut r| r.read_to_end(&mut out));
            std::fs::remove_file(&dir).unwrap();
            assert!(read.is_err(), "{compression:?} read a cut file");
        }
    }
}
