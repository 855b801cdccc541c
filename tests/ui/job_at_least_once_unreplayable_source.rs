use streamwork::prelude::*;

fn main() {
    // At-least-once needs a source that can resume from a checkpoint.
    let _ = job! {
        delivery at_least_once;
        source numbers = VecSource::new(vec![1u64, 2, 3]);
        sink out = CollectSink::<u64>::new() <- numbers;
    };
}
