//! Errors owned by core: connector failures and task failures, each saying
//! whose fault it is, and format errors (a record that cannot be read from
//! or written as its bytes).

use std::fmt;

use crate::control::Disconnected;

/// Implements `Debug` as `Display` for an error type: what `main` prints
/// when it returns the error (`fn main() -> Result<(), Box<dyn Error>>`)
/// is then the readable message, not the variant's fields.
#[doc(hidden)]
#[macro_export]
macro_rules! debug_as_display {
    ($($error:ty),+ $(,)?) => {
        $(impl ::std::fmt::Debug for $error {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(self, f)
            }
        })+
    };
}

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
///
/// Its `Display` is complete (the message, and the underlying error unless
/// the message already says it), so `source()` adds nothing to it: an
/// error chain printer shows the cause once. Code that inspects the cause
/// reads the [`source`](Self::source) field. `Debug` prints the same as
/// `Display`.
///
/// ```
/// use streamwork::core::ConnectorError;
/// let error = ConnectorError::io("reading `in.csv`", std::io::Error::other("disk gone"));
/// assert_eq!(error.to_string(), "external error: reading `in.csv`: disk gone");
/// assert_eq!(format!("{error:?}"), error.to_string());
/// assert!(std::error::Error::source(&error).is_none());
/// ```
pub struct ConnectorError {
    /// Whose fault it is.
    pub domain: ErrorDomain,
    /// What went wrong and, where possible, what to do about it.
    pub message: String,
    /// The underlying error.
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl fmt::Display for ConnectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.domain, self.message)?;
        if let Some(source) = &self.source {
            let cause = source.to_string();
            if !self.message.contains(&cause) {
                write!(f, ": {cause}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConnectorError {}

debug_as_display!(ConnectorError);

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

/// A record that cannot be read from its text or bytes, or written as
/// them: a malformed line or payload, a value its format cannot hold. The
/// input's fault (or the record type's), never the engine's: a source
/// counts, skips or dead-letters it by its policy, and a sink fails the job
/// naming it ([`ConnectorError::user`]).
///
/// A parser written by hand returns one from a `String` or a `&str`:
///
/// ```
/// use streamwork::core::FormatError;
/// fn port(line: &str) -> Result<u16, FormatError> {
///     line.trim().parse().map_err(|e| format!("`{line}` is not a port: {e}").into())
/// }
/// assert_eq!(port("80"), Ok(80));
/// assert_eq!(port("x").unwrap_err().to_string(), "`x` is not a port: invalid digit found in string");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct FormatError {
    reason: String,
}

impl FormatError {
    /// An error saying `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        FormatError {
            reason: reason.into(),
        }
    }

    /// What is wrong with the record.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The same error, with `context` (where, what) before the reason.
    pub fn context(self, context: impl fmt::Display) -> Self {
        FormatError {
            reason: format!("{context}: {}", self.reason),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for FormatError {}

debug_as_display!(FormatError);

impl From<String> for FormatError {
    fn from(reason: String) -> Self {
        FormatError { reason }
    }
}

impl From<&str> for FormatError {
    fn from(reason: &str) -> Self {
        FormatError::new(reason)
    }
}

impl From<FormatError> for ConnectorError {
    fn from(error: FormatError) -> Self {
        ConnectorError::user(error.reason)
    }
}

/// Why a task stopped before its input ended.
#[derive(thiserror::Error)]
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
    /// The instance could not take its snapshot for a checkpoint.
    #[error("cannot take a snapshot of the state: {0}")]
    Snapshot(String),
}

debug_as_display!(TaskError);

impl TaskError {
    /// Whose fault it is: a connector's error says; a restore that fails is
    /// the user's (state that does not fit the job, or a damaged checkpoint
    /// the user must deal with); a task that lost its neighbours is failing
    /// because of another task, which is reported in its place.
    pub fn domain(&self) -> ErrorDomain {
        match self {
            TaskError::Connector(error) => error.domain,
            TaskError::Restore(_) => ErrorDomain::User,
            TaskError::Snapshot(_) => ErrorDomain::Internal,
            TaskError::Disconnected | TaskError::UpstreamFailed => ErrorDomain::Internal,
        }
    }

    /// Whether running the task again (from its last checkpoint) may succeed:
    /// only an external system's failure may heal.
    pub fn is_retryable(&self) -> bool {
        match self {
            TaskError::Connector(error) => error.is_retryable(),
            TaskError::Restore(_) | TaskError::Snapshot(_) => false,
            // A cascade: the failure that caused it decides.
            TaskError::Disconnected | TaskError::UpstreamFailed => true,
        }
    }
}

impl From<Disconnected> for TaskError {
    fn from(_: Disconnected) -> Self {
        TaskError::Disconnected
    }
}
