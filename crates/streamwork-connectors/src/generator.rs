//! A deterministic generator source: record `seq` is a pure function of `seq`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use streamwork_core::{
    Collector, ConnectorError, Data, InstanceContext, Restore, Source, SourcePoll, StateBytes,
    Timestamp,
};

/// How a generator makes record `seq`: any `Fn(u64) -> T` (called without
/// dynamic dispatch), or a type-erased [`DynMake`].
pub trait Generate<T>: Clone + Send + 'static {
    /// Record `seq`.
    fn generate(&self, seq: u64) -> T;
}

impl<T, F: Fn(u64) -> T + Clone + Send + 'static> Generate<T> for F {
    #[inline]
    fn generate(&self, seq: u64) -> T {
        self(seq)
    }
}

/// A type-erased record generator, for when the source's type must be named.
pub struct DynMake<T>(Arc<dyn Fn(u64) -> T + Send + Sync>);

impl<T> Clone for DynMake<T> {
    fn clone(&self) -> Self {
        DynMake(self.0.clone())
    }
}

impl<T: 'static> Generate<T> for DynMake<T> {
    #[inline]
    fn generate(&self, seq: u64) -> T {
        (self.0)(seq)
    }
}
/// A shared, type-erased stamping function.
type StampFn<T> = Arc<dyn Fn(u64, &T) -> Option<Timestamp> + Send + Sync>;

/// A type-erased event-time stamp (what [`GeneratorSource::boxed`] keeps).
pub struct DynStamp<T>(StampFn<T>);

impl<T> Clone for DynStamp<T> {
    fn clone(&self) -> Self {
        DynStamp(self.0.clone())
    }
}

impl<T: 'static> Stamp<T> for DynStamp<T> {
    #[inline]
    fn stamp(&self, seq: u64, value: &T) -> Option<Timestamp> {
        (self.0)(seq, value)
    }
}

/// How a generator stamps event time: not at all, or by a function.
pub trait Stamp<T>: Clone + Send + 'static {
    /// The event time of record `seq`, if any.
    fn stamp(&self, seq: u64, value: &T) -> Option<Timestamp>;
}

/// No event time.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoStamp;

impl<T> Stamp<T> for NoStamp {
    #[inline]
    fn stamp(&self, _: u64, _: &T) -> Option<Timestamp> {
        None
    }
}

/// Event time from a function of the sequence number and the record.
#[derive(Clone)]
pub struct StampWith<G>(G);

impl<T, G: Fn(u64, &T) -> Timestamp + Clone + Send + 'static> Stamp<T> for StampWith<G> {
    #[inline]
    fn stamp(&self, seq: u64, value: &T) -> Option<Timestamp> {
        Some((self.0)(seq, value))
    }
}

/// Generates records `make(seq)` for `seq` in `0..count` (or forever), split
/// across instances: instance `w` of `P` generates the `seq` with
/// `seq % P == w`, in increasing order. The output is therefore the same for
/// every run and every parallelism, which makes generated jobs checkable.
///
/// The generating function is a type parameter, called without dynamic
/// dispatch; [`boxed`](Self::boxed) erases it when the source's type must be
/// named (`GeneratorSource<T>`).
///
/// ```
/// use streamwork_connectors::GeneratorSource;
/// let numbers = GeneratorSource::new(|seq| seq * 2).take(1_000);
/// # let _ = numbers;
/// ```
#[derive(Clone)]
pub struct GeneratorSource<T, F = DynMake<T>, S = DynStamp<T>> {
    make: F,
    stamp: S,
    count: Option<u64>,
    rate: Option<f64>,
    next: u64,
    step: u64,
    started: Option<Instant>,
    emitted: u64,
    /// Where to resume (next sequence number, step), from a checkpoint.
    resume: Option<(u64, u64)>,
    _type: std::marker::PhantomData<fn() -> T>,
}

const PER_POLL: u64 = 1024;

impl<T: Data, F: Fn(u64) -> T + Clone + Send + 'static> GeneratorSource<T, F, NoStamp> {
    /// An unbounded generator of `make(seq)`.
    pub fn new(make: F) -> Self {
        GeneratorSource {
            make,
            stamp: NoStamp,
            count: None,
            rate: None,
            next: 0,
            step: 1,
            started: None,
            emitted: 0,
            resume: None,
            _type: std::marker::PhantomData,
        }
    }

    /// Stamps each record with event time `stamp(seq, &record)`.
    pub fn with_timestamps<G>(self, stamp: G) -> GeneratorSource<T, F, StampWith<G>>
    where
        G: Fn(u64, &T) -> Timestamp + Clone + Send + 'static,
    {
        GeneratorSource {
            make: self.make,
            stamp: StampWith(stamp),
            count: self.count,
            rate: self.rate,
            next: self.next,
            step: self.step,
            started: self.started,
            emitted: self.emitted,
            resume: self.resume,
            _type: std::marker::PhantomData,
        }
    }
}

impl<T: Data, F: Generate<T>, S: Stamp<T>> GeneratorSource<T, F, S> {
    /// Generates only `seq < count`, then ends.
    pub fn take(mut self, count: u64) -> Self {
        self.count = Some(count);
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

    /// The same generator with its functions type-erased, so that its type can
    /// be named as `GeneratorSource<T>` (at the cost of a dynamic call per record).
    pub fn boxed(self) -> GeneratorSource<T>
    where
        F: Sync,
        S: Sync,
    {
        let stamp = self.stamp;
        let make = self.make;
        GeneratorSource {
            make: DynMake(Arc::new(move |seq| make.generate(seq))),
            stamp: DynStamp(Arc::new(move |seq, value: &T| stamp.stamp(seq, value))),
            count: self.count,
            rate: self.rate,
            next: self.next,
            step: self.step,
            started: self.started,
            emitted: self.emitted,
            resume: self.resume,
            _type: std::marker::PhantomData,
        }
    }
}

/// A generator resumes from its checkpointed sequence number.
impl<T: Data, F: Generate<T>, S: Stamp<T>> streamwork_core::checkpoint::Replayable
    for GeneratorSource<T, F, S>
{
}

impl<T: Data, F: Generate<T>, S: Stamp<T>> Source for GeneratorSource<T, F, S> {
    type Out = Collector<T>;

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let step = u64::from(ctx.parallelism());
        match self.resume.take() {
            Some((next, old_step)) if old_step == step => self.next = next,
            Some((_, old_step)) => {
                return Err(ConnectorError::user(format!(
                    "generator `{}` was checkpointed at parallelism {old_step} and restored at {step}: its split of sequence numbers depends on its parallelism, so restore it at {old_step}",
                    ctx.component()
                )));
            }
            None => self.next = u64::from(ctx.instance().0),
        }
        self.step = step;
        Ok(())
    }

    /// The next sequence number and the step: a generator is replayable.
    fn snapshot(&mut self) -> Option<StateBytes> {
        let mut bytes = self.next.to_le_bytes().to_vec();
        bytes.extend_from_slice(&self.step.to_le_bytes());
        Some(StateBytes { schema: 1, bytes })
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let Some(own) = restore.own() else {
            return Ok(());
        };
        let field = |i: usize| {
            own.bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        match (own.schema, field(0), field(1)) {
            (1, Some(next), Some(step)) => {
                self.resume = Some((next, step));
                Ok(())
            }
            _ => Err(ConnectorError::user(
                "a checkpointed generator position is damaged or of an unknown schema".to_string(),
            )),
        }
    }

    // Inlined into the engine's poll step, so that the record loop is
    // compiled there with the collector (measured: W1 in `cargo xtask bench`
    // is otherwise about a sixth slower, the loop being left out of line).
    #[inline]
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
        // How many of this instance's sequence numbers remain before `count`.
        let remaining = match self.count {
            Some(count) if self.next >= count => return Ok(SourcePoll::Finished),
            Some(count) => (count - self.next).div_ceil(self.step),
            None => u64::MAX,
        };
        let n = budget.min(remaining);
        let (first, step) = (self.next, self.step);
        let (make, stamp) = (&self.make, &self.stamp);
        out.extend_records((0..n).map(|k| {
            let seq = first + k * step;
            let value = make.generate(seq);
            let time = stamp.stamp(seq, &value);
            streamwork_core::Record { value, time }
        }));
        self.next = first + n * step;
        self.emitted += n;
        if self.rate.is_some() {
            // A paced source flushes what it emitted at once: low latency.
            return Ok(SourcePoll::Idle);
        }
        Ok(SourcePoll::Emitted)
    }
}
