//! Batches that go back to their sender.
//!
//! A dispatcher fills a buffer per target and sends it whole. Once the
//! receiving task has taken the records out, the emptied buffer travels back
//! to the dispatcher that sent it, which fills it again: a sender does not
//! allocate a buffer per batch, and the memory it writes into is memory it
//! wrote before. A dispatcher keeps at most [`Returns::SLOTS`] spare buffers,
//! whatever its number of targets (a sender to many instances must not keep
//! spares for each); a buffer that finds no room is freed.

use std::any::Any;

use crossbeam_channel::{Receiver, Sender};
use streamwork_core::record::{Data, Record};

/// A batch that knows its way home: the payload a dispatcher sends.
pub(crate) struct HomeBatch<T> {
    records: Vec<Record<T>>,
    home: Sender<Vec<Record<T>>>,
}

/// The dispatcher's end: where its emptied buffers come back to.
pub(crate) struct Returns<T> {
    home: Sender<Vec<Record<T>>>,
    back: Receiver<Vec<Record<T>>>,
}

impl<T: Data> Returns<T> {
    /// Spare buffers a dispatcher keeps.
    pub(crate) const SLOTS: usize = 8;

    /// Room for [`SLOTS`](Self::SLOTS) spare buffers.
    pub(crate) fn new() -> Self {
        let (home, back) = crossbeam_channel::bounded(Self::SLOTS);
        Returns { home, back }
    }

    /// An empty buffer with room for `capacity` records: one that came back,
    /// or a new one.
    pub(crate) fn buffer(&self, capacity: usize) -> Vec<Record<T>> {
        match self.back.try_recv() {
            Ok(mut buffer) => {
                buffer.reserve(capacity);
                buffer
            }
            Err(_) => Vec::with_capacity(capacity),
        }
    }

    /// `records`, ready to send, addressed back here once emptied.
    pub(crate) fn payload(&self, records: Vec<Record<T>>) -> Box<dyn Any + Send> {
        Box::new(HomeBatch {
            records,
            home: self.home.clone(),
        })
    }
}

/// The records of a received batch. Dropped, it sends its emptied buffer back
/// to the dispatcher it came from, if it has one.
pub(crate) struct Received<T> {
    records: Vec<Record<T>>,
    home: Option<Sender<Vec<Record<T>>>>,
}

impl<T> Received<T> {
    /// Records with no sender to go back to.
    pub(crate) fn owned(records: Vec<Record<T>>) -> Self {
        Received {
            records,
            home: None,
        }
    }

    /// A batch a dispatcher sent.
    pub(crate) fn homed(batch: HomeBatch<T>) -> Self {
        Received {
            records: batch.records,
            home: Some(batch.home),
        }
    }

    /// Records in the batch.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Takes the records out, in order.
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Record<T>> {
        self.records.drain(..)
    }
}

impl<T> Drop for Received<T> {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // Records not taken (a failure mid-batch) are dropped here, not
            // sent back.
            self.records.clear();
            // No room (enough spares) or no sender (it ended): freed here.
            let _ = home.try_send(std::mem::take(&mut self.records));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_batch_comes_back_to_its_sender_with_its_memory() {
        let returns = Returns::<u64>::new();
        let mut records = returns.buffer(8);
        records.extend((0..8).map(Record::new));
        let address = records.as_ptr();
        let payload = returns.payload(records);
        let mut received = Received::homed(*payload.downcast::<HomeBatch<u64>>().unwrap());
        assert_eq!(received.drain().map(|r| r.value).sum::<u64>(), 28);
        drop(received);
        let again = returns.buffer(8);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), address, "the same buffer, not a new one");
    }

    #[test]
    fn records_left_in_a_dropped_batch_are_not_sent_back() {
        let returns = Returns::<String>::new();
        let mut records = returns.buffer(2);
        records.push(Record::new("a".to_string()));
        records.push(Record::new("b".to_string()));
        let payload = returns.payload(records);
        let mut received = Received::homed(*payload.downcast::<HomeBatch<String>>().unwrap());
        // A failure after the first record: the second is dropped.
        assert_eq!(received.drain().next().map(|r| r.value), Some("a".into()));
        drop(received);
        assert!(returns.buffer(2).is_empty());
    }

    #[test]
    fn spare_buffers_past_the_slots_are_freed() {
        let returns = Returns::<u64>::new();
        let sent: Vec<_> = (0..Returns::<u64>::SLOTS + 2)
            .map(|_| returns.payload(returns.buffer(4)))
            .collect();
        for payload in sent {
            drop(Received::homed(
                *payload.downcast::<HomeBatch<u64>>().unwrap(),
            ));
        }
        assert_eq!(returns.back.len(), Returns::<u64>::SLOTS);
    }

    #[test]
    fn a_batch_whose_sender_is_gone_is_freed() {
        let returns = Returns::<u64>::new();
        let payload = returns.payload(returns.buffer(4));
        drop(returns);
        drop(Received::homed(
            *payload.downcast::<HomeBatch<u64>>().unwrap(),
        ));
    }
}
