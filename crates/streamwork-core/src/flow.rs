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
}

impl std::str::FromStr for Overflow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Overflow::Block),
            "drop-newest" => Ok(Overflow::DropNewest),
            "drop-oldest" => Ok(Overflow::DropOldest),
            "sample" => Ok(Overflow::Sample(4)),
            other => Err(format!(
                "unknown overflow policy `{other}`: expected block, drop-newest, drop-oldest or sample"
            )),
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

/// A condition for polling a source task, registered by an operator fused
/// into it: while it returns `false` the worker running the task does not
/// poll the source (and runs its other tasks meanwhile).
pub type SourceGate = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The gates of one source task on a worker, shared by the contexts of the
/// instances fused into it. Threads of their own never have gates: an
/// operator there waits in place instead.
#[derive(Clone, Default)]
pub struct SourceGates(std::sync::Arc<std::sync::Mutex<Vec<SourceGate>>>);

impl SourceGates {
    /// Adds a condition for polling the source.
    pub fn add(&self, gate: SourceGate) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(gate);
    }

    /// Whether every gate lets the source be polled now.
    pub fn are_open(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .all(|gate| gate())
    }
}

impl std::fmt::Debug for SourceGates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceGates").finish_non_exhaustive()
    }
}
