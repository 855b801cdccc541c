//! Chapter 8: emissions. Vehicle events are joined with temperature events by
//! zone, and the emission resolver computes each vehicle's emission from its
//! type and the zone's temperature (engines emit more when cold).
//!
//! * by default, a stream-table join: the temperature events are a table of
//!   each zone's latest reading, and each vehicle is enriched as it arrives;
//! * with `--windowed`, a windowed join in event time: each vehicle is joined
//!   with its zone's average temperature over the same minute.
//!
//! ```sh
//! cargo run --release --example emissions
//! cargo run --release --example emissions -- --windowed
//! cargo run --release --example emissions -- --port 9990 --temperature-port 9991
//!     # vehicles: TYPE,ZONE,TIME_MS   temperatures: ZONE,CELSIUS,TIME_MS
//! ```

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;
use streamwork::window::Aggregate;

/// Emissions per zone (Grokking Streaming Systems, chapter 8).
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    input: InputArgs,
    /// TCP port of the temperature readings (with --port).
    #[arg(long, requires = "port")]
    temperature_port: Option<u16>,
    /// Join with the zone's average temperature per minute instead of its latest reading.
    #[arg(long)]
    windowed: bool,
}

/// A vehicle seen in a zone.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Vehicle {
    kind: String,
    zone: u32,
    time: i64,
}

/// A temperature reading of a zone.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Temperature {
    zone: u32,
    celsius: f64,
    time: i64,
}

#[derive(Clone)]
struct ParseVehicles(InputErrors);

#[operator(stateless)]
impl ParseVehicles {
    fn on_record(&self, line: String, out: &mut Collector<Vehicle>) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        match fields.as_slice() {
            [kind, zone, time] => match (zone.parse(), time.parse()) {
                (Ok(zone), Ok(time)) => out.emit(Vehicle {
                    kind: kind.to_string(),
                    zone,
                    time,
                }),
                _ => self.0.record(format!("`{line}`: bad zone or time")),
            },
            _ => self
                .0
                .record(format!("`{line}`: expected TYPE,ZONE,TIME_MS")),
        }
    }
}

#[derive(Clone)]
struct ParseTemperatures(InputErrors);

#[operator(stateless)]
impl ParseTemperatures {
    fn on_record(&self, line: String, out: &mut Collector<Temperature>) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        match fields.as_slice() {
            [zone, celsius, time] => match (zone.parse(), celsius.parse(), time.parse()) {
                (Ok(zone), Ok(celsius), Ok(time)) => out.emit(Temperature {
                    zone,
                    celsius,
                    time,
                }),
                _ => self.0.record(format!("`{line}`: bad number")),
            },
            _ => self
                .0
                .record(format!("`{line}`: expected ZONE,CELSIUS,TIME_MS")),
        }
    }
}

/// Grams of CO2 per kilometre of each vehicle type, at 20 °C.
fn base_emission(kind: &str) -> f64 {
    match kind {
        "car" => 120.0,
        "motorcycle" => 80.0,
        "van" => 180.0,
        "bus" => 800.0,
        "truck" => 900.0,
        _ => 150.0,
    }
}

/// The emission resolver: cold engines emit more, 1% per degree under 20 °C.
fn emission(kind: &str, celsius: Option<f64>) -> f64 {
    let cold = celsius.map(|c| (20.0 - c).max(0.0)).unwrap_or(0.0);
    base_emission(kind) * (1.0 + cold / 100.0)
}

/// The mean of a window's readings.
#[derive(Clone, Copy, Default)]
struct Mean;

/// The readings of one zone and window so far: a type of the job's own,
/// kept in checkpoints through `#[state_data]`.
#[streamwork::state_data]
#[derive(Clone, Debug, Default)]
struct Readings {
    celsius: f64,
    count: u32,
}

impl Aggregate<Temperature> for Mean {
    type Acc = Readings;
    type Out = f64;
    fn create(&self) -> Readings {
        Readings::default()
    }
    fn add(&self, acc: &mut Readings, t: &Temperature) {
        acc.celsius += t.celsius;
        acc.count += 1;
    }
    fn merge(&self, into: &mut Readings, other: &Readings) {
        into.celsius += other.celsius;
        into.count += other.count;
    }
    fn result(&self, acc: &Readings) -> f64 {
        acc.celsius / f64::from(acc.count.max(1))
    }
}

/// Total emissions per zone, printed at the end.
#[derive(Clone, Default)]
struct Totals(BTreeMap<u32, (f64, u64)>);

#[operator(at_most_once)]
impl Totals {
    fn on_record(&mut self, (zone, grams): (u32, f64), _out: &mut Collector<String>) {
        let (total, vehicles) = self.0.entry(zone).or_default();
        *total += grams;
        *vehicles += 1;
    }

    fn on_end(&mut self, out: &mut Collector<String>) {
        for (zone, (total, vehicles)) in &self.0 {
            out.emit(format!(
                "zone {zone}\t{vehicles} vehicles\t{:.1} kg CO2/km",
                total / 1000.0
            ));
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    // Generated: a vehicle every 100 ms in one of 5 zones; every 10th event a
    // temperature reading of a zone, between -5 and 25 °C.
    let vehicles = LineSource::from_args(&args.input, &errors, |seq| {
        format!(
            "{},{},{}",
            common::vehicle_type(seq),
            common::mix(seq, 2) % 5,
            seq * 100
        )
    });
    let mut temperature_input = args.input.clone();
    temperature_input.port = args.temperature_port.or(args.input.port);
    temperature_input.events = args.input.events / 10 + 1;
    let temperatures = LineSource::from_args(&temperature_input, &errors, |seq| {
        format!("{},{},{}", seq % 5, common::mix(seq, 3) % 31, seq * 1000)
    });
    let vehicle_time = |v: &Vehicle| Timestamp::from_millis(v.time);
    let temperature_time = |t: &Temperature| Timestamp::from_millis(t.time);
    let graph = if args.windowed {
        job! {
            name "emissions-windowed";
            source vehicle_lines = vehicles;
            source temperature_lines = temperatures;
            operator vehicles = ParseVehicles(errors.clone()) <- vehicle_lines;
            operator readings = ParseTemperatures(errors.clone()) <- temperature_lines;
            operator timed_vehicles = Watermarks::bounded(Duration::from_secs(1)).idle_after(Duration::from_secs(1)).timestamps(vehicle_time) <- vehicles;
            operator timed_readings = Watermarks::bounded(Duration::from_secs(1)).idle_after(Duration::from_secs(1)).timestamps(temperature_time) <- readings;
            operator averages[2] { results, late } = Windows::tumbling(Duration::from_secs(60)).aggregate(Mean)
                <- timed_readings.key(|t: &Temperature| t.zone);
            operator joined[2] = Join::left().transient().tumbling(Duration::from_secs(60))
                <- left(timed_vehicles.key(|v: &Vehicle| v.zone)), right(averages.results.key(|w: &WindowResult<u32, f64>| w.key));
            operator emissions[2] = filter_map(|row: JoinRow<u32, Vehicle, WindowResult<u32, f64>>| {
                let celsius = row.right.map(|w| w.value);
                row.left.map(|vehicle| (vehicle.zone, emission(&vehicle.kind, celsius)))
            }) <- joined;
            operator totals = Totals::default() <- emissions.global();
            sink print = StdoutSink::display::<String>() <- totals;
            drop averages.late;
        }?
    } else {
        job! {
            name "emissions";
            source vehicle_lines = vehicles;
            source temperature_lines = temperatures;
            operator vehicles = ParseVehicles(errors.clone()) <- vehicle_lines;
            operator readings = ParseTemperatures(errors.clone()) <- temperature_lines;
            operator table = |t: Temperature| Change::Upsert { key: t.zone, value: t.celsius } <- readings;
            operator enriched[2] = Join::left().stream_table()
                <- left(vehicles.key(|v: &Vehicle| v.zone)), right(table.key(|c: &Change<u32, f64>| *c.key()));
            operator emissions[2] = filter_map(|row: JoinRow<u32, Vehicle, f64>| {
                row.left.map(|vehicle| (vehicle.zone, emission(&vehicle.kind, row.right)))
            }) <- enriched;
            operator totals = Totals::default() <- emissions.global();
            sink print = StdoutSink::display::<String>() <- totals;
        }?
    };
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &args.input)?;
    common::print_summary(&report, &LineSource::describe(&args.input), &errors);
    Ok(())
}
