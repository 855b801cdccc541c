use streamwork::prelude::*;

fn main() {
    // Exactly-once needs a transactional sink; a plain file sink is not one.
    let _ = job! {
        delivery exactly_once;
        source numbers = GeneratorSource::new(|i| i).take(10);
        sink out = FileSink::new("out", |n: &u64, line: &mut Vec<u8>| line.extend_from_slice(n.to_string().as_bytes())) <- numbers;
    };
}
