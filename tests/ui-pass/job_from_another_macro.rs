use streamwork::prelude::*;

// `job!` called from a `macro_rules!` that passes statements through: the
// macro's own variables keep their hygiene.
macro_rules! numbers_job {
    ($($statement:tt)*) => {
        job! {
            $($statement)*
            source numbers = GeneratorSource::new(|i| i).take(10);
            sink out = CollectSink::<u64>::new() <- numbers;
        }
    };
}

fn main() {
    let _ = numbers_job!(name "passed"; batch_size 8; key_groups 64; delivery at_least_once;);
    let _ = numbers_job!();
}
