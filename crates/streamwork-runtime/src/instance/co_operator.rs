//! A [`CoOperator`] instance: always the root of its task, as it has two
//! input ports.

use std::any::Any;

use streamwork_core::checkpoint::{Restore, SnapshotContext, StateBytes};
use streamwork_core::component::KeyKind;
use streamwork_core::outputs::Outputs;
use streamwork_core::{CoOperator, Context, TaskError, Timestamp};

use super::{Env, Instance, Kind, Receives, downcast_anchored, rooted};
use crate::failure::Failed;
use crate::message::SenderIdx;

/// A co-operator, with the key extractor of each edge of each side.
pub(crate) struct CoOperatorKind<C: CoOperator> {
    operator: C,
    left_keys: Vec<<C::Key as KeyKind>::Extractor<C::Left>>,
    right_keys: Vec<<C::Key as KeyKind>::Extractor<C::Right>>,
    /// Per port, each sender index's edge ordinal.
    sender_edges: Vec<Vec<u32>>,
}

impl<C: CoOperator> CoOperatorKind<C> {
    pub(crate) fn new(
        operator: C,
        left_keys: Vec<<C::Key as KeyKind>::Extractor<C::Left>>,
        right_keys: Vec<<C::Key as KeyKind>::Extractor<C::Right>>,
        sender_edges: Vec<Vec<u32>>,
    ) -> Self {
        CoOperatorKind {
            operator,
            left_keys,
            right_keys,
            sender_edges,
        }
    }
}

impl<C: CoOperator> Kind for CoOperatorKind<C> {
    type Out = C::Out;
    const FORWARDS_WATERMARKS: bool = true;

    fn start(&mut self, env: &Env, restore: Option<&Restore<'_>>) -> Result<(), TaskError> {
        if let Some(restore) = restore {
            self.operator.restore(restore)?;
        }
        self.operator.open(&env.ctx);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut C::Out) {
        self.operator.on_watermark(watermark, out);
    }

    fn on_processing_time(
        &mut self,
        now: Timestamp,
        out: &mut C::Out,
        _: &Env,
    ) -> Result<(), TaskError> {
        self.operator.on_processing_time(now, out);
        Ok(())
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        self.operator.snapshot(ctx)
    }

    fn on_end(&mut self, out: &mut C::Out, _: &Env) -> Result<(), TaskError> {
        self.operator.on_end(out);
        Ok(())
    }
}

impl<C: CoOperator> Receives for CoOperatorKind<C> {
    fn on_batch(
        instance: &mut Instance<Self>,
        port: usize,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<(), Failed> {
        let Instance { kind, out, env, .. } = instance;
        env.guard(|| {
            let CoOperatorKind {
                operator,
                left_keys,
                right_keys,
                sender_edges,
            } = kind;
            let edge = sender_edges
                .get(port)
                .and_then(|edges| edges.get(from.0 as usize))
                .copied()
                .unwrap_or(0) as usize;
            let n;
            if port == 0 {
                let (mut batch, anchors) = downcast_anchored::<C::Left>(batch)?;
                n = batch.len() as u64;
                let Some(extractor) = left_keys.get(edge).or(left_keys.first()) else {
                    return Ok(());
                };
                for record in rooted(batch.drain(), anchors) {
                    out.set_time(record.time);
                    let key = C::Key::extract(extractor, &record.value);
                    let mut context =
                        Context::new(C::Key::as_ref(&key), &mut *out, record.time, &env.ctx);
                    operator.on_left(record.value, &mut context);
                }
            } else {
                let (mut batch, anchors) = downcast_anchored::<C::Right>(batch)?;
                n = batch.len() as u64;
                let Some(extractor) = right_keys.get(edge).or(right_keys.first()) else {
                    return Ok(());
                };
                for record in rooted(batch.drain(), anchors) {
                    out.set_time(record.time);
                    let key = C::Key::extract(extractor, &record.value);
                    let mut context =
                        Context::new(C::Key::as_ref(&key), &mut *out, record.time, &env.ctx);
                    operator.on_right(record.value, &mut context);
                }
            }
            env.settle_acks(|| out.flush())?;
            env.counters.add_in(n);
            env.counters.set_out(out.emitted());
            Ok(out.check()?)
        })
    }

    fn on_port_end(instance: &mut Instance<Self>, port: usize) -> Result<(), Failed> {
        let Instance { kind, out, env, .. } = instance;
        env.guard(|| {
            out.set_time(None);
            if port == 0 {
                kind.operator.on_left_end(out);
            } else {
                kind.operator.on_right_end(out);
            }
            Ok(())
        })
    }
}
