//! How to run a job beyond its graph: checkpoints, acking, and what to do
//! when it fails.

use std::time::Duration;

use crate::checkpoint::CheckpointConfig;

/// How to run a job beyond its graph.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Take checkpoints (and restore from them): at-least-once or
    /// exactly-once delivery. `None`: at-most-once.
    pub checkpoints: Option<CheckpointConfig>,
    /// What [`run_with`](crate::run_with) does when the job fails: restart it from its last
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
