//! How a job fails: the first failure that is not a consequence of another
//! is recorded as a value, and every task sees the abort flag.
//!
//! Every instance records its own failure (an error its user code or
//! connector returned, or a panic caught at its boundary) with its component
//! and instance, whether it is the root of its task or fused into another's,
//! and answers its caller with [`Failed`]: the failure travels as a value,
//! never as a panic.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use streamwork_core::{InstanceIdx, TaskError};

use crate::error::JobError;

/// A failure that has been recorded: what a step of a failed instance or
/// task returns.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failed;

/// The failure of one run of a job, shared by every task.
#[derive(Clone, Default)]
pub(crate) struct Failure {
    first: Arc<Mutex<Option<JobError>>>,
    abort: Arc<AtomicBool>,
    /// The job is stopping at a complete savepoint: tasks end as they
    /// learn of it, and a task that finds a neighbour gone is not a failure.
    suspending: Arc<AtomicBool>,
}

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failure")
            .field("aborted", &self.aborted())
            .finish_non_exhaustive()
    }
}

impl Failure {
    /// Records `error` (keeping the first that is not a mere consequence of
    /// another) and aborts the job.
    pub(crate) fn record(&self, error: JobError) -> Failed {
        if error.is_cascade() && self.suspending.load(Ordering::Acquire) {
            // A neighbour that stopped at the savepoint: this task ends too.
            return Failed;
        }
        let mut slot = self.first.lock().unwrap_or_else(|p| p.into_inner());
        let replace = match &*slot {
            None => true,
            Some(existing) => existing.is_cascade() && !error.is_cascade(),
        };
        if replace {
            *slot = Some(error);
        }
        drop(slot);
        self.abort.store(true, Ordering::Relaxed);
        Failed
    }

    /// Records that `component`'s instance `instance` failed with `error`.
    pub(crate) fn task(&self, component: &str, instance: InstanceIdx, error: TaskError) -> Failed {
        self.record(JobError::Failed {
            component: component.to_string(),
            instance,
            error,
        })
    }

    /// Records that `component`'s instance `instance` panicked.
    pub(crate) fn panic(
        &self,
        component: &str,
        instance: InstanceIdx,
        payload: Box<dyn Any + Send>,
    ) -> Failed {
        self.record(JobError::Panicked {
            component: component.to_string(),
            instance,
            message: panic_message(payload),
        })
    }

    /// The recorded failure, taken.
    pub(crate) fn take(&self) -> Option<JobError> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether the job has failed.
    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// The flag the coordinator raises once the savepoint a stop asked for
    /// is complete.
    pub(crate) fn suspending_flag(&self) -> &Arc<AtomicBool> {
        &self.suspending
    }

    /// Whether the job is stopping at a complete savepoint.
    pub(crate) fn suspending(&self) -> bool {
        self.suspending.load(Ordering::Acquire)
    }

    /// The abort flag, for what watches it without recording failures.
    pub(crate) fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }
}

/// The text of a panic's payload.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_that_is_not_a_cascade_is_kept() {
        let failure = Failure::default();
        failure.task("sink", InstanceIdx(0), TaskError::Disconnected);
        assert!(failure.aborted());
        failure.task("map", InstanceIdx(1), TaskError::Restore("bad".into()));
        failure.task("other", InstanceIdx(0), TaskError::Restore("later".into()));
        failure.panic("late", InstanceIdx(0), Box::new("boom"));
        let kept = failure.take().unwrap();
        assert_eq!(
            kept.to_string(),
            "component `map` instance 1 failed: cannot restore checkpointed state: bad"
        );
    }
}
