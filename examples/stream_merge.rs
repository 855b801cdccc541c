//! Chapter 4, stream merge: vehicle events from two bridges (two sources)
//! merged into one stream and counted together (fan-in).
//!
//! ```sh
//! cargo run --release --example stream_merge
//! cargo run --release --example stream_merge -- --port 9990 --second-port 9991
//! ```

mod common;

use std::collections::BTreeMap;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Fan-in: two sources of the same type merged into one counter.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// The second bridge's TCP port (with --port).
    #[arg(long, requires = "port")]
    second_port: Option<u16>,
}

/// Tags each vehicle with the bridge it crossed.
#[derive(Clone)]
struct Tag(&'static str);

#[operator(stateless)]
impl Tag {
    fn on_record(&self, vehicle: String, out: &mut Collector<(&'static str, String)>) {
        out.emit((self.0, vehicle));
    }
}

/// Counts vehicles per type over both bridges, and per bridge.
#[derive(Clone, Default)]
struct Count {
    per_type: BTreeMap<String, u64>,
    per_bridge: BTreeMap<&'static str, u64>,
}

#[operator(at_most_once)]
impl Count {
    fn on_record(
        &mut self,
        (bridge, vehicle): (&'static str, String),
        _out: &mut Collector<String>,
    ) {
        *self.per_type.entry(vehicle).or_insert(0) += 1;
        *self.per_bridge.entry(bridge).or_insert(0) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<String>) {
        for (vehicle, count) in &self.per_type {
            out.emit(format!("{vehicle}\t{count}"));
        }
        for (bridge, count) in &self.per_bridge {
            eprintln!("merge: {count} vehicles came from the {bridge} bridge");
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let north = LineSource::from_args(&args.input, &errors, |seq| {
        common::vehicle_type(seq).to_string()
    });
    let mut second = args.input.clone();
    second.port = args.second_port.or(args.input.port);
    let south = LineSource::from_args(&second, &errors, |seq| {
        common::vehicle_type(seq + 1_000_000_007).to_string()
    });
    let graph = job! {
        name "stream_merge";
        source north_bridge = north;
        source south_bridge = south;
        operator north_tagged = Tag("north") <- north_bridge;
        operator south_tagged = Tag("south") <- south_bridge;
        operator count = Count::default() <- north_tagged, south_tagged;
        sink print = StdoutSink::display::<String>() <- count;
    }?;
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    Ok(())
}
