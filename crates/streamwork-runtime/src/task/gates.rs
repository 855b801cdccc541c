//! The gates of a source task: conditions under which it may be polled,
//! registered by the instances fused into it (an aligned watermark strategy
//! holds its source back while it is ahead of its peers).
//!
//! A gated source also waits until every source task of the job has
//! started: a gate compares its source with the others that registered in
//! the same place (an alignment group), and a source task that has not
//! started yet has not registered, so it would hold nothing back. On
//! workers a task starts at its first turn, which can come long after
//! another worker's sources began to read.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use streamwork_core::instance::{PollGate, PollGates};

/// The gates of one source task, shared by the contexts of the instances
/// fused into it.
#[derive(Clone, Default)]
pub(crate) struct SourceGates(Arc<Gates>);

#[derive(Default)]
struct Gates {
    /// Whether any gate was registered: most source tasks have none, and
    /// look at this flag only, once per poll.
    any: AtomicBool,
    gates: Mutex<Vec<PollGate>>,
    /// The job's source tasks not started yet.
    unstarted: SourceStarts,
}

/// How many of a job's source tasks have not started yet (opened, with
/// their fused instances, which register their gates as they open).
#[derive(Clone, Default)]
pub(crate) struct SourceStarts(Arc<AtomicUsize>);

impl SourceStarts {
    /// The gates of one more source task of the job.
    pub(crate) fn gates(&self) -> SourceGates {
        self.0.fetch_add(1, Ordering::AcqRel);
        SourceGates(Arc::new(Gates {
            unstarted: self.clone(),
            ..Gates::default()
        }))
    }

    fn all_started(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

impl SourceGates {
    /// Its task has started (called once, after its instances opened).
    pub(crate) fn started(&self) {
        // Saturating: gates made without a count (a default) count nothing.
        let _ = self
            .0
            .unstarted
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Where the instances fused into the task register their gates.
    pub(crate) fn registry(&self) -> PollGates {
        let shared = self.0.clone();
        Arc::new(move |gate| {
            shared
                .gates
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(gate);
            shared.any.store(true, Ordering::Release);
        })
    }

    /// Whether any gate is registered: the source's progress must then be
    /// seen after every poll, not once its batch is full.
    pub(crate) fn any(&self) -> bool {
        self.0.any.load(Ordering::Acquire)
    }

    /// Whether every gate lets the source be polled now.
    pub(crate) fn are_open(&self) -> bool {
        if !self.0.any.load(Ordering::Acquire) {
            return true;
        }
        if !self.0.unstarted.all_started() {
            return false;
        }
        self.0
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .all(|gate| gate())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn a_source_may_be_polled_while_every_gate_is_open() {
        let gates = SourceGates::default();
        assert!(gates.are_open());
        let ahead = Arc::new(AtomicBool::new(false));
        let flag = ahead.clone();
        (gates.registry())(Arc::new(move || !flag.load(Ordering::Relaxed)));
        assert!(gates.are_open());
        ahead.store(true, Ordering::Relaxed);
        assert!(!gates.are_open());
    }
}
