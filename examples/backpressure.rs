//! Chapter 9: backpressure. A generator source runs as fast as it can,
//! through a stage, into a sink that sleeps on every record. With `block`
//! the source slows down to the sink's pace (backpressure propagates); with a
//! dropping policy the source keeps its rate and the edge into the sink drops
//! what the sink cannot take, counted exactly. Backpressure watermarks pause
//! the source instead. The job page shows it live.
//!
//! ```sh
//! cargo run --release --example backpressure -- --duration-s 5 --sink-delay-us 100
//! cargo run --release --example backpressure -- --duration-s 5 --sink-delay-us 100 --overflow drop-newest --ui 127.0.0.1:7000
//! ```
//!
//! The last line on stdout is
//! `{"emitted":N,"dropped":D,"delivered":M,"bottleneck":"COMPONENT"}`.

use std::time::Duration;

use clap::Parser;
use streamwork::prelude::*;

/// A fast source into a slow sink (Grokking Streaming Systems, chapter 9).
#[derive(Parser, Debug)]
struct Args {
    /// How long to run before stopping gracefully.
    #[arg(long, default_value_t = 3.0)]
    duration_s: f64,
    /// Microseconds the sink sleeps per record.
    #[arg(long, default_value_t = 100)]
    sink_delay_us: u64,
    /// What the edge into the sink does when full: block, drop-newest, drop-oldest or sample.
    #[arg(long, default_value = "block")]
    overflow: Overflow,
    /// Pause the source while the sink's queue is fuller than this fraction (with --resume-below).
    #[arg(long, requires = "resume_below")]
    pause_above: Option<f64>,
    /// Resume the source once the sink's queue is below this fraction.
    #[arg(long, requires = "pause_above")]
    resume_below: Option<f64>,
    /// Batches the sink's queue holds.
    #[arg(long, default_value_t = 4)]
    capacity: usize,
    /// Serve the job page on this address (say 127.0.0.1:7000).
    #[arg(long)]
    ui: Option<String>,
}

/// Sleeps on every record: the slow stage.
#[derive(Clone)]
struct SleepySink {
    delay: Duration,
}

impl Sink for SleepySink {
    type In = u64;
    fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> {
        std::thread::sleep(self.delay);
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sink = SleepySink {
        delay: Duration::from_micros(args.sink_delay_us),
    };
    let (high, low) = (
        args.pause_above.unwrap_or(1.0),
        args.resume_below.unwrap_or(0.0),
    );
    let pausing = args.pause_above.is_some();
    let capacity = args.capacity;
    let overflow = args.overflow;
    let graph = if pausing {
        job! {
            name "backpressure";
            batch_size 256;
            source generator = GeneratorSource::new(|i| i);
            operator stage = |value: u64| value.wrapping_mul(0x9e37_79b9_7f4a_7c15) <- generator;
            sink slow_sink = sink <- stage.capacity(capacity).overflow(overflow).pause_sources_above(high, low);
        }?
    } else {
        job! {
            name "backpressure";
            batch_size 256;
            source generator = GeneratorSource::new(|i| i);
            operator stage = |value: u64| value.wrapping_mul(0x9e37_79b9_7f4a_7c15) <- generator;
            sink slow_sink = sink <- stage.capacity(capacity).overflow(overflow);
        }?
    };
    let (handle, page) = match &args.ui {
        Some(address) => {
            let (handle, page) = graph.start_with_ui(address)?;
            eprintln!("job page at http://{}/", page.address());
            (handle, Some(page))
        }
        None => (graph.start()?, None),
    };
    handle.stop_on_ctrl_c()?;
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(args.duration_s.max(0.0));
    while std::time::Instant::now() < deadline && !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.stop();
    let report = handle.join()?;
    drop(page);
    eprint!("{report}");
    let emitted = report
        .component("generator")
        .map(|c| c.records_out())
        .unwrap_or(0);
    let sink = report.component("slow_sink");
    let delivered = sink.map(|c| c.records_in()).unwrap_or(0);
    let dropped = sink.map(|c| c.dropped_in).unwrap_or(0);
    eprintln!(
        "overflow {:?}: the source emitted {emitted}, the sink received {delivered}, the edge dropped {dropped}; source pauses: {}",
        args.overflow, report.source_pauses
    );
    if let Some(thrashing) = &report.thrashing {
        eprintln!("{thrashing}");
    }
    let bottleneck = serde_json::to_string(&report.bottleneck.clone().unwrap_or_default())?;
    println!(
        "{{\"emitted\":{emitted},\"dropped\":{dropped},\"delivered\":{delivered},\"bottleneck\":{bottleneck}}}"
    );
    Ok(())
}
