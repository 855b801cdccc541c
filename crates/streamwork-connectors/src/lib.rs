//! Sources and sinks for Streamwork jobs: in-memory, a deterministic generator,
//! files of lines (JSON, CSV by position or header; plain, gzip or zstd), TCP lines (the book's `nc -lk 9990` readers), stdout, files,
//! and a collecting sink for tests.
//!
//! A connector is an ordinary [`Source`](streamwork_core::Source) or
//! [`Sink`](streamwork_core::Sink), which the engine drives; here, by hand:
//!
//! ```
//! use streamwork::connectors::{CollectSink, VecSource};
//! use streamwork::core::{Collector, InstanceContext, InstanceIdx, KeyGroups, Sink, Source, SourcePoll};
//! let ctx = InstanceContext::new("copy", InstanceIdx(0), 1, KeyGroups::DEFAULT);
//! let mut words = VecSource::new(vec!["a", "b"]);
//! words.open(&ctx)?;
//! let mut out = Collector::detached();
//! while words.poll(&mut out)? != SourcePoll::Finished {}
//! let sink = CollectSink::new();
//! let mut writer = sink.clone();
//! writer.open(&ctx)?;
//! for record in out.take_buffered() {
//!     writer.write(record)?;
//! }
//! writer.close()?;
//! assert_eq!(sink.values(), vec!["a", "b"]);
//! # Ok::<(), streamwork::core::ConnectorError>(())
//! ```
//!
//! Malformed input (invalid UTF-8, a line a parser rejects) is counted in an
//! [`InputErrors`] handle and reported; by default it is skipped, never a panic.
//!
//! Kafka (source, sink, per-partition watermarks, scale-out through a
//! consumer group) is the `kafka` module, behind the `kafka` feature; the
//! exactly-once PostgreSQL sink is the `postgres` module, behind the
//! `postgres` feature.
//!
//! Not here: the engine that runs these (streamwork-runtime), scale-out
//! across processes (streamwork-scaleout), other message queues.

#![warn(missing_docs)]

mod collect;
mod commit;
mod errors;
pub mod file;
pub mod formats;
mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod stdout;
mod tcp;

pub use collect::{CollectSink, TransactionalCollectSink};
pub use errors::{BadInput, InputErrors};
pub use file::{Compression, FileSink, FileSource, TransactionalFileSink, UpsertFileSink};
pub use generator::{DynMake, DynStamp, Generate, GeneratorSource, NoStamp, Stamp, StampWith};
pub use memory::VecSource;
pub use stdout::StdoutSink;
pub use tcp::TcpLineSource;
