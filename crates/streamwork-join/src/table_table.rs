//! Table-table join: two changelogs in, a changelog out. An update or a
//! deletion of a row retracts the join results it produced before, then
//! inserts the new ones: downstream, applying the [`Delta`]s in order
//! maintains exactly the join of the two current tables.

use std::marker::PhantomData;

use streamwork_core::SnapshotContext;
use streamwork_core::hash::stable_hash;
use streamwork_core::ports::Either;
use streamwork_core::{
    AnyTime, ByKey, Collector, Context, Data, Key, Operator, Restore, StateBytes, TaskError,
};
use streamwork_state::{CowMap, KeyedCheckpoint};

use crate::checkpointing::{restore_table, snapshot_table};
use crate::{Change, Delta, JoinRow};

/// The current row of each side of one key.
type Sides<L, R> = (Option<L>, Option<R>);

/// An inner join of a table of `L` and a table of `R`, keyed by `K`.
#[derive(Clone)]
pub struct TableTableJoin<L, R, K> {
    /// Both tables by key, frozen (copy-on-write) for a checkpoint.
    rows: CowMap<K, Sides<L, R>>,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: KeyedCheckpoint<(), K, Sides<L, R>>,
    _types: PhantomData<fn(L, R)>,
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Default for TableTableJoin<L, R, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> TableTableJoin<L, R, K> {
    streamwork_state::keyed_checkpointed_builder! {
        /// Puts both tables in the job's checkpoints, by key group, so that a restored job (at
        /// any parallelism) joins as if it had not failed. Needed in a job that promises
        /// at-least-once or exactly-once delivery.
        where [K, L, R]
    }

    /// Empty tables.
    pub fn new() -> Self {
        TableTableJoin {
            rows: CowMap::new(),
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    /// Drops `key`'s entry once neither table has a row for it.
    fn forget_if_empty(&mut self, key: &K) {
        let hash = stable_hash(key);
        if self
            .rows
            .get(hash, key)
            .is_some_and(|(l, r)| l.is_none() && r.is_none())
        {
            self.rows.remove(hash, key);
        }
    }

    fn sides(&mut self, key: &K) -> &mut Sides<L, R> {
        self.rows
            .get_or_insert_with(stable_hash(key), key, || (None, None))
    }
}

type Out<K, L, R> = Collector<Delta<JoinRow<K, L, R>>>;

fn row<K: Clone, L, R>(key: &K, left: L, right: R) -> JoinRow<K, L, R> {
    JoinRow {
        key: key.clone(),
        left: Some(left),
        right: Some(right),
    }
}

impl<L: Data + Sync, R: Data + Sync, K: Key> Operator for TableTableJoin<L, R, K> {
    type In = Either<Change<K, L>, Change<K, R>>;
    type Key = ByKey<K>;
    type Out = Out<K, L, R>;
    type Time = AnyTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::checkpointing::TRANSIENT);

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        snapshot_table(&mut self.checkpoint, ctx, &mut self.rows)
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        restore_table(&mut self.checkpoint, restore, &mut self.rows)
    }

    fn on_record(&mut self, record: Self::In, ctx: &mut Context<'_, ByKey<K>, Self::Out>) {
        match record {
            Either::Left(change) => {
                let (key, new) = change.into_parts();
                let (left, right) = self.sides(&key).clone();
                if let Some(right) = &right {
                    if let Some(old) = left {
                        ctx.emit(Delta::Retract(row(&key, old, right.clone())));
                    }
                    if let Some(new) = &new {
                        ctx.emit(Delta::Insert(row(&key, new.clone(), right.clone())));
                    }
                }
                self.sides(&key).0 = new;
                self.forget_if_empty(&key);
            }
            Either::Right(change) => {
                let (key, new) = change.into_parts();
                let (left, right) = self.sides(&key).clone();
                if let Some(left) = &left {
                    if let Some(old) = right {
                        ctx.emit(Delta::Retract(row(&key, left.clone(), old)));
                    }
                    if let Some(new) = &new {
                        ctx.emit(Delta::Insert(row(&key, left.clone(), new.clone())));
                    }
                }
                self.sides(&key).1 = new;
                self.forget_if_empty(&key);
            }
        }
    }
}
