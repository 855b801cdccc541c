//! The plan and the metrics as JSON, for the page and for tools.

use serde_json::{Value, json};
use streamwork_runtime::JobPlan;
use streamwork_runtime::JobReport;

/// `/plan.json`: components (name, kind, parallelism, inputs, channels),
/// edges, the stages and their topics (a job run as stages), and whether a
/// run of it reports live metrics here.
pub(crate) fn plan(plan: &JobPlan, live: bool) -> String {
    let components: Vec<Value> = plan
        .components
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "kind": c.kind.to_string(),
                "parallelism": c.parallelism,
                "inputs": c.inputs.iter().map(|(n, t)| json!({"name": n, "type": t})).collect::<Vec<_>>(),
                "channels": c.channels.iter().map(|(n, t)| json!({"name": n, "type": t})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let edges: Vec<Value> = plan
        .edges
        .iter()
        .map(|e| {
            json!({
                "from": e.from,
                "channel": e.channel,
                "to": e.to,
                "port": e.port,
                "grouping": e.grouping.to_string(),
            })
        })
        .collect();
    let stages: Vec<Value> = plan
        .stages
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "components": s.components,
                "reads": s.reads,
                "writes": s.writes,
                "partitions": s.partitions,
            })
        })
        .collect();
    json!({
        "name": plan.name,
        "components": components,
        "edges": edges,
        "stages": stages,
        "live": live,
    })
    .to_string()
}

/// `/metrics.json`: the live report as of the monitor's `look`-th look.
pub(crate) fn metrics(report: &JobReport, look: u64) -> String {
    let components: Vec<Value> = report
        .components
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "records_in": c.records_in(),
                "records_out": c.records_out(),
                "in_per_sec": c.capacity.in_per_sec,
                "out_per_sec": c.capacity.out_per_sec,
                "busy": c.capacity.busy,
                "idle": c.capacity.idle,
                "backpressured": c.capacity.backpressured,
                "queue_occupancy": c.capacity.queue_occupancy,
                "utilization": c.capacity.utilization(),
                "headroom": c.capacity.headroom(),
                "dropped_in": c.dropped_in,
                "watermark_ms": c.capacity.watermark_ms,
                "watermark_lag_ms": c.capacity.watermark_lag_ms,
            })
        })
        .collect();
    let taken: Vec<_> = report.checkpoints.iter().filter(|c| !c.is_final).collect();
    let last = taken.last().map(|c| {
        json!({
            "id": c.id.get(),
            "duration_ms": c.duration.as_secs_f64() * 1e3,
            "bytes": c.bytes,
            "pause_ms": c.longest_pause.as_secs_f64() * 1e3,
            "paused_most": c.paused_most.as_ref().map(|(name, i)| format!("{name}[{}]", i.0)),
            "alignment_ms": c.longest_alignment.as_secs_f64() * 1e3,
        })
    });
    let restore = report.recovery.restored_from.map(|id| {
        json!({
            "checkpoint": id.get(),
            "load_ms": report.recovery.load.as_secs_f64() * 1e3,
            "instance_ms": report.recovery.longest_instance_restore.as_secs_f64() * 1e3,
        })
    });
    json!({
        "job": report.job,
        "look": look,
        "elapsed_s": report.elapsed.as_secs_f64(),
        "stopped": report.stopped,
        "bottleneck": report.bottleneck,
        "thrashing": report.thrashing,
        "source_pauses": report.source_pauses,
        "input_holds": report.input_holds,
        "components": components,
        "checkpoints": {
            "completed": taken.len(),
            "early": taken.iter().filter(|c| c.early).count(),
            "last": last,
            "restore": restore,
        },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use streamwork::core::CheckpointId;
    use streamwork_runtime::CheckpointStats;

    use super::*;

    fn taken(id: u64, early: bool, is_final: bool) -> CheckpointStats {
        CheckpointStats {
            id: CheckpointId::new(id),
            duration: Duration::from_millis(3),
            bytes: 100,
            is_final,
            early,
            longest_pause: Duration::ZERO,
            paused_most: None,
            longest_alignment: Duration::ZERO,
        }
    }

    /// The page counts the checkpoints taken, and those asked for early
    /// (a memory budget passed); the final one is not counted; and the
    /// holds of the input by state past its budget.
    #[test]
    fn the_metrics_count_early_checkpoints() {
        let report = JobReport {
            job: "job".into(),
            elapsed: Duration::from_secs(1),
            stopped: false,
            components: Vec::new(),
            bottleneck: None,
            thrashing: None,
            source_pauses: 0,
            input_holds: 2,
            checkpoints: vec![
                taken(1, false, false),
                taken(2, true, false),
                taken(3, true, false),
                taken(4, false, true),
            ],
            recovery: Default::default(),
            savepoint: None,
            restarts: 0,
        };
        let json: Value = serde_json::from_str(&metrics(&report, 1)).unwrap();
        assert_eq!(json["checkpoints"]["completed"], 3);
        assert_eq!(json["checkpoints"]["early"], 2);
        assert_eq!(json["checkpoints"]["last"]["id"], 3);
        assert_eq!(json["input_holds"], 2);
    }
}
