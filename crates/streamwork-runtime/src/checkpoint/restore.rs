//! Restoring a job: the last complete checkpoint of its directory, offered
//! to every instance.

use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::{CheckpointId, RestoreSource, RestoredPart};
use streamwork_state::{Checkpoint, StateError, operator_id};

/// A loaded checkpoint offered to the instances of a restarted job.
pub(crate) struct Restored {
    checkpoint: Checkpoint,
}

/// The component name under which the final checkpoint carries its marker.
pub(crate) const FINAL_MARKER: &str = "__streamwork_final_checkpoint__";

impl RestoreSource for Restored {
    fn checkpoint(&self) -> CheckpointId {
        self.checkpoint.id()
    }

    fn is_final(&self) -> bool {
        self.checkpoint
            .snapshot(operator_id(FINAL_MARKER), 0)
            .is_some()
    }

    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>> {
        let operator = operator_id(component);
        self.checkpoint
            .snapshots()
            .filter(|s| s.operator() == operator)
            .map(|s| RestoredPart {
                part: InstanceIdx(s.part()),
                schema: s.schema(),
                bytes: s.bytes(),
            })
            .collect()
    }
}

/// Loads the last complete checkpoint of `dir`, if there is one.
pub(crate) fn load(dir: &std::path::Path) -> Result<Option<Restored>, StateError> {
    if !dir.exists() {
        return Ok(None);
    }
    match streamwork_state::load_latest(dir) {
        Ok(checkpoint) => Ok(Some(Restored { checkpoint })),
        Err(StateError::NoCheckpoint { skipped, .. }) => {
            for line in skipped {
                tracing::warn!("checkpoint directory {}: skipped {line}", dir.display());
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
