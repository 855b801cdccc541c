use streamwork::prelude::*;

/// Keeps a running sum per key, but says nothing about checkpointing it.
#[derive(Clone, Default)]
struct RunningSum {
    sums: KeyedState<u64, i64>,
}

#[operator]
impl RunningSum {
    fn on_record(&mut self, key: CurrentKey<'_, u64>, value: i64, out: &mut Collector<i64>) {
        let sum = self.sums.get_or_default(key);
        *sum += value;
        out.emit(*sum);
    }
}

fn main() {}
