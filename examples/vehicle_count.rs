//! Chapter 2 (and 3): count vehicles by type.
//!
//! ```sh
//! cargo run --release --example vehicle_count                      # generated traffic
//! cargo run --release --example vehicle_count -- --input FILE --parallelism 4 --grouping fields
//! cargo run --release --example vehicle_count -- --port 9990       # after `nc -lk 9990`
//! ```
//!
//! Prints one `TYPE<TAB>COUNT` line per vehicle type on stdout, sorted by type,
//! after the end of the input (or running totals as events arrive from TCP),
//! and a summary on stderr.

mod common;

use clap::Parser;
use common::vehicles::{self, Grouping};
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Count vehicles by type (Grokking Streaming Systems, chapters 2 and 3).
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// Counter instances.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    parallelism: u32,
    /// How events reach the counter instances.
    #[arg(long, value_enum, default_value_t = Grouping::Fields)]
    grouping: Grouping,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let source = LineSource::from_args(&args.input, &errors, |seq| {
        common::vehicle_type(seq).to_string()
    });
    let live = LineSource::is_live(&args.input);
    let spread = CollectSink::new();
    let graph = vehicles::job(
        source,
        args.parallelism,
        args.grouping,
        live,
        spread.clone(),
    )?;
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    vehicles::explain(args.grouping, args.parallelism, &spread.values(), &report);
    Ok(())
}
