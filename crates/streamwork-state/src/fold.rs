//! Keyed aggregations from closures: [`reduce`] and [`fold`], operators on a
//! keyed stream that keep one value per key (a `KeyedState`, checkpointed
//! by key group, so restorable at any parallelism) and emit `(key, value)`
//! after each record, as Flink's `KeyedStream::reduce` does.
//!
//! ```
//! use streamwork::core::testkit::Harness;
//! use streamwork::state::fold;
//!
//! // Words per key, counted.
//! let mut counts = Harness::new(fold(0u64, |count: &mut u64, _word: String| *count += 1));
//! counts.record("to".to_string(), "to".to_string(), None);
//! counts.record("to".to_string(), "to".to_string(), None);
//! let out = counts.take(|out| out.take_buffered());
//! assert_eq!(out.last().unwrap().value, ("to".to_string(), 2));
//! ```

use streamwork_core::state::{Key, KeyedState};
use streamwork_core::{
    AnyTime, ByKey, Collector, Context, Data, Operator, Restore, SnapshotContext, StateBytes,
    Statefulness, TaskError,
};

use crate::managed::{FieldsReader, FieldsWriter};
use crate::state_data::StateData;

/// The name of the one field these operators checkpoint.
const FIELD: &str = "values";

fn snapshot<K, V>(
    values: &mut KeyedState<K, V>,
    ctx: &SnapshotContext,
) -> Result<Option<StateBytes>, TaskError>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    let mut fields = FieldsWriter::new();
    fields
        .snapshot(FIELD, values, ctx)
        .map_err(|e| TaskError::Snapshot(e.to_string()))?;
    Ok(Some(fields.finish()))
}

fn restore_fields<K, V>(
    values: &mut KeyedState<K, V>,
    restore: &Restore<'_>,
) -> Result<(), TaskError>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
{
    let refused = |e: crate::StateError| TaskError::Restore(e.to_string());
    let fields = FieldsReader::read(restore).map_err(refused)?;
    fields.only(&[FIELD], &[]).map_err(refused)?;
    fields.restore(FIELD, values).map_err(refused)
}

/// Folds each key's records into one value with `f(&mut value, record)`,
/// starting from the first record; see [`reduce`]. `ASSOCIATIVE`: the
/// function was declared associative ([`Reduce::associative`]), so the
/// engine may fold a key's records before the keyed exchange.
pub struct Reduce<K, V, F, const ASSOCIATIVE: bool = false> {
    values: KeyedState<K, V>,
    f: F,
}

impl<K: Key, V: Clone, F: Clone, const ASSOCIATIVE: bool> Clone for Reduce<K, V, F, ASSOCIATIVE> {
    fn clone(&self) -> Self {
        Reduce {
            values: self.values.clone(),
            f: self.f.clone(),
        }
    }
}

impl<K, V, F> Reduce<K, V, F> {
    /// Declares `f` associative (`f(f(a, b), c)` and `f(a, f(b, c))` give
    /// the same value, as for a sum, a count, a maximum or a set union): in
    /// a job, a combiner then folds each key's records with `f` in the task
    /// that sends them, before the keyed exchange (see
    /// `Operator::COMBINES`), so that fewer cross it. The operator then
    /// emits a running value per folded record, fewer than one per record,
    /// and the same last value; `combiners false;` in `job!` gives one per
    /// record again. Without it, `f` is folded in record order only, as it
    /// must be for a function that is not associative.
    ///
    /// ```
    /// use streamwork::core::Operator;
    /// use streamwork::prelude::*;
    /// // Sums per key (the key is the first field).
    /// let sums = reduce::<u32, _, _>(|sum: &mut (u32, u64), x: (u32, u64)| sum.1 += x.1)
    ///     .associative();
    /// fn combines<O: Operator>(_: &O) -> bool {
    ///     O::COMBINES
    /// }
    /// assert!(combines(&sums));
    /// assert!(!combines(&reduce::<u32, _, _>(|a: &mut (u32, u64), b: (u32, u64)| a.1 = a.1 * 2 + b.1)));
    /// let mut merged = (7, 2);
    /// sums.combine(&mut merged, (7, 5));
    /// assert_eq!(merged, (7, 7));
    /// ```
    pub fn associative(self) -> Reduce<K, V, F, true> {
        Reduce {
            values: self.values,
            f: self.f,
        }
    }
}

/// Each key's records folded into one value (the first record, then
/// `f(&mut value, record)` for each next one), emitted as `(key, value)`
/// after every record: a running sum per key is `reduce(|sum, x| *sum += x)`.
/// With [`associative`](Reduce::associative), a combiner folds each key's
/// records before the keyed exchange.
pub fn reduce<K, V, F>(f: F) -> Reduce<K, V, F>
where
    K: Key,
    F: Fn(&mut V, V) + Clone + Send + 'static,
{
    Reduce {
        values: KeyedState::new(),
        f,
    }
}

impl<K, V, F, const ASSOCIATIVE: bool> Operator for Reduce<K, V, F, ASSOCIATIVE>
where
    K: Key + StateData,
    V: Data + StateData + Sync,
    F: Fn(&mut V, V) + Clone + Send + 'static,
{
    type In = V;
    type Key = ByKey<K>;
    type Out = Collector<(K, V)>;
    type Time = AnyTime;
    /// A key's records are folded with `f` before the exchange too, once
    /// `f` is declared associative.
    const COMBINES: bool = ASSOCIATIVE;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    #[inline]
    fn combine(&self, earlier: &mut V, later: V) {
        (self.f)(earlier, later);
    }

    #[inline]
    fn on_record(&mut self, value: V, ctx: &mut Context<'_, ByKey<K>, Collector<(K, V)>>) {
        let key = ctx.key();
        let current = match self.values.get_mut(key) {
            Some(current) => {
                (self.f)(current, value);
                current.clone()
            }
            None => {
                self.values.insert(key, value.clone());
                value
            }
        };
        ctx.emit((key.get().clone(), current));
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot(&mut self.values, ctx)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        restore_fields(&mut self.values, restore)
    }
}

/// Folds each key's records into an accumulator that starts at `init`;
/// see [`fold`].
pub struct Fold<K, A, F, T> {
    init: A,
    values: KeyedState<K, A>,
    f: F,
    _in: std::marker::PhantomData<fn(T)>,
}

impl<K: Key, A: Clone, F: Clone, T> Clone for Fold<K, A, F, T> {
    fn clone(&self) -> Self {
        Fold {
            init: self.init.clone(),
            values: self.values.clone(),
            f: self.f.clone(),
            _in: std::marker::PhantomData,
        }
    }
}

/// Each key's records folded into an accumulator that starts at `init`
/// (`f(&mut acc, record)`), emitted as `(key, acc)` after every record: a
/// count per key is `fold(0u64, |n, _| *n += 1)`.
pub fn fold<K, T, A, F>(init: A, f: F) -> Fold<K, A, F, T>
where
    K: Key,
    F: Fn(&mut A, T) + Clone + Send + 'static,
{
    Fold {
        init,
        values: KeyedState::new(),
        f,
        _in: std::marker::PhantomData,
    }
}

impl<K, T, A, F> Operator for Fold<K, A, F, T>
where
    K: Key + StateData,
    T: Data,
    A: Data + StateData + Sync,
    F: Fn(&mut A, T) + Clone + Send + 'static,
{
    type In = T;
    type Key = ByKey<K>;
    type Out = Collector<(K, A)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    #[inline]
    fn on_record(&mut self, value: T, ctx: &mut Context<'_, ByKey<K>, Collector<(K, A)>>) {
        let key = ctx.key();
        if self.values.get(key).is_none() {
            self.values.insert(key, self.init.clone());
        }
        let Some(acc) = self.values.get_mut(key) else {
            return;
        };
        (self.f)(acc, value);
        let acc = acc.clone();
        ctx.emit((key.get().clone(), acc));
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot(&mut self.values, ctx)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        restore_fields(&mut self.values, restore)
    }
}
