use streamwork::prelude::*;

/// Declared stateless, yet it counts across records.
#[derive(Clone, Default)]
struct Numbered {
    seen: u64,
}

#[operator(stateless)]
impl Numbered {
    fn on_record(&mut self, value: u64, out: &mut Collector<(u64, u64)>) {
        self.seen += 1;
        out.emit((self.seen, value));
    }
}

fn main() {}
