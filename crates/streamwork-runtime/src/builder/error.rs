//! Why a job graph cannot run, found when it is built.

use streamwork_core::checkpoint::Delivery;

/// A job graph that cannot run, found when it is built.
#[derive(Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The job has no source.
    #[error("job `{job}` has no source: add one with `source`")]
    NoSource {
        /// The job's name.
        job: String,
    },
    /// Two components share a name.
    #[error("two components are named `{name}`: component names must be unique")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// An edge that drops records in a job that promises not to lose any.
    #[error(
        "the edge from `{from}` to `{to}` drops records when full, but the job promises {delivery} delivery: use `Overflow::Block` (the default) or backpressure watermarks on it"
    )]
    DroppingEdge {
        /// The sending component.
        from: String,
        /// The receiving component.
        to: String,
        /// The delivery the job promises.
        delivery: Delivery,
    },
    /// A component that cannot keep the delivery the job promises: a
    /// source that is not replayable, an operator whose state its
    /// checkpoints leave out, a sink that would publish replays twice.
    #[error(
        "component `{component}` cannot keep the {delivery} delivery the job promises: {problem}"
    )]
    CannotKeepDelivery {
        /// The component.
        component: String,
        /// The delivery the job promises.
        delivery: Delivery,
        /// Why not, and what to do.
        problem: String,
    },
    /// Backpressure watermarks outside `0 <= low < high <= 1`.
    #[error(
        "the edge from `{from}` to `{to}` pauses its sources above {high} and resumes below {low}: both are fractions of the queue's capacity, with 0 < high <= 1 and 0 <= low < high (for example `pause_sources_above(0.8, 0.5)`)"
    )]
    BadPauseWatermarks {
        /// The sending component.
        from: String,
        /// The receiving component.
        to: String,
        /// The high watermark given.
        high: f64,
        /// The low watermark given.
        low: f64,
    },
    /// An output channel no component reads, not discarded on purpose.
    #[error(
        "output channel `{channel}` of `{component}` is read by no component: connect it, or discard it on purpose (`JobBuilder::discard`, `drop {component}.{channel};` in `job!`)"
    )]
    UnreadChannel {
        /// The component.
        component: String,
        /// The channel (`out` for a single one).
        channel: String,
    },
    /// A parallelism of zero.
    #[error("component `{component}` has parallelism 0: it must be at least 1")]
    ZeroParallelism {
        /// The component.
        component: String,
    },
    /// A keyed component's parallelism exceeds the number of key groups.
    #[error(
        "component `{component}` has parallelism {parallelism} but the job has only {key_groups} key groups: raise the key groups or lower the parallelism"
    )]
    TooManyInstances {
        /// The component.
        component: String,
        /// Its parallelism.
        parallelism: u32,
        /// The job's key groups.
        key_groups: u32,
    },
    /// A forward edge between components of different parallelism.
    #[error(
        "forward edge `{from}` -> `{to}` joins parallelism {from_parallelism} to {to_parallelism}: forward needs equal parallelism; use shuffle or a key"
    )]
    ForwardMismatch {
        /// Upstream component.
        from: String,
        /// Downstream component.
        to: String,
        /// Upstream parallelism.
        from_parallelism: u32,
        /// Downstream parallelism.
        to_parallelism: u32,
    },
    /// An input port with no stream connected.
    #[error("input {port} of component `{component}` has no stream connected")]
    UnconnectedInput {
        /// The component.
        component: String,
        /// The port index.
        port: u32,
    },
    /// A stream handle from another job builder.
    #[error("component `{component}` is connected to a stream of another job")]
    ForeignStream {
        /// The component.
        component: String,
    },
}

streamwork_core::debug_as_display!(GraphError);
