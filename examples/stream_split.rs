//! Chapter 4, stream split: one stream of vehicle events split into named,
//! typed output channels: passenger vehicles, commercial vehicles, and lines
//! that name no known vehicle.
//!
//! ```sh
//! cargo run --release --example stream_split
//! cargo run --release --example stream_split -- --port 9990
//! ```

mod common;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Split: each event goes to exactly one named channel.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
}

/// A passenger vehicle: how many seats it has.
#[derive(Clone, Debug)]
struct Passenger {
    kind: String,
    seats: u32,
}

/// A commercial vehicle: its axles.
#[derive(Clone, Debug)]
struct Commercial {
    kind: String,
    axles: u32,
}

/// The three channels of the splitter, each of its own type.
#[derive(Outputs)]
struct ByUse {
    passenger: Collector<Passenger>,
    commercial: Collector<Commercial>,
    unknown: Collector<String>,
}

#[operator]
fn split_by_use(kind: String, out: &mut ByUse) {
    match kind.as_str() {
        "car" => out.passenger.emit(Passenger { kind, seats: 5 }),
        "motorcycle" => out.passenger.emit(Passenger { kind, seats: 2 }),
        "bus" => out.passenger.emit(Passenger { kind, seats: 50 }),
        "van" => out.commercial.emit(Commercial { kind, axles: 2 }),
        "truck" => out.commercial.emit(Commercial { kind, axles: 5 }),
        _ => out.unknown.emit(kind),
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let source = LineSource::from_args(&args.input, &errors, |seq| {
        if seq.is_multiple_of(97) {
            "tractor".to_string()
        } else {
            common::vehicle_type(seq).to_string()
        }
    });
    let unknown = CollectSink::new();
    let graph = job! {
        name "stream_split";
        source lines = source;
        operator split { passenger, commercial, unknown } = SplitByUse <- lines;
        sink seats = StdoutSink::new(|p: &Passenger, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("passenger\t{}\t{} seats", p.kind, p.seats).as_bytes())
        }) <- split.passenger;
        sink axles = StdoutSink::new(|c: &Commercial, line: &mut Vec<u8>| {
            line.extend_from_slice(format!("commercial\t{}\t{} axles", c.kind, c.axles).as_bytes())
        }) <- split.commercial;
        sink unknowns = unknown.clone() <- split.unknown;
    }?;
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    let count = |name: &str| report.component(name).map(|c| c.records_in()).unwrap_or(0);
    eprintln!(
        "split: {} passenger, {} commercial, {} unknown ({} distinct unknown kinds)",
        count("seats"),
        count("axles"),
        count("unknowns"),
        unknown
            .values()
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    Ok(())
}
