//! Counting and reporting malformed input.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What to do with a malformed input line.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum BadInput {
    /// Count it, report it, and go on (the default).
    #[default]
    Skip,
    /// Fail the job with an error naming the input and position.
    Fail,
}

/// A shared count of malformed input, with the first few examples, readable
/// while and after the job runs.
///
/// ```
/// use streamwork::connectors::InputErrors;
/// let errors = InputErrors::new();
/// errors.record("input.txt:3: invalid UTF-8");
/// assert_eq!(errors.count(), 1);
/// ```
#[derive(Clone, Debug, Default)]
pub struct InputErrors {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    count: AtomicU64,
    examples: Mutex<Vec<String>>,
}

const MAX_EXAMPLES: usize = 5;

impl InputErrors {
    /// A fresh counter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one malformed input, described by `what` (where and why).
    pub fn record(&self, what: impl Into<String>) {
        let n = self.inner.count.fetch_add(1, Ordering::Relaxed);
        if (n as usize) < MAX_EXAMPLES {
            let what = what.into();
            tracing::warn!("malformed input skipped: {what}");
            self.inner
                .examples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(what);
        }
    }

    /// How many malformed inputs were seen.
    pub fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Relaxed)
    }

    /// The first few, described.
    pub fn examples(&self) -> Vec<String> {
        self.inner
            .examples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
