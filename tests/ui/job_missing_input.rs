use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

fn main() {
    let _ = job! {
        source numbers = VecSource::new(vec![1u64, 2, 3]);
        operator doubled = Double;
        sink out = StdoutSink::display::<u64>() <- numbers;
    };
}
