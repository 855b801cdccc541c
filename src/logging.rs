//! Logging out of the box: the engine reports through `tracing` (a job's
//! start and end, the checkpoint it restored, each checkpoint completed, a
//! restart after a failure, the bottleneck, thrashing), and
//! [`init`] installs a `tracing-subscriber` that prints those events on
//! standard error, filtered by `RUST_LOG` (`RUST_LOG=info` shows them all;
//! without it, warnings and errors only).
//!
//! [`Run`](crate::Run)'s methods call [`init`] once, so a job logs with no
//! set-up; an application that installs its own subscriber first keeps it
//! (a global subscriber is set once: `init` then does nothing). Built
//! without the default `logging` feature, nothing is installed.
//!
//! ```
//! // In `main`, before anything logs (or let `run` do it):
//! let installed = streamwork::logging::init();
//! // A second call, or one after the application's own subscriber, is a no-op.
//! assert!(!streamwork::logging::init() || !installed);
//! ```

use std::sync::Once;

use tracing_subscriber::EnvFilter;

/// What is shown when `RUST_LOG` is unset or unreadable.
pub const DEFAULT_FILTER: &str = "warn";

/// Installs a subscriber printing to standard error, filtered by `RUST_LOG`
/// (as `tracing-subscriber`'s `EnvFilter` reads it; [`DEFAULT_FILTER`]
/// without it), unless a global subscriber is already set. Returns whether
/// it installed one.
pub fn init() -> bool {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init()
        .is_ok()
}

/// [`init`], once per process: what `run` and `start` call.
pub(crate) fn install_default() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        init();
    });
}
