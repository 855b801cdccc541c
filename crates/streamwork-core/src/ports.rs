//! Input ports: an operator with inputs of distinct types is an [`Operator`](crate::Operator)
//! whose input is one of them.
//!
//! The engine knows one operator shape, [`Operator`](crate::Operator): it reads each input
//! port's batches, keys each record by its edge's key function, and hands
//! it to [`Operator::on_record`](crate::Operator::on_record) as the operator's input type; the end of a
//! port is [`Operator::on_input_end`](crate::Operator::on_input_end). An operator with two inputs (a join)
//! reads an [`Either`]: records of its left port arrive as [`Either::Left`],
//! of its right port as [`Either::Right`].
//!
//! ```
//! use streamwork::core::ports::Either;
//! use streamwork::core::{Collector, Context, NoKey, Operator, Statefulness};
//! use streamwork::core::testkit::CoHarness;
//!
//! /// Left records as they are, right ones negated.
//! #[derive(Clone)]
//! struct Signs;
//! impl Operator for Signs {
//!     type In = Either<i64, i64>;
//!     type Key = NoKey;
//!     type Out = Collector<i64>;
//!     type Time = streamwork::core::AnyTime;
//!     fn statefulness(&self) -> Statefulness {
//!         Statefulness::Stateless
//!     }
//!     fn on_record(&mut self, record: Either<i64, i64>, ctx: &mut Context<'_, NoKey, Collector<i64>>) {
//!         match record {
//!             Either::Left(v) => ctx.emit(v),
//!             Either::Right(v) => ctx.emit(-v),
//!         }
//!     }
//! }
//!
//! let mut harness = CoHarness::new(Signs);
//! harness.left((), 3, None);
//! harness.right((), 4, None);
//! let values: Vec<i64> = harness.take(|out| out.take_buffered().into_iter().map(|r| r.value).collect());
//! assert_eq!(values, vec![3, -4]);
//! ```

/// A record of one of an operator's two input ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Either<L, R> {
    /// A record of the left port (port 0).
    Left(L),
    /// A record of the right port (port 1).
    Right(R),
}

/// The port of [`Either::Left`].
pub const LEFT: u32 = 0;
/// The port of [`Either::Right`].
pub const RIGHT: u32 = 1;
