//! Collectors: where user code emits records, one per output channel.

use std::sync::Arc;

use crate::acking::{self, FreshTree, SourceTrees};
use crate::dispatch::Edge;
use crate::message::{Control, Disconnected};
use crate::record::{Data, Record};
use crate::time::Timestamp;

/// Default number of records per batch between tasks.
pub const DEFAULT_BATCH_SIZE: usize = 1024;

/// The batch size of a detached collector: it never dispatches.
const DETACHED: usize = usize::MAX;

/// The output of one channel of one instance: user code calls [`emit`](Self::emit);
/// the collector buffers records and hands full batches to the channel's edges.
///
/// A record emitted while processing an input record inherits that record's
/// event time unless it is emitted with [`emit_at`](Self::emit_at). When a
/// channel has several edges (fan-out), every edge receives every record.
///
/// ```
/// use streamwork_core::{Collector, Record};
/// let mut out = Collector::<u32>::detached();
/// out.emit(7);
/// out.extend([8, 9]);
/// assert_eq!(out.take_buffered(), vec![Record::new(7), Record::new(8), Record::new(9)]);
/// ```
pub struct Collector<T> {
    buffer: Vec<Record<T>>,
    batch_size: usize,
    /// The buffer length at which a push takes the slow path: the batch
    /// size, or 0 with acking (every record's root is noted).
    threshold: usize,
    time: Option<Timestamp>,
    edges: Vec<Box<dyn Edge<T>>>,
    emitted: u64,
    error: Option<Disconnected>,
    /// In a job run with acking: the root of each buffered record.
    acking: Option<Box<Roots<T>>>,
}

/// The roots of a collector's buffered records, and, for a source's
/// collector, the trees it starts.
struct Roots<T> {
    roots: Vec<u64>,
    trees: Option<Arc<SourceTrees<T>>>,
    /// A source's trees numbered since the last dispatch.
    fresh: Vec<FreshTree<T>>,
}

impl<T: Data> Roots<T> {
    #[inline]
    fn note(&mut self, record: &Record<T>) {
        let root = match &self.trees {
            Some(trees) => {
                // A new tree, tracked from the dispatch on. The source is
                // done with its record once it is dispatched, which happens
                // before this thread's reports are sent.
                let (root, id) = (trees.next_root(), acking::new_id());
                self.fresh.push((root, id, record.clone()));
                acking::complete(acking::Anchor { root, id });
                root
            }
            None => acking::current_root(),
        };
        self.roots.push(root);
    }
}

#[cold]
#[inline(never)]
fn note_roots<T: Data>(acking: &mut Roots<T>, records: &[Record<T>]) {
    for record in records {
        acking.note(record);
    }
}

impl<T: Data> Collector<T> {
    /// A collector dispatching to `edges` in batches of `batch_size`. A
    /// collector with no edges discards what it is given (an explicitly dropped
    /// channel).
    pub fn new(edges: Vec<Box<dyn Edge<T>>>, batch_size: usize) -> Self {
        let batch_size = batch_size.max(1);
        Collector {
            buffer: Vec::with_capacity(batch_size),
            batch_size,
            threshold: batch_size,
            time: None,
            edges,
            emitted: 0,
            error: None,
            acking: None,
        }
    }

    /// The same collector in a job run with acking: each record carries the
    /// root of its tree, inherited from the record being processed, or, for
    /// a source (`trees`), a new tree per record.
    pub fn with_acking(mut self, trees: Option<Arc<SourceTrees<T>>>) -> Self {
        self.acking = Some(Box::new(Roots {
            roots: Vec::with_capacity(self.buffer.capacity()),
            trees,
            fresh: Vec::new(),
        }));
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
            edges: Vec::new(),
            emitted: 0,
            error: None,
            acking: None,
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
            if let Some(acking) = self.acking.as_deref_mut() {
                note_roots(acking, &self.buffer[before..]);
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
        // One comparison per record, as without acking: with acking the
        // threshold is 0 and every record takes the slow path.
        if self.buffer.len() >= self.threshold {
            self.after_push();
        }
    }

    /// A full batch, or any record with acking.
    fn after_push(&mut self) {
        if self.acking.is_some() {
            self.note_last();
        }
        if self.buffer.len() >= self.batch_size {
            self.dispatch();
        }
    }

    /// Notes the root of the record just buffered. Out of line: a job
    /// without acking never comes here, and the emit path stays as small as
    /// it was.
    #[cold]
    #[inline(never)]
    fn note_last(&mut self) {
        if let (Some(acking), Some(record)) = (self.acking.as_deref_mut(), self.buffer.last()) {
            acking.note(record);
        }
    }

    /// Emits every record of `records` as it is (leaving it empty), taking
    /// the whole batch without a copy when nothing is buffered.
    pub fn push_batch(&mut self, records: &mut Vec<Record<T>>) {
        if self.acking.is_some() || self.batch_size == DETACHED {
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
        if let Some(acking) = self.acking.as_deref_mut() {
            acking.roots.clear();
            acking.fresh.clear();
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
        if self.error.is_some() || self.edges.is_empty() {
            self.buffer.clear();
            if let Some(acking) = self.acking.as_deref_mut() {
                // Dropped (a dropped channel): their events are done.
                acking.roots.clear();
                acking.fresh.clear();
            }
            return;
        }
        if self.acking.is_some() {
            self.dispatch_rooted();
            return;
        }
        let last = self.edges.len() - 1;
        for i in 0..last {
            let mut copy = self.buffer.clone();
            if let Err(e) = self.edges[i].push(&mut copy) {
                self.error = Some(e);
            }
        }
        if let Err(e) = self.edges[last].push(&mut self.buffer) {
            self.error = Some(e);
        }
        self.buffer.clear();
    }

    /// [`dispatch`](Self::dispatch) with each record's root, in a job run
    /// with acking.
    #[cold]
    #[inline(never)]
    fn dispatch_rooted(&mut self) {
        let Some(acking) = self.acking.as_deref_mut() else {
            return;
        };
        if let Some(trees) = &acking.trees {
            trees.begin_all(&mut acking.fresh);
        }
        let last = self.edges.len() - 1;
        for i in 0..last {
            let (mut copy, mut roots) = (self.buffer.clone(), acking.roots.clone());
            if let Err(e) = self.edges[i].push_rooted(&mut copy, &mut roots) {
                self.error = Some(e);
            }
        }
        if let Err(e) = self.edges[last].push_rooted(&mut self.buffer, &mut acking.roots) {
            self.error = Some(e);
        }
        self.buffer.clear();
        acking.roots.clear();
    }

    /// Hands everything buffered to the edges and asks them to send it now.
    /// A source's collector in a job run with acking first replays the
    /// records whose trees timed out.
    pub fn flush(&mut self) -> Result<(), Disconnected> {
        let replays = match self.acking.as_deref() {
            Some(Roots {
                trees: Some(trees), ..
            }) => trees.expired(),
            _ => Vec::new(),
        };
        for record in replays {
            self.push(record);
        }
        self.dispatch();
        for edge in &mut self.edges {
            if let Err(e) = edge.flush() {
                self.error = Some(e);
            }
        }
        self.check()
    }

    /// Flushes, then sends `control` down every edge. A watermark only hands
    /// the buffered records to the edges first: a channel edge sends it with
    /// the batch it follows (see [`ChannelDispatcher`](crate::dispatch::ChannelDispatcher)),
    /// so that a watermark per batch does not cut every batch short.
    pub fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        if matches!(control, Control::Watermark(_)) {
            self.dispatch();
        } else {
            self.flush()?;
        }
        for edge in &mut self.edges {
            if let Err(e) = edge.control(control) {
                self.error = Some(e);
            }
        }
        self.check()
    }

    /// Passes a processing-time tick to every edge (fused operators fire their
    /// processing-time timers).
    pub fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        for edge in &mut self.edges {
            if let Err(e) = edge.on_processing_time(now) {
                self.error = Some(e);
            }
        }
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
        let mut out = Collector::new(vec![Box::new(Batches(seen.clone()))], 4);
        out.emit(0);
        out.extend(1..11);
        assert_eq!(*seen.lock().unwrap(), vec![4, 4]);
        assert_eq!(out.emitted(), 11);
        out.flush().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![4, 4, 3]);
        assert_eq!(out.emitted(), 11);
    }
}
