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

/// Declares a stateless closure operator: its struct (with `Clone` and
/// `Debug`) and its [`Operator`] impl, whose `on_record` is `$body` with the
/// closure as `$f`, the record as `$value` and the context as `$ctx`.
macro_rules! closure_operator {
    (
        $(#[$doc:meta])* $name:ident, $ctor:ident,
        impl<$($generic:ident),*> where { $($bound:tt)* } emits $out:ty,
        |$f:ident, $value:ident, $ctx:ident| $body:block
    ) => {
        $(#[$doc])*
        pub struct $name<F, In> {
            f: F,
            _in: PhantomData<fn(In)>,
        }

        impl<F, In> $name<F, In> {
            fn new(f: F) -> Self {
                $name {
                    f,
                    _in: PhantomData,
                }
            }
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

        impl<In: Data, F, $($generic),*> Operator for $name<F, In>
        where
            $($bound)*
        {
            type In = In;
            type Key = NoKey;
            type Out = Collector<$out>;
            type Time = AnyTime;

            fn statefulness(&self) -> Statefulness {
                Statefulness::Stateless
            }

            #[inline]
            fn on_record(&mut self, $value: In, $ctx: &mut Context<'_, NoKey, Collector<$out>>) {
                let $f = &self.f;
                $body
            }
        }
    };
}

closure_operator!(
    /// Each record `r` becomes `f(r)`: see [`map`].
    Map, map,
    impl<Out> where { F: Fn(In) -> Out + Clone + Send + 'static, Out: Data } emits Out,
    |f, value, ctx| { ctx.emit(f(value)); }
);
closure_operator!(
    /// Keeps the records for which `f` is true: see [`filter`].
    Filter, filter,
    impl<> where { F: Fn(&In) -> bool + Clone + Send + 'static } emits In,
    |f, value, ctx| {
        if f(&value) {
            ctx.emit(value);
        }
    }
);
closure_operator!(
    /// Each record `r` becomes `f(r)`'s value, if it has one: see [`filter_map`].
    FilterMap, filter_map,
    impl<Out> where { F: Fn(In) -> Option<Out> + Clone + Send + 'static, Out: Data } emits Out,
    |f, value, ctx| {
        if let Some(out) = f(value) {
            ctx.emit(out);
        }
    }
);
closure_operator!(
    /// Each record `r` becomes every item of `f(r)`: see [`flat_map`].
    FlatMap, flat_map,
    impl<I> where { F: Fn(In) -> I + Clone + Send + 'static, I: IntoIterator, I::Item: Data }
    emits I::Item,
    |f, value, ctx| {
        for out in f(value) {
            ctx.emit(out);
        }
    }
);
closure_operator!(
    /// Passes each record on after calling `f` on it: see [`inspect`].
    Inspect, inspect,
    impl<> where { F: Fn(&In) + Clone + Send + 'static } emits In,
    |f, value, ctx| {
        f(&value);
        ctx.emit(value);
    }
);

/// Each record `r` becomes `f(r)`.
pub fn map<In, Out, F>(f: F) -> Map<F, In>
where
    F: Fn(In) -> Out + Clone + Send + 'static,
{
    Map::new(f)
}

/// Keeps the records for which `f` is true.
pub fn filter<In, F>(f: F) -> Filter<F, In>
where
    F: Fn(&In) -> bool + Clone + Send + 'static,
{
    Filter::new(f)
}

/// Each record `r` becomes `f(r)`'s value, if it has one (parsing that may
/// fail, say).
pub fn filter_map<In, Out, F>(f: F) -> FilterMap<F, In>
where
    F: Fn(In) -> Option<Out> + Clone + Send + 'static,
{
    FilterMap::new(f)
}

/// Each record `r` becomes every item of `f(r)` (a line into its words).
pub fn flat_map<In, I, F>(f: F) -> FlatMap<F, In>
where
    F: Fn(In) -> I + Clone + Send + 'static,
    I: IntoIterator,
{
    FlatMap::new(f)
}

/// Calls `f` on each record and passes it on unchanged (to log or count).
pub fn inspect<In, F>(f: F) -> Inspect<F, In>
where
    F: Fn(&In) + Clone + Send + 'static,
{
    Inspect::new(f)
}
