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
/// Its checkpointed position says which sequence numbers it has generated
/// (`seq % P == w` below its next one), so a job restored at another
/// parallelism generates each number once: every new instance skips, in
/// its own share, what the old instances had generated.
///
/// The generating function is a type parameter, called without dynamic
/// dispatch; [`boxed`](Self::boxed) erases it when the source's type must be
/// named (`GeneratorSource<T>`).
///
/// ```
/// use streamwork::connectors::GeneratorSource;
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
    /// What the old instances of a restored job had generated, from a
    /// checkpoint.
    resume: Option<Vec<Generated>>,
    /// What the old instances had generated in this instance's share and
    /// past its position: skipped.
    inherited: Vec<Generated>,
    /// No inherited number is at or past this one.
    inherited_high: u64,
    /// Numbers a poll emits at most: the job's batch size.
    per_poll: u64,
    _type: std::marker::PhantomData<fn() -> T>,
}

/// Numbers a poll emits at most before the source is opened (then: the
/// job's batch size).
const PER_POLL: u64 = streamwork_core::collector::DEFAULT_BATCH_SIZE as u64;

/// Sequence numbers generated: every `seq` with `seq % modulus == class`
/// below `next` (what one instance of `modulus` wrote in its position).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Generated {
    modulus: u64,
    class: u64,
    next: u64,
}

impl Generated {
    fn covers(&self, seq: u64) -> bool {
        seq < self.next && seq % self.modulus == self.class
    }
}

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
            inherited: Vec::new(),
            inherited_high: 0,
            per_poll: PER_POLL,
            _type: std::marker::PhantomData,
        }
    }

    /// Stamps each record with event time `stamp(seq, &record)`.
    pub fn with_timestamps<G>(self, stamp: G) -> GeneratorSource<T, F, StampWith<G>>
    where
        G: Fn(u64, &T) -> Timestamp + Clone + Send + 'static,
    {
        self.with_functions(|make, _| (make, StampWith(stamp)))
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
        self.with_functions(|make, stamp| {
            (
                DynMake(Arc::new(move |seq| make.generate(seq))),
                DynStamp(Arc::new(move |seq, value: &T| stamp.stamp(seq, value))),
            )
        })
    }

    /// The same generator, where it is, with its functions replaced by
    /// `replace(make, stamp)`.
    fn with_functions<F2, S2>(
        self,
        replace: impl FnOnce(F, S) -> (F2, S2),
    ) -> GeneratorSource<T, F2, S2> {
        let (make, stamp) = replace(self.make, self.stamp);
        GeneratorSource {
            make,
            stamp,
            count: self.count,
            rate: self.rate,
            next: self.next,
            step: self.step,
            started: self.started,
            emitted: self.emitted,
            resume: self.resume,
            inherited: self.inherited,
            inherited_high: self.inherited_high,
            per_poll: self.per_poll,
            _type: std::marker::PhantomData,
        }
    }
}

impl<T: Data, F: Generate<T>, S: Stamp<T>> GeneratorSource<T, F, S> {
    /// Emits up to `budget` of this instance's numbers while the old
    /// instances of a restored job may have generated some: those are
    /// skipped.
    #[cold]
    #[inline(never)]
    fn poll_past_inherited(&mut self, out: &mut Collector<T>, budget: u64) -> SourcePoll {
        let mut emitted = 0;
        while emitted < budget && self.next < self.inherited_high {
            if self.count.is_some_and(|count| self.next >= count) {
                return SourcePoll::Finished;
            }
            let seq = self.next;
            if !self.inherited.iter().any(|g| g.covers(seq)) {
                let value = self.make.generate(seq);
                let time = self.stamp.stamp(seq, &value);
                out.extend_records(std::iter::once(streamwork_core::Record { value, time }));
                emitted += 1;
            }
            self.next += self.step;
        }
        self.emitted += emitted;
        if self.next >= self.inherited_high {
            self.inherited.clear();
            self.inherited_high = 0;
        }
        SourcePoll::Emitted
    }
}

/// A generator resumes from its checkpointed sequence number.
impl<T: Data, F: Generate<T>, S: Stamp<T>> streamwork_core::checkpoint::Replayable
    for GeneratorSource<T, F, S>
{
}

impl<T: Data, F: Generate<T>, S: Stamp<T>> Source for GeneratorSource<T, F, S> {
    type Out = Collector<T>;

    /// A paced generator sleeps until its next record is due; an unpaced
    /// one never waits.
    fn may_block(&self) -> bool {
        self.rate.is_some()
    }

    fn replayable(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let (step, class) = (
            u64::from(ctx.parallelism().max(1)),
            u64::from(ctx.instance().0),
        );
        self.step = step;
        self.next = class;
        // One poll, one batch: what the engine holds back between.
        self.per_poll = ctx.batch_size() as u64;
        let Some(generated) = self.resume.take() else {
            return Ok(());
        };
        // Everything below `low` was generated, if one old parallelism's
        // instances all said how far they got.
        let mut low = 0;
        let mut moduli: Vec<u64> = generated.iter().map(|g| g.modulus).collect();
        moduli.sort_unstable();
        moduli.dedup();
        for modulus in moduli {
            let of: Vec<&Generated> = generated.iter().filter(|g| g.modulus == modulus).collect();
            let whole = (0..modulus).all(|c| of.iter().any(|g| g.class == c));
            if whole {
                let reached = (0..modulus)
                    .map(|c| {
                        of.iter()
                            .filter(|g| g.class == c)
                            .map(|g| g.next)
                            .max()
                            .unwrap_or(0)
                    })
                    .min()
                    .unwrap_or(0);
                low = low.max(reached);
            }
        }
        // This instance's first number at or past `low`.
        self.next = if low > class {
            class + (low - class).div_ceil(step) * step
        } else {
            class
        };
        self.inherited = generated;
        self.inherited.retain(|g| g.next > self.next);
        self.inherited_high = self.inherited.iter().map(|g| g.next).max().unwrap_or(0);
        Ok(())
    }

    /// What it has generated: its own share below its position, and what
    /// it inherited past it (schema 2: `(modulus, class, next)` triples).
    fn snapshot(&mut self) -> Option<StateBytes> {
        let own = Generated {
            modulus: self.step,
            class: self.next % self.step,
            next: self.next,
        };
        let mut bytes = Vec::with_capacity(24 * (1 + self.inherited.len()));
        for g in std::iter::once(&own).chain(self.inherited.iter().filter(|g| g.next > self.next)) {
            for v in [g.modulus, g.class, g.next] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        Some(StateBytes::new(2, bytes))
    }

    /// Gathers what every old instance had generated, at any parallelism.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let mut generated = Vec::new();
        for part in &restore.parts {
            let words: Vec<u64> = part
                .bytes
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect();
            let damaged = || {
                ConnectorError::user(format!(
                    "generator `{}`: the checkpointed position of instance {} is damaged or of an unknown schema ({})",
                    restore.component, part.part.0, part.schema
                ))
            };
            if part.bytes.len() % 8 != 0 {
                return Err(damaged());
            }
            match (part.schema, words.as_slice()) {
                // Version 1: the next number and the step of instance `part`.
                (1, [next, step]) if *step > 0 => generated.push(Generated {
                    modulus: *step,
                    class: u64::from(part.part.0) % step,
                    next: *next,
                }),
                (2, triples) if !triples.is_empty() && triples.len() % 3 == 0 => {
                    for t in triples.chunks_exact(3) {
                        if t[0] == 0 || t[1] >= t[0] {
                            return Err(damaged());
                        }
                        generated.push(Generated {
                            modulus: t[0],
                            class: t[1],
                            next: t[2],
                        });
                    }
                }
                _ => return Err(damaged()),
            }
        }
        self.resume = Some(generated);
        Ok(())
    }

    // Inlined into the engine's poll step, so that the record loop is
    // compiled there with the collector (measured: W1 in `cargo xtask bench`
    // is otherwise about a sixth slower, the loop being left out of line).
    #[inline]
    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let mut budget = self.per_poll;
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
        if self.next < self.inherited_high {
            return Ok(self.poll_past_inherited(out, budget));
        }
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
