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

    /// The report in Prometheus text exposition (what `/metrics` serves).
    pub fn prometheus(&self) -> String {
        prometheus(self)
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
                "  {:<24} {:>8} {:>12} {:>12}  [{}]{}",
                c.name,
                c.kind.to_string(),
                c.records_in(),
                c.records_out(),
                per.join(", "),
                if c.dropped_in > 0 {
                    format!(", {} dropped on the way in", c.dropped_in)
                } else {
                    String::new()
                }
            )?;
        }
        if let Some(bottleneck) = &self.bottleneck {
            writeln!(f, "  bottleneck: `{bottleneck}`")?;
        }
        if self.source_pauses > 0 {
            writeln!(
                f,
                "  sources paused {} times by backpressure",
                self.source_pauses
            )?;
        }
        if let Some(thrashing) = &self.thrashing {
            writeln!(f, "  thrashing: {thrashing}")?;
        }
        if self.restarts > 0 {
            writeln!(f, "  restarted {} times after a failure", self.restarts)?;
        }
        for skipped in &self.recovery.skipped {
            writeln!(f, "  skipped on restore: {skipped}")?;
        }
        if let Some(id) = self.recovery.restored_from {
            writeln!(
                f,
                "  restored from checkpoint {id} (loaded in {:.1} ms, longest instance restore {:.1} ms)",
                ms(self.recovery.load),
                ms(self.recovery.longest_instance_restore)
            )?;
        }
        let taken: Vec<_> = self.checkpoints.iter().filter(|c| !c.is_final).collect();
        if let Some(longest) = taken.iter().map(|c| c.duration).max() {
            let bytes: u64 = taken.iter().map(|c| c.bytes).sum();
            let pause = taken
                .iter()
                .map(|c| c.longest_pause)
                .max()
                .unwrap_or_default();
            let alignment = taken
                .iter()
                .map(|c| c.longest_alignment)
                .max()
                .unwrap_or_default();
            writeln!(
                f,
                "  {} checkpoints: {bytes} bytes in all, longest {:.1} ms, longest task pause {:.2} ms, longest alignment {:.1} ms",
                taken.len(),
                ms(longest),
                ms(pause),
                ms(alignment)
            )?;
        }
        if let Some(id) = self.savepoint {
            writeln!(
                f,
                "  stopped at savepoint {id}: the next run on the same directory resumes from it"
            )?;
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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
                label(&c.name),
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
                label(&c.name),
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
            label(&c.name),
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
    checkpoint_series(report, &mut out);
    out
}

/// The checkpoint series: how many completed, and the last one's duration,
/// size, longest task-thread pause and longest alignment; the restore this
/// run started with.
fn checkpoint_series(report: &JobReport, out: &mut String) {
    use std::fmt::Write;
    let mut gauge = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    };
    let taken = report.checkpoints.iter().filter(|c| !c.is_final).count();
    gauge(
        "streamwork_checkpoints_total",
        "counter",
        "Checkpoints completed.",
        taken as f64,
    );
    if let Some(last) = report.checkpoints.last() {
        gauge(
            "streamwork_last_checkpoint_id",
            "gauge",
            "The id of the last complete checkpoint.",
            last.id.get() as f64,
        );
        gauge(
            "streamwork_last_checkpoint_duration_seconds",
            "gauge",
            "From the trigger of the last complete checkpoint to its durable commit.",
            last.duration.as_secs_f64(),
        );
        gauge(
            "streamwork_last_checkpoint_bytes",
            "gauge",
            "Bytes of state the last complete checkpoint wrote.",
            last.bytes as f64,
        );
        gauge(
            "streamwork_last_checkpoint_pause_seconds",
            "gauge",
            "The longest time taking the last checkpoint held a task thread.",
            last.longest_pause.as_secs_f64(),
        );
        gauge(
            "streamwork_last_checkpoint_alignment_seconds",
            "gauge",
            "The longest barrier alignment of the last checkpoint.",
            last.longest_alignment.as_secs_f64(),
        );
    }
    if let Some(id) = report.recovery.restored_from {
        gauge(
            "streamwork_restored_checkpoint_id",
            "gauge",
            "The checkpoint this run restored from.",
            id.get() as f64,
        );
        gauge(
            "streamwork_restore_load_seconds",
            "gauge",
            "Finding, mapping and checking the checkpoint restored.",
            report.recovery.load.as_secs_f64(),
        );
        gauge(
            "streamwork_restore_instance_seconds",
            "gauge",
            "The longest restore of one instance from it.",
            report.recovery.longest_instance_restore.as_secs_f64(),
        );
    }
}

/// `name` as a Prometheus label value: backslash, double quote and line
/// feed escaped, as the text exposition format requires.
fn label(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CheckpointStats, Recovery};
    use streamwork_core::{CheckpointId, InstanceIdx};

    fn report(name: &str) -> JobReport {
        JobReport {
            job: "job".into(),
            elapsed: Duration::from_secs(1),
            stopped: false,
            components: vec![ComponentReport {
                name: name.into(),
                kind: ComponentKind::Operator,
                instances: vec![InstanceReport::default()],
                capacity: Capacity::default(),
                dropped_in: 0,
            }],
            bottleneck: None,
            thrashing: None,
            source_pauses: 0,
            checkpoints: vec![CheckpointStats {
                id: CheckpointId::new(7),
                duration: Duration::from_millis(12),
                bytes: 4096,
                is_final: false,
                longest_pause: Duration::from_micros(250),
                paused_most: Some((name.into(), InstanceIdx(0))),
                longest_alignment: Duration::from_millis(3),
            }],
            recovery: Recovery {
                restored_from: Some(CheckpointId::new(5)),
                load: Duration::from_millis(2),
                ..Recovery::default()
            },
            savepoint: None,
            restarts: 0,
        }
    }

    #[test]
    fn hostile_component_names_are_escaped_in_label_values() {
        let text = prometheus(&report("a\"b\\c\nd"));
        assert!(text.contains(r#"streamwork_records_in_total{component="a\"b\\c\nd"} 0"#));
        // Every sample line is one line: the name's line feed is escaped.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.split(' ').count() == 2, "{line:?}");
        }
    }

    #[test]
    fn checkpoints_and_the_restore_are_exposed_and_printed() {
        let report = report("counts");
        let text = prometheus(&report);
        assert!(text.contains("streamwork_checkpoints_total 1\n"));
        assert!(text.contains("streamwork_last_checkpoint_bytes 4096\n"));
        assert!(text.contains("streamwork_last_checkpoint_pause_seconds 0.00025\n"));
        assert!(text.contains("streamwork_last_checkpoint_alignment_seconds 0.003\n"));
        assert!(text.contains("streamwork_restored_checkpoint_id 5\n"));
        let printed = report.to_string();
        assert!(printed.contains("restored from checkpoint 5"), "{printed}");
        assert!(printed.contains("1 checkpoints: 4096 bytes"), "{printed}");
    }

    #[test]
    fn the_printed_report_names_drops_the_bottleneck_thrashing_and_restarts() {
        let mut report = report("slow");
        let quiet = report.to_string();
        assert!(
            !quiet.contains("dropped") && !quiet.contains("bottleneck"),
            "{quiet}"
        );
        report.components[0].dropped_in = 17;
        report.bottleneck = Some("slow".into());
        report.source_pauses = 3;
        report.thrashing = Some("paused 3 times in 10 s: `slow` cannot keep up".into());
        report.restarts = 2;
        report.recovery.skipped = vec!["segment 4: torn record at byte 96".into()];
        report.savepoint = Some(CheckpointId::new(9));
        let printed = report.to_string();
        for expected in [
            "17 dropped on the way in",
            "bottleneck: `slow`",
            "sources paused 3 times",
            "thrashing: paused 3 times",
            "restarted 2 times",
            "skipped on restore: segment 4",
            "stopped at savepoint 9",
        ] {
            assert!(
                printed.contains(expected),
                "`{expected}` missing from:\n{printed}"
            );
        }
    }
}
