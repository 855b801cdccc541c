//! The time domain of a window: event time (the records' timestamps, closed by
//! watermarks) or processing time (the wall clock when a record arrives).

use streamwork_core::{AnyTime, EventTime, TimeRequirement};

/// A time domain.
pub trait Domain: Copy + Send + 'static {
    /// What the window operator requires of its input's time.
    type Time: TimeRequirement;
    /// Whether windows follow the records' event time (else the wall clock).
    const EVENT_TIME: bool;
}

/// Event time: windows by record timestamps, fired by watermarks. The input
/// must be watermarked, or the job does not compile.
#[derive(Copy, Clone, Debug, Default)]
pub struct EventDomain;

/// Processing time: windows by the wall clock at arrival, fired by the clock.
#[derive(Copy, Clone, Debug, Default)]
pub struct ProcessingDomain;

impl Domain for EventDomain {
    type Time = EventTime;
    const EVENT_TIME: bool = true;
}

impl Domain for ProcessingDomain {
    type Time = AnyTime;
    const EVENT_TIME: bool = false;
}
