// The builder keeps a delivery promise in its type: a job promising
// exactly-once reads only replayable sources and writes only
// transactional or idempotent sinks, as `job!` does.
use streamwork::prelude::*;

fn main() {
    let mut job = JobBuilder::new("promised").exactly_once();
    let numbers = job.source("numbers", 1, VecSource::new(vec![1u64, 2, 3]));
    let replayed = job.source("replayed", 1, GeneratorSource::new(|i| i).take(3));
    job.sink("out", 1, CollectSink::new(), replayed);
    let _ = numbers;
}
