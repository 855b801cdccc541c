use streamwork::prelude::*;

#[derive(Clone, Default, State)]
struct Counts {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl Counts {
    fn on_record(&mut self, value: u64, out: &mut Collector<u64>) {
        *self.counts.get_or_default(&value) += 1;
        out.emit(value);
    }
}

fn main() {}
