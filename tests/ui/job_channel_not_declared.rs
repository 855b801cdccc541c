use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

#[derive(Outputs)]
struct Parity {
    even: Collector<u64>,
    odd: Collector<u64>,
}

#[operator]
fn split_parity(value: u64, out: &mut Parity) {
    if value % 2 == 0 { out.even.emit(value) } else { out.odd.emit(value) }
}

fn main() {
    let _ = job! {
        source numbers = VecSource::new(vec![1u64, 2, 3]);
        operator parity { even } = SplitParity <- numbers;
        sink evens = StdoutSink::display::<u64>() <- parity.even;
    };
}
