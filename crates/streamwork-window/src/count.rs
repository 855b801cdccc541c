//! Count windows: every `slide` events of a key, the last `size` of them
//! (tumbling when `size == slide`). Partials are kept per chunk of `slide`
//! events, so a sliding count window merges `size / slide` partials instead
//! of keeping every event. A window that never fills (at the end of the
//! input) does not fire, as in Flink's count windows.

use std::collections::VecDeque;
use std::marker::PhantomData;

use streamwork_core::SnapshotContext;
use streamwork_core::{AnyTime, Context, Data, KeyKind, Operator, Restore, StateBytes, TaskError};
use streamwork_state::{CowMap, KeyedCheckpoint};

use crate::aggregate::Aggregate;
use crate::outputs::WindowOutputs;
use crate::window::{CountWindow, Firing, WindowResult};

#[derive(Clone)]
struct KeyCounts<Acc> {
    seen: u64,
    chunks: VecDeque<Acc>,
    current: Acc,
    in_current: u64,
}

/// How count windows checkpoint: per key, `(events seen, full chunks,
/// current chunk, events in it)`.
pub type CountCheckpoint<K, Acc> = KeyedCheckpoint<(), K, (u64, Vec<Acc>, Acc, u64)>;

/// Count windows over a stream partitioned as `KK`; see the module docs.
pub struct CountWindows<T, KK: KeyKind, A: Aggregate<T>> {
    size: u64,
    slide: u64,
    aggregate: A,
    /// Each key's chunks; frozen (copy-on-write) for a checkpoint.
    keys: CowMap<KK::Value, KeyCounts<A::Acc>>,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: CountCheckpoint<KK::Value, A::Acc>,
    _types: PhantomData<fn(T)>,
}

impl<T, KK: KeyKind, A: Aggregate<T>> Clone for CountWindows<T, KK, A> {
    fn clone(&self) -> Self {
        CountWindows {
            size: self.size,
            slide: self.slide,
            aggregate: self.aggregate.clone(),
            keys: self.keys.clone(),
            checkpoint: self.checkpoint.clone(),
            _types: PhantomData,
        }
    }
}

impl<T, KK: KeyKind, A: Aggregate<T>> CountWindows<T, KK, A> {
    pub(crate) fn new(size: u64, slide: u64, aggregate: A) -> Self {
        CountWindows {
            size,
            slide,
            aggregate,
            keys: CowMap::new(),
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    streamwork_state::keyed_checkpointed_builder! {
        /// Puts each key's partial chunks in the job's checkpoints, by key
        /// group. Needed in a job that promises at-least-once or exactly-once
        /// delivery.
        where [KK::Value, A::Acc]
    }
}

impl<T: Data, KK: KeyKind, A: Aggregate<T>> Operator for CountWindows<T, KK, A> {
    type In = T;
    type Key = KK;
    type Out = WindowOutputs<WindowResult<KK::Value, A::Out, CountWindow>, T>;
    type Time = AnyTime;

    streamwork_state::keyed_checkpoint_hooks!(crate::TRANSIENT_FIX);

    fn on_record(&mut self, value: T, ctx: &mut Context<'_, KK, Self::Out>) {
        let key = ctx.key_ref();
        let (hash, key_value) = (KK::hash(key), KK::value(key));
        let aggregate = &self.aggregate;
        let state = self.keys.get_or_insert_with(hash, key_value, || KeyCounts {
            seen: 0,
            chunks: VecDeque::new(),
            current: aggregate.create(),
            in_current: 0,
        });
        aggregate.add(&mut state.current, &value);
        state.in_current += 1;
        state.seen += 1;
        if state.in_current < self.slide {
            return;
        }
        let full = std::mem::replace(&mut state.current, aggregate.create());
        state.in_current = 0;
        state.chunks.push_back(full);
        let chunks = (self.size / self.slide) as usize;
        while state.chunks.len() > chunks {
            state.chunks.pop_front();
        }
        if state.seen >= self.size {
            let parts: Vec<&A::Acc> = state.chunks.iter().collect();
            let value = aggregate.result_of_parts(&parts);
            let window = CountWindow {
                first: state.seen - self.size,
                end: state.seen,
            };
            let result = WindowResult {
                key: key_value.clone(),
                window,
                value,
                firing: Firing::Final,
            };
            ctx.out().results.emit(result);
        }
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        if !self.checkpoint.is_enabled() {
            return Ok(None);
        }
        // The pause: the keys' chunks are frozen; they (or those that
        // changed since a complete checkpoint of this run) are gathered and
        // archived off this thread, when the checkpoint is written.
        self.checkpoint.snapshot_map(ctx, (), &mut self.keys, |k| {
            let chunks = k.chunks.iter().cloned().collect();
            (k.seen, chunks, k.current.clone(), k.in_current)
        })
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let Some(restored) = self.checkpoint.restore(restore)? else {
            return Ok(());
        };
        for (key, (seen, chunks, current, in_current)) in restored.entries {
            let hash = KK::hash_value(&key);
            let counts = KeyCounts {
                seen,
                chunks: chunks.into(),
                current,
                in_current,
            };
            self.keys.insert(hash, key, counts);
        }
        Ok(())
    }
}
