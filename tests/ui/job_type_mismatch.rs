use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

fn main() {
    let _ = job! {
        source words = VecSource::new(vec![String::from("a")]);
        operator doubled = Double <- words;
        sink out = StdoutSink::display::<u64>() <- doubled;
    };
}
