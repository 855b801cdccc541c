// A closure given to the builder where an operator is expected: the error
// says what an operator is and how a closure becomes one.
use streamwork::prelude::*;

fn main() {
    let mut job = JobBuilder::new("closures");
    let numbers = job.source("numbers", 1, VecSource::new(vec![1u64, 2, 3]));
    let _doubled = job.operator("double", 1, |n: u64| n * 2, numbers);
}
