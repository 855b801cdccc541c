//! `Join`: one expression saying the join's kind and its window, interval or
//! retention — what a `job!` stage needs besides its two keyed inputs.
//!
//! ```
//! use std::time::Duration;
//! use streamwork::join::Join;
//! let interval = Join::inner().interval::<(u32, i64), (u32, i64), u32>(-5_000, 5_000);
//! let enrich = Join::left().stream_table::<(u32, i64), String, u32>();
//! # let _ = (interval, enrich);
//! ```

use std::time::Duration;

use streamwork_core::{Data, Key};
use streamwork_state::StateData;

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

/// The kinds of join as types, so that a join offers only what it does:
/// `Join::right().stream_table()` does not compile.
pub mod kind {
    use super::JoinKind;

    /// A kind of join, as a type.
    pub trait Kind: Copy + Send + Sync + 'static {
        /// The kind as a value.
        const KIND: JoinKind;
    }

    /// The kinds a stream-table join offers: inner and left.
    #[diagnostic::on_unimplemented(
        message = "a stream-table join is inner or left, not `{Self}`",
        label = "a stream row is enriched with the table's row, or with none (left)",
        note = "start it with `Join::inner()` or `Join::left()`"
    )]
    pub trait StreamTable: Kind {}

    /// The kinds an unwindowed stream-stream or table-table join offers:
    /// inner only.
    #[diagnostic::on_unimplemented(
        message = "this join is inner only, not `{Self}`",
        label = "an unwindowed or table-table join has no point at which a row is known to be unmatched",
        note = "start it with `Join::inner()`, or use a windowed or interval join for outer kinds"
    )]
    pub trait InnerOnly: Kind {}

    macro_rules! kinds {
        ($($(#[$doc:meta])* $name:ident => $kind:ident;)*) => {$(
            $(#[$doc])*
            #[derive(Copy, Clone, Debug, Default)]
            pub struct $name;

            impl Kind for $name {
                const KIND: JoinKind = JoinKind::$kind;
            }
        )*};
    }

    kinds! {
        /// Only matches.
        Inner => Inner;
        /// Matches, and unmatched left rows.
        Left => Left;
        /// Matches, and unmatched right rows.
        Right => Right;
        /// Matches, and unmatched rows of either side.
        Full => Full;
        /// Each left row once, if it matches.
        Semi => Semi;
    }

    impl StreamTable for Inner {}
    impl StreamTable for Left {}
    impl InnerOnly for Inner {}
}

/// Where a join's description starts: its kind.
#[derive(Copy, Clone, Debug)]
pub struct Join;

/// A join of kind `K` being described: then its window, interval or
/// retention, among those the kind offers.
#[derive(Copy, Clone, Debug)]
pub struct JoinOf<K, C = Durable> {
    _kind: std::marker::PhantomData<(K, C)>,
}

/// A join whose buffers, tables or versions go into the job's checkpoints
/// (the default), by key group: its key and row types must be archivable
/// (`StateData`).
#[derive(Copy, Clone, Debug, Default)]
pub struct Durable;

/// A join left out of checkpoints ([`JoinOf::transient`]), for types that
/// cannot be archived: a job that promises more than at-most-once, or a run
/// with checkpoints, refuses it, naming the fix.
#[derive(Copy, Clone, Debug, Default)]
pub struct Transient;

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn of<K, C>() -> JoinOf<K, C> {
    JoinOf {
        _kind: std::marker::PhantomData,
    }
}

impl Join {
    /// An inner join.
    pub fn inner() -> JoinOf<kind::Inner> {
        of()
    }

    /// A left outer join.
    pub fn left() -> JoinOf<kind::Left> {
        of()
    }

    /// A right outer join.
    pub fn right() -> JoinOf<kind::Right> {
        of()
    }

    /// A full outer join.
    pub fn full() -> JoinOf<kind::Full> {
        of()
    }

    /// A semi join: each left row once if the right side has a match.
    pub fn semi() -> JoinOf<kind::Semi> {
        of()
    }
}

impl<Kd: kind::Kind> JoinOf<Kd, Durable> {
    /// The same join, its state left out of checkpoints, for key or row
    /// types that cannot be archived. A job promising more than
    /// at-most-once, or a run with checkpoints, refuses it.
    pub fn transient(self) -> JoinOf<Kd, Transient> {
        of()
    }

    /// Per tumbling window of `size`, in event time; unmatched rows of an
    /// outer join are emitted when the window closes.
    pub fn tumbling<L: StateData + Data + Sync, R: StateData + Data + Sync, K: StateData + Key>(
        self,
        size: Duration,
    ) -> WindowJoin<L, R, K> {
        self.transient().tumbling(size).checkpointed()
    }

    /// Per sliding window of `size` every `slide`, in event time.
    pub fn sliding<L: StateData + Data + Sync, R: StateData + Data + Sync, K: StateData + Key>(
        self,
        size: Duration,
        slide: Duration,
    ) -> WindowJoin<L, R, K> {
        self.transient().sliding(size, slide).checkpointed()
    }

    /// A left row at `t` with every right row in `[t + lower, t + upper]`
    /// (milliseconds, bounds included). An outer join emits a row that
    /// matched nothing once no row can match it any more (event time past
    /// its interval); a semi join emits each left row at its first match.
    pub fn interval<L: StateData + Data + Sync, R: StateData + Data + Sync, K: StateData + Key>(
        self,
        lower: i64,
        upper: i64,
    ) -> IntervalJoin<L, R, K> {
        self.transient().interval(lower, upper).checkpointed()
    }

    /// Unwindowed: every pair, as soon as both sides are known (inner
    /// only). Keeps every row until [`StreamStreamJoin::retention`] bounds
    /// it.
    pub fn unwindowed<L: StateData + Data + Sync, R: StateData + Data + Sync, K: StateData + Key>(
        self,
    ) -> StreamStreamJoin<L, R, K>
    where
        Kd: kind::InnerOnly,
    {
        self.transient().unwindowed().checkpointed()
    }

    /// Two tables (changelogs of [`Change`](crate::Change)s) into a changelog of
    /// [`Delta`](crate::Delta)s (inner only).
    pub fn tables<L: StateData + Data + Sync, R: StateData + Data + Sync, K: StateData + Key>(
        self,
    ) -> TableTableJoin<L, R, K>
    where
        Kd: kind::InnerOnly,
    {
        self.transient().tables().checkpointed()
    }

    /// A stream (left) enriched with a table (right, a changelog of
    /// [`Change`](crate::Change)s): inner, or left outer (a stream row
    /// without a table row is emitted with none).
    pub fn stream_table<S: Data + Sync, V: StateData + Data + Sync, K: StateData + Key>(
        self,
    ) -> StreamTableJoin<S, V, K>
    where
        Kd: kind::StreamTable,
    {
        self.transient().stream_table().checkpointed()
    }
}

impl<Kd: kind::Kind> JoinOf<Kd, Transient> {
    /// Per tumbling window of `size`, in event time; unmatched rows of an
    /// outer join are emitted when the window closes.
    pub fn tumbling<L: Data + Sync, R: Data + Sync, K: Key>(
        self,
        size: Duration,
    ) -> WindowJoin<L, R, K> {
        WindowJoin::new(Kd::KIND, millis(size), millis(size))
    }

    /// Per sliding window of `size` every `slide`, in event time.
    pub fn sliding<L: Data + Sync, R: Data + Sync, K: Key>(
        self,
        size: Duration,
        slide: Duration,
    ) -> WindowJoin<L, R, K> {
        WindowJoin::new(Kd::KIND, millis(size), millis(slide))
    }

    /// A left row at `t` with every right row in `[t + lower, t + upper]`
    /// (milliseconds, bounds included). An outer join emits a row that
    /// matched nothing once no row can match it any more (event time past
    /// its interval); a semi join emits each left row at its first match.
    pub fn interval<L: Data + Sync, R: Data + Sync, K: Key>(
        self,
        lower: i64,
        upper: i64,
    ) -> IntervalJoin<L, R, K> {
        IntervalJoin::new(Kd::KIND, lower, upper)
    }

    /// Unwindowed: every pair, as soon as both sides are known (inner
    /// only). Keeps every row until [`StreamStreamJoin::retention`] bounds
    /// it.
    pub fn unwindowed<L: Data + Sync, R: Data + Sync, K: Key>(self) -> StreamStreamJoin<L, R, K>
    where
        Kd: kind::InnerOnly,
    {
        StreamStreamJoin::new()
    }

    /// Two tables (changelogs of [`Change`](crate::Change)s) into a changelog of
    /// [`Delta`](crate::Delta)s (inner only).
    pub fn tables<L: Data + Sync, R: Data + Sync, K: Key>(self) -> TableTableJoin<L, R, K>
    where
        Kd: kind::InnerOnly,
    {
        TableTableJoin::new()
    }

    /// A stream (left) enriched with a table (right, a changelog of
    /// [`Change`](crate::Change)s): inner, or left outer (a stream row
    /// without a table row is emitted with none).
    pub fn stream_table<S: Data + Sync, V: Data + Sync, K: Key>(self) -> StreamTableJoin<S, V, K>
    where
        Kd: kind::StreamTable,
    {
        StreamTableJoin::new(Kd::KIND)
    }
}
