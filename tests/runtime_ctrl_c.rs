//! Ctrl-C (SIGINT) stops a running job gracefully. In its own test binary,
//! since it signals its own process.

use std::time::{Duration, Instant};

use streamwork::prelude::*;

#[cfg(unix)]
#[test]
fn sigint_stops_the_job_and_drains_it() {
    let sink = CollectSink::new();
    let graph = job! {
        source numbers = GeneratorSource::new(|i| i);
        sink out = sink.clone() <- numbers;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    handle.stop_on_ctrl_c().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while handle.snapshot().component("out").unwrap().records_in() == 0 {
        assert!(Instant::now() < deadline, "no record reached the sink");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let report = handle.join().unwrap();
    assert!(report.stopped);
    assert_eq!(
        report.component("out").unwrap().records_in(),
        report.component("numbers").unwrap().records_out()
    );
}
