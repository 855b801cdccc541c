use streamwork::prelude::*;
use streamwork::runtime::JobBuilder;

/// No serde: the builder asks what `job!` asks.
#[derive(Clone, Debug)]
struct Reading {
    sensor: u32,
}

fn main() {
    let mut job = JobBuilder::new("builder");
    let readings = job.source("readings", 1, VecSource::new(vec![Reading { sensor: 1 }]));
    let _keyed = readings.key_by(|r: &Reading| r.sensor);
}
