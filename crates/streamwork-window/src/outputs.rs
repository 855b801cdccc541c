//! The two output channels of every window operator: `results`, and `late`
//! for events beyond the allowed lateness. As with `#[derive(Outputs)]`, each
//! channel must be connected or dropped explicitly, so late data is never
//! lost silently.

use std::marker::PhantomData;

use streamwork_core::outputs::{
    AllChannelsHandled, Channel, ChannelHandled, ChannelInfo, Handled, MainChannel, OutputParts,
    Unconnected,
};
use streamwork_core::{Collector, Data, JobId, NodeId, Outputs, Stream, StreamTime, Timestamp};

/// Marker types naming the channels in diagnostics.
#[allow(non_camel_case_types)]
pub mod channel {
    /// The `results` channel.
    pub struct results;
    /// The `late` channel.
    pub struct late;
}

/// The outputs of a window operator: results of type `R`, late events of type `T`.
pub struct WindowOutputs<R, T> {
    /// Window results.
    pub results: Collector<R>,
    /// Events that arrived after their window's allowed lateness.
    pub late: Collector<T>,
}

/// Stream handles of a window operator's channels; see [`WindowOutputs`].
#[must_use = "connect or drop both channels of a window: `results` and `late`"]
pub struct WindowStreams<C0, C1> {
    results: C0,
    late: C1,
}

impl<R: Data, Tm: StreamTime, C1> WindowStreams<Unconnected<channel::results, R, Tm>, C1> {
    /// Takes the stream of window results to connect it.
    pub fn results(self) -> (Stream<R, Tm>, WindowStreams<Handled, C1>) {
        (
            self.results.0,
            WindowStreams {
                results: Handled,
                late: self.late,
            },
        )
    }

    /// Drops the window results.
    pub fn drop_results(self) -> WindowStreams<Handled, C1> {
        WindowStreams {
            results: Handled,
            late: self.late,
        }
    }
}

impl<T: Data, Tm: StreamTime, C0> WindowStreams<C0, Unconnected<channel::late, T, Tm>> {
    /// Takes the stream of late events to connect it.
    pub fn late(self) -> (Stream<T, Tm>, WindowStreams<C0, Handled>) {
        (
            self.late.0,
            WindowStreams {
                results: self.results,
                late: Handled,
            },
        )
    }

    /// Drops late events (they are still counted).
    pub fn drop_late(self) -> WindowStreams<C0, Handled> {
        WindowStreams {
            results: self.results,
            late: Handled,
        }
    }
}

impl<C0: ChannelHandled, C1: ChannelHandled> AllChannelsHandled for WindowStreams<C0, C1> {}

/// The index of the `late` channel among a window operator's channels.
pub const LATE_CHANNEL: u32 = 1;

impl<R: Data, T: Data> Outputs for WindowOutputs<R, T> {
    type Streams<Tm: StreamTime> =
        WindowStreams<Unconnected<channel::results, R, Tm>, Unconnected<channel::late, T, Tm>>;

    fn channels() -> Vec<ChannelInfo> {
        vec![
            ChannelInfo {
                name: "results",
                type_name: std::any::type_name::<R>(),
            },
            ChannelInfo {
                name: "late",
                type_name: std::any::type_name::<T>(),
            },
        ]
    }

    fn streams<Tm: StreamTime>(job: JobId, node: NodeId) -> Self::Streams<Tm> {
        WindowStreams {
            results: Unconnected(Stream::__new(job, node, 0), PhantomData),
            late: Unconnected(Stream::__new(job, node, LATE_CHANNEL), PhantomData),
        }
    }

    fn assemble(parts: &mut OutputParts) -> Self {
        WindowOutputs {
            results: parts.next_collector(),
            late: parts.next_collector(),
        }
    }

    #[inline]
    fn set_time(&mut self, time: Option<Timestamp>) {
        self.results.set_time(time);
        self.late.set_time(time);
    }

    fn for_each_channel(&mut self, visit: &mut dyn FnMut(&mut dyn Channel)) {
        visit(&mut self.results);
        visit(&mut self.late);
    }

    fn for_each_channel_ref(&self, visit: &mut dyn FnMut(&dyn Channel)) {
        visit(&self.results);
        visit(&self.late);
    }
}

/// A window chained on a stream continues with its results; its late
/// events (counted by the window's `LateCounter`) are left unread.
impl<R: Data, T: Data, Tm: StreamTime> MainChannel<R, Tm>
    for WindowStreams<Unconnected<channel::results, R, Tm>, Unconnected<channel::late, T, Tm>>
{
    fn main_channel(self) -> (Stream<R, Tm>, Vec<(NodeId, u32)>) {
        let late = self.late.0;
        (self.results.0, vec![(late.node(), late.channel())])
    }
}
