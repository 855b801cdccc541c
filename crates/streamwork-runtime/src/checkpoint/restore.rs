//! Restoring a job: the last complete checkpoint of its directory, offered
//! to every instance.

use std::time::{Duration, Instant};

use streamwork_core::InstanceIdx;
use streamwork_core::checkpoint::{
    CheckpointId, RestoreSource, RestoredPart, SharedBytes, SideRecordKey,
};
use streamwork_state::{Checkpoint, StateError, operator_id, side_operator_id};

/// A loaded checkpoint offered to the instances of a restarted job.
pub(crate) struct Restored {
    checkpoint: Checkpoint,
}

/// The component name under which the final checkpoint carries its marker.
pub(crate) const FINAL_MARKER: &str = "__streamwork_final_checkpoint__";

/// The component name under which every checkpoint lists the job's
/// components (their names, one per line).
pub(crate) const COMPONENTS_MARKER: &str = "__streamwork_components__";

/// The component name under which a checkpoint marks the instances of
/// `component` that had ended their input: `PREFIX` + `component`, one
/// empty snapshot per such instance.
pub(crate) fn finished_marker(component: &str) -> String {
    format!("__streamwork_finished__{component}")
}

impl RestoreSource for Restored {
    fn checkpoint(&self) -> CheckpointId {
        self.checkpoint.id()
    }

    fn is_final(&self) -> bool {
        self.checkpoint
            .snapshot(operator_id(FINAL_MARKER), InstanceIdx(0))
            .is_some()
    }

    fn ended(&self, component: &str) -> Vec<InstanceIdx> {
        let marker = operator_id(&finished_marker(component));
        self.checkpoint
            .snapshots()
            .filter(|s| s.operator() == marker)
            .map(|s| s.part())
            .collect()
    }

    fn side_record(&self, key: SideRecordKey<'_>) -> Option<SharedBytes> {
        let operator = side_operator_id(key.component, key.stream);
        self.checkpoint.shared(key.checkpoint, operator, key.part)
    }

    fn parts(&self, component: &str) -> Vec<RestoredPart<'_>> {
        let operator = operator_id(component);
        self.checkpoint
            .snapshots()
            .filter(|s| s.operator() == operator)
            .map(|s| RestoredPart {
                part: s.part(),
                schema: s.schema(),
                bytes: s.bytes(),
            })
            .collect()
    }
}

/// Where a run started from: the checkpoint restored, and what of the
/// checkpoint directory could not be read on the way (torn records a crash
/// left, damaged older checkpoints), reported in the job's report and on
/// standard error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The checkpoint restored, if any.
    pub restored_from: Option<CheckpointId>,
    /// What was skipped, one line each.
    pub skipped: Vec<String>,
    /// Finding, mapping and checking the checkpoint restored.
    pub load: Duration,
    /// The longest restore of one instance from it (its state rebuilt
    /// from the mapped checkpoint); instances restore in parallel, on their
    /// own task threads.
    pub longest_instance_restore: Duration,
}

impl Restored {
    /// The components of the checkpointed job that kept state and that
    /// `job` no longer has (none if the checkpoint does not list them: it
    /// was written before checkpoints did).
    pub(crate) fn removed_components(&self, job: &[&str]) -> Vec<String> {
        let Some(list) = self
            .checkpoint
            .snapshot(operator_id(COMPONENTS_MARKER), InstanceIdx(0))
        else {
            return Vec::new();
        };
        let names = String::from_utf8_lossy(list.bytes()).into_owned();
        names
            .lines()
            .filter(|name| !job.contains(name))
            .filter(|name| {
                let id = operator_id(name);
                self.checkpoint.snapshots().any(|s| s.operator() == id)
            })
            .map(String::from)
            .collect()
    }
}

/// Loads the last complete checkpoint of `dir`, if there is one. A newest
/// complete checkpoint that cannot be read is an error, never a fall back
/// to an older one or to a fresh start (see
/// [`load_latest`](streamwork::state::load_latest)).
pub(crate) fn load(dir: &std::path::Path) -> Result<(Option<Restored>, Recovery), StateError> {
    if !dir.exists() {
        tracing::info!(
            "no checkpoint directory at {} yet: starting from the beginning",
            dir.display()
        );
        return Ok((None, Recovery::default()));
    }
    let loading = Instant::now();
    let (restored, skipped) = match streamwork_state::load_latest(dir) {
        Ok(checkpoint) => {
            let skipped = checkpoint.skipped().to_vec();
            (Some(Restored { checkpoint }), skipped)
        }
        Err(StateError::NoCheckpoint { skipped, .. }) => (None, skipped),
        Err(e) => return Err(e),
    };
    for line in &skipped {
        // Visible without a tracing subscriber: what was lost is the
        // user's to know.
        eprintln!(
            "streamwork: checkpoint directory {}: skipped {line}",
            dir.display()
        );
    }
    let recovery = Recovery {
        restored_from: restored.as_ref().map(|r| r.checkpoint.id()),
        skipped,
        load: loading.elapsed(),
        longest_instance_restore: Duration::ZERO,
    };
    match recovery.restored_from {
        Some(id) => tracing::info!(
            "restoring from checkpoint {id} of {} (loaded in {:.1} ms)",
            dir.display(),
            recovery.load.as_secs_f64() * 1e3
        ),
        None => tracing::info!(
            "no complete checkpoint in {}: starting from the beginning",
            dir.display()
        ),
    }
    Ok((restored, recovery))
}
