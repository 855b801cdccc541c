//! Why a job failed.

use streamwork_core::{GraphError, TaskError};

/// A job stopped with an error. The variants name the component and instance
/// where the failure started; failures that merely followed from it (a
/// downstream task losing its input) are not reported in its place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// User code panicked.
    #[error("component `{component}` instance {instance} panicked: {message}")]
    Panicked {
        /// The component whose code panicked.
        component: String,
        /// Its instance index.
        instance: u32,
        /// The panic message.
        message: String,
    },
    /// A source, sink or the runtime itself reported an error.
    #[error("component `{component}` instance {instance} failed: {source}")]
    Failed {
        /// The failing component.
        component: String,
        /// Its instance index.
        instance: u32,
        /// What happened.
        #[source]
        source: TaskError,
    },
    /// The graph cannot run.
    #[error("invalid job graph: {0}")]
    Graph(#[from] GraphError),
    /// The operating system refused a thread.
    #[error("could not start a thread for `{component}`: {source}")]
    Spawn {
        /// The component.
        component: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The job promises a delivery its run options do not provide.
    #[error(
        "job `{job}` promises {declared:?} delivery but runs with {run:?}: give it `RunOptions {{ checkpoints: Some(CheckpointConfig::new(dir, interval).delivery(Delivery::{declared:?})) }}`"
    )]
    WeakerDelivery {
        /// The job.
        job: String,
        /// What the job promises.
        declared: streamwork_core::checkpoint::Delivery,
        /// What the run provides.
        run: streamwork_core::checkpoint::Delivery,
    },
    /// The checkpoint log could not be read or written.
    #[error("checkpoints: {0}")]
    Checkpoint(#[from] streamwork_state::StateError),
    /// Ctrl-C handling could not be installed.
    #[error("could not install the Ctrl-C handler: {0}")]
    CtrlC(String),
}

impl JobError {
    /// Whether this failure only followed from another one.
    pub(crate) fn is_cascade(&self) -> bool {
        matches!(
            self,
            JobError::Failed {
                source: TaskError::Disconnected | TaskError::UpstreamFailed,
                ..
            }
        )
    }
}
