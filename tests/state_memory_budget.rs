//! A stored state's memory budget holds while checkpoints are slower than
//! the input: the state holds the job's sources back until its next
//! snapshot, instead of growing with the input rate times the checkpoint's
//! duration. In a test binary of its own: the budget counts every stored
//! state of the process.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use streamwork::state::{
    CheckpointStore, DirectoryStore, GuardedStore, StateError, StoreOptions, StoredState,
    WriteGuard, unsettled_bytes,
};

/// Slows every write of a checkpoint store: a checkpoint is complete only
/// once copied to the store, so each one takes at least that long.
#[derive(Debug)]
struct Slow(Duration);

impl WriteGuard for Slow {
    fn before_write(&self, _: &dyn CheckpointStore, _: &str) -> Result<(), StateError> {
        std::thread::sleep(self.0);
        Ok(())
    }
}

/// Counts per key in a stored state and records the largest total of the
/// process's stored states not yet durable that it saw.
#[derive(Clone, State)]
struct PeakTotals {
    counts: StoredState<u64, u64>,
    #[state(transient)]
    peak: Arc<AtomicUsize>,
}

#[operator]
impl PeakTotals {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        _value: u64,
        _out: &mut Collector<(u64, u64)>,
    ) {
        *self.counts.get_or_default(key) += 1;
        self.peak.fetch_max(unsettled_bytes(), Ordering::Relaxed);
    }

    fn on_end(&mut self, out: &mut Collector<(u64, u64)>) {
        self.counts
            .for_each(|key, count| out.emit((key, count)))
            .expect("the stored counts read back");
    }
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "streamwork-memory-budget-{name}-pid{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// 300,000 distinct keys read at full speed into a stored state with a
/// 1 MiB budget, checkpoints an hour apart but each taking at least 20 ms
/// to complete: the budget's early checkpoints alone would let the table of
/// writes grow with the input for the whole of each checkpoint (several
/// times the budget here). Held back, what is not yet durable stays within
/// a small multiple of the budget (a table doubles when it grows, and the
/// checkpoint in flight holds the previous one), on a thread per task and
/// on two workers, at least once and exactly once (barriers aligned, into
/// a transactional sink), and every key is counted once. Exactly once, the
/// job also fails two thirds of the way in and restarts from its last
/// checkpoint: the failed run's holds go with its states.
#[test]
fn a_stored_state_holds_its_input_back_while_checkpoints_are_slower_than_the_input() {
    const BUDGET: usize = 1 << 20;
    const KEYS: u64 = 300_000;
    let runs = [
        (0, Delivery::AtLeastOnce),
        (2, Delivery::AtLeastOnce),
        (0, Delivery::ExactlyOnce),
        (2, Delivery::ExactlyOnce),
    ];
    for (workers, delivery) in runs {
        let dir = dir(&format!("held-{workers}-{delivery:?}"));
        let peak = Arc::new(AtomicUsize::new(0));
        let totals = PeakTotals {
            counts: StoredState::with_options(StoreOptions {
                unsettled_bytes: BUDGET,
                ..StoreOptions::default()
            }),
            peak: peak.clone(),
        };
        let out = CollectSink::new();
        let fails = delivery == Delivery::ExactlyOnce;
        let fault = InjectFault::new(
            0,
            Fault::BeforeRecord(if fails { 200_000 } else { usize::MAX }),
        );
        // Transactional for both: what exactly once needs, and as right at
        // least once.
        let graph = job! {
            name "held";
            workers workers;
            source numbers = GeneratorSource::new(|i| i).take(KEYS);
            operator faulty = fault <- numbers;
            operator totals = totals <- faulty.key(|v: &u64| *v);
            sink out = out.transactional() <- totals;
        }
        .unwrap();
        let store = GuardedStore::with_guard(
            Arc::new(DirectoryStore::new(dir.join("store"))),
            Slow(Duration::from_millis(20)),
        );
        let options = RunOptions {
            checkpoints: Some(
                CheckpointConfig::new(dir.join("local"), Duration::from_secs(3_600))
                    .delivery(delivery)
                    .stored_in(Arc::new(store)),
            ),
            restart: RestartStrategy::FixedDelay {
                attempts: 1,
                delay: Duration::ZERO,
            },
            ..RunOptions::default()
        };
        let report = graph.run_with(options).unwrap();
        assert_eq!(
            report.restarts,
            u32::from(fails),
            "{workers} workers, {delivery:?}: the fault fired"
        );
        assert!(
            report.checkpoints.iter().filter(|c| c.early).count() >= 2,
            "{workers} workers, {delivery:?}: the budget asked for checkpoints: {:?}",
            report.checkpoints.len()
        );
        // Visible: the report (and `/metrics`, the job page) counts the holds.
        assert!(
            report.input_holds > 0,
            "{workers} workers, {delivery:?}: no hold in the report"
        );
        assert!(report.to_string().contains("sources held"), "{report}");
        let peak = peak.load(Ordering::Relaxed);
        assert!(
            peak <= 4 * BUDGET,
            "{workers} workers, {delivery:?}: {peak} bytes not yet durable at the peak, budget {BUDGET}"
        );
        let mut counts = out.values();
        counts.sort_unstable();
        assert_eq!(counts.len() as u64, KEYS, "{workers} workers, {delivery:?}");
        assert!(
            counts
                .iter()
                .enumerate()
                .all(|(i, &(k, n))| k == i as u64 && n == 1),
            "{workers} workers, {delivery:?}: every key counted once"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
