//! Running a job: how (its [`RunOptions`]), until it ends ([`run`],
//! [`start`]), and again after a failure ([`run_with`] and its
//! [`RestartStrategy`]).

use std::time::Duration;

use crate::builder::JobGraph;
use crate::checkpoint::CheckpointConfig;
use crate::error::JobError;
use crate::handle::JobHandle;
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

/// How to run a job beyond its graph.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Take checkpoints (and restore from them): at-least-once or
    /// exactly-once delivery. `None`: at-most-once.
    pub checkpoints: Option<CheckpointConfig>,
    /// What [`run_with`] does when the job fails: restart it from its last
    /// complete checkpoint, or give up.
    pub restart: RestartStrategy,
    /// At-least-once by acking (chapter 5), with this tree timeout: every
    /// source record's tree of derived events is tracked, and a record whose
    /// tree is not complete within the timeout (dropped by a full edge, say)
    /// is replayed. Independent of checkpoints.
    pub acking: Option<Duration>,
}

impl RunOptions {
    /// Options for at-least-once by acking, replaying a record whose tree
    /// is not complete within `timeout`.
    pub fn acking(timeout: Duration) -> Self {
        RunOptions {
            acking: Some(timeout),
            ..RunOptions::default()
        }
    }
}

/// When a failed job is started again from its last complete checkpoint
/// (chapter 10). A restart needs checkpoints to resume from; without them a
/// job restarts from the beginning of its input.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum RestartStrategy {
    /// Fail at the first failure (the default).
    #[default]
    Never,
    /// Up to `attempts` restarts, `delay` apart.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each.
        delay: Duration,
    },
    /// Up to `attempts` restarts, waiting `initial`, then twice as long each
    /// time, at most `max`.
    ExponentialBackoff {
        /// Restarts allowed.
        attempts: u32,
        /// The first wait.
        initial: Duration,
        /// The longest wait.
        max: Duration,
    },
}

impl RestartStrategy {
    /// The wait before restart number `attempt` (from 1), or `None` once
    /// the attempts are used up.
    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        match *self {
            RestartStrategy::Never => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (attempt <= attempts).then_some(delay)
            }
            RestartStrategy::ExponentialBackoff {
                attempts,
                initial,
                max,
            } => (attempt <= attempts).then(|| {
                let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(31));
                initial.saturating_mul(factor).min(max)
            }),
        }
    }
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
