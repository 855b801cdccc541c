//! Pre-aggregation before a keyed exchange, for an operator whose partial
//! results merge but are not records of its input type (a window's
//! incremental aggregate): the engine computes partials per key and group
//! (a window's slice) in the task that sends the records, and the operator
//! merges each partial into its state instead of the records it stands for
//! (Flink's local-global aggregation, with a partial type of its own).
//!
//! An operator offers it through `Operator::pre_aggregation`, handing
//! the engine (a `PreAggregating`) a [`LocalAggregate`] (what the sending task computes) and the
//! operator that reads both the partials and the records that were not
//! merged. The engine decides where it applies: a keyed input, more than
//! one instance on either side, a run without acking, combiners on, and no
//! component reading the operator's channel of records it finds late (a
//! partial found late stands for records that are no longer there to
//! emit).
//!
//! A partial is sent before the first watermark that reaches its group's
//! [`due`](LocalAggregate::due) time (the end of the first window it is
//! part of) and before every checkpoint barrier, so the operator has what
//! it would have had record by record whenever it fires a window or takes a
//! snapshot.

use std::hash::Hash;

use crate::ports::Either;
use crate::record::Data;
use crate::time::Timestamp;

/// What a pre-aggregating operator computes in the sending task: its
/// records merged into one partial per key and group.
pub trait LocalAggregate: Clone + Send + 'static {
    /// The records merged.
    type In: Data;
    /// The key the records are merged by (the operator's key).
    type Key: Clone + Eq + Hash + Send + Sync + 'static;
    /// A partial result: what crosses the exchange instead of its records.
    type Partial: Data;

    /// The group a record at event time `time` is merged within (a window's
    /// slice); `None`: the record is not merged, it crosses as it is.
    fn group(&self, time: Option<Timestamp>) -> Option<i64>;

    /// The watermark from which the operator needs `group`'s partials (a
    /// window's end): the engine holds a partial across earlier watermarks,
    /// and sends it before the first watermark at or past this.
    fn due(&self, group: i64) -> Timestamp;

    /// The partial of `key` in `group` holding one record, `value`.
    fn first(&self, key: Self::Key, group: i64, value: &Self::In) -> Self::Partial;

    /// Adds `value` to `partial`.
    fn add(&self, partial: &mut Self::Partial, value: &Self::In);

    /// The key a partial carries (what the exchange routes it by).
    fn key_of(partial: &Self::Partial) -> &Self::Key;
}

/// The record a pre-aggregated operator reads: one that crossed as it is
/// (`Left`), or a partial standing for several (`Right`).
pub type PreAggregatedIn<T, P> = Either<T, P>;
