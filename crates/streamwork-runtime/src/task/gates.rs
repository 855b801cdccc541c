//! The gates of a source task: conditions under which it may be polled,
//! registered by the instances fused into it (an aligned watermark strategy
//! holds its source back while it is ahead of its peers).

use std::sync::atomic::{AtomicBool, Ordering};
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
}

impl SourceGates {
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
