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
    /// Times state past its memory budget held the sources back until its
    /// next checkpoint ([`CheckpointView::hold_input`](streamwork_core::CheckpointView::hold_input)).
    pub input_holds: u64,
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
        if self.input_holds > 0 {
            writeln!(
                f,
                "  sources held {} times by state past its memory budget, each until a checkpoint",
                self.input_holds
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
            input_holds: 0,
            checkpoints: vec![CheckpointStats {
                id: CheckpointId::new(7),
                duration: Duration::from_millis(12),
                bytes: 4096,
                is_final: false,
                early: false,
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
    fn checkpoints_and_the_restore_are_printed() {
        let report = report("counts");
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
