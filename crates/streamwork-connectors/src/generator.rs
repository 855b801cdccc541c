//! A deterministic generator source: record `seq` is a pure function of `seq`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use streamwork_core::{
    Collector, ConnectorError, Data, InstanceContext, Source, SourcePoll, Timestamp,
};

type Make<T> = Arc<dyn Fn(u64) -> T + Send + Sync>;
type Stamp<T> = Arc<dyn Fn(u64, &T) -> Timestamp + Send + Sync>;

/// Generates records `make(seq)` for `seq` in `0..count` (or forever), split
/// across instances: instance `w` of `P` generates the `seq` with
/// `seq % P == w`, in increasing order. The output is therefore the same for
/// every run and every parallelism, which makes generated jobs checkable.
///
/// ```
/// use streamwork_connectors::GeneratorSource;
/// let numbers = GeneratorSource::new(|seq| seq * 2).take(1_000);
/// # let _ = numbers;
/// ```
#[derive(Clone)]
pub struct GeneratorSource<T> {
    make: Make<T>,
    stamp: Option<Stamp<T>>,
    count: Option<u64>,
    rate: Option<f64>,
    next: u64,
    step: u64,
    started: Option<Instant>,
    emitted: u64,
}

const PER_POLL: u64 = 1024;

impl<T: Data> GeneratorSource<T> {
    /// An unbounded generator of `make(seq)`.
    pub fn new(make: impl Fn(u64) -> T + Send + Sync + 'static) -> Self {
        GeneratorSource {
            make: Arc::new(make),
            stamp: None,
            count: None,
            rate: None,
            next: 0,
            step: 1,
            started: None,
            emitted: 0,
        }
    }

    /// Generates only `seq < count`, then ends.
    pub fn take(mut self, count: u64) -> Self {
        self.count = Some(count);
        self
    }

    /// Stamps each record with event time `stamp(seq, &record)`.
    pub fn with_timestamps(
        mut self,
        stamp: impl Fn(u64, &T) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        self.stamp = Some(Arc::new(stamp));
        self
    }

    /// Paces each instance to at most `per_second` records per second.
    pub fn rate(mut self, per_second: f64) -> Self {
        self.rate = (per_second > 0.0).then_some(per_second);
        self
    }

    /// The next sequence number this instance will generate (its position).
    pub fn position(&self) -> u64 {
        self.next
    }
}

impl<T: Data> Source for GeneratorSource<T> {
    type Out = Collector<T>;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.next = u64::from(ctx.instance().0);
        self.step = u64::from(ctx.parallelism());
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let mut budget = PER_POLL;
        if let Some(rate) = self.rate {
            let started = *self.started.get_or_insert_with(Instant::now);
            let due = (started.elapsed().as_secs_f64() * rate) as u64;
            if due <= self.emitted {
                let wait = (self.emitted + 1) as f64 / rate - started.elapsed().as_secs_f64();
                std::thread::sleep(Duration::from_secs_f64(wait.clamp(0.0, 0.05)));
                return Ok(SourcePoll::Idle);
            }
            budget = budget.min(due - self.emitted);
        }
        for _ in 0..budget {
            if self.count.is_some_and(|count| self.next >= count) {
                return Ok(SourcePoll::Finished);
            }
            let value = (self.make)(self.next);
            match &self.stamp {
                Some(stamp) => {
                    let time = stamp(self.next, &value);
                    out.emit_at(value, time);
                }
                None => out.emit(value),
            }
            self.next += self.step;
            self.emitted += 1;
        }
        if self.rate.is_some() {
            // A paced source flushes what it emitted at once: low latency.
            return Ok(SourcePoll::Idle);
        }
        Ok(SourcePoll::Emitted)
    }
}
