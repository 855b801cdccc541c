//! Logging out of the box: the engine says at `info` that a job starts,
//! takes checkpoints, fails, restarts from a checkpoint and finishes; and
//! `streamwork::logging::init` keeps a subscriber the application set.
//! (Its own test binary: a global subscriber is set once per process.)

mod support;

use std::sync::{Arc, Mutex};

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use support::{Numbers, dir, exactly_once};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

/// What the subscriber printed.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[test]
fn a_restart_from_a_checkpoint_is_logged_at_info() {
    // The application's own subscriber, as RUST_LOG=info would set it.
    let capture = Capture::default();
    tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_max_level(LevelFilter::INFO)
        .init();
    assert!(
        !streamwork::logging::init(),
        "the application's subscriber is kept"
    );

    let checkpoints = dir("logging-restart");
    let out = CollectSink::new();
    // Numbers holds halfway until a checkpoint completes: the fault comes
    // after one, and the restart restores it.
    let fault = InjectFault::new(0, Fault::BeforeRecord(1_500));
    let graph = job! {
        name "logged";
        delivery exactly_once;
        source numbers = Numbers::new(2_000);
        operator faulty = fault <- numbers;
        sink rows = out.transactional() <- faulty;
    }
    .unwrap();
    let report = graph.run_with(exactly_once(&checkpoints, 1)).unwrap();
    assert_eq!(report.restarts, 1, "the fault fired");
    assert_eq!(out.values().len(), 2_000);

    let log = capture.text();
    for expected in [
        "job `logged` starting: 3 components",
        "starting from the beginning",
        "complete: ",
        "restart 1 from its last complete checkpoint",
        "restoring from checkpoint ",
        "job `logged` finished in",
    ] {
        assert!(
            log.contains(expected),
            "`{expected}` is not in the log:\n{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&checkpoints);
}
