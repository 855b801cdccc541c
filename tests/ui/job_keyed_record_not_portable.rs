use streamwork::prelude::*;

/// No serde: its records cannot cross processes, so they cannot be keyed.
#[derive(Clone, Debug)]
struct Reading {
    sensor: u32,
    value: f64,
}

fn main() {
    let _ = job! {
        source readings = VecSource::new(vec![Reading { sensor: 1, value: 0.5 }]);
        operator kept[2] = filter(|r: &Reading| r.value > 0.0) <- readings.key(|r: &Reading| r.sensor);
        sink out = CollectSink::<Reading>::new() <- kept;
    };
}
