//! The progress display waits for the job and returns its report, drawn or
//! not (standard error is a terminal or not).

use streamwork::prelude::*;

#[test]
fn joining_with_progress_returns_the_report() {
    let out = CollectSink::new();
    let graph = job! {
        name "progress";
        source numbers = GeneratorSource::new(|i| i).take(50_000);
        operator odd = filter(|n: &u64| n % 2 == 1) <- numbers;
        sink out = out.clone() <- odd;
    }
    .unwrap();
    let handle = graph.start().unwrap();
    let report = streamwork::progress::join(handle, Some(50_000)).unwrap();
    assert_eq!(report.component("numbers").unwrap().records_out(), 50_000);
    assert_eq!(out.values().len(), 25_000);
}
