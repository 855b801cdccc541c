//! Running one task on a thread of its own, to its end.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::{Ended, Flags, InputRun, Task, TaskBody, run_input, run_source};

/// Runs `task` on this thread until it ends. A failure has been recorded as
/// the job's by the instance that failed (or, for a failure of the loop
/// itself, here); the task is then dropped, which closes its channels and
/// wakes its neighbours.
/// Stops `task` at the complete savepoint, as far as it can.
pub(crate) fn suspend(task: &mut Task) {
    let _ = catch_unwind(AssertUnwindSafe(|| match &mut task.body {
        TaskBody::Source { task, .. } => task.suspend(),
        TaskBody::Input { task, .. } => task.suspend(),
    }));
}

pub(crate) fn drive(mut task: Task, flags: &Flags) -> Ended {
    let times = task.times.clone();
    let (component, instance) = (task.component.clone(), task.instance);
    let result = catch_unwind(AssertUnwindSafe(|| match &mut task.body {
        TaskBody::Source {
            task,
            pauses,
            gates,
        } => run_source(task.as_mut(), pauses, gates, &times, flags),
        TaskBody::Input { task, ports, pause } => {
            let mut run = InputRun::new(component.clone(), instance, ports, pause.clone(), flags);
            run_input(&mut run, task.as_mut(), ports, &times, flags)
        }
    }));
    match result {
        Ok(Ok(ended)) => ended,
        Ok(Err(_failed)) if flags.failure.suspending() => {
            // A neighbour that stopped at the savepoint was found gone
            // mid-step (no failure then): what is fused here still commits.
            suspend(&mut task);
            Ended::Suspended
        }
        Ok(Err(_failed)) => Ended::Aborted,
        Err(payload) => {
            // Instances catch the panics of user code; one that reaches here
            // is the engine's own.
            flags.failure.panic(&component, instance, payload);
            Ended::Aborted
        }
    }
}
