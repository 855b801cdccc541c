//! Flow control of an edge (chapter 9): its capacity, what to do when it is
//! full, and when to pause the sources upstream.

/// What a sender does when the edge's channel to a receiver is full.
///
/// Only batches of records are ever dropped: control messages (watermarks,
/// end of stream) always get through, in order.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Wait for room: backpressure, nothing lost (the default).
    #[default]
    Block,
    /// Drop the batch being sent, and count its records.
    DropNewest,
    /// Drop the oldest queued batch to make room, and count its records.
    DropOldest,
    /// Keep one record in `n` of the batch being sent (count the others), then wait.
    Sample(u32),
}

impl Overflow {
    /// Whether this policy may lose records.
    pub fn drops(self) -> bool {
        !matches!(self, Overflow::Block)
    }

    /// Whether a sender facing a full channel waits for room: always when
    /// blocking, and after keeping its sample when sampling. On workers, a
    /// task whose waiting edge is full is held back before its next step.
    pub fn waits(self) -> bool {
        matches!(self, Overflow::Block | Overflow::Sample(_))
    }
}

/// An overflow policy name that is none of the known ones.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown overflow policy `{0}`: expected block, drop-newest, drop-oldest or sample")]
pub struct UnknownOverflow(pub String);

crate::debug_as_display!(UnknownOverflow);

impl std::str::FromStr for Overflow {
    type Err = UnknownOverflow;
    fn from_str(s: &str) -> Result<Self, UnknownOverflow> {
        match s {
            "block" => Ok(Overflow::Block),
            "drop-newest" => Ok(Overflow::DropNewest),
            "drop-oldest" => Ok(Overflow::DropOldest),
            "sample" => Ok(Overflow::Sample(4)),
            other => Err(UnknownOverflow(other.to_string())),
        }
    }
}

/// Backpressure watermarks: when the receiving instance's queue on this edge
/// is fuller than `high` (a fraction of its capacity), the sources upstream
/// pause; they resume once every such queue is below `low`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PauseWatermarks {
    /// Pause above this occupancy, in `(0, 1]`.
    pub high: f64,
    /// Resume below this occupancy, in `[0, high)`.
    pub low: f64,
}

impl PauseWatermarks {
    /// Whether `0 < high <= 1` and `0 <= low < high` (false for `NaN`).
    pub fn are_valid(&self) -> bool {
        self.high > 0.0 && self.high <= 1.0 && self.low >= 0.0 && self.low < self.high
    }
}

/// The flow control of one edge.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct FlowControl {
    /// Batches each sender may queue to each receiver (default: the job's
    /// channel capacity shared among the senders of the port).
    pub capacity: Option<usize>,
    /// When the channel is full.
    pub overflow: Overflow,
    /// When to pause the sources.
    pub pause: Option<PauseWatermarks>,
}
