//! Errors owned by core: connector failures, task failures, graph errors.

use std::fmt;

use crate::message::Disconnected;

/// Whose fault a connector error is, which tells a restart policy what to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ErrorDomain {
    /// Bad configuration or input supplied by the user: retrying will not help.
    User,
    /// An external system (file system, network peer) failed: retrying may help.
    External,
    /// A bug in Streamwork or in a connector.
    Internal,
}

impl fmt::Display for ErrorDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorDomain::User => "user error",
            ErrorDomain::External => "external error",
            ErrorDomain::Internal => "internal error",
        })
    }
}

/// A source or sink failed.
#[derive(Debug, thiserror::Error)]
#[error("{domain}: {message}")]
pub struct ConnectorError {
    /// Whose fault it is.
    pub domain: ErrorDomain,
    /// What went wrong and, where possible, what to do about it.
    pub message: String,
    /// The underlying error.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConnectorError {
    /// A user error (bad configuration or input).
    pub fn user(message: impl Into<String>) -> Self {
        ConnectorError {
            domain: ErrorDomain::User,
            message: message.into(),
            source: None,
        }
    }

    /// An I/O failure of an external system, with what was being done.
    pub fn io(context: impl Into<String>, error: std::io::Error) -> Self {
        ConnectorError {
            domain: ErrorDomain::External,
            message: format!("{}: {error}", context.into()),
            source: Some(Box::new(error)),
        }
    }

    /// Whether retrying the same operation may succeed.
    pub fn is_retryable(&self) -> bool {
        self.domain == ErrorDomain::External
    }
}

/// Why a task stopped before its input ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A downstream task is gone; the job is already failing elsewhere.
    #[error("downstream task stopped")]
    Disconnected,
    /// An upstream task is gone without ending its stream; the job is already
    /// failing elsewhere.
    #[error("upstream task stopped without ending its stream")]
    UpstreamFailed,
    /// A source or sink reported an error.
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    /// State checkpointed by a previous run could not be restored.
    #[error("cannot restore checkpointed state: {0}")]
    Restore(String),
}

impl From<Disconnected> for TaskError {
    fn from(_: Disconnected) -> Self {
        TaskError::Disconnected
    }
}

/// A job graph that cannot run, found when it is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The job has no source.
    #[error("job `{job}` has no source: add one with `source`")]
    NoSource {
        /// The job's name.
        job: String,
    },
    /// Two components share a name.
    #[error("two components are named `{name}`: component names must be unique")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// An edge that drops records in a job that promises not to lose any.
    #[error(
        "the edge from `{from}` to `{to}` drops records when full, but the job promises {delivery} delivery: use `Overflow::Block` (the default) or backpressure watermarks on it"
    )]
    DroppingEdge {
        /// The sending component.
        from: String,
        /// The receiving component.
        to: String,
        /// The delivery the job promises.
        delivery: String,
    },
    /// A component whose state its checkpoints would leave out, in a job that
    /// promises not to lose records.
    #[error(
        "component `{component}` keeps state that its checkpoints leave out, but the job promises {delivery} delivery: build it checkpointed (`.checkpointed()` on windows and joins, `snapshot`/`restore` on your own operators)"
    )]
    UncheckpointedState {
        /// The component.
        component: String,
        /// The delivery the job promises.
        delivery: String,
    },
    /// A parallelism of zero.
    #[error("component `{component}` has parallelism 0: it must be at least 1")]
    ZeroParallelism {
        /// The component.
        component: String,
    },
    /// A keyed component's parallelism exceeds the number of key groups.
    #[error(
        "component `{component}` has parallelism {parallelism} but the job has only {key_groups} key groups: raise the key groups or lower the parallelism"
    )]
    TooManyInstances {
        /// The component.
        component: String,
        /// Its parallelism.
        parallelism: u32,
        /// The job's key groups.
        key_groups: u32,
    },
    /// A forward edge between components of different parallelism.
    #[error(
        "forward edge `{from}` -> `{to}` joins parallelism {from_parallelism} to {to_parallelism}: forward needs equal parallelism; use shuffle or a key"
    )]
    ForwardMismatch {
        /// Upstream component.
        from: String,
        /// Downstream component.
        to: String,
        /// Upstream parallelism.
        from_parallelism: u32,
        /// Downstream parallelism.
        to_parallelism: u32,
    },
    /// An input port with no stream connected.
    #[error("input {port} of component `{component}` has no stream connected")]
    UnconnectedInput {
        /// The component.
        component: String,
        /// The port index.
        port: u32,
    },
    /// A stream handle from another job builder.
    #[error("component `{component}` is connected to a stream of another job")]
    ForeignStream {
        /// The component.
        component: String,
    },
}
