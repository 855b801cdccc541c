//! `Join`: one expression saying the join's kind and its window, interval or
//! retention — what a `job!` stage needs besides its two keyed inputs.
//!
//! ```
//! use std::time::Duration;
//! use streamwork_join::Join;
//! let interval = Join::inner().interval::<(u32, i64), (u32, i64), u32>(-5_000, 5_000);
//! let enrich = Join::left().stream_table::<(u32, i64), String, u32>();
//! # let _ = (interval, enrich);
//! ```

use std::time::Duration;

use streamwork_core::{Data, Key};

use crate::interval::IntervalJoin;
use crate::stream_table::StreamTableJoin;
use crate::table_table::TableTableJoin;
use crate::unwindowed::StreamStreamJoin;
use crate::windowed::WindowJoin;

/// Which unmatched rows a join emits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum JoinKind {
    /// Only matches.
    Inner,
    /// Matches, and left rows without a match (right side empty).
    Left,
    /// Matches, and right rows without a match (left side empty).
    Right,
    /// Matches, and the rows of either side without a match.
    Full,
    /// Each left row once if it has at least one match (right side empty).
    Semi,
}

impl JoinKind {
    /// Whether unmatched left rows are emitted.
    pub fn keeps_left(self) -> bool {
        matches!(self, JoinKind::Left | JoinKind::Full)
    }

    /// Whether unmatched right rows are emitted.
    pub fn keeps_right(self) -> bool {
        matches!(self, JoinKind::Right | JoinKind::Full)
    }
}

/// A join being described.
#[derive(Copy, Clone, Debug)]
pub struct Join {
    kind: JoinKind,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Join {
    /// An inner join.
    pub fn inner() -> Join {
        Join {
            kind: JoinKind::Inner,
        }
    }

    /// A left outer join.
    pub fn left() -> Join {
        Join {
            kind: JoinKind::Left,
        }
    }

    /// A right outer join.
    pub fn right() -> Join {
        Join {
            kind: JoinKind::Right,
        }
    }

    /// A full outer join.
    pub fn full() -> Join {
        Join {
            kind: JoinKind::Full,
        }
    }

    /// A semi join: each left row once if the right side has a match.
    pub fn semi() -> Join {
        Join {
            kind: JoinKind::Semi,
        }
    }

    /// Per tumbling window of `size`, in event time.
    pub fn tumbling<L: Data, R: Data, K: Key>(self, size: Duration) -> WindowJoin<L, R, K> {
        WindowJoin::new(self.kind, millis(size), millis(size))
    }

    /// Per sliding window of `size` every `slide`, in event time.
    pub fn sliding<L: Data, R: Data, K: Key>(
        self,
        size: Duration,
        slide: Duration,
    ) -> WindowJoin<L, R, K> {
        WindowJoin::new(self.kind, millis(size), millis(slide))
    }

    /// A left row at `t` with every right row in `[t + lower, t + upper]`
    /// (milliseconds, bounds included). Inner only: the kind is ignored.
    pub fn interval<L: Data, R: Data, K: Key>(
        self,
        lower: i64,
        upper: i64,
    ) -> IntervalJoin<L, R, K> {
        IntervalJoin::new(lower, upper)
    }

    /// Unwindowed: every pair, as soon as both sides are known (inner only).
    /// Keeps every row until [`StreamStreamJoin::retention`] bounds it.
    pub fn unwindowed<L: Data, R: Data, K: Key>(self) -> StreamStreamJoin<L, R, K> {
        StreamStreamJoin::new()
    }

    /// A stream (left) enriched with a table (right, a changelog of
    /// [`Change`](crate::Change)s): inner or left outer.
    pub fn stream_table<S: Data, V: Data, K: Key>(self) -> StreamTableJoin<S, V, K> {
        StreamTableJoin::new(self.kind)
    }

    /// Two tables (changelogs of [`Change`](crate::Change)s) into a changelog of
    /// [`Delta`](crate::Delta)s: inner.
    pub fn tables<L: Data, R: Data, K: Key>(self) -> TableTableJoin<L, R, K> {
        TableTableJoin::new()
    }
}
