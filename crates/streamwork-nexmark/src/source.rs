//! Where Nexmark events come from: a JSON-lines file (or stdin), or the generator.

use std::path::Path;

use streamwork::connectors::file::Lines;
use streamwork::prelude::*;

use crate::generator::{GeneratorConfig, event};
use crate::model::Event;

/// The events of a query: parsed from JSON lines, or generated. Every bid
/// carries its input position ([`Bid::seq`](crate::Bid::seq)).
#[derive(Clone)]
pub enum NexmarkSource {
    /// JSON lines from a file; malformed lines are counted and skipped.
    File(Box<NumberedFile>),
    /// The built-in generator.
    Generated(GeneratorSource<Event>),
}

/// A JSON-lines file whose events are numbered in the order they are read
/// (the file is read by one instance).
pub struct NumberedFile {
    file: FileSource<Event>,
    /// Where the file source polls into; its records are numbered, then
    /// handed on.
    scratch: Collector<Event>,
    next: u64,
}

impl Clone for NumberedFile {
    fn clone(&self) -> Self {
        NumberedFile {
            file: self.file.clone(),
            scratch: Collector::detached(),
            next: self.next,
        }
    }
}

impl NexmarkSource {
    /// Events from the JSON-lines file at `path` (`/dev/stdin` for standard
    /// input), counting malformed lines into `malformed`.
    pub fn file(path: impl AsRef<Path>, malformed: &InputErrors) -> Self {
        // The framework's JSON-lines decoder; a line that is not an event
        // is counted with its position and the reason.
        let lines = Lines::json()
            .skip_blank(false)
            .count_errors_in(malformed.clone());
        NexmarkSource::File(Box::new(NumberedFile {
            file: FileSource::with_lines(path, lines),
            scratch: Collector::detached(),
            next: 0,
        }))
    }

    /// `count` generated events.
    pub fn generated(config: GeneratorConfig, count: u64) -> Self {
        NexmarkSource::Generated(
            GeneratorSource::new(move |n| event(&config, n))
                .take(count)
                .boxed(),
        )
    }
}

impl Source for NexmarkSource {
    type Out = Collector<Event>;

    /// Generates: never waits.
    fn may_block(&self) -> bool {
        false
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.file.open(ctx),
            NexmarkSource::Generated(s) => s.open(ctx),
        }
    }

    fn poll(&mut self, out: &mut Collector<Event>) -> Result<SourcePoll, ConnectorError> {
        match self {
            NexmarkSource::File(s) => {
                let poll = s.file.poll(&mut s.scratch)?;
                let mut records = s.scratch.take_buffered();
                for record in &mut records {
                    if let Event::Bid(bid) = &mut record.value {
                        bid.seq = s.next;
                    }
                    s.next += 1;
                }
                out.push_batch(&mut records);
                Ok(poll)
            }
            NexmarkSource::Generated(s) => s.poll(out),
        }
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.file.close(),
            NexmarkSource::Generated(s) => s.close(),
        }
    }
}
