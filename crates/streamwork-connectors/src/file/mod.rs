//! Files of lines: a source reading a file or a directory, a sink writing
//! one file per instance, and an upsert sink keeping one file per key;
//! plain, gzip or zstd; and Parquet files (feature `parquet`).

mod compression;
mod input;
mod lines;
#[cfg(feature = "parquet")]
mod parquet;
mod sink;
mod source;
mod staging;
#[cfg(feature = "s3")]
mod store;
mod upsert;

pub use compression::Compression;
pub use lines::{LineParser, Lines, RawLineParser};
#[cfg(feature = "parquet")]
pub use parquet::{DEFAULT_ROW_GROUP_ROWS, ParquetSink, ParquetSource, hive_date_hour};
pub use sink::{FileSink, TransactionalFileSink};
pub use source::FileSource;
#[cfg(feature = "s3")]
pub use store::{MIN_PART_BYTES, StoreFileSink, StorePrefix};
pub use upsert::UpsertFileSink;
