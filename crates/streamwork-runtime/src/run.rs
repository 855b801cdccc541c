//! Running a job until it ends ([`run`], [`start`]), and again after a
//! failure ([`run_with`]).

use crate::builder::JobGraph;
use crate::error::JobError;
use crate::handle::JobHandle;
use crate::options::RunOptions;
use crate::report::JobReport;
use crate::start::start_graph;

/// Runs `graph` to completion on this machine's threads: until every source
/// has ended and everything has drained, or until a failure.
pub fn run(graph: JobGraph) -> Result<JobReport, JobError> {
    start(graph)?.join()
}

/// Starts `graph` and returns at once with a handle to stop it or wait for it.
pub fn start(graph: JobGraph) -> Result<JobHandle, JobError> {
    start_with(graph, RunOptions::default())
}

/// Starts `graph` with `options`.
pub fn start_with(graph: JobGraph, options: RunOptions) -> Result<JobHandle, JobError> {
    start_graph(&graph, options)
}

/// Runs `graph` with `options` to completion, restarting it from its last
/// complete checkpoint after a failure as `options.restart` allows. Only a
/// failure that may heal is retried ([`JobError::is_retryable`]: a panic, an
/// external system's error); a user error, bad configuration or a damaged
/// checkpoint log fails at once. The report is that of the last run, with
/// `restarts` counting the others.
pub fn run_with(graph: JobGraph, options: RunOptions) -> Result<JobReport, JobError> {
    let mut attempt = 0;
    loop {
        let outcome = start_graph(&graph, options.clone()).and_then(JobHandle::join);
        let error = match outcome {
            Ok(mut report) => {
                report.restarts = attempt;
                return Ok(report);
            }
            Err(error) if !error.is_retryable() => return Err(error),
            Err(error) => error,
        };
        attempt += 1;
        let Some(delay) = options.restart.delay(attempt) else {
            return Err(error);
        };
        tracing::warn!(
            "job `{}` failed ({error}); restart {attempt} from its last complete checkpoint in {delay:?}",
            graph.name()
        );
        std::thread::sleep(delay);
    }
}
