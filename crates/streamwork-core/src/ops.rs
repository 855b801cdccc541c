//! Operators from closures: [`map`], [`filter`], [`filter_map`],
//! [`flat_map`] and [`inspect`], each a stateless [`Operator`] wrapping the
//! closure, usable wherever an operator is (`job!`, the builder, the fluent
//! steps of a stream). Each is monomorphised over its closure and, on a
//! forward edge, fused into the task upstream of it: a closure costs what
//! the same code in an `#[operator]` function costs.
//!
//! A record keeps its event time through them. Keyed aggregations
//! (`reduce`, `fold`) keep state and live in the state crate.
//!
//! ```
//! use streamwork::core::ops::{filter, flat_map, map};
//! use streamwork::core::testkit::Harness;
//!
//! let mut words = Harness::new(flat_map(|line: String| {
//!     line.split_whitespace().map(str::to_owned).collect::<Vec<_>>()
//! }));
//! words.record((), "to be or not".to_string(), None);
//! assert_eq!(words.take(|out| out.take_buffered()).len(), 4);
//!
//! let mut lengths = Harness::new(map(|word: String| word.len()));
//! lengths.record((), "streams".to_string(), None);
//! assert_eq!(lengths.take(|out| out.take_buffered())[0].value, 7);
//!
//! let mut long = Harness::new(filter(|word: &String| word.len() > 3));
//! long.record((), "to".to_string(), None);
//! assert!(long.take(|out| out.take_buffered()).is_empty());
//! ```

use std::marker::PhantomData;

use crate::collector::Collector;
use crate::component::{AnyTime, Context, NoKey, Operator, Statefulness};
use crate::record::Data;

/// Declares a stateless closure operator's struct, with `Clone` and
/// `Debug`.
macro_rules! closure_operator {
    ($(#[$doc:meta])* $name:ident, $ctor:ident) => {
        $(#[$doc])*
        pub struct $name<F, In> {
            f: F,
            _in: PhantomData<fn(In)>,
        }

        impl<F: Clone, In> Clone for $name<F, In> {
            fn clone(&self) -> Self {
                $name {
                    f: self.f.clone(),
                    _in: PhantomData,
                }
            }
        }

        impl<F, In> std::fmt::Debug for $name<F, In> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($ctor))
            }
        }
    };
}

closure_operator!(
    /// Each record `r` becomes `f(r)`: see [`map`].
    Map, map
);
closure_operator!(
    /// Keeps the records for which `f` is true: see [`filter`].
    Filter, filter
);
closure_operator!(
    /// Each record `r` becomes `f(r)`'s value, if it has one: see [`filter_map`].
    FilterMap, filter_map
);
closure_operator!(
    /// Each record `r` becomes every item of `f(r)`: see [`flat_map`].
    FlatMap, flat_map
);
closure_operator!(
    /// Passes each record on after calling `f` on it: see [`inspect`].
    Inspect, inspect
);

/// Each record `r` becomes `f(r)`.
pub fn map<In, Out, F>(f: F) -> Map<F, In>
where
    F: Fn(In) -> Out + Clone + Send + 'static,
{
    Map {
        f,
        _in: PhantomData,
    }
}

/// Keeps the records for which `f` is true.
pub fn filter<In, F>(f: F) -> Filter<F, In>
where
    F: Fn(&In) -> bool + Clone + Send + 'static,
{
    Filter {
        f,
        _in: PhantomData,
    }
}

/// Each record `r` becomes `f(r)`'s value, if it has one (parsing that may
/// fail, say).
pub fn filter_map<In, Out, F>(f: F) -> FilterMap<F, In>
where
    F: Fn(In) -> Option<Out> + Clone + Send + 'static,
{
    FilterMap {
        f,
        _in: PhantomData,
    }
}

/// Each record `r` becomes every item of `f(r)` (a line into its words).
pub fn flat_map<In, I, F>(f: F) -> FlatMap<F, In>
where
    F: Fn(In) -> I + Clone + Send + 'static,
    I: IntoIterator,
{
    FlatMap {
        f,
        _in: PhantomData,
    }
}

/// Calls `f` on each record and passes it on unchanged (to log or count).
pub fn inspect<In, F>(f: F) -> Inspect<F, In>
where
    F: Fn(&In) + Clone + Send + 'static,
{
    Inspect {
        f,
        _in: PhantomData,
    }
}

impl<In: Data, Out: Data, F> Operator for Map<F, In>
where
    F: Fn(In) -> Out + Clone + Send + 'static,
{
    type In = In;
    type Key = NoKey;
    type Out = Collector<Out>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: In, ctx: &mut Context<'_, NoKey, Collector<Out>>) {
        ctx.emit((self.f)(value));
    }
}

impl<In: Data, F> Operator for Filter<F, In>
where
    F: Fn(&In) -> bool + Clone + Send + 'static,
{
    type In = In;
    type Key = NoKey;
    type Out = Collector<In>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: In, ctx: &mut Context<'_, NoKey, Collector<In>>) {
        if (self.f)(&value) {
            ctx.emit(value);
        }
    }
}

impl<In: Data, Out: Data, F> Operator for FilterMap<F, In>
where
    F: Fn(In) -> Option<Out> + Clone + Send + 'static,
{
    type In = In;
    type Key = NoKey;
    type Out = Collector<Out>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: In, ctx: &mut Context<'_, NoKey, Collector<Out>>) {
        if let Some(out) = (self.f)(value) {
            ctx.emit(out);
        }
    }
}

impl<In: Data, I, F> Operator for FlatMap<F, In>
where
    F: Fn(In) -> I + Clone + Send + 'static,
    I: IntoIterator,
    I::Item: Data,
{
    type In = In;
    type Key = NoKey;
    type Out = Collector<I::Item>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: In, ctx: &mut Context<'_, NoKey, Collector<I::Item>>) {
        for out in (self.f)(value) {
            ctx.emit(out);
        }
    }
}

impl<In: Data, F> Operator for Inspect<F, In>
where
    F: Fn(&In) + Clone + Send + 'static,
{
    type In = In;
    type Key = NoKey;
    type Out = Collector<In>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: In, ctx: &mut Context<'_, NoKey, Collector<In>>) {
        (self.f)(&value);
        ctx.emit(value);
    }
}
