//! What a job did: records in and out of every instance.

use std::fmt;
use std::time::Duration;

use streamwork_core::graph::ComponentKind;

/// Counts of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceReport {
    /// Records received.
    pub records_in: u64,
    /// Records emitted, on all channels.
    pub records_out: u64,
}

/// Counts of one component, per instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentReport {
    /// The component's name.
    pub name: String,
    /// Source, operator or sink.
    pub kind: ComponentKind,
    /// One entry per instance, by index.
    pub instances: Vec<InstanceReport>,
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobReport {
    /// The job's name.
    pub job: String,
    /// Wall time from start to the end of the last task.
    pub elapsed: Duration,
    /// Whether it was stopped (stop handle, Ctrl-C) rather than running out of input.
    pub stopped: bool,
    /// Every component, in the order they were added.
    pub components: Vec<ComponentReport>,
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
