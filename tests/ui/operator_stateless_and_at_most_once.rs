use streamwork::prelude::*;

#[derive(Clone, Default)]
struct Pass;

#[operator(stateless, at_most_once)]
impl Pass {
    fn on_record(&mut self, value: u64, out: &mut Collector<u64>) {
        out.emit(value);
    }
}

fn main() {}
