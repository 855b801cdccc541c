//! Output channel sets: one [`Collector`] (channel `out`), or a struct of named,
//! typed collectors derived with `#[derive(Outputs)]`.
//!
//! A derived set's stream handles are a typestate: each channel must be taken
//! (connected) or dropped explicitly before the set can be finished, so an
//! output channel left unconnected is a compile error, not a silent data loss.

use std::any::Any;
use std::collections::VecDeque;

use crate::collector::Collector;
use crate::control::{Control, Disconnected};
use crate::edge::Edge;
use crate::id::{JobId, NodeId};
use crate::lineage::Lineage;
use crate::record::Data;
use crate::stream::Stream;
use crate::stream_time::StreamTime;
use crate::time::Timestamp;

/// Name and type of one output channel (for plans and the web view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The channel's name (`out` for a single collector).
    pub name: &'static str,
    /// The Rust type of its records.
    pub type_name: &'static str,
}

/// What the engine built for one output channel of one instance, type-erased
/// because the engine does not know the channel's record type `T`.
#[derive(Default)]
pub struct ChannelParts {
    /// Where the channel's batches go (the fan-out of its edges when it has
    /// several): a `Box<dyn Edge<T>>`, boxed as `Any`; `None` for a channel
    /// nobody reads.
    pub edge: Option<Box<dyn Any + Send>>,
    /// In a job run with acking: a `Box<dyn Lineage<T>>`, boxed as `Any`.
    pub lineage: Option<Box<dyn Any + Send>>,
}

/// The parts of each output channel of one instance, from which an
/// [`Outputs`] value is assembled.
pub struct OutputParts {
    channels: VecDeque<ChannelParts>,
    batch_size: usize,
    detached: bool,
}

impl OutputParts {
    /// Parts for channels in order.
    pub fn new(channels: Vec<ChannelParts>, batch_size: usize) -> Self {
        OutputParts {
            channels: channels.into(),
            batch_size,
            detached: false,
        }
    }

    /// Parts whose collectors keep what they are given (see
    /// [`Collector::detached`]): for test harnesses.
    pub fn detached() -> Self {
        OutputParts {
            channels: VecDeque::new(),
            batch_size: usize::MAX,
            detached: true,
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
        let parts = self.channels.pop_front().unwrap_or_default();
        let edge = parts
            .edge
            .map(|edge| match edge.downcast::<Box<dyn Edge<T>>>() {
                Ok(edge) => *edge,
                Err(_) => wrong_type::<T>("an edge"),
            });
        let collector = Collector::new(edge, self.batch_size);
        match parts.lineage {
            None => collector,
            Some(lineage) => match lineage.downcast::<Box<dyn Lineage<T>>>() {
                Ok(lineage) => collector.with_lineage(*lineage),
                Err(_) => wrong_type::<T>("a lineage"),
            },
        }
    }
}

fn wrong_type<T>(what: &str) -> ! {
    panic!(
        "streamwork internal error: {what} of the wrong type was wired to a channel of `{}`",
        std::any::type_name::<T>()
    )
}

/// One output channel, whatever its record type: what the engine does to
/// every channel of an instance alike.
pub trait Channel {
    /// Opens the channel's edges (an instance fused downstream opens).
    fn open(&mut self) -> Result<(), Disconnected>;
    /// Flushes the channel.
    fn flush(&mut self) -> Result<(), Disconnected>;
    /// Sends a control message down the channel.
    fn control(&mut self, control: &Control) -> Result<(), Disconnected>;
    /// Passes a processing-time tick down the channel.
    fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected>;
    /// Records emitted so far.
    fn emitted(&self) -> u64;
    /// The first delivery failure, if any.
    fn check(&self) -> Result<(), Disconnected>;
}

/// The [`Channel`] methods of a [`Collector`], its own: in its `Channel`
/// impl and, as straight calls with no visit, in its `Outputs` impl.
macro_rules! collector_channel_methods {
    () => {
        fn open(&mut self) -> Result<(), Disconnected> {
            Collector::open(self)
        }
        fn flush(&mut self) -> Result<(), Disconnected> {
            Collector::flush(self)
        }
        fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
            Collector::control(self, control)
        }
        fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
            Collector::tick(self, now)
        }
        fn emitted(&self) -> u64 {
            Collector::emitted(self)
        }
        fn check(&self) -> Result<(), Disconnected> {
            Collector::check(self)
        }
    };
}

impl<T: Data> Channel for Collector<T> {
    collector_channel_methods!();
}

/// A set of output channels. Implemented by [`Collector<T>`] (one channel
/// named `out`) and by structs of collectors with `#[derive(Outputs)]`.
///
/// An implementation names its channels, builds their stream handles and
/// collectors, and visits them; every operation on all channels at once
/// (flush, control, ...) is provided on top of the visit.
pub trait Outputs: Send + Sized + 'static {
    /// The builder-side stream handle(s) of the channels, for inputs of time
    /// marker `Tm`.
    type Streams<Tm: StreamTime>;

    /// Names and types of the channels, in order.
    fn channels() -> Vec<ChannelInfo>;

    /// Stream handles for the channels of component `node` of job `job`.
    #[doc(hidden)]
    fn streams<Tm: StreamTime>(job: JobId, node: NodeId) -> Self::Streams<Tm>;

    /// Builds the collectors from the engine's parts.
    #[doc(hidden)]
    fn assemble(parts: &mut OutputParts) -> Self;

    /// Sets the event time inherited by emitted records (per record: kept
    /// out of the visit so that it stays a static call).
    fn set_time(&mut self, time: Option<Timestamp>);

    /// Calls `visit` on every channel, in order.
    fn for_each_channel(&mut self, visit: &mut dyn FnMut(&mut dyn Channel));

    /// Calls `visit` on every channel, in order, without changing any.
    fn for_each_channel_ref(&self, visit: &mut dyn FnMut(&dyn Channel));

    /// Opens every channel.
    fn open(&mut self) -> Result<(), Disconnected> {
        all(self, |channel| channel.open())
    }

    /// Flushes every channel.
    fn flush(&mut self) -> Result<(), Disconnected> {
        all(self, |channel| channel.flush())
    }

    /// Sends a control message down every channel.
    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        all(self, |channel| channel.control(control))
    }

    /// Passes a processing-time tick down every channel.
    fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        all(self, |channel| channel.tick(now))
    }

    /// The channel a batch handled in place goes on through
    /// ([`Operator::on_batch_in_place`](crate::Operator::on_batch_in_place)),
    /// as `Any` (a `Collector` of the operator's input type): a single
    /// collector itself; `None` (the default) for a set of channels.
    #[doc(hidden)]
    fn in_place(&mut self) -> Option<&mut dyn Any> {
        None
    }

    /// Records emitted on all channels so far.
    fn emitted(&self) -> u64 {
        let mut emitted = 0;
        self.for_each_channel_ref(&mut |channel| emitted += channel.emitted());
        emitted
    }

    /// The first delivery failure of any channel, if any.
    fn check(&self) -> Result<(), Disconnected> {
        let mut result = Ok(());
        self.for_each_channel_ref(&mut |channel| {
            if result.is_ok() {
                result = channel.check();
            }
        });
        result
    }
}

/// Applies `op` to every channel (all of them, even after a failure) and
/// returns the first failure.
fn all<O: Outputs>(
    outputs: &mut O,
    mut op: impl FnMut(&mut dyn Channel) -> Result<(), Disconnected>,
) -> Result<(), Disconnected> {
    let mut result = Ok(());
    outputs.for_each_channel(&mut |channel| {
        let outcome = op(channel);
        if result.is_ok() {
            result = outcome;
        }
    });
    result
}

impl<T: Data> Outputs for Collector<T> {
    type Streams<Tm: StreamTime> = Stream<T, Tm>;

    fn channels() -> Vec<ChannelInfo> {
        vec![ChannelInfo {
            name: "out",
            type_name: std::any::type_name::<T>(),
        }]
    }

    fn streams<Tm: StreamTime>(job: JobId, node: NodeId) -> Stream<T, Tm> {
        Stream::__new(job, node, 0)
    }

    fn assemble(parts: &mut OutputParts) -> Self {
        parts.next_collector()
    }

    fn in_place(&mut self) -> Option<&mut dyn Any> {
        Some(self)
    }

    #[inline]
    fn set_time(&mut self, time: Option<Timestamp>) {
        Collector::set_time(self, time);
    }

    fn for_each_channel(&mut self, visit: &mut dyn FnMut(&mut dyn Channel)) {
        visit(self);
    }

    fn for_each_channel_ref(&self, visit: &mut dyn FnMut(&dyn Channel)) {
        visit(self);
    }

    // One channel: straight calls, no visit.
    collector_channel_methods!();
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

/// Output streams with one main channel, which a chained step continues
/// with (a window's results): the stream, and the other channels, as
/// `(node, channel)`, for the builder to discard (a window's late events,
/// still counted by the window).
pub trait MainChannel<R, Tm: StreamTime> {
    /// The main stream, and the channels left unread on purpose.
    fn main_channel(self) -> (Stream<R, Tm>, Vec<(crate::NodeId, u32)>);
}

impl<R: Data, Tm: StreamTime> MainChannel<R, Tm> for Stream<R, Tm> {
    fn main_channel(self) -> (Stream<R, Tm>, Vec<(crate::NodeId, u32)>) {
        (self, Vec::new())
    }
}
