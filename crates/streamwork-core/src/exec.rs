//! The runtime interface: type-erased instances the runtime drives, and the
//! typed wrappers that run user code inside them.
//!
//! The runtime moves batches as `Box<dyn Any + Send>` and calls
//! [`InputTask::on_batch`] once per batch; the typed wrapper downcasts once
//! and loops over the records with monomorphised calls into user code.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::acking::{self, Anchor, AnchoredBatch};
use crate::checkpoint::{FINAL_CHECKPOINT, Part, StateBytes};
use crate::collector::Collector;
use crate::component::{
    CoOperator, Context, InstanceContext, KeyKind, NoKey, Operator, Sink, Source, SourcePoll,
    TimeRequirement,
};
use crate::dispatch::Edge;
use crate::error::TaskError;
use crate::message::{Control, Disconnected, SenderIdx};
use crate::outputs::Outputs;
use crate::record::{Data, Record};
use crate::time::Timestamp;

thread_local! {
    static CURRENT: std::cell::RefCell<Option<(Arc<str>, u32)>> = const { std::cell::RefCell::new(None) };
}

/// The component and instance whose user code this thread is running (or last
/// ran when it panicked): how the runtime names the culprit of a panic inside
/// a fused chain.
pub fn current_component() -> Option<(Arc<str>, u32)> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Marks this thread as running `ctx`'s user code until dropped. Entered once
/// per batch; left as is when unwinding, so the panicking component stays
/// recorded.
struct Scope {
    previous: Option<(Arc<str>, u32)>,
}

impl Scope {
    fn enter(ctx: &InstanceContext) -> Scope {
        let current = Some((ctx.component_arc(), ctx.instance().0));
        Scope {
            previous: CURRENT.with(|c| c.replace(current)),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let previous = self.previous.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
}

/// Live counters of one instance, updated once per batch (relaxed atomics,
/// never per record) and readable while the job runs.
#[derive(Debug, Default)]
pub struct InstanceCounters {
    records_in: AtomicU64,
    records_out: AtomicU64,
}

impl InstanceCounters {
    /// Records received so far.
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }
    /// Records emitted so far (all channels).
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }
    fn add_in(&self, n: u64) {
        self.records_in.fetch_add(n, Ordering::Relaxed);
    }
    fn set_out(&self, n: u64) {
        self.records_out.store(n, Ordering::Relaxed);
    }
}

/// A source instance as the runtime drives it.
pub trait SourceTask: Send {
    /// Opens the source.
    fn open(&mut self) -> Result<(), TaskError>;
    /// Polls once.
    fn poll(&mut self) -> Result<SourcePoll, TaskError>;
    /// Sends what is buffered.
    fn flush(&mut self) -> Result<(), TaskError>;
    /// The wall clock reads `now`: fused operators fire processing-time timers.
    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), TaskError>;
    /// Takes the source's part of `checkpoint` (its position) and sends the
    /// checkpoint's barrier downstream, after everything polled before.
    fn checkpoint(&mut self, checkpoint: u64) -> Result<(), TaskError>;
    /// Closes the source and sends end-of-stream downstream.
    fn finish(&mut self) -> Result<(), TaskError>;
}

/// An instance reading channels, as the runtime drives it. The runtime counts
/// end-of-stream messages per port and tracks the watermark of every sender:
/// it calls [`on_watermark`](Self::on_watermark) when the minimum over all
/// active senders advances, [`on_idle`](Self::on_idle) when every remaining
/// sender is idle, [`on_port_end`](Self::on_port_end) when every sender of a
/// port has ended, then [`finish`](Self::finish).
pub trait InputTask: Send {
    /// Opens the instance.
    fn open(&mut self) -> Result<(), TaskError>;
    /// Processes one batch (a `Vec<Record<T>>` of the port's type).
    fn on_batch(
        &mut self,
        port: usize,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<(), TaskError>;
    /// The instance's event time advanced to `watermark`.
    fn on_watermark(&mut self, watermark: Timestamp) -> Result<(), TaskError>;
    /// Every sender that has not ended is idle.
    fn on_idle(&mut self) -> Result<(), TaskError>;
    /// The wall clock reads `now`.
    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), TaskError>;
    /// Every sender into `port` has ended.
    fn on_port_end(&mut self, port: usize) -> Result<(), TaskError>;
    /// Sends what is buffered (the input is momentarily empty).
    fn flush(&mut self) -> Result<(), TaskError>;
    /// The barrier of `checkpoint` has arrived from every sender (or every
    /// sender that has not ended): snapshot, then forward the barrier.
    fn on_barrier(&mut self, checkpoint: u64) -> Result<(), TaskError>;
    /// Every port has ended: emit what is left and end the outputs.
    fn finish(&mut self) -> Result<(), TaskError>;
}

/// Hands an instance's part of `checkpoint` to the coordinator, if the job
/// takes checkpoints; `state` is only asked for then.
fn report_part(ctx: &InstanceContext, checkpoint: u64, state: impl FnOnce() -> Option<StateBytes>) {
    if let Some(hooks) = ctx.checkpoints() {
        hooks.report(Part {
            checkpoint,
            component: ctx.component_arc(),
            instance: ctx.instance().0,
            state: state(),
        });
    }
}

/// A restore that fails inside a fused chain fails the task like a fused
/// sink's error does.
fn restore_failed(ctx: &InstanceContext, error: &TaskError) -> ! {
    fused_sink_failed(ctx, error)
}

/// A batch's records, and their anchors if the job runs with acking.
fn downcast_anchored<T: 'static>(
    batch: Box<dyn Any + Send>,
) -> (Vec<Record<T>>, Option<Vec<Anchor>>) {
    let batch = match batch.downcast::<Vec<Record<T>>>() {
        Ok(batch) => return (*batch, None),
        Err(batch) => batch,
    };
    match batch.downcast::<AnchoredBatch<T>>() {
        Ok(batch) => {
            let AnchoredBatch { records, anchors } = *batch;
            (records, Some(anchors))
        }
        Err(_) => panic!(
            "streamwork internal error: a batch of the wrong type reached a port of `{}`",
            std::any::type_name::<T>()
        ),
    }
}

/// Records of a received batch, each making its anchor's root current and
/// reporting its event done as it is taken: what it emits belongs to its tree.
fn rooted<T>(
    records: Vec<Record<T>>,
    anchors: Option<Vec<Anchor>>,
) -> impl Iterator<Item = Record<T>> {
    let mut anchors = anchors.map(Vec::into_iter);
    records.into_iter().inspect(move |_| {
        if let Some(anchor) = anchors.as_mut().and_then(Iterator::next) {
            acking::complete(anchor);
            acking::set_current_root(anchor.root);
        }
    })
}

/// After a batch in a job run with acking: dispatches everything the batch
/// produced (creating its events' ids), then sends the task's reports.
fn settle_acks(
    ctx: &InstanceContext,
    flush: impl FnOnce() -> Result<(), Disconnected>,
) -> Result<(), Disconnected> {
    let Some(acker) = ctx.acking() else {
        return Ok(());
    };
    acking::set_current_root(0);
    flush()?;
    acking::send_pending(acker);
    Ok(())
}

/// Runs a [`Source`].
pub struct SourceInstance<S: Source> {
    source: S,
    out: S::Out,
    ctx: InstanceContext,
    counters: Arc<InstanceCounters>,
}

impl<S: Source> SourceInstance<S> {
    /// Wraps `source` with its outputs.
    pub fn new(
        source: S,
        out: S::Out,
        ctx: InstanceContext,
        counters: Arc<InstanceCounters>,
    ) -> Self {
        SourceInstance {
            source,
            out,
            ctx,
            counters,
        }
    }
}

impl<S: Source> SourceTask for SourceInstance<S> {
    fn open(&mut self) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        if let Some(restore) = self.ctx.restore() {
            self.source.restore(&restore)?;
        }
        Ok(self.source.open(&self.ctx)?)
    }

    fn poll(&mut self) -> Result<SourcePoll, TaskError> {
        let _scope = Scope::enter(&self.ctx);
        let poll = self.source.poll(&mut self.out)?;
        let out = &mut self.out;
        settle_acks(&self.ctx, || out.flush())?;
        self.counters.set_out(self.out.emitted());
        Ok(poll)
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        self.out.flush()?;
        if let Some(acker) = self.ctx.acking() {
            acking::send_pending(acker);
        }
        Ok(())
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), TaskError> {
        Ok(self.out.tick(now)?)
    }

    fn checkpoint(&mut self, checkpoint: u64) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        let source = &mut self.source;
        report_part(&self.ctx, checkpoint, || source.snapshot());
        source.snapshot_taken(checkpoint);
        Ok(self.out.control(&Control::Barrier(checkpoint))?)
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        if let Some(acker) = self.ctx.acking().cloned() {
            // The input has ended, but not every tree: replay what times
            // out until every record has been processed.
            while acker.pending_of(self.ctx.component(), self.ctx.instance().0) > 0 {
                if acker.aborted() {
                    return Err(TaskError::Disconnected);
                }
                self.out.flush()?;
                acking::send_pending(&acker);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let source = &mut self.source;
        report_part(&self.ctx, FINAL_CHECKPOINT, || source.snapshot());
        source.snapshot_taken(FINAL_CHECKPOINT);
        self.source.close()?;
        self.out.control(&Control::EndOfStream)?;
        self.counters.set_out(self.out.emitted());
        Ok(())
    }
}

/// Runs an [`Operator`], as a task root or fused into its upstream.
pub struct OperatorInstance<O: Operator> {
    operator: O,
    out: O::Out,
    ctx: InstanceContext,
    counters: Arc<InstanceCounters>,
    extractors: Vec<<O::Key as KeyKind>::Extractor<O::In>>,
    sender_edges: Vec<u32>,
    opened: bool,
    watermark: Timestamp,
}

impl<O: Operator> OperatorInstance<O> {
    /// Wraps `operator`. `extractors` holds the key extractor of each incoming
    /// edge; `sender_edges` maps each sender index to its edge ordinal.
    pub fn new(
        operator: O,
        out: O::Out,
        ctx: InstanceContext,
        counters: Arc<InstanceCounters>,
        extractors: Vec<<O::Key as KeyKind>::Extractor<O::In>>,
        sender_edges: Vec<u32>,
    ) -> Self {
        OperatorInstance {
            operator,
            out,
            ctx,
            counters,
            extractors,
            sender_edges,
            opened: false,
            watermark: Timestamp::MIN,
        }
    }

    fn ensure_open(&mut self) {
        if !self.opened {
            let _scope = Scope::enter(&self.ctx);
            self.opened = true;
            if let Some(restore) = self.ctx.restore()
                && let Err(e) = self.operator.restore(&restore)
            {
                restore_failed(&self.ctx, &e);
            }
            self.operator.open(&self.ctx);
        }
    }

    fn barrier(&mut self, checkpoint: u64) -> Result<(), Disconnected> {
        self.ensure_open();
        let _scope = Scope::enter(&self.ctx);
        let operator = &mut self.operator;
        report_part(&self.ctx, checkpoint, || operator.snapshot());
        self.out.control(&Control::Barrier(checkpoint))
    }

    fn process(&mut self, edge: usize, records: impl Iterator<Item = Record<O::In>>) -> u64 {
        let _scope = Scope::enter(&self.ctx);
        let OperatorInstance {
            operator,
            out,
            ctx,
            extractors,
            ..
        } = self;
        let Some(extractor) = extractors.get(edge).or(extractors.first()) else {
            return 0;
        };
        let n = run_records::<O>(operator, out, ctx, extractor, records);
        out.set_time(None);
        if ctx.acking().is_some() {
            // What the batch's end emits derives from no one record.
            acking::set_current_root(0);
        }
        operator.on_batch_end(out);
        n
    }

    /// Lets the operator handle the batch in place, if its output is one
    /// collector of its input type and it can: the records it leaves go on
    /// as they are. Returns the records received, or `None` if it did not.
    fn process_in_place(&mut self, records: &mut Vec<Record<O::In>>) -> Option<u64> {
        let n = records.len() as u64;
        let _scope = Scope::enter(&self.ctx);
        let out = (&mut self.out as &mut dyn Any).downcast_mut::<Collector<O::In>>()?;
        if !self.operator.on_batch_in_place(records) {
            return None;
        }
        out.push_batch(records);
        out.set_time(None);
        self.operator.on_batch_end(&mut self.out);
        Some(n)
    }

    fn advance(&mut self, watermark: Timestamp) -> Result<(), Disconnected> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.ensure_open();
        let _scope = Scope::enter(&self.ctx);
        self.watermark = watermark;
        self.out.set_time(None);
        self.operator.on_watermark(watermark, &mut self.out);
        if O::Time::FORWARDS_WATERMARKS && watermark < Timestamp::MAX {
            self.out.control(&Control::Watermark(watermark))?;
        }
        self.counters.set_out(self.out.emitted());
        Ok(())
    }

    fn idle(&mut self) -> Result<(), Disconnected> {
        if O::Time::FORWARDS_WATERMARKS {
            self.out.control(&Control::Idle)?;
        }
        Ok(())
    }

    fn tick(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.ensure_open();
        let _scope = Scope::enter(&self.ctx);
        self.out.set_time(None);
        self.operator.on_processing_time(now, &mut self.out);
        self.counters.set_out(self.out.emitted());
        self.out.tick(now)
    }

    fn end(&mut self) -> Result<(), Disconnected> {
        // End of input advances event time to its end: everything fires.
        self.advance(Timestamp::MAX)?;
        self.ensure_open();
        let _scope = Scope::enter(&self.ctx);
        self.out.set_time(None);
        self.operator.on_end(&mut self.out);
        let operator = &mut self.operator;
        report_part(&self.ctx, FINAL_CHECKPOINT, || operator.snapshot());
        self.out.control(&Control::EndOfStream)?;
        self.counters.set_out(self.out.emitted());
        Ok(())
    }
}

impl<O: Operator> InputTask for OperatorInstance<O> {
    fn open(&mut self) -> Result<(), TaskError> {
        self.ensure_open();
        Ok(())
    }

    fn on_batch(
        &mut self,
        _port: usize,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<(), TaskError> {
        let (batch, anchors) = downcast_anchored::<O::In>(batch);
        let edge = self.sender_edges.get(from.0 as usize).copied().unwrap_or(0) as usize;
        // Without acking, the records go straight in: the hot path.
        let n = match anchors {
            None => self.process(edge, batch.into_iter()),
            anchors => self.process(edge, rooted(batch, anchors)),
        };
        let out = &mut self.out;
        settle_acks(&self.ctx, || out.flush())?;
        self.counters.add_in(n);
        self.counters.set_out(self.out.emitted());
        Ok(self.out.check()?)
    }

    fn on_watermark(&mut self, watermark: Timestamp) -> Result<(), TaskError> {
        Ok(self.advance(watermark)?)
    }

    fn on_idle(&mut self) -> Result<(), TaskError> {
        Ok(self.idle()?)
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), TaskError> {
        Ok(self.tick(now)?)
    }

    fn on_port_end(&mut self, _port: usize) -> Result<(), TaskError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(self.out.flush()?)
    }

    fn on_barrier(&mut self, checkpoint: u64) -> Result<(), TaskError> {
        Ok(self.barrier(checkpoint)?)
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        Ok(self.end()?)
    }
}

/// Operators fused into an upstream task receive batches through [`Edge`].
impl<O: Operator> Edge<O::In> for OperatorInstance<O> {
    fn push(&mut self, records: &mut Vec<Record<O::In>>) -> Result<(), Disconnected> {
        self.ensure_open();
        if self.ctx.acking().is_none()
            && let Some(n) = self.process_in_place(records)
        {
            self.counters.add_in(n);
            self.counters.set_out(self.out.emitted());
            return self.out.check();
        }
        let n = self.process(0, records.drain(..));
        self.counters.add_in(n);
        self.counters.set_out(self.out.emitted());
        self.out.check()
    }

    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<O::In>>,
        roots: &mut Vec<u64>,
    ) -> Result<(), Disconnected> {
        self.ensure_open();
        // Called while the upstream processes a record of its own: its root
        // is current again afterwards.
        let upstream = acking::current_root();
        let n = self.process(
            0,
            records
                .drain(..)
                .zip(roots.drain(..))
                .map(|(record, root)| {
                    acking::set_current_root(root);
                    record
                }),
        );
        acking::set_current_root(upstream);
        self.counters.add_in(n);
        self.counters.set_out(self.out.emitted());
        self.out.check()
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        self.out.flush()
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        match control {
            Control::EndOfStream => self.end(),
            Control::Watermark(watermark) => self.advance(*watermark),
            Control::Idle => self.idle(),
            Control::Barrier(checkpoint) => self.barrier(*checkpoint),
        }
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.tick(now)
    }
}

/// The per-record loop of an operator, a function of its own so that the
/// operator and its outputs arrive as distinct (`noalias`) references and the
/// optimizer can keep their fields in registers across records.
#[inline(never)]
fn run_records<O: Operator>(
    operator: &mut O,
    out: &mut O::Out,
    ctx: &InstanceContext,
    extractor: &<O::Key as KeyKind>::Extractor<O::In>,
    records: impl Iterator<Item = Record<O::In>>,
) -> u64 {
    let mut n = 0;
    for record in records {
        n += 1;
        let time = record.time;
        out.set_time(time);
        let key = O::Key::extract(extractor, &record.value);
        let mut context = Context::new(O::Key::as_ref(&key), &mut *out, time, ctx);
        operator.on_record(record.value, &mut context);
    }
    n
}

/// Runs a [`CoOperator`] (always a task root: it has two ports).
pub struct CoOperatorInstance<C: CoOperator> {
    operator: C,
    out: C::Out,
    ctx: InstanceContext,
    counters: Arc<InstanceCounters>,
    left_keys: Vec<<C::Key as KeyKind>::Extractor<C::Left>>,
    right_keys: Vec<<C::Key as KeyKind>::Extractor<C::Right>>,
    /// Per port, each sender index's edge ordinal.
    sender_edges: Vec<Vec<u32>>,
    watermark: Timestamp,
}

impl<C: CoOperator> CoOperatorInstance<C> {
    /// Wraps `operator`, with the key extractor of each edge of each side.
    pub fn new(
        operator: C,
        out: C::Out,
        ctx: InstanceContext,
        counters: Arc<InstanceCounters>,
        left_keys: Vec<<C::Key as KeyKind>::Extractor<C::Left>>,
        right_keys: Vec<<C::Key as KeyKind>::Extractor<C::Right>>,
        sender_edges: Vec<Vec<u32>>,
    ) -> Self {
        CoOperatorInstance {
            operator,
            out,
            ctx,
            counters,
            left_keys,
            right_keys,
            sender_edges,
            watermark: Timestamp::MIN,
        }
    }
}

impl<C: CoOperator> InputTask for CoOperatorInstance<C> {
    fn open(&mut self) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        if let Some(restore) = self.ctx.restore() {
            self.operator.restore(&restore)?;
        }
        self.operator.open(&self.ctx);
        Ok(())
    }

    fn on_batch(
        &mut self,
        port: usize,
        from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        let edge = self
            .sender_edges
            .get(port)
            .and_then(|edges| edges.get(from.0 as usize))
            .copied()
            .unwrap_or(0) as usize;
        let n;
        if port == 0 {
            let (batch, anchors) = downcast_anchored::<C::Left>(batch);
            n = batch.len() as u64;
            let Some(extractor) = self.left_keys.get(edge).or(self.left_keys.first()) else {
                return Ok(());
            };
            for record in rooted(batch, anchors) {
                self.out.set_time(record.time);
                let key = C::Key::extract(extractor, &record.value);
                let mut context =
                    Context::new(C::Key::as_ref(&key), &mut self.out, record.time, &self.ctx);
                self.operator.on_left(record.value, &mut context);
            }
        } else {
            let (batch, anchors) = downcast_anchored::<C::Right>(batch);
            n = batch.len() as u64;
            let Some(extractor) = self.right_keys.get(edge).or(self.right_keys.first()) else {
                return Ok(());
            };
            for record in rooted(batch, anchors) {
                self.out.set_time(record.time);
                let key = C::Key::extract(extractor, &record.value);
                let mut context =
                    Context::new(C::Key::as_ref(&key), &mut self.out, record.time, &self.ctx);
                self.operator.on_right(record.value, &mut context);
            }
        }
        let out = &mut self.out;
        settle_acks(&self.ctx, || out.flush())?;
        self.counters.add_in(n);
        self.counters.set_out(self.out.emitted());
        Ok(self.out.check()?)
    }

    fn on_watermark(&mut self, watermark: Timestamp) -> Result<(), TaskError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        let _scope = Scope::enter(&self.ctx);
        self.watermark = watermark;
        self.out.set_time(None);
        self.operator.on_watermark(watermark, &mut self.out);
        if watermark < Timestamp::MAX {
            self.out.control(&Control::Watermark(watermark))?;
        }
        self.counters.set_out(self.out.emitted());
        Ok(())
    }

    fn on_idle(&mut self) -> Result<(), TaskError> {
        Ok(self.out.control(&Control::Idle)?)
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        self.out.set_time(None);
        self.operator.on_processing_time(now, &mut self.out);
        Ok(self.out.tick(now)?)
    }

    fn on_port_end(&mut self, port: usize) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        self.out.set_time(None);
        if port == 0 {
            self.operator.on_left_end(&mut self.out);
        } else {
            self.operator.on_right_end(&mut self.out);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(self.out.flush()?)
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        self.on_watermark(Timestamp::MAX)?;
        let _scope = Scope::enter(&self.ctx);
        self.out.set_time(None);
        self.operator.on_end(&mut self.out);
        let operator = &mut self.operator;
        report_part(&self.ctx, FINAL_CHECKPOINT, || operator.snapshot());
        self.out.control(&Control::EndOfStream)?;
        self.counters.set_out(self.out.emitted());
        Ok(())
    }

    fn on_barrier(&mut self, checkpoint: u64) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        let operator = &mut self.operator;
        report_part(&self.ctx, checkpoint, || operator.snapshot());
        Ok(self.out.control(&Control::Barrier(checkpoint))?)
    }
}

/// Runs a [`Sink`], as a task root or fused into its upstream.
pub struct SinkInstance<S: Sink> {
    sink: S,
    ctx: InstanceContext,
    counters: Arc<InstanceCounters>,
    opened: bool,
    /// The last checkpoint committed.
    committed: u64,
}

impl<S: Sink> SinkInstance<S> {
    /// Wraps `sink`.
    pub fn new(sink: S, ctx: InstanceContext, counters: Arc<InstanceCounters>) -> Self {
        SinkInstance {
            sink,
            ctx,
            counters,
            opened: false,
            committed: 0,
        }
    }

    fn ensure_open(&mut self) -> Result<(), TaskError> {
        if !self.opened {
            let _scope = Scope::enter(&self.ctx);
            self.opened = true;
            self.sink.open(&self.ctx)?;
            if let Some(restore) = self.ctx.restore() {
                self.committed = restore.checkpoint;
                self.sink.restore(&restore)?;
            }
        }
        Ok(())
    }

    /// Commits what completed checkpoints staged.
    fn commit_completed(&mut self) -> Result<(), TaskError> {
        let Some(completed) = self.ctx.checkpoints().map(|h| h.completed()) else {
            return Ok(());
        };
        if completed > self.committed {
            let _scope = Scope::enter(&self.ctx);
            self.sink.commit(completed)?;
            self.committed = completed;
        }
        Ok(())
    }

    fn barrier(&mut self, checkpoint: u64) -> Result<(), TaskError> {
        self.ensure_open()?;
        let _scope = Scope::enter(&self.ctx);
        self.sink.pre_commit(checkpoint)?;
        report_part(&self.ctx, checkpoint, || None);
        self.commit_completed()
    }

    fn end(&mut self) -> Result<(), TaskError> {
        self.ensure_open()?;
        let _scope = Scope::enter(&self.ctx);
        if let Some(hooks) = self.ctx.checkpoints().cloned() {
            // The final checkpoint: staged output becomes visible once every
            // instance of the job has reported its final part.
            self.sink.pre_commit(FINAL_CHECKPOINT)?;
            report_part(&self.ctx, FINAL_CHECKPOINT, || None);
            while !hooks.final_completed() {
                if hooks.aborted() {
                    return Err(TaskError::Disconnected);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            self.sink.commit(FINAL_CHECKPOINT)?;
        }
        Ok(self.sink.close()?)
    }

    fn write_all(&mut self, records: impl Iterator<Item = Record<S::In>>) -> Result<(), TaskError> {
        self.ensure_open()?;
        let _scope = Scope::enter(&self.ctx);
        let mut n = 0;
        for record in records {
            n += 1;
            self.sink.write(record)?;
        }
        self.counters.add_in(n);
        Ok(())
    }
}

impl<S: Sink> InputTask for SinkInstance<S> {
    fn open(&mut self) -> Result<(), TaskError> {
        self.ensure_open()
    }

    fn on_batch(
        &mut self,
        _port: usize,
        _from: SenderIdx,
        batch: Box<dyn Any + Send>,
    ) -> Result<(), TaskError> {
        let (batch, anchors) = downcast_anchored::<S::In>(batch);
        self.write_all(batch.into_iter())?;
        if let (Some(acker), Some(anchors)) = (self.ctx.acking().cloned(), anchors) {
            // Written and flushed: the records' events are done.
            let _scope = Scope::enter(&self.ctx);
            self.sink.flush()?;
            for anchor in anchors {
                acking::complete(anchor);
            }
            acking::send_pending(&acker);
        }
        Ok(())
    }

    fn on_watermark(&mut self, _watermark: Timestamp) -> Result<(), TaskError> {
        Ok(())
    }

    fn on_idle(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    fn on_processing_time(&mut self, _now: Timestamp) -> Result<(), TaskError> {
        self.commit_completed()
    }

    fn on_port_end(&mut self, _port: usize) -> Result<(), TaskError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        let _scope = Scope::enter(&self.ctx);
        Ok(self.sink.flush()?)
    }

    fn on_barrier(&mut self, checkpoint: u64) -> Result<(), TaskError> {
        self.barrier(checkpoint)
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        self.end()
    }
}

/// A fused sink cannot return its own error through [`Edge`], whose only error
/// is [`Disconnected`]; it fails the task by panicking with the error text,
/// which the runtime reports with the sink's component and instance.
impl<S: Sink> Edge<S::In> for SinkInstance<S> {
    fn push(&mut self, records: &mut Vec<Record<S::In>>) -> Result<(), Disconnected> {
        if let Err(e) = self.write_all(records.drain(..)) {
            fused_sink_failed(&self.ctx, &e);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        if let Err(e) = InputTask::flush(self) {
            fused_sink_failed(&self.ctx, &e);
        }
        Ok(())
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        let result = match control {
            Control::EndOfStream => self.end(),
            Control::Barrier(checkpoint) => self.barrier(*checkpoint),
            Control::Watermark(_) | Control::Idle => Ok(()),
        };
        if let Err(e) = result {
            fused_sink_failed(&self.ctx, &e);
        }
        Ok(())
    }

    fn on_processing_time(&mut self, _now: Timestamp) -> Result<(), Disconnected> {
        if let Err(e) = self.commit_completed() {
            fused_sink_failed(&self.ctx, &e);
        }
        Ok(())
    }
}

/// Marker payload of a panic raised to fail a task from inside a fused chain;
/// the runtime reports it as the named component's error, not as a user panic.
#[derive(Debug)]
pub struct FusedFailure {
    /// The component that failed.
    pub component: String,
    /// Its instance.
    pub instance: u32,
    /// The error text.
    pub message: String,
}

fn fused_sink_failed(ctx: &InstanceContext, error: &TaskError) -> ! {
    std::panic::panic_any(FusedFailure {
        component: ctx.component().to_string(),
        instance: ctx.instance().0,
        message: error.to_string(),
    })
}

/// The identity operator behind [`JobBuilder::merge`](crate::JobBuilder::merge).
pub struct Identity<T>(PhantomData<fn() -> T>);

impl<T> Identity<T> {
    /// The identity on `T`.
    pub fn new() -> Self {
        Identity(PhantomData)
    }
}

impl<T> Default for Identity<T> {
    fn default() -> Self {
        Self::new()
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
    type Time = crate::component::AnyTime;

    #[inline]
    fn on_record(&mut self, value: T, ctx: &mut Context<'_, NoKey, Collector<T>>) {
        ctx.emit(value);
    }
}
