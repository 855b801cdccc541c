//! Sources and sinks for Streamwork jobs: in-memory, a deterministic generator,
//! files of lines, TCP lines (the book's `nc -lk 9990` readers), stdout, files,
//! and a collecting sink for tests.
//!
//! ```
//! use streamwork_connectors::{CollectSink, VecSource};
//! use streamwork_core::JobBuilder;
//! let mut job = JobBuilder::new("copy");
//! let words = job.source("words", 1, VecSource::new(vec!["a", "b"]));
//! let sink = CollectSink::new();
//! job.sink("collect", 1, sink.clone(), words);
//! // streamwork_runtime::run(job.build()?)? then sink.values() == ["a", "b"]
//! # Ok::<(), streamwork_core::GraphError>(())
//! ```
//!
//! Malformed input (invalid UTF-8, a line a parser rejects) is counted in an
//! [`InputErrors`] handle and reported; by default it is skipped, never a panic.
//!
//! Kafka (source, sink, per-partition watermarks, scale-out through a
//! consumer group) is the `kafka` module, behind the `kafka` feature.
//!
//! Not here: the runtime that runs these (streamwork-runtime), other message
//! queues.

#![warn(missing_docs)]

mod collect;
mod errors;
pub mod file;
mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
mod memory;
mod stdout;
mod tcp;

pub use collect::CollectSink;
pub use errors::{BadInput, InputErrors};
pub use file::{FileSink, FileSource, TransactionalFileSink, UpsertFileSink};
pub use generator::{DynMake, DynStamp, Generate, GeneratorSource, NoStamp, Stamp, StampWith};
pub use memory::VecSource;
pub use stdout::StdoutSink;
pub use tcp::TcpLineSource;
