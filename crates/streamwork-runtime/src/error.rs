//! Why a job failed, and whether running it again may help.

use streamwork_core::checkpoint::Delivery;
use streamwork_core::{ErrorDomain, InstanceIdx, TaskError};

use crate::builder::error::GraphError;

/// A job stopped with an error. The variants name the component and instance
/// where the failure started; failures that merely followed from it (a
/// downstream task losing its input) are not reported in its place.
///
/// Its `Display` is complete, causes included (so `source()` adds nothing
/// and an error chain printer shows each cause once), and `Debug` prints
/// the same: `fn main() -> Result<(), Box<dyn Error>>` shows the message.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// User code panicked.
    #[error("component `{component}` instance {instance} panicked: {message}")]
    Panicked {
        /// The component whose code panicked.
        component: String,
        /// Its instance index.
        instance: InstanceIdx,
        /// The panic message.
        message: String,
    },
    /// A source, sink or the runtime itself reported an error.
    #[error("component `{component}` instance {instance} failed: {error}")]
    Failed {
        /// The failing component.
        component: String,
        /// Its instance index.
        instance: InstanceIdx,
        /// What happened.
        error: TaskError,
    },
    /// The graph cannot run.
    #[error("invalid job graph: {0}")]
    Graph(GraphError),
    /// The operating system refused a thread.
    #[error("could not start a thread for `{component}`: {error}")]
    Spawn {
        /// The component (or the engine's own thread, such as the
        /// checkpoint coordinator).
        component: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The job promises a delivery its run options do not provide.
    #[error(
        "job `{job}` promises {declared:?} delivery but runs with {run:?}: give it `RunOptions {{ checkpoints: Some(CheckpointConfig::new(dir, interval).delivery(Delivery::{declared:?})) }}`"
    )]
    WeakerDelivery {
        /// The job.
        job: String,
        /// What the job promises.
        declared: Delivery,
        /// What the run provides.
        run: Delivery,
    },
    /// The run takes checkpoints for a delivery that a component cannot keep.
    #[error(
        "component `{component}` cannot keep the {delivery} delivery this run's checkpoints promise: {problem}"
    )]
    CannotKeepDelivery {
        /// The component.
        component: String,
        /// The delivery the run's checkpoints promise.
        delivery: Delivery,
        /// Why not, and what to do.
        problem: String,
    },
    /// The checkpoint log could not be read or written.
    #[error("checkpoints: {0}")]
    Checkpoint(streamwork_state::StateError),
    /// The checkpoint to restore holds state of components the job no
    /// longer has.
    #[error(
        "checkpoint {checkpoint} holds the state of {}, which the job no longer has: components are matched by name, so restore with the job that has {}, rename it back, or drop that state on purpose (`CheckpointConfig {{ drop_removed_state: true, .. }}`)",
        components.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
        if components.len() == 1 { "it" } else { "them" }
    )]
    RemovedComponentState {
        /// The checkpoint.
        checkpoint: streamwork_core::CheckpointId,
        /// The components that are gone.
        components: Vec<String>,
    },
    /// Ctrl-C handling could not be installed.
    #[error("could not install the Ctrl-C handler: {0}")]
    CtrlC(std::sync::Arc<ctrlc::Error>),
    /// The job was aborted through [`StopHandle::abort`](crate::StopHandle::abort).
    #[error(
        "job `{job}` was aborted: {reason}; it took no checkpoint after that, and a run restored from its last complete checkpoint carries on"
    )]
    Aborted {
        /// The job.
        job: String,
        /// Why, as the one who aborted it said.
        reason: String,
    },
}

streamwork_core::debug_as_display!(JobError);

impl From<GraphError> for JobError {
    fn from(error: GraphError) -> Self {
        JobError::Graph(error)
    }
}

impl From<streamwork_state::StateError> for JobError {
    fn from(error: streamwork_state::StateError) -> Self {
        JobError::Checkpoint(error)
    }
}

impl JobError {
    /// Whether this failure only followed from another one.
    pub(crate) fn is_cascade(&self) -> bool {
        matches!(
            self,
            JobError::Failed {
                error: TaskError::Disconnected | TaskError::UpstreamFailed,
                ..
            }
        )
    }

    /// Whose fault the failure is: the user's (bad configuration, input or
    /// code that returned an error), an external system's, or Streamwork's.
    pub fn domain(&self) -> ErrorDomain {
        match self {
            JobError::Failed { error, .. } => error.domain(),
            // A panic is a bug in the code that panicked: the user's, unless
            // it was Streamwork's own, which we cannot tell apart here.
            JobError::Panicked { .. } => ErrorDomain::User,
            JobError::Graph(_)
            | JobError::WeakerDelivery { .. }
            | JobError::CannotKeepDelivery { .. }
            | JobError::RemovedComponentState { .. }
            | JobError::CtrlC(_) => ErrorDomain::User,
            JobError::Spawn { .. } | JobError::Aborted { .. } => ErrorDomain::External,
            JobError::Checkpoint(
                streamwork_state::StateError::Io { .. }
                | streamwork_state::StateError::CompleteCheckpointUnusable { .. },
            ) => ErrorDomain::External,
            JobError::Checkpoint(_) => ErrorDomain::User,
        }
    }

    /// Whether running the job again from its last complete checkpoint may
    /// succeed: a panic (as a stream processor treats an exception: the
    /// record may have met a transient condition), an external system's
    /// failure, a refused thread. Bad configuration, user errors and a
    /// damaged checkpoint log do not heal; [`run_with`](crate::run_with)
    /// fails at once on them.
    pub fn is_retryable(&self) -> bool {
        match self {
            JobError::Panicked { .. } => true,
            JobError::Failed { error, .. } => error.is_retryable(),
            JobError::Spawn { .. } => true,
            JobError::Graph(_)
            | JobError::WeakerDelivery { .. }
            | JobError::CannotKeepDelivery { .. }
            | JobError::RemovedComponentState { .. }
            | JobError::Checkpoint(_)
            | JobError::CtrlC(_)
            | JobError::Aborted { .. } => false,
        }
    }
}
