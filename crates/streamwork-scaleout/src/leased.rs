//! A partition's lease, wherever it is kept: beside its checkpoints in
//! the store ([`StoreLease`]) or in the directory every process shares
//! ([`Lease`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use streamwork_runtime::CheckpointConfig;
use streamwork_state::CheckpointStore;

use crate::error::GroupError;
use crate::lease::Lease;
use crate::lease_clock::Holding;
use crate::store_lease::StoreLease;

/// Where a partition's lease is.
pub(crate) enum LeasePlace {
    /// Beside its checkpoints in the store (`STAGE/PARTITION` there): each
    /// process has a directory of its own.
    Store {
        store: Arc<dyn CheckpointStore>,
        name: String,
    },
    /// In its checkpoint directory, which every process shares.
    Directory(PathBuf),
}

/// A partition's lease, taken.
pub(crate) enum Taken {
    Store(StoreLease),
    Directory(Lease),
}

impl Taken {
    /// The lease as held: whether it was lost, and what to do when it is.
    pub(crate) fn holding(&self) -> &Holding {
        match self {
            Taken::Store(lease) => lease.holding(),
            Taken::Directory(lease) => lease.holding(),
        }
    }

    pub(crate) fn release(self) {
        match self {
            Taken::Store(lease) => lease.release(),
            Taken::Directory(lease) => lease.release(),
        }
    }

    /// The job's checkpoints under this lease: into the store through its
    /// fence, or in the shared directory as they are.
    pub(crate) fn checkpoints(&self, config: CheckpointConfig) -> CheckpointConfig {
        match self {
            Taken::Store(lease) => config.stored_in(lease.fenced()),
            Taken::Directory(_) => config,
        }
    }
}

/// A partition's job behind its lease.
pub(crate) struct Leased {
    pub(crate) place: LeasePlace,
    pub(crate) member: String,
    pub(crate) stale: Duration,
}

impl Leased {
    /// Waits for the lease (`None` if `stopped` first).
    pub(crate) fn take(&self, stopped: &AtomicBool) -> Result<Option<Taken>, GroupError> {
        match &self.place {
            LeasePlace::Store { store, name } => {
                StoreLease::acquire(store.clone(), &self.member, self.stale, stopped)
                    .map(|taken| taken.map(Taken::Store))
                    .map_err(|error| GroupError::Store {
                        task: name.clone(),
                        error,
                    })
            }
            LeasePlace::Directory(dir) => Lease::acquire(dir, &self.member, self.stale, stopped)
                .map(|taken| taken.map(Taken::Directory))
                .map_err(|error| GroupError::Lease {
                    dir: dir.clone(),
                    error,
                }),
        }
    }

    /// What the logs call the partition.
    pub(crate) fn name(&self) -> String {
        match &self.place {
            LeasePlace::Store { name, .. } => name.clone(),
            LeasePlace::Directory(dir) => dir.display().to_string(),
        }
    }
}
