//! Collectors: where user code emits records, one per output channel.

use crate::control::{Control, Disconnected};
use crate::edge::Edge;
use crate::lineage::Lineage;
use crate::record::{Data, Record};
use crate::time::Timestamp;

/// Default number of records per batch between tasks.
pub const DEFAULT_BATCH_SIZE: usize = 1024;

/// The batch size of a detached collector: it never dispatches.
const DETACHED: usize = usize::MAX;

/// The output of one channel of one instance: user code calls [`emit`](Self::emit);
/// the collector buffers records and hands full batches to the channel's
/// edge, the engine's (a dispatcher, a fused instance, or the fan-out of
/// several when several components read the channel).
///
/// A record emitted while processing an input record inherits that record's
/// event time unless it is emitted with [`emit_at`](Self::emit_at).
///
/// ```
/// use streamwork::core::{Collector, Record};
/// let mut out = Collector::<u32>::detached();
/// out.emit(7);
/// out.extend([8, 9]);
/// assert_eq!(out.take_buffered(), vec![Record::new(7), Record::new(8), Record::new(9)]);
/// ```
pub struct Collector<T> {
    buffer: Vec<Record<T>>,
    batch_size: usize,
    /// The buffer length at which a push takes the slow path: the batch
    /// size, or 0 with a lineage (every record's root is noted).
    threshold: usize,
    time: Option<Timestamp>,
    /// Where full batches go; `None` for a channel nobody reads.
    edge: Option<Box<dyn Edge<T>>>,
    emitted: u64,
    error: Option<Disconnected>,
    /// In a job run with acking: the roots of the buffered records.
    lineage: Option<Box<dyn Lineage<T>>>,
}

impl<T: Data> Collector<T> {
    /// A collector handing batches of `batch_size` to `edge`. A collector
    /// with no edge discards what it is given (an explicitly dropped
    /// channel).
    pub fn new(edge: Option<Box<dyn Edge<T>>>, batch_size: usize) -> Self {
        let batch_size = batch_size.max(1);
        Collector {
            buffer: Vec::with_capacity(batch_size),
            batch_size,
            threshold: batch_size,
            time: None,
            edge,
            emitted: 0,
            error: None,
            lineage: None,
        }
    }

    /// The same collector in a job run with acking: `lineage` notes the
    /// root of every record and hands the roots to the edges with the
    /// records.
    pub fn with_lineage(mut self, lineage: Box<dyn Lineage<T>>) -> Self {
        self.lineage = Some(lineage);
        self.threshold = 0;
        self
    }

    /// A collector with no edges that keeps everything buffered until
    /// [`take_buffered`](Self::take_buffered): for unit tests of operators.
    pub fn detached() -> Self {
        Collector {
            buffer: Vec::new(),
            batch_size: DETACHED,
            threshold: DETACHED,
            time: None,
            edge: None,
            emitted: 0,
            error: None,
            lineage: None,
        }
    }

    /// Emits `value` with the current event time (that of the input record
    /// being processed, if any).
    #[inline]
    pub fn emit(&mut self, value: T) {
        let time = self.time;
        self.push(Record { value, time });
    }

    /// Emits `value` at event time `time`.
    #[inline]
    pub fn emit_at(&mut self, value: T, time: Timestamp) {
        self.push(Record {
            value,
            time: Some(time),
        });
    }

    /// Emits every value of `values` at the current event time. Faster than
    /// calling [`emit`](Self::emit) in a loop: records are written a batch's
    /// room at a time, with one capacity check per run instead of per record.
    #[inline]
    pub fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        let time = self.time;
        self.extend_records(values.into_iter().map(|value| Record { value, time }));
    }

    /// Emits every record of `records`, each with its own event time.
    #[inline]
    pub fn extend_records<I: IntoIterator<Item = Record<T>>>(&mut self, records: I) {
        let mut records = records.into_iter();
        loop {
            let room = self.batch_size.saturating_sub(self.buffer.len()).max(1);
            let before = self.buffer.len();
            self.buffer.extend(records.by_ref().take(room));
            let added = self.buffer.len() - before;
            if let Some(lineage) = self.lineage.as_deref_mut() {
                note_all(lineage, &self.buffer[before..]);
            }
            if self.buffer.len() >= self.batch_size {
                self.dispatch();
            }
            if added < room {
                return;
            }
        }
    }

    #[inline]
    fn push(&mut self, record: Record<T>) {
        self.buffer.push(record);
        // One comparison per record, with or without acking: with acking the
        // threshold is 0 and every record takes the slow path.
        if self.buffer.len() >= self.threshold {
            self.after_push();
        }
    }

    /// A full batch, or any record with a lineage. Out of line: once per
    /// batch, and `emit` stays a push and a comparison, small enough to be
    /// inlined into the user's code and that into the engine's loop.
    #[inline(never)]
    fn after_push(&mut self) {
        if self.lineage.is_some() {
            self.note_last();
        }
        if self.buffer.len() >= self.batch_size {
            self.dispatch();
        }
    }

    /// Notes the root of the record just buffered. Out of line: a job
    /// without acking never comes here, and the emit path stays small.
    #[cold]
    #[inline(never)]
    fn note_last(&mut self) {
        if let (Some(lineage), Some(record)) = (self.lineage.as_deref_mut(), self.buffer.last()) {
            lineage.note(std::slice::from_ref(record));
        }
    }

    /// Emits every record of `records` as it is (leaving it empty), taking
    /// the whole batch without a copy when nothing is buffered.
    pub fn push_batch(&mut self, records: &mut Vec<Record<T>>) {
        if self.lineage.is_some() || self.batch_size == DETACHED {
            for record in records.drain(..) {
                self.push(record);
            }
            return;
        }
        if self.buffer.is_empty() {
            std::mem::swap(&mut self.buffer, records);
        } else {
            self.buffer.append(records);
        }
        if self.buffer.len() >= self.batch_size {
            self.dispatch();
        }
    }

    /// Records emitted so far.
    pub fn emitted(&self) -> u64 {
        self.emitted + self.buffer.len() as u64
    }

    /// Sets the event time inherited by records emitted with [`emit`](Self::emit).
    #[inline]
    pub fn set_time(&mut self, time: Option<Timestamp>) {
        self.time = time;
    }

    /// Removes and returns the buffered records (see [`detached`](Self::detached)).
    pub fn take_buffered(&mut self) -> Vec<Record<T>> {
        if let Some(lineage) = self.lineage.as_deref_mut() {
            lineage.discard();
        }
        self.emitted += self.buffer.len() as u64;
        std::mem::take(&mut self.buffer)
    }

    fn dispatch(&mut self) {
        // A detached collector keeps its records until `take_buffered`.
        if self.buffer.is_empty() || self.batch_size == DETACHED {
            return;
        }
        // Counted here, once per batch, rather than on every emit.
        self.emitted += self.buffer.len() as u64;
        let edge = match (&mut self.edge, self.error) {
            (Some(edge), None) => edge.as_mut(),
            _ => {
                self.buffer.clear();
                if let Some(lineage) = self.lineage.as_deref_mut() {
                    lineage.discard();
                }
                return;
            }
        };
        let sent = match self.lineage.as_deref_mut() {
            Some(lineage) => lineage.dispatch(&mut self.buffer, edge),
            None => edge.push(&mut self.buffer),
        };
        if let Err(e) = sent {
            self.error = Some(e);
        }
        self.buffer.clear();
    }

    /// Runs `step` on the edge, if there is one, noting its failure.
    fn on_edge(&mut self, step: impl FnOnce(&mut dyn Edge<T>) -> Result<(), Disconnected>) {
        if let Some(edge) = self.edge.as_deref_mut()
            && let Err(e) = step(edge)
        {
            self.error = Some(e);
        }
    }

    /// Opens the edge: an instance fused downstream restores and opens.
    pub fn open(&mut self) -> Result<(), Disconnected> {
        self.on_edge(|edge| edge.open());
        self.check()
    }

    /// Hands everything buffered to the edge and asks it to send it now.
    /// A source's collector in a job run with acking first emits again the
    /// records whose trees timed out.
    pub fn flush(&mut self) -> Result<(), Disconnected> {
        let replays = match self.lineage.as_deref_mut() {
            Some(lineage) => lineage.replays(),
            None => Vec::new(),
        };
        for record in replays {
            self.push(record);
        }
        self.dispatch();
        self.on_edge(|edge| edge.flush());
        self.check()
    }

    /// Flushes, then sends `control` down the edge. A watermark only hands
    /// the buffered records to the edge first: a channel edge sends it with
    /// the batch it follows, so that a watermark per batch does not cut every
    /// batch short.
    pub fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        if matches!(control, Control::Watermark(_)) {
            self.dispatch();
        } else {
            self.flush()?;
        }
        self.on_edge(|edge| edge.control(control));
        self.check()
    }

    /// Passes a processing-time tick down the edge (fused operators fire
    /// their processing-time timers).
    pub fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.on_edge(|edge| edge.on_processing_time(now));
        self.check()
    }

    /// The first delivery failure, if any.
    pub fn check(&self) -> Result<(), Disconnected> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cold]
#[inline(never)]
fn note_all<T>(lineage: &mut dyn Lineage<T>, records: &[Record<T>]) {
    lineage.note(records);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records the batches it is given.
    struct Batches(Arc<Mutex<Vec<usize>>>);

    impl Edge<u32> for Batches {
        fn push(&mut self, records: &mut Vec<Record<u32>>) -> Result<(), Disconnected> {
            self.0.lock().unwrap().push(records.len());
            records.clear();
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Disconnected> {
            Ok(())
        }
        fn control(&mut self, _: &Control) -> Result<(), Disconnected> {
            Ok(())
        }
    }

    #[test]
    fn extend_dispatches_full_batches_and_counts() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut out = Collector::new(Some(Box::new(Batches(seen.clone()))), 4);
        out.emit(0);
        out.extend(1..11);
        assert_eq!(*seen.lock().unwrap(), vec![4, 4]);
        assert_eq!(out.emitted(), 11);
        out.flush().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![4, 4, 3]);
        assert_eq!(out.emitted(), 11);
    }

    /// Counts the records it notes and dispatches.
    #[derive(Default)]
    struct Counting {
        noted: usize,
        dispatched: usize,
    }

    impl Lineage<u32> for Counting {
        fn note(&mut self, records: &[Record<u32>]) {
            self.noted += records.len();
        }
        fn dispatch(
            &mut self,
            records: &mut Vec<Record<u32>>,
            edge: &mut dyn Edge<u32>,
        ) -> Result<(), Disconnected> {
            self.dispatched += records.len();
            edge.push(records)
        }
        fn discard(&mut self) {}
        fn replays(&mut self) -> Vec<Record<u32>> {
            Vec::new()
        }
    }

    #[test]
    fn a_lineage_notes_every_record_however_emitted() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut out = Collector::new(Some(Box::new(Batches(seen.clone()))), 4)
            .with_lineage(Box::new(Counting::default()));
        out.emit(0);
        out.extend(1..6);
        out.push_batch(&mut vec![Record::new(6), Record::new(7)]);
        out.flush().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![4, 4]);
        assert_eq!(out.emitted(), 8);
    }
}
