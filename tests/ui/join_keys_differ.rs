// Both inputs of a join must be keyed by the same type: the error names the
// key the join takes and the stream that gives another.
use std::time::Duration;
use streamwork::prelude::*;

fn main() {
    let _ = job! {
        source left = VecSource::new(vec![(1u32, 10u64)]);
        source right = VecSource::new(vec![(String::from("a"), 20u64)]);
        operator left_timed = Watermarks::monotonic().timestamps(|_: &(u32, u64)| Timestamp::from_millis(0)) <- left;
        operator right_timed = Watermarks::monotonic().timestamps(|_: &(String, u64)| Timestamp::from_millis(0)) <- right;
        operator joined = Join::inner().tumbling::<(u32, u64), (String, u64), u32>(Duration::from_secs(1))
            <- left(left_timed.key(|(k, _): &(u32, u64)| *k)),
               right(right_timed.key(|(k, _): &(String, u64)| k.clone()));
        sink out = StdoutSink::new(|_: &JoinRow<u32, (u32, u64), (String, u64)>, _: &mut Vec<u8>| {}) <- joined;
    };
}
