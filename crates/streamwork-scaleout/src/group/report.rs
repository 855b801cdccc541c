//! What a runner did: its report, each partition job's run, and the
//! handovers of partitions between processes.

use std::time::{Duration, SystemTime};

use crate::stages::StagePlan;

/// What a runner did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReport {
    /// Rebalances that assigned this process partitions (or none).
    pub rebalances: u64,
    /// Partition jobs started (a partition assigned twice counts twice).
    pub tasks_started: u64,
    /// Records read by this process's partition jobs.
    pub records: u64,
    /// The partitions owned at the end, as `(topic, partition)`.
    pub owned_at_end: Vec<(String, i32)>,
    /// From the first record this process's partition jobs read to the
    /// last: the time it was busy, for throughput.
    pub busy: Duration,
    /// The job's stages and their topics ([`GroupRunner::run_job`](crate::GroupRunner::run_job)).
    pub stages: Option<StagePlan>,
    /// Every partition job this process ran, with when it started, read
    /// its first record and stopped: with the other processes' runs, what
    /// [`handovers`] measures.
    pub runs: Vec<TaskRun>,
}

/// One run of one partition job in one process.
///
/// A process prints each as one line (`task-run ` and the run as JSON, times
/// in milliseconds since the Unix epoch) for another to read back with
/// [`parse`](Self::parse):
///
/// ```
/// # use std::time::{Duration, SystemTime};
/// use streamwork::scaleout::TaskRun;
///
/// let run = TaskRun {
///     task: "counted/3".to_string(),
///     started: SystemTime::UNIX_EPOCH + Duration::from_millis(1_000),
///     first_record: None,
///     stop_asked: None,
///     stopped: None,
/// };
/// assert_eq!(TaskRun::parse(&run.line()), Some(run));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskRun {
    /// `STAGE/PARTITION` (or `TOPIC/PARTITION`).
    pub task: String,
    /// When the group gave it to this process (its job started restoring).
    #[serde(with = "epoch_ms")]
    pub started: SystemTime,
    /// When its job first read a record.
    #[serde(with = "epoch_ms::optional")]
    pub first_record: Option<SystemTime>,
    /// When the process was asked to stop it (the group revoked it, or the
    /// process left).
    #[serde(with = "epoch_ms::optional")]
    pub stop_asked: Option<SystemTime>,
    /// When its job had stopped (drained, final checkpoint taken and, with
    /// a checkpoint store, stored).
    #[serde(with = "epoch_ms::optional")]
    pub stopped: Option<SystemTime>,
}

/// What starts a [`TaskRun`]'s line.
pub(super) const TASK_RUN: &str = "task-run ";

impl TaskRun {
    /// The run as one line, for a process to print (see the type's docs).
    pub fn line(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string());
        format!("{TASK_RUN}{json}")
    }

    /// A run from a [`line`](Self::line); `None` for any other line.
    pub fn parse(line: &str) -> Option<TaskRun> {
        serde_json::from_str(line.trim_end().strip_prefix(TASK_RUN)?).ok()
    }
}

/// Times as milliseconds since the Unix epoch, in a run's line.
pub(super) mod epoch_ms {
    use std::time::{Duration, SystemTime};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn ms(time: SystemTime) -> u64 {
        time.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(ms(*time))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(u64::deserialize(d)?))
    }

    pub(super) mod optional {
        use std::time::{Duration, SystemTime};

        use serde::{Deserialize, Deserializer, Serializer};

        pub(crate) fn serialize<S: Serializer>(
            time: &Option<SystemTime>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => s.serialize_some(&crate::group::report::epoch_ms::ms(*time)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            Ok(Option::<u64>::deserialize(d)?
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)))
        }
    }
}

/// A partition job moved from one process to another: from the moment the
/// old owner was asked to stop it to the first record the new owner read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// `STAGE/PARTITION`.
    pub task: String,
    /// The stopped run (an index into the runs given to [`handovers`]).
    pub from: usize,
    /// The run that carried on.
    pub to: usize,
    /// From the stop asked to the job stopped (draining, final checkpoint,
    /// storing it).
    pub stopping: Duration,
    /// From the job stopped to the new owner starting it (the group's
    /// rebalance).
    pub rebalance: Duration,
    /// From the new owner starting it to its first record (fetching the
    /// checkpoint, restoring, reading).
    pub resuming: Duration,
}

impl Handover {
    /// From the stop asked to the new owner's first record.
    pub fn total(&self) -> Duration {
        self.stopping + self.rebalance + self.resuming
    }
}

/// The hand-overs among `runs` (every process's [`GroupReport::runs`]):
/// each run stopped, paired with the next run of the same task that read a
/// record.
pub fn handovers(runs: &[TaskRun]) -> Vec<Handover> {
    let mut handovers = Vec::new();
    for (from, old) in runs.iter().enumerate() {
        let (Some(asked), Some(stopped)) = (old.stop_asked, old.stopped) else {
            continue;
        };
        let next = runs
            .iter()
            .enumerate()
            .filter(|(_, new)| new.task == old.task && new.started >= stopped)
            .min_by_key(|(_, new)| new.started);
        if let Some((to, new)) = next
            && let Some(first) = new.first_record
        {
            let since = |later: SystemTime, earlier: SystemTime| {
                later.duration_since(earlier).unwrap_or_default()
            };
            handovers.push(Handover {
                task: old.task.clone(),
                from,
                to,
                stopping: since(stopped, asked),
                rebalance: since(new.started, stopped),
                resuming: since(first, new.started),
            });
        }
    }
    handovers
}
