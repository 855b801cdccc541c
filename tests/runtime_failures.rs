//! Failures are values: a fused sink that cannot write ends the job with its
//! own error (no panic on the way), and `run_with` restarts a job only for a
//! failure that may heal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use streamwork::prelude::*;

/// Counts the panics of this test binary (none of its tests panics on
/// purpose), then lets the default hook print them.
fn count_panics() -> Arc<AtomicUsize> {
    static PANICS: std::sync::OnceLock<Arc<AtomicUsize>> = std::sync::OnceLock::new();
    PANICS
        .get_or_init(|| {
            let panics = Arc::new(AtomicUsize::new(0));
            let counted = panics.clone();
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                counted.fetch_add(1, Ordering::SeqCst);
                default(info);
            }));
            panics
        })
        .clone()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "streamwork-failures-{name}-pid{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_fused_sink_that_cannot_write_fails_the_job_with_its_own_error_and_no_panic() {
    let panics = count_panics();
    let dir = scratch("unwritable");
    // The output "directory" is a file: the sink cannot create its part.
    let not_a_dir = dir.join("taken");
    std::fs::write(&not_a_dir, "a file").unwrap();
    for workers in [0u32, 2] {
        let before = panics.load(Ordering::SeqCst);
        let graph = job! {
            workers workers;
            source numbers[2] = GeneratorSource::new(|i| i).take(1_000);
            sink out[2] = FileSink::new(&not_a_dir, |n: &u64, line: &mut Vec<u8>| {
                line.extend_from_slice(n.to_string().as_bytes())
            }) <- numbers;
        }
        .unwrap();
        let error = graph.run().unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("component `out` instance "),
            "the sink, fused into the source's task, is named: {text}"
        );
        assert!(text.contains("taken"), "the path is named: {text}");
        assert_eq!(error.domain(), ErrorDomain::External, "{text}");
        assert_eq!(
            panics.load(Ordering::SeqCst),
            before,
            "{workers} workers: no panic on the way"
        );
    }
}

/// Fails its first `failures` writes with `domain`, counting its opens.
#[derive(Clone)]
struct Flaky {
    domain: ErrorDomain,
    failures: Arc<AtomicUsize>,
    opens: Arc<AtomicUsize>,
}

impl Flaky {
    fn new(domain: ErrorDomain, failures: usize) -> Self {
        Flaky {
            domain,
            failures: Arc::new(AtomicUsize::new(failures)),
            opens: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Sink for Flaky {
    type In = u64;

    fn open(&mut self, _: &InstanceContext) -> Result<(), ConnectorError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left == 0 {
            return Ok(());
        }
        self.failures.store(left - 1, Ordering::SeqCst);
        Err(ConnectorError {
            domain: self.domain,
            message: "the store refused the record".into(),
            source: None,
        })
    }
}

fn run_flaky(sink: &Flaky) -> Result<JobReport, JobError> {
    let graph = job! {
        source numbers = GeneratorSource::new(|i| i).take(100);
        sink out = sink.clone() <- numbers;
    }
    .unwrap();
    graph.run_with(RunOptions {
        restart: RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        },
        ..RunOptions::default()
    })
}

#[test]
fn run_with_does_not_restart_a_user_error() {
    let sink = Flaky::new(ErrorDomain::User, 1);
    let error = run_flaky(&sink).unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert_eq!(error.domain(), ErrorDomain::User);
    assert_eq!(sink.opens.load(Ordering::SeqCst), 1, "one run, no restart");
}

#[test]
fn run_with_restarts_a_retryable_external_error() {
    let sink = Flaky::new(ErrorDomain::External, 2);
    let report = run_flaky(&sink).unwrap();
    assert_eq!(report.restarts, 2);
    assert_eq!(sink.opens.load(Ordering::SeqCst), 3);
}

#[test]
fn run_with_gives_up_once_its_attempts_are_used() {
    let sink = Flaky::new(ErrorDomain::External, 10);
    let error = run_flaky(&sink).unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert_eq!(
        sink.opens.load(Ordering::SeqCst),
        4,
        "the run and 3 restarts"
    );
}

/// Bad settings are refused when the job is built, naming the edge and the
/// valid range: `NaN` and out-of-range backpressure watermarks.
#[test]
fn bad_backpressure_watermarks_are_refused_not_a_panic() {
    let panics = count_panics();
    let before = panics.load(Ordering::SeqCst);
    for (high, low) in [
        (f64::NAN, 0.5),
        (0.8, f64::NAN),
        (1.5, 0.2),
        (0.5, 0.7),
        (0.0, 0.0),
    ] {
        let result = job! {
            source numbers = VecSource::new(vec![1u64, 2, 3]);
            sink out = CollectSink::new() <- numbers.shuffle().pause_sources_above(high, low);
        };
        let error = result.err().expect("refused");
        let text = error.to_string();
        assert!(
            text.contains("edge from `numbers` to `out`") && text.contains("0 < high <= 1"),
            "{text}"
        );
    }
    let fine = job! {
        source numbers = VecSource::new(vec![1u64, 2, 3]);
        sink out = CollectSink::new() <- numbers.shuffle().pause_sources_above(0.8, 0.5);
    };
    fine.unwrap().run().unwrap();
    assert_eq!(panics.load(Ordering::SeqCst), before, "no panic");
}
