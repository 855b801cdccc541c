//! Where Nexmark events come from: a JSON-lines file (or stdin), or the generator.

use std::path::Path;

use streamwork::connectors::file::Lines;
use streamwork::core::checkpoint::RestoredPart;
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
    /// Another source whose input never ends: it idles after its last
    /// event. For fault tests: a run is then killed, never finished, so a
    /// kill after the next checkpoint always finds one, however fast the
    /// machine.
    HeldOpen(Box<NexmarkSource>),
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

    /// This source, idling after its last event instead of ending (see
    /// [`NexmarkSource::HeldOpen`]).
    pub fn held_open(self) -> Self {
        NexmarkSource::HeldOpen(Box::new(self))
    }
}

/// The layout of a numbered file's position: the number of its next event
/// (`u64`), then the file source's own position (its schema, `u32`, and
/// bytes), all little-endian.
const NUMBERED_FILE_SCHEMA: u32 = 1;

impl NumberedFile {
    fn snapshot(&mut self) -> Option<StateBytes> {
        let inner = self.file.snapshot()?;
        let mut bytes = Vec::with_capacity(12 + inner.bytes.len());
        bytes.extend_from_slice(&self.next.to_le_bytes());
        bytes.extend_from_slice(&inner.schema.to_le_bytes());
        bytes.extend_from_slice(&inner.bytes);
        Some(StateBytes {
            schema: NUMBERED_FILE_SCHEMA,
            bytes,
            side: inner.side,
            builds_on: inner.builds_on,
        })
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut parts = Vec::with_capacity(restore.parts.len());
        for part in &restore.parts {
            let split = (part.schema == NUMBERED_FILE_SCHEMA && part.bytes.len() >= 12)
                .then(|| part.bytes.split_at(8))
                .and_then(|(next, rest)| {
                    let (schema, bytes) = rest.split_at(4);
                    Some((
                        u64::from_le_bytes(next.try_into().ok()?),
                        u32::from_le_bytes(schema.try_into().ok()?),
                        bytes,
                    ))
                });
            let Some((next, schema, bytes)) = split else {
                return Err(ConnectorError::user(format!(
                    "Nexmark source `{}`: the checkpointed position of instance {} is damaged or of an unknown schema ({}, {} bytes; this version reads schema {NUMBERED_FILE_SCHEMA}): start over without restoring",
                    restore.component,
                    part.part.0,
                    part.schema,
                    part.bytes.len()
                )));
            };
            // The file is read by one instance: its count is the one.
            self.next = self.next.max(next);
            parts.push(RestoredPart {
                part: part.part,
                schema,
                bytes,
            });
        }
        self.file.restore(&restore.with_parts(parts))
    }
}

/// Generated events resume from the generator's position; a file's from
/// its offset and event count.
impl streamwork::core::checkpoint::Replayable for NexmarkSource {}

impl Source for NexmarkSource {
    type Out = Collector<Event>;

    /// Generates: never waits.
    fn may_block(&self) -> bool {
        false
    }

    fn replayable(&self) -> bool {
        match self {
            NexmarkSource::File(s) => s.file.replayable(),
            NexmarkSource::Generated(s) => s.replayable(),
            NexmarkSource::HeldOpen(s) => s.replayable(),
        }
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        match self {
            NexmarkSource::File(s) => s.snapshot(),
            NexmarkSource::Generated(s) => s.snapshot(),
            NexmarkSource::HeldOpen(s) => s.snapshot(),
        }
    }

    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        match self {
            NexmarkSource::File(s) => s.file.snapshot_taken(checkpoint),
            NexmarkSource::Generated(s) => s.snapshot_taken(checkpoint),
            NexmarkSource::HeldOpen(s) => s.snapshot_taken(checkpoint),
        }
    }

    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        match self {
            NexmarkSource::File(s) => s.file.suspended_at(checkpoint),
            NexmarkSource::Generated(s) => s.suspended_at(checkpoint),
            NexmarkSource::HeldOpen(s) => s.suspended_at(checkpoint),
        }
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.restore(restore),
            NexmarkSource::Generated(s) => s.restore(restore),
            NexmarkSource::HeldOpen(s) => s.restore(restore),
        }
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.file.open(ctx),
            NexmarkSource::Generated(s) => s.open(ctx),
            NexmarkSource::HeldOpen(s) => s.open(ctx),
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
            NexmarkSource::HeldOpen(s) => match s.poll(out)? {
                SourcePoll::Finished => Ok(SourcePoll::Idle),
                poll => Ok(poll),
            },
        }
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        match self {
            NexmarkSource::File(s) => s.file.close(),
            NexmarkSource::Generated(s) => s.close(),
            NexmarkSource::HeldOpen(s) => s.close(),
        }
    }
}
