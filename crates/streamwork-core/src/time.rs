//! Event time: timestamps carried by records.

use std::fmt;
use std::num::NonZeroU64;

/// A point in event time, in milliseconds since the Unix epoch.
///
/// Event time is whatever the data says it is; it need not be related to the
/// wall clock of the machine processing it. The range is `i64::MIN + 1 ..=
/// i64::MAX` milliseconds: the one excluded value lets `Option<Timestamp>` take
/// 8 bytes, so a record's optional event time costs no more than a timestamp.
///
/// ```
/// use streamwork::core::Timestamp;
/// let t = Timestamp::from_millis(-1_500);
/// assert_eq!(t.millis(), -1_500);
/// assert!(Timestamp::from_millis(-1) < Timestamp::from_millis(0));
/// assert_eq!(std::mem::size_of::<Option<Timestamp>>(), 8);
/// ```
#[derive(
    Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(NonZeroU64);

/// Offset-binary encoding: `millis ^ SIGN` orders like `millis` as an unsigned
/// number, and is zero only for `i64::MIN`, which is excluded.
const SIGN: u64 = 1 << 63;

impl Timestamp {
    /// The smallest representable time: "before everything".
    pub const MIN: Timestamp = Timestamp::from_millis(i64::MIN + 1);
    /// The largest representable time: "after everything" (end of input).
    pub const MAX: Timestamp = Timestamp::from_millis(i64::MAX);

    /// A timestamp `millis` milliseconds after the epoch (`i64::MIN` is taken
    /// as `i64::MIN + 1`).
    #[inline]
    pub const fn from_millis(millis: i64) -> Self {
        let millis = if millis == i64::MIN {
            i64::MIN + 1
        } else {
            millis
        };
        match NonZeroU64::new(millis as u64 ^ SIGN) {
            Some(encoded) => Timestamp(encoded),
            None => Timestamp(NonZeroU64::MIN),
        }
    }

    /// Milliseconds since the epoch.
    #[inline]
    pub const fn millis(self) -> i64 {
        (self.0.get() ^ SIGN) as i64
    }
}

impl Default for Timestamp {
    fn default() -> Self {
        Timestamp::from_millis(0)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({})", self.millis())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn extremes_round_trip() {
        assert_eq!(Timestamp::MAX.millis(), i64::MAX);
        assert_eq!(Timestamp::MIN.millis(), i64::MIN + 1);
        assert_eq!(Timestamp::from_millis(i64::MIN), Timestamp::MIN);
    }

    proptest! {
        #[test]
        fn order_and_value_are_preserved(a in (i64::MIN + 1).., b in (i64::MIN + 1)..) {
            let (ta, tb) = (Timestamp::from_millis(a), Timestamp::from_millis(b));
            prop_assert_eq!(ta.millis(), a);
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
        }
    }
}
