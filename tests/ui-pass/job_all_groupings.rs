use streamwork::prelude::*;

#[operator]
fn double(value: u64, out: &mut Collector<u64>) {
    out.emit(value * 2);
}

fn main() {
    let graph = job! {
        name "groupings";
        source numbers[2] = VecSource::new(vec![1u64, 2, 3]);
        operator a[2] = Double <- numbers;
        operator b[3] = Double <- a.shuffle();
        operator c[2] = Double <- b.key(|v| *v);
        operator d[2] = Double <- c.broadcast(), b.global();
        operator e[2] = Double <- d.custom(|v: &u64, n: u32| (*v as u32) % n);
        sink out[2] = StdoutSink::display::<u64>() <- e.forward();
    };
    assert!(graph.is_ok());
}
