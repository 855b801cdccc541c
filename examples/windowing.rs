//! Chapter 7: tumbling, sliding and session windows side by side on the same
//! vehicle events, in event time with a watermark, and what happens to late
//! events (within the allowed lateness: the window re-fires as an update;
//! beyond it: the `late` channel).
//!
//! ```sh
//! cargo run --release --example windowing
//! cargo run --release --example windowing -- --port 9990     # lines: TYPE,TIME_MS
//! ```

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use common::{InputArgs, LineSource};
use streamwork::prelude::*;

/// Windows side by side (Grokking Streaming Systems, chapter 7).
#[derive(Parser, Debug)]
struct Args {
    /// Read `TYPE,TIME_MS` lines from this file (or directory).
    #[arg(long, conflicts_with = "port")]
    input: Option<std::path::PathBuf>,
    /// Read `TYPE,TIME_MS` lines from a TCP server on 127.0.0.1:PORT (run `nc -lk PORT` first).
    #[arg(long)]
    port: Option<u16>,
    /// How many events to generate (the late ones are events 35 and 70).
    #[arg(long, default_value_t = 90)]
    events: u64,
}

/// A vehicle seen at an event time (milliseconds).
type Sighting = (String, i64);

#[derive(Clone)]
struct ParseSightings {
    errors: InputErrors,
}

#[operator(stateless)]
impl ParseSightings {
    fn on_record(&self, line: String, out: &mut Collector<Sighting>) {
        let parsed = line
            .split_once(',')
            .and_then(|(kind, time)| Some((kind.trim().to_string(), time.trim().parse().ok()?)));
        match parsed {
            Some(sighting) => out.emit(sighting),
            None => self
                .errors
                .record(format!("`{line}`: expected TYPE,TIME_MS")),
        }
    }
}

/// Generated traffic: a vehicle every ~700 ms of event time, slightly out of
/// order, with one event late within the lateness and one beyond it.
fn generated(seq: u64) -> String {
    let kinds = ["car", "truck", "bus"];
    let kind = kinds[(common::mix(seq, 5) % 3) as usize];
    let time = match seq {
        35 => 19_500, // late, within the 2 s lateness of the closed window [10 s, 20 s)
        70 => 9_000,  // late, far beyond any lateness
        _ => seq as i64 * 700 - (common::mix(seq, 9) % 1_500) as i64,
    };
    format!("{kind},{}", time.max(0))
}

fn summary(sightings: WindowContents<'_, Sighting>) -> String {
    let mut kinds: BTreeMap<&str, u32> = BTreeMap::new();
    for (kind, _) in sightings.iter() {
        *kinds.entry(kind).or_default() += 1;
    }
    let times: Vec<i64> = sightings.iter().map(|(_, t)| *t).collect();
    format!(
        "{} sightings, first at {} ms, last at {} ms",
        sightings.len(),
        times.iter().min().unwrap_or(&0),
        times.iter().max().unwrap_or(&0)
    )
}

fn line<R: std::fmt::Display>(
    shape: &'static str,
) -> impl Fn(&WindowResult<String, R>, &mut Vec<u8>) + Clone {
    move |r, out| {
        let firing = match r.firing {
            Firing::Final => "",
            Firing::Early => " (early)",
            Firing::Update => " (update: a late event arrived within the lateness)",
        };
        out.extend_from_slice(
            format!(
                "{shape:<8} {:<6} [{:>6}, {:>6}) ms  {}{firing}",
                r.key,
                r.window.start.millis(),
                r.window.end.millis(),
                r.value
            )
            .as_bytes(),
        );
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let errors = InputErrors::new();
    let late = LateCounter::new();
    let input = InputArgs {
        input: args.input,
        port: args.port,
        events: args.events,
    };
    let source = LineSource::from_args(&input, &errors, generated);
    let secs = Duration::from_secs;
    // One record per batch: watermarks are coalesced per batch, and this small
    // example wants event time to advance after every record so that the
    // late events are late when they arrive.
    let graph = job! {
        name "windowing";
        batch_size 1;
        source lines = source;
        operator sightings = ParseSightings { errors: errors.clone() } <- lines;
        operator timed = Watermarks::bounded(secs(2)).timestamps(|s: &Sighting| Timestamp::from_millis(s.1)) <- sightings;
        operator tumbling { results, late } = Windows::tumbling(secs(10)).allowed_lateness(secs(2)).count_late_in(late.clone()).apply(summary)
            <- timed.key(|s: &Sighting| s.0.clone());
        operator sliding { results, late } = Windows::sliding(secs(10), secs(5)).count_late_in(late.clone()).count()
            <- timed.key(|s: &Sighting| s.0.clone());
        operator sessions { results, late } = Windows::session(secs(1)).count_late_in(late.clone()).count()
            <- timed.key(|s: &Sighting| s.0.clone());
        sink print_tumbling = StdoutSink::new(line("tumbling")) <- tumbling.results;
        sink print_sliding = StdoutSink::new(line("sliding")) <- sliding.results;
        sink print_sessions = StdoutSink::new(line("session")) <- sessions.results;
        sink print_late = StdoutSink::new(|s: &Sighting, out: &mut Vec<u8>| {
            out.extend_from_slice(format!("late     {:<6} at {} ms: beyond the allowed lateness, sent to the late channel", s.0, s.1).as_bytes())
        }) <- tumbling.late;
        drop sliding.late;
        drop sessions.late;
    }?;
    let handle = graph.start()?;
    handle.stop_on_ctrl_c()?;
    let report = common::join_with_progress(handle, &input)?;
    common::print_summary(&report, &LineSource::describe(&input), &errors);
    eprintln!(
        "late events beyond the allowed lateness (all three window operators): {}",
        late.get()
    );
    Ok(())
}
