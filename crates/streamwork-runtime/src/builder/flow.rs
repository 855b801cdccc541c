//! Steps chained on a stream: [`JobBuilder::flow`] wraps a stream, and each
//! step (`map`, `filter`, `filter_map`, `flat_map`, `inspect`, `key_by`
//! then `reduce`, `fold`, `count`, `window` or `join`, any operator, a sink) adds one component
//! (`count` three: the ones, their sum per key and its rows)
//! reading the previous one, so that a job reads top to bottom. Each step
//! is the operator of the same name (`streamwork::core::ops`,
//! `streamwork::state::{reduce, fold}`), named after its place in the job
//! (`flat_map-2`, stable as long as the job is), at the parallelism of the
//! step before unless [`Flow::parallelism`] changes it: a forward edge, so
//! that the step is fused into the task before it. The type checks are the
//! builder's: a step that does not take the stream's records, or a keyed
//! step on an unkeyed stream, does not compile.
//!
//! ```
//! use streamwork::core::{Collector, Record, Sink, ConnectorError};
//! use streamwork::runtime::JobBuilder;
//! # #[derive(Clone)] struct Lines(Vec<String>);
//! # impl streamwork::core::Source for Lines { type Out = Collector<String>;
//! #   fn poll(&mut self, out: &mut Collector<String>) -> Result<streamwork::core::SourcePoll, ConnectorError> {
//! #     match self.0.pop() { Some(l) => { out.emit(l); Ok(streamwork::core::SourcePoll::Emitted) } None => Ok(streamwork::core::SourcePoll::Finished) } } }
//! # #[derive(Clone)] struct Discard;
//! # impl Sink for Discard { type In = (String, u64); fn write(&mut self, _: Record<(String, u64)>) -> Result<(), ConnectorError> { Ok(()) } }
//! let mut job = JobBuilder::new("word count");
//! let lines = job.source("lines", 1, Lines(vec!["to be or not to be".into()]));
//! job.flow(lines)
//!     .flat_map(|line: String| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
//!     .key_by(|word: &String| word.clone())
//!     .fold(0u64, |count: &mut u64, _word: String| *count += 1)
//!     .sink("counts", Discard);
//! let graph = job.build().unwrap();
//! assert_eq!(graph.nodes().len(), 4);
//! ```

use streamwork_core::ops::{self, Filter, FilterMap, FlatMap, Inspect, Map};
use streamwork_core::outputs::MainChannel;
use streamwork_core::stream_time::{Admits, StreamTime, TimeRequirement};
use streamwork_core::{Collector, Data, Key, NoKey, Operator, Outputs, Stream};
use streamwork_state::{Fold, Reduce, StateData};

use super::input::{Groupings, IntoInputs, KeyedStream};
use super::{JobBuilder, promise};

/// A stream with the builder it belongs to, to chain steps on.
pub struct Flow<'j, T, Tm, D> {
    job: &'j mut JobBuilder<D>,
    stream: Stream<T, Tm>,
    parallelism: u32,
}

/// A keyed stream with its builder, for a keyed step; see [`Flow::key_by`].
pub struct KeyedFlow<'j, T, K, Tm, D> {
    job: &'j mut JobBuilder<D>,
    stream: KeyedStream<T, K, Tm>,
    parallelism: u32,
}

/// The flow that goes on from `stream`, the output of the step before.
fn continue_with<U, Tm, D>(
    job: &mut JobBuilder<D>,
    stream: Stream<U, Tm>,
    parallelism: u32,
) -> Flow<'_, U, Tm, D> {
    Flow {
        job,
        stream,
        parallelism,
    }
}

impl<D> JobBuilder<D> {
    /// Chains steps on `stream`; see [`Flow`].
    pub fn flow<T: Data, Tm: StreamTime>(&mut self, stream: Stream<T, Tm>) -> Flow<'_, T, Tm, D> {
        let parallelism = self.nodes[stream.node().0 as usize].parallelism;
        continue_with(self, stream, parallelism)
    }

    /// A name for a step: what it does and where it is in the job.
    fn step_name(&self, step: &str) -> String {
        format!("{step}-{}", self.nodes.len())
    }
}

impl<'j, T: Data, Tm: StreamTime, D> Flow<'j, T, Tm, D> {
    /// The steps after this one run with `parallelism` instances (the
    /// records are shuffled to them if it differs from the step before).
    pub fn parallelism(mut self, parallelism: u32) -> Self {
        self.parallelism = parallelism.max(1);
        self
    }

    /// Adds `operator` (a single output channel), named `name`, reading
    /// this stream.
    pub fn operator<O, U>(
        self,
        name: &str,
        operator: O,
    ) -> Flow<'j, U, <O::Time as TimeRequirement>::Out<Tm>, D>
    where
        O: Operator<In = T, Key = NoKey, Out = Collector<U>>,
        O::Time: Admits<Tm>,
        U: Data,
        <O::Time as TimeRequirement>::Out<Tm>: StreamTime,
        Stream<T, Tm>: IntoInputs<T, NoKey, Tm>,
        Collector<U>: Outputs<
            Streams<<O::Time as TimeRequirement>::Out<Tm>> = Stream<
                U,
                <O::Time as TimeRequirement>::Out<Tm>,
            >,
        >,
    {
        let parallelism = self.parallelism;
        let stream = self.job.operator(name, parallelism, operator, self.stream);
        continue_with(self.job, stream, parallelism)
    }

    fn step<O, U>(self, step: &str, operator: O) -> Flow<'j, U, Tm, D>
    where
        O: Operator<In = T, Key = NoKey, Out = Collector<U>, Time = streamwork_core::AnyTime>,
        U: Data,
    {
        let name = self.job.step_name(step);
        self.operator(&name, operator)
    }

    /// Each record `r` becomes `f(r)`.
    pub fn map<U: Data, F>(self, f: F) -> Flow<'j, U, Tm, D>
    where
        F: Fn(T) -> U + Clone + Send + 'static,
        Map<F, T>:
            Operator<In = T, Key = NoKey, Out = Collector<U>, Time = streamwork_core::AnyTime>,
    {
        self.step("map", ops::map(f))
    }

    /// Keeps the records for which `f` is true.
    pub fn filter<F>(self, f: F) -> Flow<'j, T, Tm, D>
    where
        F: Fn(&T) -> bool + Clone + Send + 'static,
        Filter<F, T>:
            Operator<In = T, Key = NoKey, Out = Collector<T>, Time = streamwork_core::AnyTime>,
    {
        self.step("filter", ops::filter(f))
    }

    /// Each record `r` becomes `f(r)`'s value, if it has one.
    pub fn filter_map<U: Data, F>(self, f: F) -> Flow<'j, U, Tm, D>
    where
        F: Fn(T) -> Option<U> + Clone + Send + 'static,
        FilterMap<F, T>:
            Operator<In = T, Key = NoKey, Out = Collector<U>, Time = streamwork_core::AnyTime>,
    {
        self.step("filter_map", ops::filter_map(f))
    }

    /// Each record `r` becomes every item of `f(r)`.
    pub fn flat_map<I, F>(self, f: F) -> Flow<'j, I::Item, Tm, D>
    where
        I: IntoIterator,
        I::Item: Data,
        F: Fn(T) -> I + Clone + Send + 'static,
        FlatMap<F, T>: Operator<In = T, Key = NoKey, Out = Collector<I::Item>, Time = streamwork_core::AnyTime>,
    {
        self.step("flat_map", ops::flat_map(f))
    }

    /// Calls `f` on each record and passes it on.
    pub fn inspect<F>(self, f: F) -> Flow<'j, T, Tm, D>
    where
        F: Fn(&T) + Clone + Send + 'static,
        Inspect<F, T>:
            Operator<In = T, Key = NoKey, Out = Collector<T>, Time = streamwork_core::AnyTime>,
    {
        self.step("inspect", ops::inspect(f))
    }

    /// Partitions the stream by `key` for a keyed step (fields grouping).
    /// The records are [`Portable`](streamwork_core::Portable): see
    /// [`Groupings::key_by`].
    pub fn key_by<K: Key, F>(self, key: F) -> KeyedFlow<'j, T, K, Tm, D>
    where
        T: streamwork_core::Portable,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        KeyedFlow {
            job: self.job,
            stream: self.stream.key_by(key),
            parallelism: self.parallelism,
        }
    }

    /// Writes the stream to `sink`, named `name`.
    pub fn sink<S>(self, name: &str, sink: S)
    where
        S: promise::SinkFor<D, In = T>,
    {
        self.job.sink(name, self.parallelism, sink, self.stream);
    }

    /// The stream, to connect it by hand.
    pub fn stream(self) -> Stream<T, Tm> {
        self.stream
    }
}

impl<'j, T: Data, K: Key, Tm: StreamTime, D> KeyedFlow<'j, T, K, Tm, D> {
    /// The keyed steps run with `parallelism` instances.
    pub fn parallelism(mut self, parallelism: u32) -> Self {
        self.parallelism = parallelism.max(1);
        self
    }

    fn keyed_step<O, U>(self, step: &str, operator: O) -> Flow<'j, U, Tm, D>
    where
        O: Operator<
                In = T,
                Key = streamwork_core::ByKey<K>,
                Out = Collector<U>,
                Time = streamwork_core::AnyTime,
            >,
        U: Data,
    {
        let name = self.job.step_name(step);
        let parallelism = self.parallelism;
        let stream = self.job.operator(&name, parallelism, operator, self.stream);
        continue_with(self.job, stream, parallelism)
    }

    /// Each key's records folded into one value, emitted as `(key, value)`
    /// after each record; see `streamwork::state::reduce`. For a combiner
    /// before the exchange, declare the function associative with
    /// `.operator("sums", reduce(f).associative())`, which returns the
    /// step's stream.
    pub fn reduce<F>(self, f: F) -> Flow<'j, (K, T), Tm, D>
    where
        F: Fn(&mut T, T) + Clone + Send + 'static,
        Reduce<K, T, F>: Operator<
                In = T,
                Key = streamwork_core::ByKey<K>,
                Out = Collector<(K, T)>,
                Time = streamwork_core::AnyTime,
            >,
    {
        self.keyed_step("reduce", streamwork_state::reduce(f))
    }

    /// Each key's records counted, emitted as `(key, count)`: the count of
    /// a key goes up by the records counted since its last update. The
    /// records become `(key, 1)` in the task before the keyed exchange, and
    /// a combiner adds up each key's ones there (see `Reduce::associative`), so that
    /// about one record per key crosses the exchange per flush instead of
    /// each; with `combiners(false)`, one update per record.
    ///
    /// ```
    /// use streamwork::prelude::*;
    /// let mut job = JobBuilder::new("counts");
    /// let words = job.source("words", 2, VecSource::new(vec!["a".to_string(), "b".into(), "a".into()]));
    /// let out = CollectSink::new();
    /// job.flow(words)
    ///     .key_by(|w: &String| w.clone())
    ///     .count()
    ///     .sink("out", out.clone());
    /// job.build().unwrap().run().unwrap();
    /// let last: std::collections::BTreeMap<String, u64> = out.values().into_iter().collect();
    /// assert_eq!(last["a"], 2);
    /// ```
    pub fn count(self) -> Flow<'j, (K, u64), Tm, D>
    where
        K: StateData,
        (K, u64): streamwork_core::Portable,
    {
        let KeyedFlow {
            job,
            stream,
            parallelism,
        } = self;
        let key = stream.key_fn();
        let upstream = stream.as_input().stream();
        let sending = job.nodes[upstream.node().0 as usize].parallelism;
        let name = job.step_name("count");
        let ones = job.operator(
            &format!("{name} (ones)"),
            sending,
            ops::map(move |record: T| (key(&record), 1u64)),
            upstream.forward(),
        );
        let counted = job.operator(
            &name,
            parallelism,
            streamwork_state::reduce(|count: &mut (K, u64), more: (K, u64)| count.1 += more.1)
                .associative(),
            ones.key_by(|(key, _): &(K, u64)| key.clone()),
        );
        let rows = job.operator(
            &format!("{name} (rows)"),
            parallelism,
            ops::map(|(_, row): (K, (K, u64))| row),
            counted.forward(),
        );
        continue_with(job, rows, parallelism)
    }

    /// Each key's records folded into an accumulator from `init`, emitted
    /// as `(key, acc)` after each record; see `streamwork::state::fold`.
    pub fn fold<A, F>(self, init: A, f: F) -> Flow<'j, (K, A), Tm, D>
    where
        A: Data + StateData,
        K: StateData,
        F: Fn(&mut A, T) + Clone + Send + 'static,
        Fold<K, A, F, T>: Operator<
                In = T,
                Key = streamwork_core::ByKey<K>,
                Out = Collector<(K, A)>,
                Time = streamwork_core::AnyTime,
            >,
    {
        self.keyed_step("fold", streamwork_state::fold(init, f))
    }

    /// Windows (or any keyed operator with a main channel) over the keyed
    /// stream, such as `Windows::tumbling(Duration::from_secs(60)).count()`:
    /// continues with their results. Late events are counted by the
    /// window and left unread; to keep them, use
    /// [`operator`](Self::operator), which returns every channel.
    pub fn window<O, R>(self, windows: O) -> Flow<'j, R, <O::Time as TimeRequirement>::Out<Tm>, D>
    where
        O: Operator<In = T, Key = streamwork_core::ByKey<K>>,
        O::Time: Admits<Tm>,
        R: Data,
        <O::Time as TimeRequirement>::Out<Tm>: StreamTime,
        <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>:
            MainChannel<R, <O::Time as TimeRequirement>::Out<Tm>>,
    {
        let name = self.job.step_name("window");
        let parallelism = self.parallelism;
        let streams = self.job.operator(&name, parallelism, windows, self.stream);
        let (stream, unread) = streams.main_channel();
        self.job.discarded.extend(unread);
        continue_with(self.job, stream, parallelism)
    }

    /// Joins this keyed stream (the left side) with `right`, keyed by the
    /// same type, through `join` (a `Join` spec's operator, such as
    /// `Join::inner().tumbling(Duration::from_secs(60))`), and continues with
    /// the joined rows. The key types must agree: a right side keyed by
    /// another type does not compile.
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamwork::prelude::*;
    /// let mut job = JobBuilder::new("join");
    /// let clicks = job.source("clicks", 1, VecSource::new(vec![(1u32, 10i64)]));
    /// let views = job.source("views", 1, VecSource::new(vec![(1u32, 5i64)]));
    /// let views = job
    ///     .flow(views)
    ///     .operator("timed views", Watermarks::monotonic().timestamps(|v: &(u32, i64)| Timestamp::from_millis(v.1)))
    ///     .stream();
    /// job.flow(clicks)
    ///     .operator("timed clicks", Watermarks::monotonic().timestamps(|c: &(u32, i64)| Timestamp::from_millis(c.1)))
    ///     .key_by(|c: &(u32, i64)| c.0)
    ///     .join(views.key_by(|v: &(u32, i64)| v.0), Join::inner().tumbling(Duration::from_secs(60)))
    ///     .sink("pairs", CollectSink::new());
    /// assert_eq!(job.build().unwrap().nodes().len(), 6);
    /// ```
    pub fn join<C, R, U>(
        self,
        right: impl IntoInputs<R, streamwork_core::ByKey<K>, Tm>,
        join: C,
    ) -> Flow<'j, U, <C::Time as TimeRequirement>::Out<Tm>, D>
    where
        C: Operator<
                In = streamwork_core::ports::Either<T, R>,
                Key = streamwork_core::ByKey<K>,
                Out = Collector<U>,
            >,
        R: Data,
        C::Time: Admits<Tm>,
        U: Data,
        <C::Time as TimeRequirement>::Out<Tm>: StreamTime,
        Collector<U>: Outputs<
            Streams<<C::Time as TimeRequirement>::Out<Tm>> = Stream<
                U,
                <C::Time as TimeRequirement>::Out<Tm>,
            >,
        >,
    {
        let name = self.job.step_name("join");
        let parallelism = self.parallelism;
        let stream = self
            .job
            .two_input_operator(&name, parallelism, join, self.stream, right);
        continue_with(self.job, stream, parallelism)
    }

    /// Adds a keyed `operator` (windows, say), named `name`, and returns
    /// its output streams (connect or discard each channel).
    pub fn operator<O>(
        self,
        name: &str,
        operator: O,
    ) -> <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>
    where
        O: Operator<In = T, Key = streamwork_core::ByKey<K>>,
        O::Time: Admits<Tm>,
    {
        self.job
            .operator(name, self.parallelism, operator, self.stream)
    }
}
