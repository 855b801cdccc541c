//! Records: a value with an optional event timestamp.

use crate::Timestamp;

/// Bound on every value that flows between components: owned, clonable (fan-out
/// copies it) and sendable across threads.
pub trait Data: Clone + Send + 'static {}
impl<T: Clone + Send + 'static> Data for T {}

/// One event in a stream: a value and, when known, its event time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<T> {
    /// The payload.
    pub value: T,
    /// Event time, if the source attached one.
    pub time: Option<Timestamp>,
}

impl<T> Record<T> {
    /// A record without event time.
    pub fn new(value: T) -> Self {
        Record { value, time: None }
    }

    /// A record stamped with event time `time`.
    pub fn at(value: T, time: Timestamp) -> Self {
        Record {
            value,
            time: Some(time),
        }
    }
}
