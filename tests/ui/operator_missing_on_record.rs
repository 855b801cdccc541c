use streamwork::prelude::*;

#[derive(Clone)]
struct Counter;

#[operator]
impl Counter {
    fn process(&mut self, value: u64, out: &mut Collector<u64>) {
        out.emit(value);
    }
}

fn main() {}
