//! Where Nexmark events come from: a JSON-lines file (or stdin), or the generator.

use std::path::Path;

use streamwork::connectors::file::Lines;
use streamwork::prelude::*;

use crate::generator::{GeneratorConfig, event};
use crate::model::Event;

/// The events of a query: parsed from JSON lines, or generated.
#[derive(Clone)]
pub enum NexmarkSource {
    /// JSON lines from a file; malformed lines are counted and skipped.
    File(Box<FileSource<Event>>),
    /// The built-in generator.
    Generated(GeneratorSource<Event>),
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
        NexmarkSource::File(Box::new(FileSource::with_lines(path, lines)))
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

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.open(ctx),
            NexmarkSource::Generated(s) => s.open(ctx),
        }
    }

    fn poll(&mut self, out: &mut Collector<Event>) -> Result<SourcePoll, ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.poll(out),
            NexmarkSource::Generated(s) => s.poll(out),
        }
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.close(),
            NexmarkSource::Generated(s) => s.close(),
        }
    }
}
