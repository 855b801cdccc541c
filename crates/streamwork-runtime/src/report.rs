//! What a job did: records in and out of every instance.

use std::fmt;
use std::time::Duration;

use crate::builder::ComponentKind;

pub use crate::metrics::Capacity;

/// Counts of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceReport {
    /// Records received.
    pub records_in: u64,
    /// Records emitted, on all channels.
    pub records_out: u64,
}

/// Counts of one component, per instance, and its capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentReport {
    /// The component's name.
    pub name: String,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// One entry per instance, by index.
    pub instances: Vec<InstanceReport>,
    /// Rates and time shares over the monitor's last interval.
    pub capacity: Capacity,
    /// Records dropped by overflow policies on the edges into this component.
    pub dropped_in: u64,
}

impl ComponentReport {
    /// Records received by all instances.
    pub fn records_in(&self) -> u64 {
        self.instances.iter().map(|i| i.records_in).sum()
    }

    /// Records emitted by all instances.
    pub fn records_out(&self) -> u64 {
        self.instances.iter().map(|i| i.records_out).sum()
    }
}

/// The outcome of a job that ended without error.
#[derive(Clone, Debug, PartialEq)]
pub struct JobReport {
    /// The job's name.
    pub job: String,
    /// Wall time from start to the end of the last task.
    pub elapsed: Duration,
    /// Whether it was stopped (stop handle, Ctrl-C) rather than running out of input.
    pub stopped: bool,
    /// Every component, in the order they were added.
    pub components: Vec<ComponentReport>,
    /// The component last found to be the bottleneck, if backpressure arose.
    pub bottleneck: Option<String>,
    /// The report of a permanent shortfall, if pauses kept recurring.
    pub thrashing: Option<String>,
    /// Times sources were paused by backpressure watermarks.
    pub source_pauses: u64,
    /// The checkpoints completed, in order (a job that takes them; filled
    /// in by `join`).
    pub checkpoints: Vec<crate::checkpoint::CheckpointStats>,
    /// The checkpoint this run restored, and what of the checkpoint
    /// directory it could not read (filled in by `join`).
    pub recovery: crate::checkpoint::Recovery,
    /// The savepoint the job stopped at (a stop of a job that takes
    /// checkpoints): the next run on the same directory resumes from it.
    pub savepoint: Option<streamwork_core::CheckpointId>,
    /// Times the job was restarted after a failure (`run_with`).
    pub restarts: u32,
}

impl JobReport {
    /// The component named `name`.
    pub fn component(&self, name: &str) -> Option<&ComponentReport> {
        self.components.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for JobReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "job `{}` {} in {:.3} s",
            self.job,
            if self.stopped { "stopped" } else { "finished" },
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  {:<24} {:>8} {:>12} {:>12}  per instance (in)",
            "component", "kind", "records in", "records out"
        )?;
        for c in &self.components {
            let per: Vec<String> = c
                .instances
                .iter()
                .map(|i| i.records_in.to_string())
                .collect();
            writeln!(
                f,
                "  {:<24} {:>8} {:>12} {:>12}  [{}]",
                c.name,
                c.kind.to_string(),
                c.records_in(),
                c.records_out(),
                per.join(", ")
            )?;
        }
        Ok(())
    }
}

/// A Prometheus series: name, type, help, and its value for a component.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ComponentReport) -> f64,
);

/// The report as Prometheus text exposition: one series per component,
/// labelled `component`.
pub fn prometheus(report: &JobReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let series: [Series; 9] = [
        (
            "streamwork_records_in_total",
            "counter",
            "Records received.",
            |c| c.records_in() as f64,
        ),
        (
            "streamwork_records_out_total",
            "counter",
            "Records emitted.",
            |c| c.records_out() as f64,
        ),
        (
            "streamwork_dropped_records_total",
            "counter",
            "Records dropped by overflow policies on the edges into the component.",
            |c| c.dropped_in as f64,
        ),
        (
            "streamwork_records_in_per_second",
            "gauge",
            "Records received per second.",
            |c| c.capacity.in_per_sec,
        ),
        (
            "streamwork_utilization",
            "gauge",
            "Share of wall time busy.",
            |c| c.capacity.utilization(),
        ),
        (
            "streamwork_headroom",
            "gauge",
            "Share of capacity left.",
            |c| c.capacity.headroom(),
        ),
        (
            "streamwork_idle_ratio",
            "gauge",
            "Share of wall time waiting for input.",
            |c| c.capacity.idle,
        ),
        (
            "streamwork_backpressure_ratio",
            "gauge",
            "Share of wall time blocked on a full output.",
            |c| c.capacity.backpressured,
        ),
        (
            "streamwork_queue_occupancy",
            "gauge",
            "Fullness of the input queues.",
            |c| c.capacity.queue_occupancy,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for c in &report.components {
            let _ = writeln!(
                out,
                "{name}{{component=\"{}\"}} {}",
                c.name.replace('"', "'"),
                value(c)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP streamwork_watermark_lag_ms Wall-clock time minus the component's watermark."
    );
    let _ = writeln!(out, "# TYPE streamwork_watermark_lag_ms gauge");
    for c in &report.components {
        if let Some(lag) = c.capacity.watermark_lag_ms {
            let _ = writeln!(
                out,
                "streamwork_watermark_lag_ms{{component=\"{}\"}} {lag}",
                c.name.replace('"', "'"),
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP streamwork_bottleneck The component found to be the bottleneck (1)."
    );
    let _ = writeln!(out, "# TYPE streamwork_bottleneck gauge");
    for c in &report.components {
        let is = report.bottleneck.as_deref() == Some(c.name.as_str());
        let _ = writeln!(
            out,
            "streamwork_bottleneck{{component=\"{}\"}} {}",
            c.name.replace('"', "'"),
            u8::from(is)
        );
    }
    let _ = writeln!(
        out,
        "# HELP streamwork_source_pauses_total Times sources were paused by backpressure watermarks."
    );
    let _ = writeln!(out, "# TYPE streamwork_source_pauses_total counter");
    let _ = writeln!(
        out,
        "streamwork_source_pauses_total {}",
        report.source_pauses
    );
    out
}
