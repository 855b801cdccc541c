//! The identity operator behind [`JobBuilder::merge`](crate::JobBuilder::merge).

use std::marker::PhantomData;

use streamwork_core::{AnyTime, Collector, Context, Data, NoKey, Operator, Statefulness};

/// Emits every record as it is.
pub(crate) struct Identity<T>(PhantomData<fn() -> T>);

impl<T> Identity<T> {
    /// The identity on `T`.
    pub(crate) fn new() -> Self {
        Identity(PhantomData)
    }
}

impl<T> Clone for Identity<T> {
    fn clone(&self) -> Self {
        Identity(PhantomData)
    }
}

impl<T: Data> Operator for Identity<T> {
    type In = T;
    type Key = NoKey;
    type Out = Collector<T>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }

    #[inline]
    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<T>>) {
        ctx.emit(value);
    }
}
