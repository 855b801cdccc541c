// A join offers only what its kind does: a stream-table join is inner or
// left, an unwindowed join inner only.
use streamwork::prelude::*;

fn main() {
    let _ = Join::right().stream_table::<(u32, i64), String, u32>();
    let _ = Join::left().unwindowed::<u64, u64, u32>();
}
