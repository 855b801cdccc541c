use streamwork::prelude::*;

#[derive(Clone, Default, State)]
struct CountPerKey {
    counts: KeyedState<u64, u64>,
}

#[operator]
impl CountPerKey {
    fn on_record(&mut self, key: CurrentKey<'_, u64>, _value: u64, out: &mut Collector<u64>) {
        *self.counts.get_or_default(key) += 1;
        out.emit(*key);
    }
}

fn main() {
    let _ = job! {
        source numbers[2] = VecSource::new(vec![1u64, 2, 3]);
        operator counts[2] = CountPerKey::default() <- numbers.shuffle();
        sink out = StdoutSink::display::<u64>() <- counts;
    };
}
