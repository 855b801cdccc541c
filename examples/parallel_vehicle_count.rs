//! Chapter 3: the vehicle count with parallel counters, run once with shuffle
//! grouping and once with fields grouping on the same events, to show why
//! fields grouping gives correct per-type counts in each instance.
//!
//! ```sh
//! cargo run --release --example parallel_vehicle_count
//! cargo run --release --example parallel_vehicle_count -- --parallelism 4 --grouping shuffle
//! cargo run --release --example parallel_vehicle_count -- --port 9990
//! ```

mod common;

use clap::Parser;
use common::vehicles::{self, Grouping};
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Parallel vehicle counting: shuffle versus fields grouping (chapter 3).
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// Counter instances.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=128))]
    parallelism: u32,
    /// Run only this grouping (default: both, one after the other, on the same events).
    #[arg(long, value_enum)]
    grouping: Option<Grouping>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let groupings = match (args.grouping, LineSource::is_live(&args.input)) {
        (Some(grouping), _) => vec![grouping],
        // A live TCP input can only be read once.
        (None, true) => vec![Grouping::Fields],
        (None, false) => vec![Grouping::Shuffle, Grouping::Fields],
    };
    for grouping in groupings {
        eprintln!(
            "--- {grouping:?} grouping, {} counter instances ---",
            args.parallelism
        );
        let errors = InputErrors::new();
        let source = LineSource::from_args(&args.input, &errors, |seq| {
            common::vehicle_type(seq).to_string()
        });
        let spread = CollectSink::new();
        let graph = vehicles::job(
            source,
            args.parallelism,
            grouping,
            LineSource::is_live(&args.input),
            spread.clone(),
        )?;
        let handle = graph.start()?;
        handle.stop_on_ctrl_c()?;
        let report = common::join_with_progress(handle, &args.input)?;
        common::print_summary(&report, &LineSource::describe(&args.input), &errors);
        vehicles::explain(grouping, args.parallelism, &spread.values(), &report);
    }
    Ok(())
}
