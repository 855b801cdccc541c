//! Rescaling a job run as stages: a process whose job asks for other
//! partition counts than the group's [`Layout`] records moves the group to
//! the next generation before any partition job runs.
//!
//! It takes the lease of every partition of the old layout (so no process
//! of the old layout runs any of them meanwhile; a dead one's leases go
//! stale), and then, from the old partitions' latest checkpoints:
//!
//! 1. sends what every exchange writer's part holds staged or
//!    unacknowledged into its topic (as that writer, restored, would), so
//!    that each old topic holds every record a completed checkpoint covers;
//! 2. for each exchange whose partition count changes, reads each old
//!    partition from where its reader's checkpoint is, admits what that
//!    reader would (its record of each writer), and writes it into the
//!    exchange's new topic, routed by key group over the new partitions,
//!    numbered by a writer of the migration's own: the new readers start
//!    with those records, before anything the new writers write;
//! 3. writes the new layout, conditionally (another process that moved the
//!    group first wins, and this one takes its layout).
//!
//! A stage whose partition count changed gets new checkpoint paths; each of
//! its new partitions restores, until it has checkpoints of its own, from
//! all the old partitions' checkpoints, taking its key groups' state
//! ([`RescaledFrom`](streamwork_runtime::RescaledFrom)); its exchange ends
//! start anew. A writer whose exchange moved starts anew in the new topic.
//! Every step can be done again from the start after a crash: the old
//! checkpoints do not change, what is sent again is dropped as read, and
//! the migration's writer numbers the same records the same.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::stages::StagePlan;
use streamwork_core::checkpoint::RestoredPart;
use streamwork_core::{InstanceContext, InstanceIdx, Sink};
use streamwork_state::{
    Checkpoint, CheckpointStore, DirectoryStore, Mirror, StateError, load_latest, operator_id,
};

use crate::error::GroupError;
use crate::exchange::{ExchangeSink, Unsent, read_part, resend_part, undelivered};
use crate::layout::{LAYOUT, Layout, migration_writer, stage_path};
use crate::leased::{LeasePlace, Leased, Taken};

/// What a rescale needs of the runner.
pub(crate) struct Rescaler<'a> {
    pub(crate) brokers: &'a str,
    pub(crate) group: &'a str,
    pub(crate) extra: &'a [(String, String)],
    pub(crate) checkpoint_dir: &'a Path,
    pub(crate) store: Option<&'a Arc<dyn CheckpointStore>>,
    /// A partition lease's stale time.
    pub(crate) stale: Duration,
    pub(crate) member: &'a str,
    /// How long to wait for the old partitions' leases.
    pub(crate) wait: Duration,
}

/// A move from layout `old` to `next`, which the layout object holds at
/// `version` in `root`; `create` makes an exchange topic.
#[derive(Copy, Clone)]
struct Migration<'a> {
    plan: &'a StagePlan,
    old: &'a Layout,
    next: &'a Layout,
    root: &'a Arc<dyn CheckpointStore>,
    version: &'a str,
    create: &'a dyn Fn(&str, u32) -> Result<(), GroupError>,
}

impl Migration<'_> {
    /// Whether the layout object is still at the version the move started
    /// from.
    fn still_current(&self) -> Result<bool, GroupError> {
        let now = self.root.read_versioned(LAYOUT).map_err(layout_error)?;
        Ok(now.as_ref().map(|(_, v)| v.as_str()) == Some(self.version))
    }
}

/// The old layout's partitions' latest checkpoints, by stage and partition.
type OldCheckpoints = Vec<Vec<Option<Checkpoint>>>;

impl Rescaler<'_> {
    /// Where the layout is kept: the store, or the shared directory.
    fn root(&self) -> Arc<dyn CheckpointStore> {
        match self.store {
            Some(store) => store.clone(),
            None => Arc::new(DirectoryStore::new(self.checkpoint_dir)),
        }
    }

    /// The layout the job runs in: the group's if it fits `wanted`, the
    /// first one if the group has none, else the next generation, after
    /// moving the group to it. `create` makes an exchange topic.
    pub(crate) fn settle(
        &self,
        plan: &StagePlan,
        wanted: Layout,
        create: &dyn Fn(&str, u32) -> Result<(), GroupError>,
    ) -> Result<Layout, GroupError> {
        let root = self.root();
        loop {
            match root.read_versioned(LAYOUT).map_err(layout_error)? {
                None => {
                    let text = wanted.to_text().into_bytes();
                    if root
                        .write_if(LAYOUT, text, None)
                        .map_err(layout_error)?
                        .is_some()
                    {
                        return Ok(wanted);
                    }
                }
                Some((bytes, version)) => {
                    let stored = Layout::parse(&String::from_utf8_lossy(&bytes))
                        .map_err(|unreadable| GroupError::Layout {
                            problem: format!("{unreadable}: it was written by another version, or damaged: restore it from a copy, or run the job as a new group"),
                        })?;
                    if stored.fits(&wanted) {
                        return Ok(stored);
                    }
                    if !stored.same_shape(&wanted) {
                        return Err(GroupError::Layout {
                            problem: "the job's stages or exchanges are not those the group ran (only partition counts can change between runs): run the changed job as a new group".to_string(),
                        });
                    }
                    let mut next = stored.rescaled_to(&wanted);
                    next.name_previous(&stored, self.group);
                    let migration = Migration {
                        plan,
                        old: &stored,
                        next: &next,
                        root: &root,
                        version: &version,
                        create,
                    };
                    if self.migrate(&migration)? {
                        return Ok(next);
                    }
                }
            }
        }
    }

    /// Moves the group from `old` to `next` (see the [module
    /// docs](self)); `false` if the layout changed meanwhile.
    fn migrate(&self, migration: &Migration<'_>) -> Result<bool, GroupError> {
        let (old, next) = (migration.old, migration.next);
        tracing::warn!(
            "kafka group `{}`: rescaling from generation {} ({}) to {} ({}); every partition of the old layout must be free first",
            self.group,
            old.generation,
            counts(old),
            next.generation,
            counts(next)
        );
        // One process moves the group: the others wait for it here, then
        // find the layout moved.
        let lock = self.take_lock()?;
        // The lock's last holder may have moved the group already, and its
        // processes run the new layout's partitions, some of them under the
        // old one's lease names: look before waiting for those leases.
        if !migration.still_current()? {
            lock.release();
            return Ok(false);
        }
        let outcome = self.take_all(old).and_then(|leases| {
            let outcome = self.move_records(migration);
            for lease in leases {
                lease.release();
            }
            outcome
        });
        lock.release();
        if let Ok(true) = outcome {
            tracing::warn!(
                "kafka group `{}`: rescaled to generation {}",
                self.group,
                next.generation
            );
        }
        outcome
    }

    fn move_records(&self, migration: &Migration<'_>) -> Result<bool, GroupError> {
        if !migration.still_current()? {
            return Ok(false);
        }
        let Migration {
            plan,
            old,
            next,
            root,
            version,
            create,
        } = *migration;
        let checkpoints = self.load_all(old)?;
        let part_of = |stage: usize, partition: u32, component: &str| {
            let checkpoint = checkpoints[stage][partition as usize].as_ref()?;
            let snapshot = checkpoint.snapshot(operator_id(component), InstanceIdx(partition))?;
            Some(RestoredPart {
                part: InstanceIdx(partition),
                schema: snapshot.schema(),
                bytes: snapshot.bytes(),
            })
        };
        // 1. Every old writer's staged records into its topic.
        for exchange in &plan.exchanges {
            let stage = exchange.from_stage;
            for partition in 0..old.stages[stage].partitions {
                if let Some(part) = part_of(stage, partition, &format!("{}:write", exchange.name)) {
                    resend_part(self.brokers, self.extra, &part)?;
                }
            }
        }
        // 2. The undelivered records of each moved exchange into its new
        //    topic.
        for (index, exchange) in plan.exchanges.iter().enumerate() {
            let (before, after) = (&old.exchanges[index], &next.exchanges[index]);
            if before.partitions == after.partitions {
                continue;
            }
            let (from, to) = (before.topic(self.group), after.topic(self.group));
            create(&to, after.partitions)?;
            for partition in 0..before.partitions {
                let reader = part_of(
                    exchange.to_stage,
                    partition,
                    &format!("{}:read", exchange.name),
                );
                let (position, log) = match reader.as_ref().map(read_part) {
                    Some(Some((positions, log))) => (
                        positions.get(&(partition as i32)).copied().unwrap_or(0),
                        log,
                    ),
                    Some(None) => {
                        return Err(GroupError::Layout {
                            problem: format!(
                                "the reader of `{from}` partition {partition} has a checkpoint of another version of the exchange protocol"
                            ),
                        });
                    }
                    None => (0, Default::default()),
                };
                let records = undelivered(
                    self.brokers,
                    self.extra,
                    &from,
                    partition as i32,
                    position,
                    log,
                )?;
                let moved = records.len();
                let mut sink = ExchangeSink::new(
                    self.brokers,
                    &to,
                    after.partitions,
                    plan.key_groups,
                    migration_writer(after.generation, partition),
                    self.extra,
                    Unsent::default(),
                );
                let ctx = InstanceContext::new("rescale", InstanceIdx(0), 1, plan.key_groups);
                sink.open(&ctx)?;
                for record in records {
                    sink.write(record)?;
                }
                sink.close()?;
                tracing::info!(
                    "kafka group `{}`: moved {moved} records of `{from}` partition {partition} (from offset {position}) into `{to}`",
                    self.group
                );
            }
        }
        // 3. The new layout.
        let text = next.to_text().into_bytes();
        Ok(root
            .write_if(LAYOUT, text, Some(version))
            .map_err(layout_error)?
            .is_some())
    }

    /// The group's rescale lock: a lease of its own beside the layout.
    fn take_lock(&self) -> Result<Taken, GroupError> {
        let place = match self.store {
            Some(store) => LeasePlace::Store {
                store: store.child("rescale").map_err(|error| GroupError::Store {
                    task: "rescale".to_string(),
                    error,
                })?,
                name: "rescale".to_string(),
            },
            None => LeasePlace::Directory(self.checkpoint_dir.join("rescale")),
        };
        let leased = Leased {
            place,
            member: self.member.to_string(),
            stale: self.stale,
        };
        let never = AtomicBool::new(false);
        leased.take(&never)?.ok_or_else(|| GroupError::Layout {
            problem: "the rescale lock could not be taken".to_string(),
        })
    }

    /// Takes the lease of every partition of `layout`, waiting at most
    /// [`wait`](Self::wait) for a holder to let go or go silent.
    fn take_all(&self, layout: &Layout) -> Result<Vec<Taken>, GroupError> {
        let stopped = Arc::new(AtomicBool::new(false));
        let timer = {
            let (stopped, wait) = (stopped.clone(), self.wait);
            std::thread::spawn(move || {
                let until = std::time::Instant::now() + wait;
                while std::time::Instant::now() < until && !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                stopped.store(true, Ordering::Relaxed);
            })
        };
        // Every lease at once: a dead process's go stale together.
        let mut places = Vec::new();
        let mut outcome = Ok(());
        for stage in &layout.stages {
            for partition in 0..stage.partitions {
                let path = stage.path(partition);
                let place = match self.store {
                    Some(store) => match store.child(&path) {
                        Ok(store) => LeasePlace::Store {
                            store,
                            name: path.clone(),
                        },
                        Err(error) => {
                            outcome = Err(GroupError::Store { task: path, error });
                            continue;
                        }
                    },
                    None => LeasePlace::Directory(self.checkpoint_dir.join(&path)),
                };
                places.push((path, place));
            }
        }
        let takers: Vec<_> = places
            .into_iter()
            .map(|(path, place)| {
                let leased = Leased {
                    place,
                    member: self.member.to_string(),
                    stale: self.stale,
                };
                let stopped = stopped.clone();
                (path, std::thread::spawn(move || leased.take(&stopped)))
            })
            .collect();
        let mut taken = Vec::new();
        for (path, taker) in takers {
            match taker.join() {
                Ok(Ok(Some(lease))) => taken.push(lease),
                Ok(Ok(None)) => {
                    outcome = outcome.and(Err(GroupError::Layout {
                        problem: format!(
                            "partition `{path}` of the group's current layout is still run by another process after {:?}: stop every process of the group before starting it with other partition counts",
                            self.wait
                        ),
                    }));
                }
                Ok(Err(error)) => outcome = outcome.and(Err(error)),
                Err(_) => {
                    outcome = outcome.and(Err(GroupError::Layout {
                        problem: format!("taking the lease of `{path}` panicked"),
                    }));
                }
            }
        }
        stopped.store(true, Ordering::Relaxed);
        let _ = timer.join();
        match outcome {
            Ok(()) => Ok(taken),
            Err(error) => {
                for lease in taken {
                    lease.release();
                }
                Err(error)
            }
        }
    }

    /// The latest checkpoint of every partition of `layout`, copied from
    /// the store when the processes share none.
    fn load_all(&self, layout: &Layout) -> Result<OldCheckpoints, GroupError> {
        let mut all = Vec::with_capacity(layout.stages.len());
        for stage in &layout.stages {
            let mut partitions = Vec::with_capacity(stage.partitions as usize);
            for partition in 0..stage.partitions {
                let path = stage.path(partition);
                let dir = self.local_copy(&path, "migration")?;
                partitions.push(load(&dir, &path)?);
            }
            all.push(partitions);
        }
        Ok(all)
    }

    /// A directory holding the checkpoints of partition path `path`: the
    /// shared directory's, or a copy of the store's, made for `reader` (its
    /// own copy: partitions restore at once, each from every old one).
    pub(crate) fn local_copy(&self, path: &str, reader: &str) -> Result<PathBuf, GroupError> {
        match self.store {
            None => Ok(self.checkpoint_dir.join(path)),
            Some(store) => {
                let dir = self.checkpoint_dir.join(".rescale").join(reader).join(path);
                let store_error = |error| GroupError::Store {
                    task: path.to_string(),
                    error,
                };
                let child = store.child(path).map_err(store_error)?;
                Mirror::new(child).fetch(&dir).map_err(store_error)?;
                Ok(dir)
            }
        }
    }

    /// The checkpoint directories of the partitions stage `name` had in
    /// generation `generation` (`partitions` of them), for the partition of
    /// its next generation at `reader` to restore from.
    pub(crate) fn old_partitions(
        &self,
        name: &str,
        generation: u32,
        partitions: u32,
        reader: &str,
    ) -> Result<Vec<PathBuf>, GroupError> {
        (0..partitions)
            .map(|partition| self.local_copy(&stage_path(name, generation, partition), reader))
            .collect()
    }
}

/// A failure of the store while reading or writing the layout.
fn layout_error(error: StateError) -> GroupError {
    GroupError::Store {
        task: LAYOUT.to_string(),
        error,
    }
}

/// `dir`'s latest checkpoint, if it has one.
fn load(dir: &Path, path: &str) -> Result<Option<Checkpoint>, GroupError> {
    if !dir.exists() {
        return Ok(None);
    }
    match load_latest(dir) {
        Ok(checkpoint) => Ok(Some(checkpoint)),
        Err(StateError::NoCheckpoint { .. }) => Ok(None),
        Err(error) => Err(GroupError::Store {
            task: path.to_string(),
            error,
        }),
    }
}

/// `STAGE×PARTITIONS, ...` of a layout, for the log.
fn counts(layout: &Layout) -> String {
    layout
        .stages
        .iter()
        .map(|s| format!("{}×{}", s.name, s.partitions))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::layout;
    use crate::leased::LeasePlace;
    use streamwork_core::KeyGroups;

    /// Two processes started together with new partition counts: the one
    /// that waited for the rescale lock finds the group moved, and does
    /// not wait for the old layout's leases, which the first one's
    /// partition jobs now hold (a kept stage keeps its lease names).
    #[test]
    fn a_process_that_waited_for_the_lock_finds_the_group_moved() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("rescale-{}-{nanos}", std::process::id()));
        let root: Arc<dyn CheckpointStore> = Arc::new(DirectoryStore::new(&dir));
        let first = layout(4, 3);
        let mut moved = first.rescaled_to(&layout(2, 3));
        moved.name_previous(&first, "g");
        let read = root
            .write_if(LAYOUT, first.to_text().into_bytes(), None)
            .unwrap()
            .unwrap();
        // The other process moves the group and runs `lines/0` again.
        root.write_if(LAYOUT, moved.to_text().into_bytes(), Some(&read))
            .unwrap()
            .unwrap();
        let hour = Duration::from_secs(3_600);
        let running = Leased {
            place: LeasePlace::Directory(dir.join(moved.stages[0].path(0))),
            member: "other".to_string(),
            stale: hour,
        }
        .take(&AtomicBool::new(false))
        .unwrap()
        .unwrap();
        let rescaler = Rescaler {
            brokers: "127.0.0.1:1",
            group: "g",
            extra: &[],
            checkpoint_dir: &dir,
            store: None,
            stale: hour,
            member: "this",
            wait: Duration::from_millis(300),
        };
        let plan = StagePlan {
            job: "j".to_string(),
            stages: Vec::new(),
            exchanges: Vec::new(),
            key_groups: KeyGroups::default(),
        };
        let outcome = rescaler.migrate(&Migration {
            plan: &plan,
            old: &first,
            next: &moved,
            root: &root,
            version: &read,
            create: &|topic, _| panic!("no topic to make, and `{topic}` asked for"),
        });
        assert!(matches!(outcome, Ok(false)), "{outcome:?}");
        running.release();
        std::fs::remove_dir_all(&dir).ok();
    }
}
