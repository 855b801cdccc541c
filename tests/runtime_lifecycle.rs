//! Ending, stopping and failing: a bounded job ends by itself, an unbounded one
//! drains on stop, and a panic anywhere fails the job with its name, never a
//! hang; on a thread per task and on workers alike.

use std::time::{Duration, Instant};

use streamwork::prelude::*;

#[derive(Clone)]
struct ExplodeAt(u64);

#[operator(stateless)]
impl ExplodeAt {
    fn on_record(&self, value: u64, out: &mut Collector<u64>) {
        if value == self.0 {
            panic!("boom at {value}");
        }
        out.emit(value);
    }
}

#[test]
fn bounded_job_ends_and_reports_per_instance_counts() {
    let graph = job! {
        source numbers[2] = GeneratorSource::new(|i| i).take(1000);
        operator pass[3] = ExplodeAt(u64::MAX) <- numbers.shuffle();
        sink out = CollectSink::new() <- pass;
    }
    .unwrap();
    let report = graph.run().unwrap();
    assert!(!report.stopped);
    let numbers = report.component("numbers").unwrap();
    assert_eq!(numbers.instances.len(), 2);
    assert_eq!(numbers.instances[0].records_out, 500);
    assert_eq!(numbers.instances[1].records_out, 500);
    let pass = report.component("pass").unwrap();
    assert_eq!(pass.instances.len(), 3);
    assert_eq!(pass.records_in(), 1000);
    assert_eq!(report.component("out").unwrap().records_in(), 1000);
    assert!(report.to_string().contains("numbers"));
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stop_drains_an_unbounded_job_gracefully() {
    for workers in [0, 2] {
        stop_drains(workers);
    }
}

fn stop_drains(workers: u32) {
    let sink = CollectSink::new();
    let graph = job! {
        workers workers;
        source numbers[2] = GeneratorSource::new(|i| i);
        operator pass[2] = ExplodeAt(u64::MAX) <- numbers.key(|v| *v);
        sink out = sink.clone() <- pass;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    wait_until("records to flow", || {
        handle.snapshot().component("out").unwrap().records_in() > 0
    });
    handle.stop_handle().stop();
    let report = handle.join().unwrap();
    assert!(report.stopped);
    let emitted = report.component("numbers").unwrap().records_out();
    assert!(emitted > 0);
    // Nothing in flight is lost: everything emitted reached the sink.
    assert_eq!(report.component("out").unwrap().records_in(), emitted);
    assert_eq!(sink.values().len() as u64, emitted);
}

#[test]
fn a_panic_names_the_component_instance_and_message() {
    let graph = job! {
        source numbers = GeneratorSource::new(|i| i).take(10_000);
        operator explode[3] = ExplodeAt(4321) <- numbers.key(|v| *v);
        sink out = CollectSink::new() <- explode;
    }
    .unwrap();
    match graph.run() {
        Err(JobError::Panicked {
            component,
            instance,
            message,
        }) => {
            assert_eq!(component, "explode");
            assert!(instance < InstanceIdx(3));
            assert_eq!(message, "boom at 4321");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
}

#[test]
fn a_panic_in_a_fused_operator_names_that_operator() {
    let graph = job! {
        source numbers[2] = GeneratorSource::new(|i| i).take(10_000);
        operator explode[2] = ExplodeAt(77) <- numbers;
        sink out[2] = CollectSink::new() <- explode;
    }
    .unwrap();
    let error = graph.run().unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("component `explode` instance 1 panicked: boom at 77"),
        "{error}"
    );
}

#[derive(Clone)]
struct PanickingSource;

impl Source for PanickingSource {
    type Out = Collector<u64>;
    fn poll(&mut self, out: &mut Collector<u64>) -> Result<SourcePoll, ConnectorError> {
        out.emit(1);
        panic!("source broke");
    }
}

#[test]
fn a_panic_in_a_source_fails_the_job() {
    let graph = job! {
        source broken = PanickingSource;
        sink out = CollectSink::new() <- broken;
    }
    .unwrap();
    let error = graph.run().unwrap_err();
    assert_eq!(
        error.to_string(),
        "component `broken` instance 0 panicked: source broke"
    );
}

#[derive(Clone)]
struct FailingSink;

impl Sink for FailingSink {
    type In = u64;
    fn write(&mut self, record: Record<u64>) -> Result<(), ConnectorError> {
        if record.value == 5 {
            return Err(ConnectorError::user("cannot store 5"));
        }
        Ok(())
    }
}

#[test]
fn a_sink_error_fails_the_job_with_its_message() {
    for parallelism in [1u32, 2] {
        let graph = job! {
            source numbers[parallelism] = VecSource::new((0..100u64).collect());
            sink store[parallelism] = FailingSink <- numbers;
        }
        .unwrap();
        let error = graph.run().unwrap_err().to_string();
        assert!(error.starts_with("component `store` instance"), "{error}");
        assert!(error.contains("cannot store 5"), "{error}");
    }
}

#[test]
fn a_panic_behind_a_full_channel_does_not_hang() {
    // An unbounded source blocked on a full channel into a panicking operator
    // (on workers: held back by it, perhaps on another worker): the abort
    // must end it.
    for workers in [0, 2] {
        let mut job = JobBuilder::new("blocked");
        job.batch_size(1).channel_capacity(1).workers(workers);
        let numbers = job.source("numbers", 2, GeneratorSource::new(|i| i));
        let exploded = job.operator("explode", 1, ExplodeAt(3), numbers.shuffle());
        job.sink("out", 1, CollectSink::new(), exploded.shuffle());
        let error = job.build().unwrap().run().unwrap_err();
        assert!(
            matches!(error, JobError::Panicked { ref component, ref message, .. }
                if component == "explode" && message.contains("boom at 3")),
            "{workers} workers: {error}"
        );
    }
}

#[test]
fn dropping_a_handle_stops_the_job() {
    let graph = job! {
        source numbers = GeneratorSource::new(|i| i);
        sink out = CollectSink::new() <- numbers;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    drop(handle);
}
