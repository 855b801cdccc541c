//! The vehicle count job of chapters 2 and 3, shared by `vehicle_count` and
//! `parallel_vehicle_count`.

#![allow(dead_code)]

use std::collections::BTreeMap;

use streamwork::prelude::*;

use super::LineSource;

/// How vehicle events reach the counters.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    /// Fields grouping: all events of a type go to one counter instance.
    Fields,
    /// Shuffle grouping: events go round-robin to the counter instances.
    Shuffle,
}

/// A partial count: `count` events of `vehicle` seen by counter `instance`.
#[derive(Clone, Debug)]
pub struct PartialCount {
    pub vehicle: String,
    pub instance: u32,
    pub count: u64,
}

/// Counts the vehicles this instance sees; emits its running count of a type
/// each time it changes (the book's `VehicleCounter`).
#[derive(Clone, Default)]
pub struct VehicleCounter {
    instance: u32,
    counts: std::collections::HashMap<String, u64>,
}

#[operator(at_most_once)]
impl VehicleCounter {
    fn open(&mut self, ctx: &InstanceContext) {
        self.instance = ctx.instance().0;
    }

    fn on_record(&mut self, vehicle: String, out: &mut Collector<PartialCount>) {
        let count = self.counts.entry(vehicle.clone()).or_insert(0);
        *count += 1;
        out.emit(PartialCount {
            vehicle,
            instance: self.instance,
            count: *count,
        });
    }
}

/// The totals: lines `TYPE\tCOUNT`, and how many counter instances each type
/// was spread over.
#[derive(Outputs)]
pub struct TotalsOut {
    pub lines: Collector<String>,
    pub spread: Collector<(String, usize)>,
}

/// Sums the latest partial count of every counter instance, per type. Prints
/// running totals when `live`, and the final totals, sorted, at the end.
#[derive(Clone, Default)]
pub struct Totals {
    pub live: bool,
    partials: BTreeMap<String, BTreeMap<u32, u64>>,
}

impl Totals {
    pub fn new(live: bool) -> Self {
        Totals {
            live,
            partials: BTreeMap::new(),
        }
    }
}

#[operator(at_most_once)]
impl Totals {
    fn on_record(&mut self, partial: PartialCount, out: &mut TotalsOut) {
        let per_instance = self.partials.entry(partial.vehicle.clone()).or_default();
        per_instance.insert(partial.instance, partial.count);
        if self.live {
            let total: u64 = per_instance.values().sum();
            out.lines.emit(format!("{}\t{total}", partial.vehicle));
        }
    }

    fn on_end(&mut self, out: &mut TotalsOut) {
        for (vehicle, per_instance) in &self.partials {
            if !self.live {
                let total: u64 = per_instance.values().sum();
                out.lines.emit(format!("{vehicle}\t{total}"));
            }
            out.spread.emit((vehicle.clone(), per_instance.len()));
        }
    }
}

/// The vehicle count job: lines → counters (`parallelism`, by `grouping`) →
/// totals → stdout. `spread` receives how many instances counted each type.
pub fn job(
    source: LineSource,
    parallelism: u32,
    grouping: Grouping,
    live: bool,
    spread: CollectSink<(String, usize)>,
) -> Result<JobGraph, streamwork::runtime::GraphError> {
    let totals = Totals::new(live);
    let print = StdoutSink::display::<String>();
    // Chosen at run time: one job for both groupings.
    let grouping = match grouping {
        Grouping::Fields => GroupingChoice::key(|vehicle: &String| vehicle.clone()),
        Grouping::Shuffle => GroupingChoice::shuffle(),
    };
    job! {
        name "vehicle_count";
        source lines = source;
        operator counter[parallelism] = VehicleCounter::default() <- lines.grouped(grouping);
        operator totals { lines, spread } = totals <- counter.global();
        sink print = print <- totals.lines;
        sink spread_out = spread <- totals.spread;
    }
}

/// Explains, on stderr, what the grouping did to the counts.
pub fn explain(
    grouping: Grouping,
    parallelism: u32,
    spread: &[(String, usize)],
    report: &JobReport,
) {
    let counter = report.component("counter");
    if let Some(counter) = counter {
        let per: Vec<String> = counter
            .instances
            .iter()
            .enumerate()
            .map(|(i, c)| format!("#{i}: {}", c.records_in))
            .collect();
        eprintln!("  events per counter instance: {}", per.join(", "));
    }
    let split: Vec<&(String, usize)> = spread.iter().filter(|(_, n)| *n > 1).collect();
    match grouping {
        Grouping::Fields => eprintln!(
            "grouping: fields. Every event of a vehicle type went to the same one of {parallelism} counter instances, so each instance's count of its types is the exact total."
        ),
        Grouping::Shuffle => {
            eprintln!(
                "grouping: shuffle. Events went round-robin to {parallelism} counter instances, so each instance only holds a partial count of each type; {} of {} types were counted by more than one instance.",
                split.len(),
                spread.len()
            );
            eprintln!(
                "The totals printed are right only because `totals` sums the partial counts of every instance downstream: read from one instance alone they would be wrong. Fields grouping avoids the extra step."
            );
        }
    }
}
