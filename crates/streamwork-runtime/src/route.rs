//! Routes: which target instance(s) each record of an edge goes to (ch. 3).
//!
//! A [`Route`] is the per-record decision of one sending instance of an
//! edge: [`ShuffleRoute`] (round-robin from the sender's index),
//! [`KeyRoute`] (the key's stable hash, through key groups, onto the
//! instance owning the group), [`FixedRoute`] (global grouping, or a forward
//! edge that could not be fused), [`BroadcastRoute`] and [`CustomRoute`].
//! The dispatcher holds it as a [`Partition`]: one dynamic call per batch,
//! inside which the per-record loop ([`Partition::split`]) is monomorphised
//! over the route and its key function, because the builder's `key_by`
//! makes the route where the key function's type is known.

use streamwork_core::grouping::KeyGroups;
use streamwork_core::id::InstanceIdx;
use streamwork_core::record::{Data, Record};

/// Where one record goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One instance, by index.
    One(u32),
    /// Every instance.
    All,
}

/// The per-record routing decision of an edge. Implementations are small and
/// monomorphised into the dispatcher, so routing costs no dynamic call.
pub trait Route<T>: Send + 'static {
    /// Picks the target of `value` among `targets` instances.
    fn route(&mut self, value: &T, targets: u32) -> Target;
}

/// What a route is made for: one sending instance of an edge.
#[derive(Copy, Clone, Debug)]
pub struct RouteContext {
    /// The sending instance.
    pub source_instance: InstanceIdx,
    /// How many instances receive.
    pub targets: u32,
    /// The job's key groups.
    pub key_groups: KeyGroups,
}

/// A [`Route`] behind one dynamic call per batch: what the engine's
/// dispatcher holds. Implemented for every route, so the per-record loop of
/// [`split`](Self::split) is monomorphised over the route (and its key
/// function).
pub trait Partition<T>: Send {
    /// The target of one record (for the few paths that route record by
    /// record, such as a job run with acking).
    fn target_of(&mut self, value: &T, targets: u32) -> Target;

    /// Moves records from `records` into `buffers` (one per target, in
    /// instance order) until a buffer reaches `batch_size`, then returns
    /// `true` with the rest of `records` left to split; `false` once every
    /// record is placed.
    fn split(
        &mut self,
        records: &mut std::vec::Drain<'_, Record<T>>,
        buffers: &mut [Vec<Record<T>>],
        batch_size: usize,
    ) -> bool;
}

impl<T: Data, R: Route<T>> Partition<T> for R {
    #[inline]
    fn target_of(&mut self, value: &T, targets: u32) -> Target {
        Route::route(self, value, targets)
    }

    fn split(
        &mut self,
        records: &mut std::vec::Drain<'_, Record<T>>,
        buffers: &mut [Vec<Record<T>>],
        batch_size: usize,
    ) -> bool {
        let targets = buffers.len() as u32;
        for record in records.by_ref() {
            match Route::route(self, &record.value, targets) {
                Target::One(target) => {
                    let buffer = &mut buffers[target as usize];
                    buffer.push(record);
                    if buffer.len() >= batch_size {
                        return true;
                    }
                }
                Target::All => {
                    let mut full = false;
                    for buffer in buffers.iter_mut() {
                        buffer.push(record.clone());
                        full |= buffer.len() >= batch_size;
                    }
                    if full {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// Round-robin, starting at an offset so that parallel senders do not all start
/// on instance 0.
#[derive(Clone, Debug)]
pub struct ShuffleRoute {
    next: u32,
}

impl ShuffleRoute {
    /// Starts at instance `start` (taken modulo the number of targets).
    pub fn starting_at(start: u32) -> Self {
        ShuffleRoute { next: start }
    }
}

impl<T> Route<T> for ShuffleRoute {
    #[inline]
    fn route(&mut self, _: &T, targets: u32) -> Target {
        let target = self.next % targets;
        self.next = target + 1;
        Target::One(target)
    }
}

/// Fields grouping: the key's stable hash, through key groups, onto an instance.
pub struct KeyRoute<F> {
    key_hash: F,
    key_groups: KeyGroups,
    /// The owning instance of each key group, for the edge's parallelism.
    owners: Vec<u32>,
}

impl<F> KeyRoute<F> {
    /// Routes by `key_hash(value)` over `key_groups`, onto `parallelism` instances.
    pub fn new(key_hash: F, key_groups: KeyGroups, parallelism: u32) -> Self {
        let owners = (0..key_groups.count())
            .map(|group| key_groups.instance_of(group, parallelism))
            .collect();
        KeyRoute {
            key_hash,
            key_groups,
            owners,
        }
    }
}

impl<T, F: FnMut(&T) -> u64 + Send + 'static> Route<T> for KeyRoute<F> {
    #[inline]
    fn route(&mut self, value: &T, _targets: u32) -> Target {
        let group = self.key_groups.key_group((self.key_hash)(value));
        Target::One(self.owners[group as usize])
    }
}

/// Everything to one fixed instance: global grouping (instance 0), or a forward
/// edge that could not be fused (instance `i` to instance `i`).
#[derive(Clone, Debug)]
pub struct FixedRoute(pub u32);

impl<T> Route<T> for FixedRoute {
    #[inline]
    fn route(&mut self, _: &T, _: u32) -> Target {
        Target::One(self.0)
    }
}

/// Every instance gets a copy.
#[derive(Clone, Debug)]
pub struct BroadcastRoute;

impl<T> Route<T> for BroadcastRoute {
    #[inline]
    fn route(&mut self, _: &T, _: u32) -> Target {
        Target::All
    }
}

/// A user function `(value, targets) -> instance`; results are taken modulo
/// the number of targets so a bad function cannot index out of range.
pub struct CustomRoute<F>(pub F);

impl<T, F: FnMut(&T, u32) -> u32 + Send + 'static> Route<T> for CustomRoute<F> {
    #[inline]
    fn route(&mut self, value: &T, targets: u32) -> Target {
        Target::One((self.0)(value, targets) % targets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_route_uses_the_owner_table() {
        let mut route = KeyRoute::new(|v: &u64| *v, KeyGroups::DEFAULT, 4);
        assert_eq!(route.route(&0, 4), Target::One(0));
        assert_eq!(route.route(&u64::MAX, 4), Target::One(3));
    }

    #[test]
    fn shuffle_is_round_robin() {
        let mut r = ShuffleRoute::starting_at(1);
        let picks: Vec<Target> = (0..4).map(|_| Route::<u8>::route(&mut r, &0, 3)).collect();
        assert_eq!(
            picks,
            vec![
                Target::One(1),
                Target::One(2),
                Target::One(0),
                Target::One(1)
            ]
        );
    }

    #[test]
    fn split_stops_at_the_first_full_buffer_and_resumes() {
        let mut route = CustomRoute(|v: &u32, _| *v % 2);
        let mut records: Vec<Record<u32>> = (0..7).map(Record::new).collect();
        let mut buffers = vec![Vec::new(), Vec::new()];
        let mut drain = records.drain(..);
        assert!(route.split(&mut drain, &mut buffers, 2));
        assert_eq!(buffers[0].len(), 2, "0 and 2");
        buffers[0].clear();
        assert!(route.split(&mut drain, &mut buffers, 2));
        assert_eq!(buffers[1].len(), 2, "1 and 3");
        buffers[1].clear();
        assert!(route.split(&mut drain, &mut buffers, 2), "4 and 6");
        assert!(!route.split(&mut drain, &mut buffers, 2));
        let values = |b: &Vec<Record<u32>>| b.iter().map(|r| r.value).collect::<Vec<_>>();
        assert_eq!(
            (values(&buffers[0]), values(&buffers[1])),
            (vec![4, 6], vec![5])
        );
    }

    #[test]
    fn broadcast_splits_a_copy_into_every_buffer() {
        let mut records: Vec<Record<u32>> = (0..3).map(Record::new).collect();
        let mut buffers = vec![Vec::new(), Vec::new(), Vec::new()];
        assert!(!BroadcastRoute.split(&mut records.drain(..), &mut buffers, 8));
        assert!(buffers.iter().all(|b| b.len() == 3));
    }
}
