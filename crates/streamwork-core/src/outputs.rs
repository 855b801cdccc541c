//! Output channel sets: one [`Collector`] (channel `out`), or a struct of named,
//! typed collectors derived with `#[derive(Outputs)]`.
//!
//! A derived set's stream handles are a typestate: each channel must be taken
//! (connected) or dropped explicitly before the set can be finished, so an
//! output channel left unconnected is a compile error, not a silent data loss.

use std::any::Any;
use std::collections::VecDeque;

use crate::collector::Collector;
use crate::component::StreamTime;
use crate::dispatch::Edge;
use crate::graph::{NodeId, Stream};
use crate::message::{Control, Disconnected};
use crate::record::Data;
use crate::time::Timestamp;

/// Name and type of one output channel (for plans and the web view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The channel's name (`out` for a single collector).
    pub name: &'static str,
    /// The Rust type of its records.
    pub type_name: &'static str,
}

/// The edges of each output channel of one instance, as the runtime built them,
/// from which an [`Outputs`] value is assembled.
pub struct OutputParts {
    channels: VecDeque<Vec<Box<dyn Any + Send>>>,
    batch_size: usize,
    detached: bool,
    acking: Option<PartsAcking>,
}

/// How the collectors of a job run with acking are made.
struct PartsAcking {
    acker: std::sync::Arc<crate::acking::Acker>,
    /// For a source instance: its component and index, whose collectors
    /// start a tree per record.
    source: Option<(std::sync::Arc<str>, u32)>,
}

impl OutputParts {
    /// Parts for channels in order; each element of a channel's list is a
    /// `Box<dyn Edge<T>>` boxed as `Any`.
    pub fn new(channels: Vec<Vec<Box<dyn Any + Send>>>, batch_size: usize) -> Self {
        OutputParts {
            channels: channels.into(),
            batch_size,
            detached: false,
            acking: None,
        }
    }

    /// The same parts in a job run with acking through `acker`; `source`
    /// names the source instance whose outputs these are, if it is one.
    pub fn with_acking(
        mut self,
        acker: std::sync::Arc<crate::acking::Acker>,
        source: Option<(std::sync::Arc<str>, u32)>,
    ) -> Self {
        self.acking = Some(PartsAcking { acker, source });
        self
    }

    /// Parts whose collectors keep what they are given (see
    /// [`Collector::detached`]): for test harnesses.
    pub fn detached() -> Self {
        OutputParts {
            channels: VecDeque::new(),
            batch_size: usize::MAX,
            detached: true,
            acking: None,
        }
    }

    /// Assembles the collector of the next channel, of type `T`.
    ///
    /// # Panics
    ///
    /// If the parts do not match the channel types, which the typed builder
    /// rules out: this would be a bug in Streamwork, reported as such.
    pub fn next_collector<T: Data>(&mut self) -> Collector<T> {
        if self.detached {
            return Collector::detached();
        }
        let edges = self.channels.pop_front().unwrap_or_default();
        let edges = edges
            .into_iter()
            .map(|edge| match edge.downcast::<Box<dyn Edge<T>>>() {
                Ok(edge) => *edge,
                Err(_) => panic!(
                    "streamwork internal error: an edge of the wrong type was wired to a channel of `{}`",
                    std::any::type_name::<T>()
                ),
            })
            .collect();
        let collector = Collector::new(edges, self.batch_size);
        match &self.acking {
            None => collector,
            Some(PartsAcking { acker, source }) => {
                let trees = source
                    .as_ref()
                    .map(|(component, instance)| acker.register::<T>(component.clone(), *instance));
                collector.with_acking(trees)
            }
        }
    }
}

/// A set of output channels. Implemented by [`Collector<T>`] (one channel
/// named `out`) and by structs of collectors with `#[derive(Outputs)]`.
pub trait Outputs: Send + Sized + 'static {
    /// The builder-side stream handle(s) of the channels, for inputs of time
    /// marker `Tm`.
    type Streams<Tm: StreamTime>;

    /// Names and types of the channels, in order.
    fn channels() -> Vec<ChannelInfo>;

    /// Stream handles for the channels of component `node` of job `job`.
    #[doc(hidden)]
    fn streams<Tm: StreamTime>(job: u64, node: NodeId) -> Self::Streams<Tm>;

    /// Builds the collectors from the runtime's edges.
    #[doc(hidden)]
    fn assemble(parts: &mut OutputParts) -> Self;

    /// Sets the event time inherited by emitted records.
    fn set_time(&mut self, time: Option<Timestamp>);

    /// Flushes every channel.
    fn flush(&mut self) -> Result<(), Disconnected>;

    /// Sends a control message down every channel.
    fn control(&mut self, control: &Control) -> Result<(), Disconnected>;

    /// Records emitted on all channels so far.
    fn emitted(&self) -> u64;

    /// The first delivery failure of any channel, if any.
    fn check(&self) -> Result<(), Disconnected>;

    /// Passes a processing-time tick down every channel.
    fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected>;
}

impl<T: Data> Outputs for Collector<T> {
    type Streams<Tm: StreamTime> = Stream<T, Tm>;

    fn channels() -> Vec<ChannelInfo> {
        vec![ChannelInfo {
            name: "out",
            type_name: std::any::type_name::<T>(),
        }]
    }

    fn streams<Tm: StreamTime>(job: u64, node: NodeId) -> Stream<T, Tm> {
        Stream::__new(job, node, 0)
    }

    fn assemble(parts: &mut OutputParts) -> Self {
        parts.next_collector()
    }

    #[inline]
    fn set_time(&mut self, time: Option<Timestamp>) {
        Collector::set_time(self, time);
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        Collector::flush(self)
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        Collector::control(self, control)
    }

    fn emitted(&self) -> u64 {
        Collector::emitted(self)
    }

    fn check(&self) -> Result<(), Disconnected> {
        Collector::check(self)
    }

    fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        Collector::tick(self, now)
    }
}

/// Typestate of a channel of a derived output set that has been connected or
/// explicitly dropped.
#[derive(Debug)]
pub struct Handled;

/// Implemented only by [`Handled`]: every channel of a derived output set must
/// be connected or dropped before `done()` compiles.
#[diagnostic::on_unimplemented(
    message = "an output channel is neither connected nor dropped: `{Self}`",
    label = "this component has an output channel that nothing reads",
    note = "connect every output channel to a downstream component, or drop it explicitly (`drop NAME.CHANNEL;` in `job!`, `.drop_CHANNEL()` in the builder)",
    note = "in `job!`, declare every channel of the component: `operator NAME {{ a, b }} = ...`"
)]
pub trait ChannelHandled {}
impl ChannelHandled for Handled {}

/// Implemented (by `#[derive(Outputs)]`) for a set of channel streams whose
/// every channel is [`Handled`].
pub trait AllChannelsHandled {}

/// Compiles only when every channel of `streams` was connected or dropped.
///
/// `job!` calls it after wiring a component with named channels; builder users
/// call it the same way after taking or dropping each channel.
pub fn all_channels_handled<S: AllChannelsHandled>(streams: S) {
    let _ = streams;
}

/// The unconnected state of channel `Name` (a marker type named after the
/// channel) carrying records of type `T` with time marker `Tm`.
pub struct Unconnected<Name, T, Tm: StreamTime>(
    pub Stream<T, Tm>,
    pub std::marker::PhantomData<Name>,
);
