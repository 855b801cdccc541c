//! Streamwork's joins (chapter 8), as keyed two-input operators: both inputs
//! are keyed by the join key, so the records of a key from either side meet
//! in the same instance.
//!
//! * [`StreamTableJoin`]: each stream event enriched with the table's row for
//!   its key (inner or left outer), optionally as of the event's time
//!   (temporal join);
//! * [`WindowJoin`]: both sides buffered per key per window; inner, left,
//!   right, full outer, or semi; results when the window closes;
//! * [`IntervalJoin`]: `a` with every `b` whose time lies in
//!   `[a.time + lower, a.time + upper]`, results as soon as both are known;
//! * [`TableTableJoin`]: two changelogs in, a changelog out, with retractions;
//! * [`StreamStreamJoin`]: unwindowed, results as soon as both sides are
//!   known, state kept for a retention time.
//!
//! The state of every join is bounded by its window, interval or retention and
//! released as the watermark passes; a table's state is one row per key.
//!
//! ```
//! use std::time::Duration;
//! use streamwork::join::Join;
//! // Inner join of two streams keyed by u32, per tumbling 10 s window.
//! let join = Join::inner().tumbling::<(u32, i64), (u32, String), u32>(Duration::from_secs(10));
//! # let _ = join;
//! ```
//!
//! Not here: windows on one stream (`streamwork-window`), the runtime.

#![warn(missing_docs)]

mod checkpointing;
pub mod interval;
mod rows;
pub mod spec;
pub mod stream_table;
pub mod table_table;
pub mod unwindowed;
pub mod windowed;

pub use interval::IntervalJoin;
pub use spec::{Join, JoinKind, JoinOf, kind};
pub use stream_table::{StreamTableJoin, TemporalTableJoin};
pub use streamwork_window::LateCounter;
pub use table_table::TableTableJoin;
pub use unwindowed::StreamStreamJoin;
pub use windowed::WindowJoin;

/// One result of a join: the key, and the rows of each side (`None` on the
/// side an outer join found no match for).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JoinRow<K, L, R> {
    /// The join key.
    pub key: K,
    /// The left row.
    pub left: Option<L>,
    /// The right row.
    pub right: Option<R>,
}

/// One update of a table: the table is the materialized view of a changelog
/// of these, one row per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Change<K, V> {
    /// Inserts or replaces the row of `key`.
    Upsert {
        /// The row's key.
        key: K,
        /// The new row.
        value: V,
    },
    /// Deletes the row of `key`.
    Delete {
        /// The row's key.
        key: K,
    },
}

impl<K, V> Change<K, V> {
    /// The key this change is about: the key to group a changelog by.
    pub fn key(&self) -> &K {
        match self {
            Change::Upsert { key, .. } | Change::Delete { key } => key,
        }
    }

    /// The key and the row it now has (`None`: deleted).
    pub fn into_parts(self) -> (K, Option<V>) {
        match self {
            Change::Upsert { key, value } => (key, Some(value)),
            Change::Delete { key } => (key, None),
        }
    }
}

/// One entry of a changelog produced by a join of tables: a row appears
/// (`Insert`), or a row produced earlier is withdrawn (`Retract`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Delta<T> {
    /// A new result row.
    Insert(T),
    /// A result row emitted before is no longer valid.
    Retract(T),
}
