//! Window functions: incremental aggregates (O(1) state per window and key),
//! and full-window functions over the buffered events.
//!
//! Both are an [`Aggregate`]: a full-window function's accumulator is the
//! list of events, and its result is computed over the parts of a window
//! (its slices) without copying them.

use std::marker::PhantomData;

use streamwork_core::Data;

use crate::window::WindowContents;

/// A window function computed incrementally: `create` an accumulator, `add`
/// each event, `merge` partial accumulators (slices, merged sessions), and
/// take the `result`.
pub trait Aggregate<T>: Clone + Send + 'static {
    /// The accumulator. `Sync`, because a checkpoint reads the window's
    /// accumulators from the thread that writes it while the operator goes
    /// on (copy-on-write).
    type Acc: Clone + Send + Sync + 'static;
    /// The result.
    type Out: Data;

    /// An empty accumulator.
    fn create(&self) -> Self::Acc;
    /// Adds one event.
    fn add(&self, acc: &mut Self::Acc, value: &T);
    /// Merges `other` into `into`.
    fn merge(&self, into: &mut Self::Acc, other: &Self::Acc);
    /// The result of an accumulator.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
    /// Whether a window over several parts should be computed with
    /// [`result_of_parts`](Self::result_of_parts) rather than by merging
    /// accumulators (true for full-window functions, whose merge would copy
    /// the events).
    const BY_PARTS: bool = false;

    /// The result over several partial accumulators, in time order.
    fn result_of_parts(&self, parts: &[&Self::Acc]) -> Self::Out {
        match parts {
            [one] => self.result(one),
            _ => {
                let mut acc = self.create();
                for part in parts {
                    self.merge(&mut acc, part);
                }
                self.result(&acc)
            }
        }
    }
}

/// Counts events.
#[derive(Copy, Clone, Debug, Default)]
pub struct Count;

impl<T> Aggregate<T> for Count {
    type Acc = u64;
    type Out = u64;
    #[inline]
    fn create(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, acc: &mut u64, _: &T) {
        *acc += 1;
    }
    #[inline]
    fn merge(&self, into: &mut u64, other: &u64) {
        *into += other;
    }
    #[inline]
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// Sums `f(event)` with wrapping arithmetic.
#[derive(Clone)]
pub struct Sum<F>(pub F);

impl<T, F: Fn(&T) -> u64 + Clone + Send + 'static> Aggregate<T> for Sum<F> {
    type Acc = u64;
    type Out = u64;
    #[inline]
    fn create(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, acc: &mut u64, value: &T) {
        *acc = acc.wrapping_add((self.0)(value));
    }
    #[inline]
    fn merge(&self, into: &mut u64, other: &u64) {
        *into = into.wrapping_add(*other);
    }
    #[inline]
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// The largest `f(event)`, with the first event reaching it (`None` when empty).
#[derive(Clone)]
pub struct MaxBy<F>(pub F);

impl<
    T: Data + Sync,
    V: Ord + Clone + Send + Sync + 'static,
    F: Fn(&T) -> V + Clone + Send + 'static,
> Aggregate<T> for MaxBy<F>
{
    type Acc = Option<(V, T)>;
    type Out = Option<T>;
    fn create(&self) -> Self::Acc {
        None
    }
    fn add(&self, acc: &mut Self::Acc, value: &T) {
        let v = (self.0)(value);
        if acc.as_ref().is_none_or(|(best, _)| v > *best) {
            *acc = Some((v, value.clone()));
        }
    }
    fn merge(&self, into: &mut Self::Acc, other: &Self::Acc) {
        if let Some((v, t)) = other
            && into.as_ref().is_none_or(|(best, _)| v > best)
        {
            *into = Some((v.clone(), t.clone()));
        }
    }
    fn result(&self, acc: &Self::Acc) -> Option<T> {
        acc.as_ref().map(|(_, t)| t.clone())
    }
}

/// A full-window function: buffers the window's events and calls `f` over
/// them once the window fires.
pub struct Apply<T, F> {
    f: F,
    _type: PhantomData<fn(T)>,
}

impl<T, F: Clone> Clone for Apply<T, F> {
    fn clone(&self) -> Self {
        Apply {
            f: self.f.clone(),
            _type: PhantomData,
        }
    }
}

impl<T, F> Apply<T, F> {
    /// The full-window function `f`.
    pub fn new(f: F) -> Self {
        Apply {
            f,
            _type: PhantomData,
        }
    }
}

impl<T: Data + Sync, R: Data, F: Fn(WindowContents<'_, T>) -> R + Clone + Send + 'static>
    Aggregate<T> for Apply<T, F>
{
    type Acc = Vec<T>;
    type Out = R;
    fn create(&self) -> Vec<T> {
        Vec::new()
    }
    fn add(&self, acc: &mut Vec<T>, value: &T) {
        acc.push(value.clone());
    }
    fn merge(&self, into: &mut Vec<T>, other: &Vec<T>) {
        into.extend_from_slice(other);
    }
    fn result(&self, acc: &Vec<T>) -> R {
        (self.f)(WindowContents::new(&[acc.as_slice()]))
    }
    fn result_of_parts(&self, parts: &[&Vec<T>]) -> R {
        let slices: Vec<&[T]> = parts.iter().map(|p| p.as_slice()).collect();
        (self.f)(WindowContents::new(&slices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_window_functions_see_every_part_in_order() {
        let collect = Apply::new(|events: WindowContents<'_, u32>| {
            events.iter().copied().collect::<Vec<_>>()
        });
        let (a, b) = (vec![1, 2], vec![3]);
        assert_eq!(collect.result_of_parts(&[&a, &b]), vec![1, 2, 3]);
    }

    #[test]
    fn max_by_keeps_the_first_maximum() {
        let max = MaxBy(|v: &(u32, char)| v.0);
        let mut acc = max.create();
        for v in [(1, 'a'), (3, 'b'), (3, 'c'), (2, 'd')] {
            max.add(&mut acc, &v);
        }
        assert_eq!(max.result(&acc), Some((3, 'b')));
    }
}
