//! What can go wrong writing or reading checkpoints.

use std::path::PathBuf;
use streamwork_core::{InstanceIdx, OperatorId};

/// A checkpoint could not be written or read.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The file system refused an operation.
    #[error("checkpoint log: cannot {action} {path}: {error}")]
    Io {
        /// What was being done ("create", "write", "map", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The directory holds no complete, intact checkpoint.
    #[error(
        "no usable checkpoint in {dir}{}: start the job without restoring, or point it at another checkpoint directory",
        if skipped.is_empty() { String::new() } else { format!(" (skipped: {})", skipped.join("; ")) }
    )]
    NoCheckpoint {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What was found and could not be used.
        skipped: Vec<String>,
    },
    /// A checkpoint that completed, and whose output transactional sinks
    /// may have published, cannot be read: restoring an older one would
    /// publish that output again, so nothing is restored.
    #[error(
        "checkpoint {newest} in {dir} completed (transactional sinks may have published its output) but cannot be used{}{}: restoring {} would publish output again. Repair or restore {dir} from a backup; to start over instead, remove it together with the job's committed output",
        usable.map_or(String::new(), |u| format!(", and the newest usable one is {u}")),
        if skipped.is_empty() { String::new() } else { format!(" ({})", skipped.join("; ")) },
        usable.map_or("from nothing".to_string(), |u| format!("checkpoint {u}"))
    )]
    CompleteCheckpointUnusable {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The newest checkpoint known to have completed.
        newest: streamwork_core::CheckpointId,
        /// The newest checkpoint that could be restored.
        usable: Option<streamwork_core::CheckpointId>,
        /// What was found damaged or missing.
        skipped: Vec<String>,
    },
    /// A payload is not a valid archive of the type asked for.
    #[error(
        "the snapshot of operator {operator} part {part} in checkpoint {checkpoint} is not a valid archive of `{type_name}`: {reason}"
    )]
    InvalidArchive {
        /// The checkpoint.
        checkpoint: streamwork_core::CheckpointId,
        /// The operator's id.
        operator: OperatorId,
        /// The instance index or first key group.
        part: InstanceIdx,
        /// The type asked for.
        type_name: &'static str,
        /// What rkyv's validation found.
        reason: String,
    },
    /// A value could not be archived.
    #[error("cannot archive a value of `{type_name}`: {reason}")]
    Serialize {
        /// The value's type.
        type_name: &'static str,
        /// What rkyv said.
        reason: String,
    },
    /// A snapshot's schema version is one the state type cannot read.
    #[error(
        "cannot restore operator {operator} part {part} as `{type_name}`: its snapshot has schema version {found}, the type reads version {supported}; {reason}"
    )]
    IncompatibleSchema {
        /// The operator's id.
        operator: OperatorId,
        /// The instance index or first key group.
        part: InstanceIdx,
        /// The state type.
        type_name: &'static str,
        /// The version the snapshot was written with.
        found: u32,
        /// The version the type writes.
        supported: u32,
        /// What to do about it.
        reason: &'static str,
    },
    /// A snapshot was written by state types of another layout (a field
    /// added, removed, renamed or reordered; a type changed): its bytes
    /// would read back as values they do not hold.
    #[error(
        "cannot restore operator {operator} part {part} as `{type_name}`: it was written with another layout of its types (fingerprint {found:#018x}, this build's is {expected:#018x}): a field, variant or type of its state changed since. Resume with the build that wrote the checkpoint, or start over without restoring"
    )]
    LayoutChanged {
        /// The operator's id.
        operator: OperatorId,
        /// The instance index or first key group.
        part: InstanceIdx,
        /// The state type.
        type_name: &'static str,
        /// The fingerprint the snapshot was written with.
        found: u64,
        /// This build's.
        expected: u64,
    },
    /// Keyed state was written with another number of key groups.
    #[error(
        "operator {operator}'s keyed state was written with {found} key groups, the job now has {expected}: the number of key groups is fixed for the life of a job; restore with {found}"
    )]
    KeyGroupsChanged {
        /// The operator's id.
        operator: OperatorId,
        /// Key groups in the snapshot.
        found: u32,
        /// Key groups of the job restoring it.
        expected: u32,
    },
    /// A field of an operator's state cannot be restored as the operator is
    /// now (`#[derive(State)]`).
    #[error("cannot restore field `{field}` of `{component}`: {reason}")]
    FieldRefused {
        /// The component.
        component: String,
        /// The field (empty when the whole snapshot is refused).
        field: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A run of a stored state (`StoredState`) in the checkpoint log cannot
    /// be read: it fails its checksum or does not hold the state's type. The
    /// log's damage, found when the run was first read rather than when the
    /// checkpoint loaded.
    #[error(
        "a run of stored state in the checkpoint log cannot be read ({reason}): the checkpoint directory is damaged; restore it from a copy, or remove it to start over"
    )]
    RunUnreadable {
        /// What is wrong with it.
        reason: String,
    },
    /// A snapshot larger than a record can describe.
    #[error("a snapshot of {len} bytes does not fit in a checkpoint log record")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The checkpoint store (object storage) refused an operation: the
    /// checkpoint does not count as complete.
    #[error(
        "checkpoint store {store}: cannot {action} `{object}`: {reason}. Check that the store is reachable and the credentials allow it; the job restores from the store's last complete checkpoint"
    )]
    Store {
        /// The store (its kind and location).
        store: String,
        /// What was being done ("upload", "download", "list", "delete").
        action: &'static str,
        /// The object's name.
        object: String,
        /// The store's error.
        reason: String,
    },
}

streamwork_core::debug_as_display!(StateError);

impl StateError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        StateError::Io {
            action,
            path: path.into(),
            error: source,
        }
    }
}
