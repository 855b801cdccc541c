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
    /// The UTC calendar date and hour of this time: `(year, month, day,
    /// hour)`, months and days from 1, any `i64` of milliseconds.
    ///
    /// ```
    /// use streamwork::core::Timestamp;
    /// assert_eq!(Timestamp::from_millis(1_796_385_600_000).civil(), (2026, 12, 4, 12));
    /// assert_eq!(Timestamp::from_millis(-1).civil(), (1969, 12, 31, 23));
    /// ```
    pub fn civil(self) -> (i64, u32, u32, u32) {
        let millis = self.millis();
        let (year, month, day) = civil_from_days(millis.div_euclid(86_400_000));
        let hour = (millis.rem_euclid(86_400_000) / 3_600_000) as u32;
        (year, month, day, hour)
    }

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

/// The civil date `(year, month, day)` of a day number since 1970-01-01
/// (Howard Hinnant's algorithm, proleptic Gregorian).
///
/// ```
/// use streamwork::core::time::civil_from_days;
/// assert_eq!(civil_from_days(0), (1970, 1, 1));
/// assert_eq!(civil_from_days(-1), (1969, 12, 31));
/// assert_eq!(civil_from_days(20_791), (2026, 12, 4));
/// ```
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
