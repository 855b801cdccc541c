//! What every transactional sink does when its input ends.

use streamwork_core::checkpoint::CheckpointId;
use streamwork_core::{ConnectorError, Sink};

/// Stages and commits what `sink` holds as the final checkpoint's output,
/// as its `close` does: without checkpoints, everything becomes visible at
/// the end; with them, the final checkpoint has already staged and
/// committed it all, and this finds nothing left.
pub(crate) fn commit_at_end<S: Sink>(sink: &mut S) -> Result<(), ConnectorError> {
    sink.pre_commit(CheckpointId::FINAL)?;
    sink.commit(CheckpointId::FINAL)
}
