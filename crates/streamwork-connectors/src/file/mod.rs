//! Files of lines: a source reading a file or a directory, and a sink writing
//! one file per instance.

mod lines;
mod sink;
mod source;

pub use lines::{LineParser, Lines, RawLineParser};
pub use sink::{FileSink, TransactionalFileSink};
pub use source::FileSource;
