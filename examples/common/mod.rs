//! What the examples share: where lines come from (generated, a file, or the
//! book's TCP reader), a progress bar while a bounded job runs, and printing a
//! summary.

#![allow(dead_code)]

pub mod vehicles;

use std::path::PathBuf;

use streamwork::connectors::file::Lines;
use streamwork::prelude::*;

/// Where a job's input lines come from.
#[derive(clap::Args, Debug, Clone)]
pub struct InputArgs {
    /// Read lines from this file (or every file of this directory).
    #[arg(long, conflicts_with = "port")]
    pub input: Option<PathBuf>,
    /// Read lines from a TCP server on 127.0.0.1:PORT, as in the book (run `nc -lk PORT` first).
    #[arg(long)]
    pub port: Option<u16>,
    /// How many events to generate when neither --input nor --port is given.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
}

/// A line source chosen at run time: one type for `job!`, whatever the input.
#[derive(Clone)]
pub enum LineSource {
    /// Deterministically generated lines.
    Generated(GeneratorSource<String>),
    /// Lines of a file or directory.
    File(Box<FileSource<String>>),
    /// Lines from a TCP server.
    Tcp(TcpLineSource<String>),
}

impl LineSource {
    /// The source `args` ask for; `generate(seq)` makes line `seq` when generating.
    /// Blank lines are skipped and malformed ones counted into `errors`.
    pub fn from_args(
        args: &InputArgs,
        errors: &InputErrors,
        generate: impl Fn(u64) -> String + Clone + Send + Sync + 'static,
    ) -> LineSource {
        let lines = || {
            Lines::text()
                .skip_blank(true)
                .count_errors_in(errors.clone())
        };
        match (&args.input, args.port) {
            (Some(path), _) => LineSource::File(Box::new(FileSource::with_lines(path, lines()))),
            (None, Some(port)) => LineSource::Tcp(TcpLineSource::with_lines(
                format!("127.0.0.1:{port}"),
                lines(),
            )),
            (None, None) => {
                LineSource::Generated(GeneratorSource::new(generate).take(args.events).boxed())
            }
        }
    }

    /// Describes the input for summaries.
    pub fn describe(args: &InputArgs) -> String {
        match (&args.input, args.port) {
            (Some(path), _) => format!("file {}", path.display()),
            (None, Some(port)) => format!("TCP 127.0.0.1:{port}"),
            (None, None) => format!("{} generated events", args.events),
        }
    }

    /// Whether the input is live (TCP): examples then print results as they come.
    pub fn is_live(args: &InputArgs) -> bool {
        args.port.is_some() && args.input.is_none()
    }
}

impl Source for LineSource {
    type Out = Collector<String>;

    fn replayable(&self) -> bool {
        match self {
            LineSource::Generated(s) => s.replayable(),
            LineSource::File(s) => s.replayable(),
            LineSource::Tcp(s) => s.replayable(),
        }
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        match self {
            LineSource::Generated(s) => s.open(ctx),
            LineSource::File(s) => s.open(ctx),
            LineSource::Tcp(s) => s.open(ctx),
        }
    }

    fn poll(&mut self, out: &mut Collector<String>) -> Result<SourcePoll, ConnectorError> {
        match self {
            LineSource::Generated(s) => s.poll(out),
            LineSource::File(s) => s.poll(out),
            LineSource::Tcp(s) => s.poll(out),
        }
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        match self {
            LineSource::Generated(s) => s.close(),
            LineSource::File(s) => s.close(),
            LineSource::Tcp(s) => s.close(),
        }
    }
}

/// A deterministic pseudo-random number for event `seq` (generated inputs).
pub fn mix(seq: u64, salt: u64) -> u64 {
    streamwork::core::hash::fmix64(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)
}

/// The vehicle types of the book's generated traffic, with their weights.
pub const VEHICLE_TYPES: &[(&str, u64)] = &[
    ("car", 50),
    ("truck", 15),
    ("van", 15),
    ("bus", 8),
    ("motorcycle", 12),
];

/// The vehicle type of generated event `seq`.
pub fn vehicle_type(seq: u64) -> &'static str {
    let total: u64 = VEHICLE_TYPES.iter().map(|(_, w)| w).sum();
    let mut pick = mix(seq, 1) % total;
    for (name, weight) in VEHICLE_TYPES {
        if pick < *weight {
            return name;
        }
        pick -= weight;
    }
    VEHICLE_TYPES[0].0
}

/// Waits for the job to end, showing the library's progress display on a
/// terminal while a bounded input is read (towards the number of events
/// when it is known); then returns its report.
pub fn join_with_progress(handle: JobHandle, args: &InputArgs) -> Result<JobReport, JobError> {
    // A live (TCP) input has no end to make progress towards.
    if LineSource::is_live(args) {
        return handle.join();
    }
    let events = args.input.is_none().then_some(args.events);
    streamwork::progress::join(handle, events)
}

/// Prints the job's report and the malformed input count on stderr.
pub fn print_summary(report: &JobReport, input: &str, errors: &InputErrors) {
    eprintln!();
    eprintln!("input: {input}");
    eprint!("{report}");
    let rate = report
        .components
        .first()
        .map(|c| c.records_out() as f64 / report.elapsed.as_secs_f64().max(1e-9))
        .unwrap_or(0.0);
    eprintln!("  throughput: {rate:.0} events/s from the first source");
    if errors.count() > 0 {
        eprintln!("  malformed input skipped: {}", errors.count());
        for example in errors.examples() {
            eprintln!("    {example}");
        }
    }
}
