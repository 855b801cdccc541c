//! The time domain of a window: event time (the records' timestamps, closed by
//! watermarks) or processing time (the wall clock when a record arrives).

use streamwork_core::timer::wall_clock;
use streamwork_core::{AnyTime, EventTime, TimeRequirement, Timestamp};

/// A time domain.
pub trait Domain: Copy + Send + 'static {
    /// What the window operator requires of its input's time.
    type Time: TimeRequirement;
    /// Whether windows follow the records' event time (else the wall clock).
    const EVENT_TIME: bool;

    /// The time a record falls at: its timestamp in event time (none counts
    /// as the beginning of time); in processing time the operator's clock
    /// `now`, started from the wall clock at the first record.
    #[inline]
    fn record_time(timestamp: Option<Timestamp>, now: &mut i64) -> i64 {
        if Self::EVENT_TIME {
            timestamp.map(Timestamp::millis).unwrap_or(i64::MIN)
        } else {
            if *now == i64::MIN {
                *now = wall_clock().millis();
            }
            *now
        }
    }

    /// Where a watermark moves the windows' clock: everywhere in event time;
    /// in processing time only the end of input does.
    #[inline]
    fn watermark_time(watermark: Timestamp) -> Option<i64> {
        (Self::EVENT_TIME || watermark == Timestamp::MAX).then_some(watermark.millis())
    }

    /// Where a processing-time tick moves the clock (processing time only).
    #[inline]
    fn tick_time(now: Timestamp) -> Option<i64> {
        (!Self::EVENT_TIME).then_some(now.millis())
    }

    /// Where the end of a batch moves the clock: processing time reads the
    /// wall clock once per batch, not per record.
    #[inline]
    fn batch_end_time() -> Option<i64> {
        (!Self::EVENT_TIME).then(|| wall_clock().millis())
    }
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
