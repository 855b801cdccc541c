//! Inputs: a stream with its grouping chosen, the description of one edge
//! into a component.
//!
//! An [`Input<T, Tm>`] is a [`Stream`] with its grouping chosen; a
//! [`KeyedStream<T, K, Tm>`] is a stream grouped by a key of type `K`, the
//! only input a keyed operator accepts; [`Inputs`] are the streams feeding one
//! port. Groupings are chosen on the stream through [`Groupings`] (in the
//! prelude): [`shuffle`](Groupings::shuffle), [`key_by`](Groupings::key_by),
//! [`broadcast`](Groupings::broadcast), [`global`](Groupings::global),
//! [`forward`](Groupings::forward), [`partition_by`](Groupings::partition_by);
//! a bare stream means forward when the parallelism is equal and shuffle
//! otherwise. Each input carries what makes its route ([`RouteMaker`]), made
//! here where the key function's type is known, so that the dispatcher's
//! per-record loop is monomorphised over it.

use std::sync::Arc;

use streamwork_core::flow::{FlowControl, Overflow, PauseWatermarks};
use streamwork_core::grouping::GroupingKind;
use streamwork_core::hash::stable_hash;
use streamwork_core::key::{ByKey, KeyFn, KeyKind, NoKey};
use streamwork_core::portable::Portable;
use streamwork_core::record::Data;
use streamwork_core::state::Key;
use streamwork_core::stream::Stream;
use streamwork_core::stream_time::{StreamTime, Unwatermarked};

use crate::route::{
    BroadcastRoute, CustomRoute, FixedRoute, KeyRoute, Partition, RouteContext, ShuffleRoute,
};

/// Makes the route of one sending instance of an edge, once the engine
/// knows the edge's resolved grouping, its targets and the key groups.
pub type RouteMaker<T> =
    Arc<dyn Fn(GroupingKind, RouteContext) -> Box<dyn Partition<T>> + Send + Sync>;

/// The grouping an edge was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupingSpec {
    /// Forward when the parallelism is equal, shuffle otherwise.
    Auto,
    /// As chosen.
    Fixed(GroupingKind),
}

fn basic_route<T: Data>() -> RouteMaker<T> {
    Arc::new(|kind, ctx: RouteContext| -> Box<dyn Partition<T>> {
        match kind {
            GroupingKind::Forward => Box::new(FixedRoute(ctx.source_instance.0)),
            GroupingKind::Broadcast => Box::new(BroadcastRoute),
            GroupingKind::Global => Box::new(FixedRoute(0)),
            GroupingKind::Shuffle | GroupingKind::Key | GroupingKind::Custom => {
                Box::new(ShuffleRoute::starting_at(ctx.source_instance.0))
            }
        }
    })
}

/// A stream with its grouping chosen: one input edge of a component.
pub struct Input<T, Tm = Unwatermarked> {
    stream: Stream<T, Tm>,
    grouping: GroupingSpec,
    route: RouteMaker<T>,
    flow: FlowControl,
    exchange: Option<Exchange<T>>,
}

/// How the records of a keyed edge cross processes, when the job runs as
/// stages (see `streamwork::core::portable`): what `key_by` knows of them
/// and a runner splitting the job needs.
pub struct Exchange<T> {
    /// The stable hash of a record's key.
    pub key_hash: Arc<dyn Fn(&T) -> u64 + Send + Sync>,
    /// Appends a record's bytes.
    pub encode: fn(&T, &mut Vec<u8>) -> Result<(), streamwork_core::FormatError>,
    /// A record from its bytes.
    pub decode: fn(&[u8]) -> Result<T, streamwork_core::FormatError>,
    /// Whether the stream carries watermarks.
    pub watermarked: bool,
}

impl<T> Clone for Exchange<T> {
    fn clone(&self) -> Self {
        Exchange {
            key_hash: self.key_hash.clone(),
            encode: self.encode,
            decode: self.decode,
            watermarked: self.watermarked,
        }
    }
}

impl<T, Tm> Input<T, Tm> {
    /// Lets each sender queue at most `batches` batches to each receiver.
    pub fn capacity(mut self, batches: usize) -> Self {
        self.flow.capacity = Some(batches.max(1));
        self
    }

    /// What to do when the channel is full (default: block).
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.flow.overflow = policy;
        self
    }

    /// Pauses the sources upstream while the receiver's queue on this edge is
    /// above `high` (a fraction of its capacity), until it is below `low`.
    /// `0 < high <= 1` and `0 <= low < high`: other values (`NaN`
    /// included) are refused when the job is built.
    pub fn pause_sources_above(mut self, high: f64, low: f64) -> Self {
        self.flow.pause = Some(PauseWatermarks { high, low });
        self
    }

    /// The grouping, as chosen.
    pub fn grouping(&self) -> GroupingSpec {
        self.grouping
    }

    /// Capacity, overflow policy and backpressure watermarks of the edge.
    pub fn flow(&self) -> FlowControl {
        self.flow
    }

    /// What makes each sending instance's route.
    pub fn route(&self) -> &RouteMaker<T> {
        &self.route
    }

    /// How its records cross processes: a keyed edge's.
    pub fn exchange(&self) -> Option<&Exchange<T>> {
        self.exchange.as_ref()
    }

    /// The stream this edge reads: its job, upstream component and output
    /// channel.
    pub fn stream(&self) -> Stream<T, Tm> {
        self.stream
    }

    /// A keyed edge from `stream`, with this edge's flow control, routed by
    /// `hash` (the stable hash of the record's key): the edge of a
    /// pre-aggregated operator's partials beside its records' edge. It has
    /// no exchange: a job does not run as stages across an event-time
    /// exchange, and a pre-aggregated operator is in event time.
    pub(crate) fn beside<P: Data>(
        &self,
        stream: Stream<P, Tm>,
        hash: impl Fn(&P) -> u64 + Clone + Send + Sync + 'static,
    ) -> Input<P, Tm> {
        let route: RouteMaker<P> = Arc::new(move |_, ctx: RouteContext| {
            Box::new(KeyRoute::new(hash.clone(), ctx.key_groups, ctx.targets))
        });
        Input {
            stream,
            grouping: self.grouping,
            route,
            flow: self.flow,
            exchange: None,
        }
    }

    /// The same edge (grouping, route, flow control, exchange) read from
    /// `stream` instead, a stream of the same records: how the builder puts
    /// a step (a combiner) between a stream and the edge that reads it.
    pub fn reading(mut self, stream: Stream<T, Tm>) -> Self {
        self.stream = stream;
        self
    }
}

impl<T, Tm> Clone for Input<T, Tm> {
    fn clone(&self) -> Self {
        Input {
            stream: self.stream,
            grouping: self.grouping,
            route: self.route.clone(),
            flow: self.flow,
            exchange: self.exchange.clone(),
        }
    }
}

/// A stream grouped by key `K` (fields grouping): the only input a keyed
/// operator (`type Key = ByKey<K>`) accepts.
pub struct KeyedStream<T, K, Tm = Unwatermarked> {
    input: Input<T, Tm>,
    key: KeyFn<T, K>,
}

impl<T, K, Tm> Clone for KeyedStream<T, K, Tm> {
    fn clone(&self) -> Self {
        KeyedStream {
            input: self.input.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> KeyedStream<T, K, Tm> {
    /// This fields-grouped stream as a plain input, for an operator that is
    /// not keyed (it receives all records of a key but no keyed context).
    pub fn as_input(self) -> Input<T, Tm> {
        self.input
    }

    /// The function that gives a record's key.
    pub fn key_fn(&self) -> KeyFn<T, K> {
        self.key.clone()
    }

    /// See [`Input::capacity`].
    pub fn capacity(mut self, batches: usize) -> Self {
        self.input = self.input.capacity(batches);
        self
    }

    /// See [`Input::overflow`].
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.input = self.input.overflow(policy);
        self
    }

    /// See [`Input::pause_sources_above`].
    pub fn pause_sources_above(mut self, high: f64, low: f64) -> Self {
        self.input = self.input.pause_sources_above(high, low);
        self
    }
}

/// The groupings of a stream: how an edge out of it picks the receiving
/// instance of each record. In the prelude (`use streamwork::prelude::*`);
/// implemented for every [`Stream`].
///
/// ```
/// use streamwork::prelude::*;
/// let mut job = JobBuilder::new("groupings");
/// let words = job.source("words", 1, VecSource::new(vec!["a".to_string(), "b".to_string()]));
/// let shuffled = job.operator("upper", 2, map(|w: String| w.to_uppercase()), words.shuffle());
/// let print = StdoutSink::new(|w: &String, out: &mut Vec<u8>| out.extend_from_slice(w.as_bytes()));
/// job.sink("print", 2, print, shuffled.key_by(|w: &String| w.clone()));
/// # let _ = job.build();
/// ```
pub trait Groupings<T, Tm>: Sized {
    /// The default grouping, with capacity `batches`; see [`Input::capacity`].
    fn capacity(self, batches: usize) -> Input<T, Tm>;

    /// The default grouping, with an overflow policy; see [`Input::overflow`].
    fn overflow(self, policy: Overflow) -> Input<T, Tm>;

    /// The default grouping, with backpressure watermarks; see
    /// [`Input::pause_sources_above`].
    fn pause_sources_above(self, high: f64, low: f64) -> Input<T, Tm>;

    /// Forward grouping: instance `i` feeds instance `i` (equal parallelism);
    /// the two components are fused into one task.
    fn forward(self) -> Input<T, Tm>;

    /// Shuffle grouping: records go round-robin to the instances.
    fn shuffle(self) -> Input<T, Tm>;

    /// Broadcast grouping: every instance receives every record.
    fn broadcast(self) -> Input<T, Tm>;

    /// Global grouping: every record goes to instance 0.
    fn global(self) -> Input<T, Tm>;

    /// Fields grouping by `key`: every record with the same key goes to the
    /// same instance, through the stable hash (`streamwork::core::hash`) and
    /// key groups.
    ///
    /// The records are [`Portable`] (serde's `Serialize` and
    /// `Deserialize`): when the job runs as stages in several processes, a
    /// keyed exchange carries them through a partitioned log.
    fn key_by<K: Key, F>(self, key: F) -> KeyedStream<T, K, Tm>
    where
        T: Portable,
        F: Fn(&T) -> K + Send + Sync + 'static;

    /// The grouping `choice` names, chosen at run time (from a flag, say):
    /// one job for every grouping, instead of one per grouping. For an
    /// operator that does not need a keyed stream; one with keyed state
    /// reads `.key_by(...)`, whose key type the compiler checks.
    ///
    /// ```
    /// use streamwork::runtime::GroupingChoice;
    /// let fields = true; // --grouping fields
    /// let choice = if fields {
    ///     GroupingChoice::key(|line: &String| line.clone())
    /// } else {
    ///     GroupingChoice::shuffle()
    /// };
    /// # let _ = choice;
    /// ```
    fn grouped(self, choice: GroupingChoice<T>) -> Input<T, Tm>;

    /// Custom grouping: `pick(record, n_instances)` chooses the instance
    /// (taken modulo `n_instances`).
    fn partition_by(
        self,
        pick: impl Fn(&T, u32) -> u32 + Clone + Send + Sync + 'static,
    ) -> Input<T, Tm>;
}

/// `stream` with `grouping`, routed by the grouping alone.
fn input<T: Data, Tm>(stream: Stream<T, Tm>, grouping: GroupingSpec) -> Input<T, Tm> {
    Input {
        stream,
        grouping,
        route: basic_route(),
        flow: FlowControl::default(),
        exchange: None,
    }
}

/// A fields-grouped input by `key`, in one process.
fn keyed_input<T: Data, Tm, K: Key, F>(stream: Stream<T, Tm>, key: Arc<F>) -> Input<T, Tm>
where
    F: Fn(&T) -> K + Send + Sync + 'static,
{
    // The route calls the key function through `Arc<F>`: a static call,
    // inlined into the routing loop. The receiver gets it as a `KeyFn`.
    let route: RouteMaker<T> = Arc::new(move |_, ctx: RouteContext| {
        let key = key.clone();
        Box::new(KeyRoute::new(
            move |v: &T| stable_hash(&key(v)),
            ctx.key_groups,
            ctx.targets,
        ))
    });
    Input {
        route,
        ..input(stream, GroupingSpec::Fixed(GroupingKind::Key))
    }
}

impl<T: Data, Tm: StreamTime> Groupings<T, Tm> for Stream<T, Tm> {
    fn capacity(self, batches: usize) -> Input<T, Tm> {
        input(self, GroupingSpec::Auto).capacity(batches)
    }

    fn overflow(self, policy: Overflow) -> Input<T, Tm> {
        input(self, GroupingSpec::Auto).overflow(policy)
    }

    fn pause_sources_above(self, high: f64, low: f64) -> Input<T, Tm> {
        input(self, GroupingSpec::Auto).pause_sources_above(high, low)
    }

    fn forward(self) -> Input<T, Tm> {
        input(self, GroupingSpec::Fixed(GroupingKind::Forward))
    }

    fn shuffle(self) -> Input<T, Tm> {
        input(self, GroupingSpec::Fixed(GroupingKind::Shuffle))
    }

    fn broadcast(self) -> Input<T, Tm> {
        input(self, GroupingSpec::Fixed(GroupingKind::Broadcast))
    }

    fn global(self) -> Input<T, Tm> {
        input(self, GroupingSpec::Fixed(GroupingKind::Global))
    }

    fn key_by<K: Key, F>(self, key: F) -> KeyedStream<T, K, Tm>
    where
        T: Portable,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        let key = Arc::new(key);
        let hash_key = key.clone();
        let exchange = Exchange {
            key_hash: Arc::new(move |v: &T| stable_hash(&hash_key(v))),
            encode: |v: &T, out: &mut Vec<u8>| v.encode_into(out),
            decode: T::decode,
            watermarked: Tm::WATERMARKED,
        };
        let mut input = keyed_input(self, key.clone());
        input.exchange = Some(exchange);
        KeyedStream { input, key }
    }

    fn grouped(self, choice: GroupingChoice<T>) -> Input<T, Tm> {
        match choice.0 {
            Choice::Shuffle => self.shuffle(),
            Choice::Broadcast => self.broadcast(),
            Choice::Global => self.global(),
            Choice::Forward => self.forward(),
            Choice::Key(hash) => keyed_input(self, Arc::new(move |value: &T| hash(value))),
        }
    }

    fn partition_by(
        self,
        pick: impl Fn(&T, u32) -> u32 + Clone + Send + Sync + 'static,
    ) -> Input<T, Tm> {
        let route: RouteMaker<T> = Arc::new(move |_, _| Box::new(CustomRoute(pick.clone())));
        Input {
            route,
            ..input(self, GroupingSpec::Fixed(GroupingKind::Custom))
        }
    }
}

/// A grouping chosen at run time; see [`Groupings::grouped`].
pub struct GroupingChoice<T>(Choice<T>);

enum Choice<T> {
    Shuffle,
    Broadcast,
    Global,
    Forward,
    /// The stable hash of the record's key.
    Key(Arc<dyn Fn(&T) -> u64 + Send + Sync>),
}

impl<T> Clone for GroupingChoice<T> {
    fn clone(&self) -> Self {
        GroupingChoice(match &self.0 {
            Choice::Shuffle => Choice::Shuffle,
            Choice::Broadcast => Choice::Broadcast,
            Choice::Global => Choice::Global,
            Choice::Forward => Choice::Forward,
            Choice::Key(hash) => Choice::Key(hash.clone()),
        })
    }
}

impl<T> GroupingChoice<T> {
    /// Round-robin.
    pub fn shuffle() -> Self {
        GroupingChoice(Choice::Shuffle)
    }

    /// Every record to every instance.
    pub fn broadcast() -> Self {
        GroupingChoice(Choice::Broadcast)
    }

    /// Every record to instance 0.
    pub fn global() -> Self {
        GroupingChoice(Choice::Global)
    }

    /// Instance `i` to instance `i` (equal parallelism).
    pub fn forward() -> Self {
        GroupingChoice(Choice::Forward)
    }

    /// Fields grouping by `key`: a key's records to one instance.
    pub fn key<K: Key>(key: impl Fn(&T) -> K + Send + Sync + 'static) -> Self {
        GroupingChoice(Choice::Key(Arc::new(move |value: &T| {
            stable_hash(&key(value))
        })))
    }
}

/// One stream into a port, with the key extractor its receiver applies
/// (`()` for an unkeyed port).
pub type PortInput<T, KK, Tm> = (Input<T, Tm>, <KK as KeyKind>::Extractor<T>);

/// Streams of one time (all watermarked, or none) that may feed one input
/// together: what a fan-in in `job!` requires of each stream after the
/// first.
#[diagnostic::on_unimplemented(
    message = "one input reads streams of two times, `{Other}` and `{Self}`: mixing watermarked and unwatermarked inputs",
    label = "this stream's time is not the time of the input's first stream",
    note = "add a watermark strategy after the unwatermarked source (`Watermarks::bounded(Duration::from_secs(4)).timestamps(|record| ...)`), so that every stream into the input carries watermarks, or read none of them in event time"
)]
pub trait SameTime<Other>: Sized {
    /// The same inputs, of the same time.
    fn cast<T: 'static, KK: KeyKind>(inputs: Vec<Inputs<T, KK, Self>>)
    -> Vec<Inputs<T, KK, Other>>;
}

impl<Tm> SameTime<Tm> for Tm {
    fn cast<T: 'static, KK: KeyKind>(inputs: Vec<Inputs<T, KK, Tm>>) -> Vec<Inputs<T, KK, Tm>> {
        inputs
    }
}

/// `first` and `more` into one input, if they are of one time (what `job!`
/// generates for a fan-in, so that mixing times is a clear error).
#[doc(hidden)]
pub fn fan_in<T: 'static, KK: KeyKind, A, B: SameTime<A>>(
    mut first: Vec<Inputs<T, KK, A>>,
    more: Vec<Inputs<T, KK, B>>,
) -> Vec<Inputs<T, KK, A>> {
    first.extend(B::cast(more));
    first
}

/// The streams feeding one input port, and for keyed ports the key extractor
/// of each. `Tm` is the streams' common time marker.
pub struct Inputs<T: 'static, KK: KeyKind, Tm = Unwatermarked> {
    items: Vec<PortInput<T, KK, Tm>>,
}

impl<T: 'static, KK: KeyKind, Tm> Inputs<T, KK, Tm> {
    /// Each stream with the key extractor its receiver applies.
    pub fn items(&self) -> &[PortInput<T, KK, Tm>] {
        &self.items
    }

    /// The streams with their key extractors, to rewire them.
    pub fn into_items(self) -> Vec<PortInput<T, KK, Tm>> {
        self.items
    }

    /// The inputs of a port from its streams and key extractors.
    pub fn from_items(items: Vec<PortInput<T, KK, Tm>>) -> Self {
        Inputs { items }
    }
}

/// Conversion into the inputs of a port partitioned as `KK`.
#[diagnostic::on_unimplemented(
    message = "this input takes `{T}` records (key: `{KK}`), and `{Self}` does not give them",
    label = "this stream's record type, key or time does not fit the input, which takes `{T}` (key: `{KK}`)",
    note = "the record types must be the same: map the stream first (`map(|x: A| -> B ...)`), or change what the operator takes",
    note = "an operator with `type Key = ByKey<K>` (keyed state) needs a stream keyed by `K`: use `.key_by(|record| ...)` on the stream (`.key(...)` in `job!`)",
    note = "an event-time operator (event-time windows and timers) needs a `Watermarked` stream: read from a watermark strategy placed after the source, such as `Watermarks::bounded(Duration::from_secs(4)).timestamps(|record| ...)`",
    note = "several streams into one input (fan-in) are given as an array or a Vec, and must all carry watermarks or none"
)]
pub trait IntoInputs<T: 'static, KK: KeyKind, Tm> {
    /// Converts.
    fn into_inputs(self) -> Inputs<T, KK, Tm>;
}

impl<T: Data, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for Stream<T, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(input(self, GroupingSpec::Auto), ())],
        }
    }
}

impl<T: Data, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for Input<T, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(self, ())],
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> IntoInputs<T, NoKey, Tm> for KeyedStream<T, K, Tm> {
    fn into_inputs(self) -> Inputs<T, NoKey, Tm> {
        Inputs {
            items: vec![(self.input, ())],
        }
    }
}

impl<T: Data, K: Key, Tm: StreamTime> IntoInputs<T, ByKey<K>, Tm> for KeyedStream<T, K, Tm> {
    fn into_inputs(self) -> Inputs<T, ByKey<K>, Tm> {
        Inputs {
            items: vec![(self.input, self.key)],
        }
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime, X: IntoInputs<T, KK, Tm>> IntoInputs<T, KK, Tm>
    for Vec<X>
{
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        Inputs {
            items: self
                .into_iter()
                .flat_map(|x| x.into_inputs().items)
                .collect(),
        }
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime, X: IntoInputs<T, KK, Tm>, const N: usize>
    IntoInputs<T, KK, Tm> for [X; N]
{
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        Vec::from(self).into_inputs()
    }
}

impl<T: Data, KK: KeyKind, Tm: StreamTime> IntoInputs<T, KK, Tm> for Inputs<T, KK, Tm> {
    fn into_inputs(self) -> Inputs<T, KK, Tm> {
        self
    }
}
