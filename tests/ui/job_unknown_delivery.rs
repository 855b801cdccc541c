use streamwork::prelude::*;

fn main() {
    let _ = job! {
        delivery exactly_one;
        source numbers = GeneratorSource::new(|i| i).take(10);
        sink out = CollectSink::<u64>::new() <- numbers;
    };
}
