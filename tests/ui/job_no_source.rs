use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

fn main() {
    let _ = job! {
        operator doubled = Double <- doubled;
    };
}
