//! A source over an in-memory vector.

use std::sync::Arc;

use streamwork_core::{Collector, ConnectorError, Data, InstanceContext, Source, SourcePoll};

/// Emits the elements of a vector. With parallelism P, instance `w` emits the
/// elements at indices `i` with `i % P == w`, in order.
///
/// ```
/// use streamwork::connectors::VecSource;
/// let source = VecSource::new(vec![1, 2, 3]);
/// # let _ = source;
/// ```
#[derive(Clone)]
pub struct VecSource<T> {
    items: Arc<Vec<T>>,
    next: usize,
    step: usize,
}

impl<T: Data> VecSource<T> {
    /// A source emitting `items`.
    pub fn new(items: Vec<T>) -> Self {
        VecSource {
            items: Arc::new(items),
            next: 0,
            step: 1,
        }
    }
}

const PER_POLL: usize = 1024;

impl<T: Data + Sync> Source for VecSource<T> {
    type Out = Collector<T>;

    /// Reads memory: never waits.
    fn may_block(&self) -> bool {
        false
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.next = ctx.instance().0 as usize;
        self.step = ctx.parallelism() as usize;
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        for _ in 0..PER_POLL {
            match self.items.get(self.next) {
                Some(item) => {
                    out.emit(item.clone());
                    self.next += self.step;
                }
                None => return Ok(SourcePoll::Finished),
            }
        }
        Ok(SourcePoll::Emitted)
    }
}
