//! Input ports: an operator with inputs of distinct types is an [`Operator`]
//! whose input is one of them.
//!
//! The engine knows one operator shape, [`Operator`]: it reads each input
//! port's batches, keys each record by its edge's key function, and hands
//! it to [`Operator::on_record`] as the operator's input type; the end of a
//! port is [`Operator::on_input_end`]. An operator with two inputs reads an
//! [`Either`]: records of its left port arrive as [`Either::Left`], of its
//! right port as [`Either::Right`]. A [`CoOperator`] (what joins implement,
//! with a method per side) is such an operator through [`TwoPorts`].
//!
//! ```
//! use streamwork::core::ports::{Either, TwoPorts};
//! use streamwork::core::{Collector, CoOperator, Context, NoKey, Statefulness};
//! use streamwork::core::testkit::Harness;
//!
//! /// Left records as they are, right ones negated.
//! #[derive(Clone)]
//! struct Signs;
//! impl CoOperator for Signs {
//!     type Left = i64;
//!     type Right = i64;
//!     type Key = NoKey;
//!     type Out = Collector<i64>;
//!     type Time = streamwork::core::AnyTime;
//!     fn statefulness(&self) -> Statefulness {
//!         Statefulness::Stateless
//!     }
//!     fn on_left(&mut self, v: i64, ctx: &mut Context<'_, NoKey, Collector<i64>>) {
//!         ctx.emit(v);
//!     }
//!     fn on_right(&mut self, v: i64, ctx: &mut Context<'_, NoKey, Collector<i64>>) {
//!         ctx.emit(-v);
//!     }
//! }
//!
//! let mut harness = Harness::new(TwoPorts(Signs));
//! harness.record((), Either::Left(3), None);
//! harness.record((), Either::Right(4), None);
//! let values: Vec<i64> = harness.take(|out| out.take_buffered().into_iter().map(|r| r.value).collect());
//! assert_eq!(values, vec![3, -4]);
//! ```

use crate::checkpoint::{Restore, SnapshotContext, StateBytes};
use crate::component::{CoOperator, Context, Operator, Statefulness};
use crate::error::TaskError;
use crate::instance::InstanceContext;
use crate::time::Timestamp;

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

/// A [`CoOperator`] as the [`Operator`] it is: two input ports, read as an
/// [`Either`], each record handed to the side's method.
#[derive(Clone, Debug)]
pub struct TwoPorts<C>(pub C);

impl<C: CoOperator> Operator for TwoPorts<C> {
    type In = Either<C::Left, C::Right>;
    type Key = C::Key;
    type Out = C::Out;
    type Time = C::Time;

    fn open(&mut self, ctx: &InstanceContext) {
        self.0.open(ctx);
    }

    #[inline]
    fn on_record(&mut self, value: Self::In, ctx: &mut Context<'_, Self::Key, Self::Out>) {
        match value {
            Either::Left(left) => self.0.on_left(left, ctx),
            Either::Right(right) => self.0.on_right(right, ctx),
        }
    }

    fn on_input_end(&mut self, port: u32, out: &mut Self::Out) {
        match port {
            LEFT => self.0.on_left_end(out),
            _ => self.0.on_right_end(out),
        }
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Self::Out) {
        self.0.on_watermark(watermark, out);
    }

    fn statefulness(&self) -> Statefulness {
        self.0.statefulness()
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.0.snapshot(ctx)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        self.0.restore(restore)
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        self.0.on_processing_time(now, out);
    }

    fn on_end(&mut self, out: &mut Self::Out) {
        self.0.on_end(out);
    }
}
