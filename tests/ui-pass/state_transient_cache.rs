//! A transient field that is not a state kind (a cache rebuilt as records
//! come) compiles without a warning.
#![deny(warnings)]

use streamwork::prelude::*;

#[derive(Clone, Default, State)]
struct Lengths {
    totals: KeyedState<String, u64>,
    #[state(transient)]
    scratch: Vec<u8>,
}

#[operator]
impl Lengths {
    fn on_record(&mut self, word: CurrentKey<'_, String>, line: String, out: &mut Collector<u64>) {
        self.scratch.clear();
        self.scratch.extend_from_slice(line.as_bytes());
        let total = self.totals.get_or_default(word);
        *total += self.scratch.len() as u64;
        out.emit(*total);
    }
}

fn main() {
    let _ = Lengths::default();
}
