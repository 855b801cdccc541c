//! Event time: timestamps carried by records.

use std::fmt;

/// A point in event time, in milliseconds since the Unix epoch.
///
/// Event time is whatever the data says it is; it need not be related to the
/// wall clock of the machine processing it.
///
/// ```
/// use streamwork_core::Timestamp;
/// let t = Timestamp::from_millis(1_500);
/// assert_eq!(t.millis(), 1_500);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The smallest representable time: "before everything".
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    /// The largest representable time: "after everything" (end of input).
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    /// A timestamp `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}
