use std::time::Duration;
use streamwork::prelude::*;

fn main() {
    let _ = job! {
        source events = VecSource::new(vec![(1u32, 10i64)]);
        operator timed = Watermarks::monotonic().timestamps(|e: &(u32, i64)| Timestamp::from_millis(e.1)) <- events;
        operator counts { results } = Windows::tumbling(Duration::from_secs(1)).count()
            <- timed.key(|e: &(u32, i64)| e.0);
        sink out = StdoutSink::new(|_: &WindowResult<u32, u64>, _: &mut Vec<u8>| {}) <- counts.results;
    };
}
