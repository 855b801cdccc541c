//! Typed stream handles: how a job being built names an output channel.
//!
//! A [`Stream<T, Tm>`] is what adding a component returns for each output
//! channel: ids and types, nothing else. How an edge out of it is grouped
//! (`shuffle`, `key_by`, ...) is chosen through the engine's builder
//! (`streamwork::runtime::Groupings`, in the prelude), which makes the route
//! that edge's records take.

use std::marker::PhantomData;

use crate::id::{JobId, NodeId};
use crate::stream_time::Unwatermarked;

/// A typed handle on one output channel of a component, used to connect it.
///
/// `Tm` says whether the stream carries watermarks ([`Watermarked`](crate::Watermarked))
/// or not ([`Unwatermarked`]): an event-time operator only accepts watermarked streams.
pub struct Stream<T, Tm = Unwatermarked> {
    job: JobId,
    node: NodeId,
    channel: u32,
    _type: PhantomData<fn() -> (T, Tm)>,
}

impl<T, Tm> Clone for Stream<T, Tm> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, Tm> Copy for Stream<T, Tm> {}

impl<T, Tm> std::fmt::Debug for Stream<T, Tm> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:?}.{})", self.node, self.channel)
    }
}

impl<T, Tm> Stream<T, Tm> {
    /// The job the stream belongs to.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The component that emits it.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Which of the component's output channels it is.
    pub fn channel(&self) -> u32 {
        self.channel
    }

    #[doc(hidden)]
    pub fn __new(job: JobId, node: NodeId, channel: u32) -> Self {
        Stream {
            job,
            node,
            channel,
            _type: PhantomData,
        }
    }
}
