//! The two ends of a keyed edge cut between parts of a graph, typed by the
//! edge's records: made where `key_by` knew the type, used by
//! [`JobGraph::into_part`](crate::JobGraph::into_part) where only the
//! graph is known.
//!
//! * [`EncodeExchange`] encodes each record into an [`Envelope`] (its
//!   key's hash and its bytes), for the runner's sink, which numbers what
//!   it writes, to write to the exchange's log;
//! * [`ExchangeSource`] decodes the envelopes the runner's source reads
//!   back into records.

use std::sync::Arc;

use crate::builder::input::Exchange;
use streamwork_core::checkpoint::{Restore, SnapshotContext, StateBytes};
use streamwork_core::component::{AnyTime, Context, NoKey, Operator, Source, SourcePoll};

use super::envelope::Envelope;
use streamwork_core::{
    CheckpointId, Collector, ConnectorError, Data, InstanceContext, Statefulness, TaskError,
};

/// Encodes each record into an [`Envelope`]: its key's hash and its bytes.
/// It keeps nothing across records: the runner's sink numbers what it
/// writes, and writes it only once the checkpoint that covers it is
/// complete (see `streamwork::scaleout`), so a replay may encode other
/// records than the first run did.
#[derive(Clone)]
pub(crate) struct EncodeExchange<T> {
    exchange: Exchange<T>,
    writer: u32,
    /// Records encoded so far (for the message of a record that cannot be).
    encoded: u64,
    /// A record that could not be encoded: the next checkpoint fails with it.
    failed: Option<String>,
}

impl<T> EncodeExchange<T> {
    /// The encoder of what writer `writer` sends into `exchange`.
    pub(crate) fn new(exchange: Exchange<T>, writer: u32) -> Self {
        EncodeExchange {
            exchange,
            writer,
            encoded: 0,
            failed: None,
        }
    }
}

impl<T: Data> Operator for EncodeExchange<T> {
    type In = T;
    type Key = NoKey;
    type Out = Collector<Envelope>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<Envelope>>) {
        self.encoded += 1;
        let mut payload = Vec::new();
        if let Err(error) = (self.exchange.encode)(&value, &mut payload) {
            // serde formats fail only on what they cannot represent (a
            // sequence of unknown length, say): a property of the type, so
            // the job fails rather than go on without the record.
            self.failed.get_or_insert(format!(
                "record {} of `{}` cannot be encoded: {error}",
                self.encoded,
                std::any::type_name::<T>()
            ));
            return;
        }
        let envelope = Envelope {
            key_hash: (self.exchange.key_hash)(&value),
            writer: self.writer,
            seq: 0,
            payload,
        };
        match ctx.timestamp() {
            Some(time) => ctx.emit_at(envelope, time),
            None => ctx.emit(envelope),
        }
    }

    fn snapshot(&mut self, _: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        match &self.failed {
            Some(failed) => Err(TaskError::Connector(ConnectorError::user(failed.clone()))),
            None => Ok(None),
        }
    }
}

/// A source of [`Envelope`]s: what a runner reads an exchange's log with.
/// Every `Source` of envelopes is one.
pub trait EnvelopeSource: Send + 'static {
    /// A fresh copy, for another instance or a restart.
    fn clone_box(&self) -> Box<dyn EnvelopeSource>;
    /// See [`Source::open`].
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError>;
    /// See [`Source::poll`].
    fn poll(&mut self, out: &mut Collector<Envelope>) -> Result<SourcePoll, ConnectorError>;
    /// See [`Source::close`].
    fn close(&mut self) -> Result<(), ConnectorError>;
    /// See [`Source::replayable`].
    fn replayable(&self) -> bool;
    /// See [`Source::snapshot`].
    fn snapshot(&mut self) -> Option<StateBytes>;
    /// See [`Source::snapshot_taken`].
    fn snapshot_taken(&mut self, checkpoint: CheckpointId);
    /// See [`Source::suspended_at`].
    fn suspended_at(&mut self, checkpoint: CheckpointId);
    /// See [`Source::restore`].
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError>;
}

impl<S: Source<Out = Collector<Envelope>>> EnvelopeSource for S {
    fn clone_box(&self) -> Box<dyn EnvelopeSource> {
        Box::new(self.clone())
    }
    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        Source::open(self, ctx)
    }
    fn poll(&mut self, out: &mut Collector<Envelope>) -> Result<SourcePoll, ConnectorError> {
        Source::poll(self, out)
    }
    fn close(&mut self) -> Result<(), ConnectorError> {
        Source::close(self)
    }
    fn replayable(&self) -> bool {
        Source::replayable(self)
    }
    fn snapshot(&mut self) -> Option<StateBytes> {
        Source::snapshot(self)
    }
    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        Source::snapshot_taken(self, checkpoint)
    }
    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        Source::suspended_at(self, checkpoint)
    }
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        Source::restore(self, restore)
    }
}

/// The records of an exchange, decoded from the envelopes `inner` reads
/// (which drops what a writer's replay wrote again).
pub(crate) struct ExchangeSource<T> {
    exchange: Arc<str>,
    inner: Box<dyn EnvelopeSource>,
    read: Collector<Envelope>,
    decode: fn(&[u8]) -> Result<T, streamwork_core::FormatError>,
}

impl<T> ExchangeSource<T> {
    /// The records of exchange `exchange`, decoded by `decode` from what
    /// `inner` reads.
    pub(crate) fn new(
        exchange: &str,
        inner: Box<dyn EnvelopeSource>,
        decode: fn(&[u8]) -> Result<T, streamwork_core::FormatError>,
    ) -> Self {
        ExchangeSource {
            exchange: Arc::from(exchange),
            inner,
            read: Collector::detached(),
            decode,
        }
    }
}

impl<T> Clone for ExchangeSource<T> {
    fn clone(&self) -> Self {
        ExchangeSource {
            exchange: self.exchange.clone(),
            inner: self.inner.clone_box(),
            read: Collector::detached(),
            decode: self.decode,
        }
    }
}

impl<T: Data> Source for ExchangeSource<T> {
    type Out = Collector<T>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.inner.open(ctx)
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let poll = self.inner.poll(&mut self.read)?;
        for record in self.read.take_buffered() {
            let envelope = record.value;
            let value = (self.decode)(&envelope.payload).map_err(|error| {
                ConnectorError::user(format!(
                    "exchange `{}`: record {} of writer {} is not a `{}` ({error}): the exchange's log holds records of another version of the job; run the changed job as a new group, or drain the old one first",
                    self.exchange,
                    envelope.seq,
                    envelope.writer,
                    std::any::type_name::<T>()
                ))
            })?;
            match record.time {
                Some(time) => out.emit_at(value, time),
                None => out.emit(value),
            }
        }
        Ok(poll)
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.inner.close()
    }

    fn replayable(&self) -> bool {
        self.inner.replayable()
    }

    fn snapshot(&mut self) -> Option<StateBytes> {
        self.inner.snapshot()
    }

    fn snapshot_taken(&mut self, checkpoint: CheckpointId) {
        self.inner.snapshot_taken(checkpoint)
    }

    fn suspended_at(&mut self, checkpoint: CheckpointId) {
        self.inner.suspended_at(checkpoint)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.inner.restore(restore)
    }
}

#[cfg(test)]
mod tests {
    use streamwork_core::{InstanceIdx, KeyGroups, Portable};

    use super::*;

    /// Envelopes from a vector, once.
    #[derive(Clone)]
    struct Envelopes(Vec<Envelope>);

    impl Source for Envelopes {
        type Out = Collector<Envelope>;

        fn poll(&mut self, out: &mut Collector<Envelope>) -> Result<SourcePoll, ConnectorError> {
            if self.0.is_empty() {
                return Ok(SourcePoll::Finished);
            }
            out.extend(self.0.drain(..));
            Ok(SourcePoll::Emitted)
        }
    }

    fn envelope(seq: u64, payload: Vec<u8>) -> Envelope {
        Envelope {
            key_hash: 0,
            writer: 3,
            seq,
            payload,
        }
    }

    fn source<T: Portable>(envelopes: Vec<Envelope>) -> ExchangeSource<T> {
        ExchangeSource {
            exchange: Arc::from("counted-in"),
            inner: Box::new(Envelopes(envelopes)),
            read: Collector::detached(),
            decode: T::decode,
        }
    }

    #[test]
    fn records_are_decoded_in_order() {
        let mut bytes = Vec::new();
        let mut envelopes = Vec::new();
        for (seq, word) in ["a", "bb", ""].into_iter().enumerate() {
            bytes.clear();
            String::from(word).encode_into(&mut bytes).unwrap();
            envelopes.push(envelope(seq as u64 + 1, bytes.clone()));
        }
        let mut source = source::<String>(envelopes);
        let ctx = InstanceContext::new("read", InstanceIdx(0), 1, KeyGroups::DEFAULT);
        source.open(&ctx).unwrap();
        let mut out = Collector::detached();
        source.poll(&mut out).unwrap();
        let words: Vec<String> = out.take_buffered().into_iter().map(|r| r.value).collect();
        assert_eq!(words, ["a", "bb", ""]);
    }

    #[test]
    fn a_record_of_another_type_is_refused_with_the_exchange_and_the_fix() {
        // What a job whose exchange carried strings wrote, read by one whose
        // exchange carries pairs of numbers.
        let mut bytes = Vec::new();
        String::from("a word").encode_into(&mut bytes).unwrap();
        let mut source = source::<(u64, u64)>(vec![envelope(9, bytes)]);
        let mut out = Collector::detached();
        let refused = source.poll(&mut out).unwrap_err().to_string();
        assert!(
            refused.contains("exchange `counted-in`: record 9 of writer 3 is not a `(u64, u64)`")
                && refused.contains("run the changed job as a new group"),
            "{refused}"
        );
        assert!(out.take_buffered().is_empty());
    }
}
