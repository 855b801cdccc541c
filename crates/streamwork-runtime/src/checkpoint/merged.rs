//! The checkpoints of a stage's old partitions offered as one, to a
//! partition of the stage restarted at another partition count: part `b` of
//! every component is old partition `b`'s own part (each old partition was
//! told it is instance `b` of the old count), so keyed state moves by key
//! group as it does at a restore at another parallelism in one process.

use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::{
    CheckpointId, RestoreSource, RestoredPart, SharedBytes, SideRecordKey,
};
use streamwork_state::{Checkpoint, operator_id, side_operator_id};

use super::restore::{FINAL_MARKER, finished_marker};

/// Old partitions' checkpoints, by old partition, as one restore.
pub(crate) struct Merged {
    /// Each old partition's checkpoint (`None`: it took none).
    checkpoints: Vec<Option<Checkpoint>>,
    /// The newest of their ids: what the run restores "from" (its own ids
    /// continue past it, so that no sink takes a new checkpoint of a
    /// smaller id for one it restored).
    newest: CheckpointId,
    /// Components offered no state.
    fresh: Vec<String>,
}

impl Merged {
    pub(crate) fn new(checkpoints: Vec<Option<Checkpoint>>, fresh: Vec<String>) -> Self {
        let newest = checkpoints
            .iter()
            .flatten()
            .map(Checkpoint::id)
            .max()
            .unwrap_or(CheckpointId::NONE);
        Merged {
            checkpoints,
            newest,
            fresh,
        }
    }

    fn offers(&self, component: &str) -> bool {
        !self.fresh.iter().any(|fresh| fresh == component)
    }

    /// Old partition `b`'s checkpoint and the part its instance wrote.
    fn of(&self, b: usize) -> Option<&Checkpoint> {
        self.checkpoints.get(b)?.as_ref()
    }
}

impl RestoreSource for Merged {
    fn checkpoint(&self) -> CheckpointId {
        self.newest
    }

    /// Only if every old partition had ended.
    fn is_final(&self) -> bool {
        !self.checkpoints.is_empty()
            && self.checkpoints.iter().all(|c| {
                c.as_ref().is_some_and(|c| {
                    c.snapshot(operator_id(FINAL_MARKER), InstanceIdx(0))
                        .is_some()
                })
            })
    }

    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>> {
        if !self.offers(component) {
            return Vec::new();
        }
        let operator = operator_id(component);
        (0..self.checkpoints.len())
            .filter_map(|b| {
                let snapshot = self.of(b)?.snapshot(operator, InstanceIdx(b as u32))?;
                Some(RestoredPart {
                    part: InstanceIdx(b as u32),
                    schema: snapshot.schema(),
                    bytes: snapshot.bytes(),
                })
            })
            .collect()
    }

    fn ended(&self, component: &str) -> Vec<InstanceIdx> {
        let marker = operator_id(&finished_marker(component));
        (0..self.checkpoints.len())
            .filter(|&b| {
                self.of(b).is_some_and(|c| {
                    c.snapshot(operator_id(FINAL_MARKER), InstanceIdx(0))
                        .is_some()
                        || c.snapshot(marker, InstanceIdx(b as u32)).is_some()
                })
            })
            .map(|b| InstanceIdx(b as u32))
            .collect()
    }

    /// Part `b`'s side records are in old partition `b`'s log; a record of
    /// "this checkpoint" is of the checkpoint restored from that log.
    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes> {
        if !self.offers(key.component) {
            return None;
        }
        let old = self.of(key.part.index())?;
        let checkpoint = if key.checkpoint == self.newest {
            old.id()
        } else {
            key.checkpoint
        };
        let operator = side_operator_id(key.component, key.stream);
        old.shared(checkpoint, operator, key.part)
    }
}
