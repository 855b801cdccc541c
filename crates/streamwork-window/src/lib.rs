//! Streamwork's event time and windows (chapter 7): watermark strategies, and
//! window operators — tumbling, sliding (on shared slices), session and count
//! windows, in event or processing time, keyed or over all records — with
//! incremental aggregates or full-window functions, early firing, allowed
//! lateness with update re-firing, and a `late` channel that must be wired or
//! dropped.
//!
//! ```
//! use std::time::Duration;
//! use streamwork::core::Timestamp;
//! use streamwork::window::{Watermarks, Windows};
//! // The two operators of an event-time windowed count, as `job!` would
//! // place them after a source of `(key, millis)` pairs:
//! let timed = Watermarks::bounded(Duration::from_millis(500))
//!     .timestamps(|r: &(u32, i64)| Timestamp::from_millis(r.1));
//! let counts = Windows::tumbling(Duration::from_secs(1)).count::<(u32, i64), u32>();
//! # let _ = (timed, counts);
//! ```
//!
//! Modules: [`watermark`] (strategies), [`spec`] (the `Windows` builder),
//! [`sliced`] (tumbling and sliding), [`session`], [`count`],
//! [`aggregate`] (window functions), [`window`] (bounds and results),
//! [`outputs`] (the `results` and `late` channels).
//!
//! Not here: joins (`streamwork-join`), checkpointing of window state
//! (`streamwork-state`).

#![warn(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod aggregate;
pub mod count;
mod domain;
pub mod ends;
pub mod outputs;
pub mod session;
pub mod sliced;
pub mod spec;
pub mod watermark;
pub mod window;

pub use aggregate::{Aggregate, Apply, Count, MaxBy, Sum};
pub use domain::{Domain, EventDomain, ProcessingDomain};
pub use outputs::{WindowOutputs, WindowStreams};
pub use spec::{WindowSpec, Windows};
pub use watermark::{AlignmentGroup, AssignWatermarks, WatermarkSpec, Watermarks};
pub use window::{CountWindow, Firing, Window, WindowContents, WindowResult};

/// What a window operator left out of checkpoints says when a job needs its
/// state checkpointed: the fix.
pub(crate) const TRANSIENT_FIX: &str = "its state is left out of checkpoints: build it without `.transient()` (its key and accumulator types must then be archivable: primitives, `String`, `Vec`, tuples, or types marked `#[streamwork::state_data]`)";

/// The time hooks of a window operator of domain `D` that closes windows as
/// its `advance` is told the time: at a watermark and at each batch's end.
macro_rules! window_time_hooks {
    () => {
        fn on_watermark(&mut self, watermark: streamwork_core::Timestamp, out: &mut Self::Out) {
            self.advance(D::watermark_time(watermark), out);
        }

        fn on_batch_end(&mut self, out: &mut Self::Out) {
            self.advance(D::batch_end_time(), out);
        }
    };
}
pub(crate) use window_time_hooks;

/// A shared count of late events (beyond the allowed lateness, or dropped by a
/// watermark strategy), readable while and after the job runs.
#[derive(Clone, Debug, Default)]
pub struct LateCounter(Arc<AtomicU64>);

impl LateCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
