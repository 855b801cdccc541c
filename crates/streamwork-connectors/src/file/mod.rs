//! Files of lines: a source reading a file or a directory, a sink writing
//! one file per instance, and an upsert sink keeping one file per key;
//! plain, gzip or zstd.

mod compression;
mod lines;
mod sink;
mod source;
mod staging;
mod upsert;

pub use compression::Compression;
pub use lines::{LineParser, Lines, RawLineParser};
pub use sink::{FileSink, TransactionalFileSink};
pub use source::FileSource;
pub use upsert::UpsertFileSink;
