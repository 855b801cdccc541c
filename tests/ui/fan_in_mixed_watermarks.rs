// Mixing a watermarked and an unwatermarked stream into one input: the
// error says which and what to add.
use streamwork::prelude::*;

fn main() {
    let _ = job! {
        source a = VecSource::new(vec![1u64]);
        source b = VecSource::new(vec![2u64]);
        operator timed = Watermarks::monotonic().timestamps(|v: &u64| Timestamp::from_millis(*v as i64)) <- a;
        sink out = StdoutSink::display::<u64>() <- timed, b;
    };
}
