//! Ids as newtypes: instances, checkpoints, operators' state, ack roots,
//! components and jobs being built. None of them is ever passed around as a bare integer.

use std::fmt;

/// Index of one parallel instance of a component, from 0.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceIdx(pub u32);

impl InstanceIdx {
    /// The index as a `usize`, for indexing per-instance tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for InstanceIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The stable id of a component's state in checkpoints: a hash of its name
/// (or of its name and a side stream), the same in every version of the
/// program and on every platform (`streamwork::state::operator_id`).
/// Shown in hexadecimal.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperatorId(pub u64);

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The id of one checkpoint. Ids grow: a later checkpoint of a job has a
/// larger id. [`CheckpointId::NONE`] stands for "no checkpoint yet" and
/// [`CheckpointId::FINAL`] for the snapshot taken at the end of input, which
/// the coordinator stores under a real id.
///
/// ```
/// use streamwork::core::CheckpointId;
/// assert!(CheckpointId::new(3) > CheckpointId::new(2));
/// assert!(CheckpointId::NONE < CheckpointId::new(1));
/// assert_eq!(CheckpointId::new(7).to_string(), "7");
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckpointId(u64);

impl CheckpointId {
    /// No checkpoint: what "the last complete checkpoint" is before the first.
    pub const NONE: CheckpointId = CheckpointId(0);
    /// The snapshot every instance takes at the end of its input.
    pub const FINAL: CheckpointId = CheckpointId(u64::MAX);

    /// The checkpoint with id `raw`.
    #[inline]
    pub const fn new(raw: u64) -> Self {
        CheckpointId(raw)
    }

    /// The raw id, as the checkpoint log stores it.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is [`CheckpointId::FINAL`].
    pub fn is_final(self) -> bool {
        self == CheckpointId::FINAL
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_final() {
            f.write_str("final")
        } else {
            self.0.fmt(f)
        }
    }
}

/// The id of one source record's tree of derived events, in a job run with
/// acking (chapter 5). [`RootId::UNTRACKED`] marks a record that belongs to
/// no tree (a window's result, emitted from state rather than from one
/// record).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RootId(u64);

impl RootId {
    /// A record of no tree.
    pub const UNTRACKED: RootId = RootId(0);

    /// The tree with this raw id.
    #[inline]
    pub const fn from_raw(raw: u64) -> Self {
        RootId(raw)
    }

    /// The raw id.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Whether the record belongs to a tree.
    #[inline]
    pub fn is_tracked(self) -> bool {
        self.0 != 0
    }
}

/// Identifies a component within the job being built.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The id as a `usize`, for indexing per-component tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Identifies one job builder, so that a stream of one job cannot be wired
/// into another.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobId(pub u64);
