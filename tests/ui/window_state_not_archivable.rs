// Windows checkpoint their state by default: a window that keeps its
// events cannot be built over a type that cannot be archived, unless it is
// built `.transient()` (which a delivery promise then refuses).
use std::time::Duration;
use streamwork::prelude::*;

#[derive(Clone, Debug)]
struct Reading {
    zone: u32,
}

fn main() {
    let count = |readings: WindowContents<'_, Reading>| readings.len() as u64;
    let _ = Windows::tumbling(Duration::from_secs(1)).apply::<Reading, u32, u64, _>(count);
    let _ = Windows::tumbling(Duration::from_secs(1))
        .transient()
        .apply::<Reading, u32, u64, _>(count);
    let _ = Reading { zone: 1 }.zone;
}
