//! How a job takes checkpoints, and what the coordinator measured of each.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::{CheckpointId, Delivery};
use streamwork_state::CheckpointStore;

/// How a job takes checkpoints and restores from them.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// The checkpoint directory (created if need be).
    pub dir: PathBuf,
    /// Time between the end of one checkpoint and the start of the next.
    pub interval: Duration,
    /// At-least-once or exactly-once (at-most-once takes no checkpoints).
    pub delivery: Delivery,
    /// Restore from the directory's last complete checkpoint, if it has one.
    pub restore: bool,
    /// Complete checkpoints kept.
    pub retain: usize,
    /// Restore a changed job even if a component that kept state in the
    /// checkpoint is gone (its state is dropped). Off by default: such a
    /// restore is refused, naming the components.
    pub drop_removed_state: bool,
    /// A copy of the directory beyond this machine (object storage): every
    /// checkpoint is copied there before it counts as complete, and a
    /// restore starts from the store's newest checkpoint, so that a process
    /// with an empty directory of its own carries on (see
    /// [`Mirror`](streamwork_state::Mirror)). `None`: the directory alone.
    pub store: Option<Arc<dyn CheckpointStore>>,
    /// For the first run of one partition of a stage whose partition count
    /// changed (see [`rescaled_from`](Self::rescaled_from)): the
    /// checkpoint directories of the stage's old partitions, in order, and
    /// the components that start anew rather than take their state.
    pub rescaled: Option<RescaledFrom>,
}

/// The checkpoints a stage partition restores from when its own directory
/// holds none yet, after its stage's partition count changed: part `b` of
/// every component is old partition `b`'s, so that keyed state moves by
/// key group, as at a restore at another parallelism in one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RescaledFrom {
    /// Each old partition's checkpoint directory (loaded, never written),
    /// by old partition.
    pub dirs: Vec<PathBuf>,
    /// Components offered no state (they start anew: the stage's exchange
    /// ends, whose logs the runner moved).
    pub fresh: Vec<String>,
}

impl CheckpointConfig {
    /// Checkpoints into `dir` every `interval`, exactly-once, restoring
    /// from the directory when it holds a complete checkpoint.
    pub fn new(dir: impl Into<PathBuf>, interval: Duration) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            interval,
            delivery: Delivery::ExactlyOnce,
            restore: true,
            retain: 3,
            drop_removed_state: false,
            store: None,
            rescaled: None,
        }
    }

    /// The same, restoring from the checkpoints of a stage's old partitions
    /// when the directory (and the store) hold none yet.
    pub fn rescaled_from(mut self, rescaled: RescaledFrom) -> Self {
        self.rescaled = Some(rescaled);
        self
    }

    /// The same, with `delivery`.
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// The same, with every checkpoint copied into `store` (see
    /// [`store`](Self::store)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use streamwork::runtime::CheckpointConfig;
    /// use streamwork::state::DirectoryStore;
    /// let config = CheckpointConfig::new("/tmp/ckpt", Duration::from_secs(1))
    ///     .stored_in(Arc::new(DirectoryStore::new("/mnt/shared/ckpt")));
    /// assert!(config.store.is_some());
    /// ```
    pub fn stored_in(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.store = Some(store);
        self
    }
}

/// One checkpoint as the coordinator completed it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointStats {
    /// Its id.
    pub id: CheckpointId,
    /// From the trigger to the durable commit record.
    pub duration: Duration,
    /// Bytes of state written.
    pub bytes: u64,
    /// Whether it is the final checkpoint, taken at end of input.
    pub is_final: bool,
    /// Whether an instance asked for it before the interval (a memory
    /// budget passed: [`CheckpointView::request_checkpoint`](streamwork_core::checkpoint::CheckpointView::request_checkpoint)).
    pub early: bool,
    /// The longest time a task thread was held by taking its part (records
    /// waited meanwhile), and the instance that took it.
    pub longest_pause: Duration,
    /// The instance of [`longest_pause`](Self::longest_pause): its
    /// component and index.
    pub paused_most: Option<(String, InstanceIdx)>,
    /// The longest alignment: from the barrier's first arrival on an input
    /// of a task to its last.
    pub longest_alignment: Duration,
}
