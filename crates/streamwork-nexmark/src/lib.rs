//! The Nexmark benchmark on Streamwork: the event model and its JSON-lines
//! form, a deterministic generator, the queries as jobs, and the runner behind
//! the `streamwork-nexmark` CLI (the contract is the crate's `NEXMARK.md`).
//!
//! ```
//! use streamwork_nexmark::{Input, Query, RowTarget, RunOptions, run};
//! let summary = run(&RunOptions {
//!     output: RowTarget::Blackhole,
//!     parallelism: 2,
//!     ..RunOptions::new(Query::Q2, Input::Generated { events: 10_000, seed: 42 })
//! })?;
//! assert_eq!(summary.events, 10_000);
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! Lateness is decided where the input is read, in input order: after each
//! event the watermark is the largest `dateTime` so far minus 4 s, and an event
//! below it is dropped and counted. The input is read by one instance, so the
//! results do not depend on timing or on `--parallelism`.

#![warn(missing_docs)]

pub mod generator;
pub mod model;
pub mod queries;
pub mod sink;
pub mod source;
pub mod text;
pub mod time;

use std::path::PathBuf;
use std::time::Instant;

use streamwork::prelude::*;

pub use generator::GeneratorConfig;
pub use model::{Auction, Bid, Event, Person};
pub use queries::{Query, SideInput, SideInputError};
pub use sink::RowTarget;
pub use text::Text;

use queries::JobParts;
use sink::RowOutput;
use source::NexmarkSource;

/// Where the events come from.
#[derive(Clone, Debug)]
pub enum Input {
    /// A JSON-lines file; `-` is standard input.
    File(PathBuf),
    /// The generator.
    Generated {
        /// How many events.
        events: u64,
        /// Seed.
        seed: u64,
    },
}

/// One run of one query.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The query.
    pub query: Query,
    /// The events.
    pub input: Input,
    /// Where rows go.
    pub output: RowTarget,
    /// Parallelism of the query's operators.
    pub parallelism: u32,
    /// Worker threads that share the tasks: `None` for the default, one per
    /// instance up to the cores ([`default_workers`]); `Some(0)` for one
    /// thread per task.
    pub workers: Option<u32>,
    /// q13's side input (`None`: the standard one).
    pub side_input: Option<PathBuf>,
    /// Checkpoints, and the delivery they give (`None`: at most once, no
    /// checkpoints).
    pub checkpoints: Option<Checkpoints>,
    /// Write an update stream: each change of the result as it happens,
    /// each row with its `"op"` (`"+"` enters the result, `"-"` leaves it),
    /// rather than final rows. The rows of q4, q6 and q15-q19 change as
    /// input arrives; those of the other queries are final when written,
    /// each a `"+"`.
    pub updates: bool,
    /// For fault tests: the input never ends (see
    /// [`NexmarkSource::HeldOpen`]), so that the run is killed, never
    /// finished.
    pub hold_input_open: bool,
}

/// How a run checkpoints. A run with the same directory resumes from its
/// last complete checkpoint (after a crash, say); exactly once, the rows it
/// then writes and counts are those of a run without failure.
#[derive(Clone, Debug)]
pub struct Checkpoints {
    /// Where checkpoints are kept.
    pub dir: PathBuf,
    /// How often one starts.
    pub interval: std::time::Duration,
    /// At least once or exactly once.
    pub delivery: Delivery,
}

impl RunOptions {
    /// `query` on `input`, rows to stdout, at parallelism 1, a thread per
    /// task, the standard side input.
    pub fn new(query: Query, input: Input) -> Self {
        RunOptions {
            query,
            input,
            output: RowTarget::Stdout,
            parallelism: 1,
            workers: None,
            side_input: None,
            checkpoints: None,
            updates: false,
            hold_input_open: false,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Events read (late ones included, malformed lines not).
    pub events: u64,
    /// Events dropped as late.
    pub late: u64,
    /// Lines that were not Nexmark events.
    pub malformed: u64,
    /// Result rows written.
    pub results: u64,
    /// Wall time.
    pub elapsed_s: f64,
    /// CPU time the process used during the run (user and system, every
    /// thread).
    pub cpu_s: f64,
    /// Checkpoints completed during the run (the final one at the end of
    /// input not counted).
    pub checkpoints: u64,
    /// The longest a task waited for a checkpoint, in milliseconds.
    pub longest_checkpoint_pause_ms: f64,
    /// The checkpoint the run resumed from, if any.
    pub resumed: Option<Resumed>,
}

/// Where a run resumed, and what resuming cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Resumed {
    /// The checkpoint restored.
    pub checkpoint: u64,
    /// Finding, mapping and checking it, in milliseconds.
    pub load_ms: f64,
    /// The longest one instance took to rebuild its state from it, in
    /// milliseconds (instances restore in parallel).
    pub longest_instance_restore_ms: f64,
}

impl Summary {
    /// Events read per second of wall time.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed_s.max(1e-9)
    }

    /// Events read per second of CPU time: the throughput of one core, so
    /// that a run that keeps two cores busy is not counted as one.
    pub fn events_per_core_sec(&self) -> f64 {
        self.events as f64 / self.cpu_s.max(1e-9)
    }
}

/// The worker threads of a run at `parallelism` by default: one per
/// instance, at most one per core. Instance `i` of every component then
/// shares worker `i`, so a record crosses threads only at an exchange, and
/// at parallelism 1 the whole query runs on one thread with no channel
/// between its steps that another thread must wake.
pub fn default_workers(parallelism: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    parallelism.clamp(1, cores.max(1))
}

/// CPU seconds (user and system) the process has used so far.
fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |usage| {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        seconds(usage.user_time()) + seconds(usage.system_time())
    })
}

/// Runs a query to the end of its input.
pub fn run(options: &RunOptions) -> anyhow::Result<Summary> {
    let malformed = InputErrors::new();
    let late = LateCounter::new();
    let parallelism = options.parallelism.max(1);
    let (source, source_parallelism) = match &options.input {
        Input::File(path) => {
            let path = if path.as_os_str() == "-" {
                PathBuf::from("/dev/stdin")
            } else {
                path.clone()
            };
            (NexmarkSource::file(path, &malformed), 1)
        }
        Input::Generated { events, seed } => {
            let config = GeneratorConfig {
                seed: *seed,
                ..GeneratorConfig::default()
            };
            // `events` writes the input itself: one instance keeps it in order.
            let instances = if options.query == Query::Events {
                1
            } else {
                parallelism
            };
            (NexmarkSource::generated(config, *events), instances)
        }
    };
    let source = if options.hold_input_open {
        source.held_open()
    } else {
        source
    };
    // The side input is read entirely before the first event.
    let side_input = match (&options.side_input, options.query) {
        (Some(path), Query::Q13) => SideInput::read(path)?,
        _ => SideInput::standard(),
    };
    let exactly_once = options
        .checkpoints
        .as_ref()
        .is_some_and(|c| c.delivery == Delivery::ExactlyOnce);
    if options.checkpoints.is_some()
        && matches!(&options.input, Input::File(path) if path.as_os_str() == "-")
    {
        anyhow::bail!(
            "standard input cannot be read again after a failure, so a run with checkpoints cannot resume it: give --input FILE, or run without checkpoints"
        );
    }
    let output = if exactly_once {
        RowOutput::exactly_once(options.output.clone())?
    } else {
        RowOutput::new(options.output.clone())
    }
    .with_updates(options.updates);
    let graph = queries::job(
        options.query,
        JobParts {
            source,
            sp: source_parallelism,
            p: parallelism,
            sink_p: output.parallelism(parallelism),
            late: &late,
            output: &output,
            side_input: std::sync::Arc::new(side_input),
        },
    )?;
    let workers = options
        .workers
        .unwrap_or_else(|| default_workers(parallelism));
    let graph = graph.with_workers(workers);
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    let report = match &options.checkpoints {
        None => graph.run()?,
        Some(checkpoints) => graph.run_with(streamwork::runtime::RunOptions {
            checkpoints: Some(
                CheckpointConfig::new(&checkpoints.dir, checkpoints.interval)
                    .delivery(checkpoints.delivery),
            ),
            ..streamwork::runtime::RunOptions::default()
        })?,
    };
    let events = report
        .component("events")
        .map(|c| c.records_out())
        .unwrap_or(0);
    Ok(Summary {
        events,
        late: late.get(),
        malformed: malformed.count(),
        results: output.rows(),
        elapsed_s: started.elapsed().as_secs_f64(),
        cpu_s: cpu_seconds() - cpu_before,
        checkpoints: report.checkpoints.iter().filter(|c| !c.is_final).count() as u64,
        longest_checkpoint_pause_ms: report
            .checkpoints
            .iter()
            .map(|c| c.longest_pause.as_secs_f64() * 1e3)
            .fold(0.0, f64::max),
        resumed: report.recovery.restored_from.map(|id| Resumed {
            checkpoint: id.get(),
            load_ms: report.recovery.load.as_secs_f64() * 1e3,
            longest_instance_restore_ms: report.recovery.longest_instance_restore.as_secs_f64()
                * 1e3,
        }),
    })
}
