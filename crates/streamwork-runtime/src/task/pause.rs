//! The input side of a task's flow control (chapter 9): its backpressure
//! watermarks raise a pause of the sources upstream while a queue is too
//! full, and lower it once every queue has drained enough.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::InputChannel;
use crate::metrics::PauseFlag;

/// The shortest pause of the sources once a backpressure watermark is
/// crossed: hysteresis in time, against pausing and resuming at every batch.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// The input side of a task's flow control: its pause request, and when it
/// was raised.
pub(crate) struct PauseState {
    flag: Arc<PauseFlag>,
    raised_at: Option<Instant>,
}

impl PauseState {
    /// The flow control of an instance whose pause request is `flag`.
    pub(crate) fn new(flag: Arc<PauseFlag>) -> Self {
        PauseState {
            flag,
            raised_at: None,
        }
    }

    /// Raises the pause above a channel's high watermark, lowers it once every
    /// watermarked channel is below its low one (and the pause lasted long enough).
    pub(crate) fn update(&mut self, ports: &[Vec<InputChannel>]) {
        let watermarked = ports.iter().flatten().filter_map(|c| Some((c, c.pause?)));
        let (mut above, mut below) = (false, true);
        for (channel, watermarks) in watermarked {
            let occupancy = channel.receiver.len() as f64 / channel.capacity.max(1) as f64;
            above |= occupancy >= watermarks.high;
            below &= occupancy <= watermarks.low;
        }
        match self.raised_at {
            None if above => {
                self.flag.raise();
                self.raised_at = Some(Instant::now());
            }
            Some(at) if below && at.elapsed() >= MIN_PAUSE => {
                self.flag.lower();
                self.raised_at = None;
            }
            _ => {}
        }
    }

    pub(crate) fn release(&mut self) {
        if self.raised_at.take().is_some() {
            self.flag.lower();
        }
    }
}

pub(crate) fn occupancy(ports: &[Vec<InputChannel>]) -> f64 {
    let (len, capacity) = ports.iter().flatten().fold((0usize, 0usize), |(l, c), ch| {
        (l + ch.receiver.len(), c + ch.capacity)
    });
    len as f64 / capacity.max(1) as f64
}
