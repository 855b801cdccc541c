//! Driving operators by hand, without a runtime: scripted records (with keys
//! and event times), watermarks and processing time, and the outputs they
//! produce. For unit tests of operators, windows and joins.
//!
//! ```
//! use streamwork_core::testkit::Harness;
//! use streamwork_core::{AnyTime, Collector, Context, NoKey, Operator};
//! #[derive(Clone)]
//! struct Double;
//! impl Operator for Double {
//!     type In = u32;
//!     type Key = NoKey;
//!     type Out = Collector<u32>;
//!     type Time = AnyTime;
//!     fn on_record(&mut self, v: u32, ctx: &mut Context<'_, NoKey, Collector<u32>>) {
//!         ctx.emit(v * 2);
//!     }
//! }
//! let mut harness = Harness::new(Double);
//! harness.record((), 21, None);
//! assert_eq!(harness.take(|out| out.take_buffered()).len(), 1);
//! ```

use crate::component::{CoOperator, Context, InstanceContext, KeyKind, Operator};
use crate::grouping::KeyGroups;
use crate::outputs::{OutputParts, Outputs};
use crate::time::Timestamp;

fn context(name: &str) -> InstanceContext {
    InstanceContext::new(name, 0, 1, KeyGroups::DEFAULT)
}

/// One operator instance, driven by hand.
pub struct Harness<O: Operator> {
    operator: O,
    out: O::Out,
    ctx: InstanceContext,
    watermark: Timestamp,
}

impl<O: Operator> Harness<O> {
    /// Opens `operator` as instance 0 of 1, with outputs that keep what they get.
    pub fn new(mut operator: O) -> Self {
        let ctx = context("harness");
        operator.open(&ctx);
        Harness {
            operator,
            out: O::Out::assemble(&mut OutputParts::detached()),
            ctx,
            watermark: Timestamp::MIN,
        }
    }

    /// Processes `value` with key `key` (`()` when unkeyed) at event time `time` (ms).
    pub fn record(&mut self, key: <O::Key as KeyKind>::Value, value: O::In, time: Option<i64>) {
        let owned = O::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(O::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_record(value, &mut ctx);
        self.out.set_time(None);
        self.operator.on_batch_end(&mut self.out);
    }

    /// Advances event time to `millis` (as the runtime does, never backwards).
    pub fn watermark(&mut self, millis: i64) {
        let watermark = Timestamp::from_millis(millis);
        if watermark > self.watermark {
            self.watermark = watermark;
            self.operator.on_watermark(watermark, &mut self.out);
        }
    }

    /// Ticks processing time to `millis`.
    pub fn processing_time(&mut self, millis: i64) {
        self.operator
            .on_processing_time(Timestamp::from_millis(millis), &mut self.out);
    }

    /// Ends the input: event time reaches its end, then `on_end`.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.operator.on_end(&mut self.out);
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &O {
        &self.operator
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<R>(&mut self, read: impl FnOnce(&mut O::Out) -> R) -> R {
        read(&mut self.out)
    }
}

/// One two-input operator instance, driven by hand.
pub struct CoHarness<C: CoOperator> {
    operator: C,
    out: C::Out,
    ctx: InstanceContext,
    watermark: Timestamp,
}

impl<C: CoOperator> CoHarness<C> {
    /// Opens `operator` as instance 0 of 1.
    pub fn new(mut operator: C) -> Self {
        let ctx = context("harness");
        operator.open(&ctx);
        CoHarness {
            operator,
            out: C::Out::assemble(&mut OutputParts::detached()),
            ctx,
            watermark: Timestamp::MIN,
        }
    }

    /// Processes a left record.
    pub fn left(&mut self, key: <C::Key as KeyKind>::Value, value: C::Left, time: Option<i64>) {
        let owned = C::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(C::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_left(value, &mut ctx);
    }

    /// Processes a right record.
    pub fn right(&mut self, key: <C::Key as KeyKind>::Value, value: C::Right, time: Option<i64>) {
        let owned = C::Key::owned(key);
        let time = time.map(Timestamp::from_millis);
        self.out.set_time(time);
        let mut ctx = Context::new(C::Key::as_ref(&owned), &mut self.out, time, &self.ctx);
        self.operator.on_right(value, &mut ctx);
    }

    /// Advances event time to `millis`.
    pub fn watermark(&mut self, millis: i64) {
        let watermark = Timestamp::from_millis(millis);
        if watermark > self.watermark {
            self.watermark = watermark;
            self.operator.on_watermark(watermark, &mut self.out);
        }
    }

    /// Ends both inputs.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.operator.on_end(&mut self.out);
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &C {
        &self.operator
    }

    /// Reads (and usually drains) the outputs.
    pub fn take<R>(&mut self, read: impl FnOnce(&mut C::Out) -> R) -> R {
        read(&mut self.out)
    }
}
