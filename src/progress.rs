//! A progress display for bounded jobs (the default `progress` feature, on
//! indicatif): while the job runs, standard error shows the events its
//! sources have read, the rate, the share done and the time left when the
//! number of events is known, and the bottleneck once the monitor names
//! one. Where standard error is not a terminal (a pipe, a log file, CI),
//! nothing is drawn: [`join`] only waits.
//!
//! ```no_run
//! use streamwork::prelude::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let graph = job! {
//!     source numbers = GeneratorSource::new(|i| i).take(10_000_000);
//!     sink out = CollectSink::<u64>::new() <- numbers;
//! }?;
//! // 10 million events to read: a bar with the time left.
//! let report = streamwork::progress::join(graph.start()?, Some(10_000_000))?;
//! # let _ = report;
//! # Ok(())
//! # }
//! ```

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use streamwork_runtime::{ComponentKind, JobError, JobHandle, JobReport};

/// Waits for the job to end, drawing its progress on a terminal: towards
/// `events` when the input's size is known, as a running count otherwise.
/// Returns the job's report.
pub fn join(handle: JobHandle, events: Option<u64>) -> Result<JobReport, JobError> {
    if !std::io::stderr().is_terminal() {
        return handle.join();
    }
    let bar = match events {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "[{bar:30}] {human_pos}/{human_len} events  {msg}  eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {human_pos} events read  {msg}  {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    let metrics = handle.live_metrics();
    let mut last = (Instant::now(), 0u64);
    while !handle.is_finished() {
        let report = metrics.snapshot();
        let read: u64 = report
            .components
            .iter()
            .filter(|c| c.kind == ComponentKind::Source)
            .map(|source| source.records_out())
            .sum();
        bar.set_position(read);
        let now = Instant::now();
        let seconds = now.duration_since(last.0).as_secs_f64();
        if seconds >= 0.5 {
            let rate = read.saturating_sub(last.1) as f64 / seconds;
            let bottleneck = report
                .bottleneck
                .map(|b| format!(", bottleneck `{b}`"))
                .unwrap_or_default();
            bar.set_message(format!("{:.2} M events/s{bottleneck}", rate / 1e6));
            last = (now, read);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    handle.join()
}
