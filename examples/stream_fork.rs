//! Chapter 4, stream fork: one stream of vehicle events fanned out to two
//! independent branches, a per-type counter and a speeding alert; each branch
//! receives every event.
//!
//! ```sh
//! cargo run --release --example stream_fork
//! cargo run --release --example stream_fork -- --port 9990     # lines: TYPE,SPEED_KMH
//! ```

mod common;

use std::collections::BTreeMap;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Fan-out: every event goes to both branches.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// Speed above which an alert is raised, in km/h.
    #[arg(long, default_value_t = 120)]
    limit: u32,
}

#[derive(Clone, Debug)]
struct Vehicle {
    kind: String,
    speed_kmh: u32,
}

#[derive(Clone)]
struct ParseVehicles {
    errors: InputErrors,
}

#[operator(stateless)]
impl ParseVehicles {
    fn on_record(&self, line: String, out: &mut Collector<Vehicle>) {
        let parsed = line
            .split_once(',')
            .and_then(|(kind, speed)| Some((kind.trim(), speed.trim().parse().ok()?)));
        match parsed {
            Some((kind, speed_kmh)) => out.emit(Vehicle {
                kind: kind.to_string(),
                speed_kmh,
            }),
            None => self
                .errors
                .record(format!("`{line}`: expected TYPE,SPEED_KMH")),
        }
    }
}

/// Counts vehicles by type; emits the counts at the end.
#[derive(Clone, Default)]
struct CountByType {
    counts: BTreeMap<String, u64>,
}

#[operator(at_most_once)]
impl CountByType {
    fn on_record(&mut self, vehicle: Vehicle, _out: &mut Collector<String>) {
        *self.counts.entry(vehicle.kind).or_insert(0) += 1;
    }

    fn on_end(&mut self, out: &mut Collector<String>) {
        for (kind, count) in &self.counts {
            out.emit(format!("count\t{kind}\t{count}"));
        }
    }
}

/// Raises an alert for each vehicle over the limit.
#[derive(Clone)]
struct SpeedAlert {
    limit: u32,
}

#[operator(stateless)]
impl SpeedAlert {
    fn on_record(&self, vehicle: Vehicle, out: &mut Collector<String>) {
        if vehicle.speed_kmh > self.limit {
            out.emit(format!(
                "alert\t{}\t{} km/h",
                vehicle.kind, vehicle.speed_kmh
            ));
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let source = LineSource::from_args(&args.input, &errors, |seq| {
        format!(
            "{},{}",
            common::vehicle_type(seq),
            60 + common::mix(seq, 3) % 80
        )
    });
    let alerts = CollectSink::new();
    let graph = job! {
        name "stream_fork";
        source lines = source;
        operator vehicles = ParseVehicles { errors: errors.clone() } <- lines;
        operator counts = CountByType::default() <- vehicles;
        operator alerts = SpeedAlert { limit: args.limit } <- vehicles;
        sink print_counts = StdoutSink::display::<String>() <- counts;
        sink keep_alerts = alerts.clone() <- alerts;
    }?;
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    eprintln!(
        "fork: both branches received all {} vehicles; {} were over {} km/h",
        report
            .component("counts")
            .map(|c| c.records_in())
            .unwrap_or(0),
        alerts.values().len(),
        args.limit
    );
    Ok(())
}
