//! Exactly-once into an idempotent sink: running counts per key upserted into
//! one file per key; a failure and a restore from the last checkpoint replay
//! some records, which rewrite the same values, so the files end as in a run
//! without failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::state::{restore_keyed_from, snapshot_keyed};

/// A running count per key, checkpointed by key group.
#[derive(Clone, Default)]
struct RunningCount {
    counts: KeyedState<u64, u64>,
    key_groups: KeyGroups,
}

impl Operator for RunningCount {
    type In = u64;
    type Key = ByKey<u64>;
    type Out = Collector<(u64, u64)>;
    type Time = AnyTime;

    fn statefulness(&self) -> Statefulness {
        Statefulness::Checkpointed
    }

    fn open(&mut self, ctx: &InstanceContext) {
        self.key_groups = ctx.key_groups();
    }

    fn on_record(&mut self, value: u64, ctx: &mut Context<'_, ByKey<u64>, Self::Out>) {
        let count = self.counts.get_or_default(ctx.key());
        *count += 1;
        let count = *count;
        ctx.emit((value % 50, count));
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        let bytes = snapshot_keyed(&self.counts, ctx.key_groups)
            .map_err(|e| TaskError::Snapshot(e.to_string()))?;
        Ok(Some(StateBytes::new(1, bytes.to_vec())))
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        self.counts = restore_keyed_from(restore).map_err(|e| TaskError::Restore(e.to_string()))?;
        Ok(())
    }
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "streamwork-upsert-{name}-pid{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(root: &Path, fault: InjectFault<u64>) -> JobReport {
    let graph = job! {
        batch_size 32;
        delivery exactly_once;
        source numbers = GeneratorSource::new(|i: u64| i).take(40_000);
        operator checked[2] = fault <- numbers.shuffle();
        operator counts[2] = RunningCount::default() <- checked.key(|v: &u64| v % 50);
        sink latest[2] = UpsertFileSink::new(
            root.join("out"),
            |(key, _): &(u64, u64)| *key,
            |(_, count): &(u64, u64), line: &mut Vec<u8>| line.extend_from_slice(count.to_string().as_bytes()),
        ) <- counts;
    }
    .unwrap();
    graph
        .run_with(RunOptions {
            checkpoints: Some(
                CheckpointConfig::new(root.join("ckpt"), Duration::from_millis(2))
                    .delivery(Delivery::ExactlyOnce),
            ),
            restart: RestartStrategy::FixedDelay {
                attempts: 2,
                delay: Duration::from_millis(1),
            },
            ..RunOptions::default()
        })
        .unwrap()
}

fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn an_upsert_sink_ends_as_a_run_without_failure() {
    let clean_root = dir("clean");
    run(
        &clean_root,
        InjectFault::new(0, Fault::BeforeRecord(usize::MAX)),
    );
    let clean = files(&clean_root.join("out"));
    assert_eq!(clean.len(), 50);
    assert!(clean.values().all(|count| count == "800"), "{clean:?}");

    let root = dir("fault");
    let fault = InjectFault::new(1, Fault::BeforeRecord(9_000));
    let report = run(&root, fault.clone());
    assert!(fault.has_fired());
    assert_eq!(report.restarts, 1);
    assert_eq!(files(&root.join("out")), clean);
    std::fs::remove_dir_all(&clean_root).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}
