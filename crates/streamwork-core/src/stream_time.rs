//! Time in the type: whether a stream carries watermarks, and what an
//! operator needs of its inputs' time. An event-time operator on a stream
//! without watermarks does not compile.

/// Whether a stream carries watermarks: the time marker of a [`Stream`](crate::Stream).
pub trait StreamTime: Send + Sync + 'static {
    /// Whether the stream carries watermarks.
    const WATERMARKED: bool;
}

/// A stream without watermarks: its event time never advances (until its end).
#[derive(Copy, Clone, Debug, Default)]
pub struct Unwatermarked;

/// A stream downstream of a watermark strategy: event time advances.
#[derive(Copy, Clone, Debug, Default)]
pub struct Watermarked;

impl StreamTime for Unwatermarked {
    const WATERMARKED: bool = false;
}
impl StreamTime for Watermarked {
    const WATERMARKED: bool = true;
}

/// What an operator needs of its input's time, and what its output then is.
pub trait TimeRequirement: Send + 'static {
    /// The time marker of the output streams, given the inputs' marker `Tm`.
    type Out<Tm: StreamTime>: StreamTime;
    /// Whether the runtime forwards the inputs' watermarks and idleness
    /// downstream (false for operators that generate their own).
    const FORWARDS_WATERMARKS: bool = true;
}

/// Works on any stream; output streams carry watermarks if the inputs do.
#[derive(Copy, Clone, Debug, Default)]
pub struct AnyTime;

/// Works in event time (event-time windows and timers): the inputs must carry
/// watermarks, or the job does not compile.
#[derive(Copy, Clone, Debug, Default)]
pub struct EventTime;

/// Assigns timestamps and generates watermarks: any input, watermarked output.
#[derive(Copy, Clone, Debug, Default)]
pub struct AssignsWatermarks;

impl TimeRequirement for AnyTime {
    type Out<Tm: StreamTime> = Tm;
}
impl TimeRequirement for EventTime {
    type Out<Tm: StreamTime> = Tm;
}
impl TimeRequirement for AssignsWatermarks {
    type Out<Tm: StreamTime> = Watermarked;
    const FORWARDS_WATERMARKS: bool = false;
}

/// `Self` (an operator's [`TimeRequirement`]) accepts inputs of time marker `Tm`.
#[diagnostic::on_unimplemented(
    message = "this operator works in event time, but its input stream has no watermarks",
    label = "an event-time window or timer needs watermarks to ever fire",
    note = "attach a watermark strategy after the source, as in `operator timed = Watermarks::bounded(Duration::from_secs(4)).timestamps(|r| ...) <- source;`, and read from `timed`"
)]
pub trait Admits<Tm: StreamTime> {}
impl<Tm: StreamTime> Admits<Tm> for AnyTime {}
impl Admits<Watermarked> for EventTime {}
impl<Tm: StreamTime> Admits<Tm> for AssignsWatermarks {}
