//! `cargo xtask bench`: the standard workloads against their hand-written
//! baselines. Each workload and parallelism runs in a fresh process of
//! `streamwork-bench`, so that its peak resident size is its own; the baseline
//! runs in that same process, just before. The processes run in rounds, and
//! each configuration reports its median round and the spread of all;
//! a run (not `--quick`, not `--against` another build) keeps its results
//! and a chart under `benches/results/`.

use std::process::Command;

use anyhow::{Context, bail};

use crate::{project_root, run as run_command};

#[path = "../../benches/measurement.rs"]
mod measurement;
use measurement::Measurement;

const WORKLOADS: &[&str] = &[
    "W1",
    "W1-CLOSURE",
    "W1-FLOW",
    "W2",
    "W3",
    "W3-K100",
    "W3-K100K",
    // W3 by hand on threads with a keyed exchange: what parallelism costs
    // without a framework (`benches/exchange.rs`).
    "W3-HAND",
    "JOIN",
    "STATE-KEYED",
    "STATE-STORED",
    "STATE-WINDOW",
];

/// Whether `workload` is a state workload: its figures include checkpoints
/// and restores, and a build from before them does not know it.
fn is_state(workload: &str) -> bool {
    workload.starts_with("STATE-")
}

/// Whether a build from before closures (W1 written with them) or the
/// hand-written W3 may not know `workload`: it is not run against another
/// build.
fn is_recent(workload: &str) -> bool {
    is_state(workload) || workload.starts_with("W1-") || workload == "W3-HAND"
}
const PARALLELISM: &[u32] = &[1, 2];

/// A Nexmark query `--nexmark` runs, with the published per-core figures it
/// is held against, in thousands of events per core-second.
struct Published {
    query: &'static str,
    /// Feldera's published 16-core throughput divided by 16 (it publishes
    /// no q10 or q11).
    feldera: Option<f64>,
    /// Flink 1.13's "Throughput/Cores" in the Nexmark repository's results
    /// (`nexmark/nexmark`, README: 3 workers of 8 cores, exactly once with
    /// RocksDB and incremental checkpoints every 3 min; it runs no q6).
    flink: Option<f64>,
}

impl Published {
    /// Five times Feldera's figure, ten times Flink's.
    fn multiples(&self) -> (f64, f64) {
        (
            self.feldera.map_or(0.0, |f| 5.0 * f),
            self.flink.map_or(0.0, |f| 10.0 * f),
        )
    }

    /// The bar of the benchmark issue: five times Feldera's figure and ten
    /// times Flink's, whichever is higher.
    fn bar(&self) -> f64 {
        let (feldera, flink) = self.multiples();
        feldera.max(flink)
    }

    /// Which figure sets the bar.
    fn bar_source(&self) -> &'static str {
        let (feldera, flink) = self.multiples();
        if feldera >= flink {
            "5x Feldera"
        } else {
            "10x Flink"
        }
    }
}

/// The queries `--nexmark` runs, q0 to q22.
const NEXMARK: &[Published] = &[
    Published {
        query: "q0",
        feldera: Some(436.0),
        flink: Some(155.02),
    },
    Published {
        query: "q1",
        feldera: Some(412.0),
        flink: Some(157.94),
    },
    Published {
        query: "q2",
        feldera: Some(422.0),
        flink: Some(175.21),
    },
    Published {
        query: "q3",
        feldera: Some(413.0),
        flink: Some(152.12),
    },
    Published {
        query: "q4",
        feldera: Some(265.0),
        flink: Some(34.33),
    },
    Published {
        query: "q5",
        feldera: Some(412.0),
        flink: Some(22.14),
    },
    Published {
        query: "q6",
        feldera: Some(250.0),
        flink: None,
    },
    Published {
        query: "q7",
        feldera: Some(196.0),
        flink: Some(12.33),
    },
    Published {
        query: "q8",
        feldera: Some(415.0),
        flink: Some(146.14),
    },
    Published {
        query: "q9",
        feldera: Some(57.0),
        flink: Some(14.24),
    },
    Published {
        query: "q10",
        feldera: None,
        flink: Some(57.81),
    },
    Published {
        query: "q11",
        feldera: None,
        flink: Some(39.7),
    },
    Published {
        query: "q12",
        feldera: Some(418.0),
        flink: Some(75.67),
    },
    Published {
        query: "q13",
        feldera: Some(230.0),
        flink: Some(130.73),
    },
    Published {
        query: "q14",
        feldera: Some(429.0),
        flink: Some(161.23),
    },
    Published {
        query: "q15",
        feldera: Some(221.0),
        flink: Some(72.42),
    },
    Published {
        query: "q16",
        feldera: Some(51.0),
        flink: Some(18.65),
    },
    Published {
        query: "q17",
        feldera: Some(242.0),
        flink: Some(116.8),
    },
    Published {
        query: "q18",
        feldera: Some(85.0),
        flink: Some(53.7),
    },
    Published {
        query: "q19",
        feldera: Some(75.0),
        flink: Some(44.04),
    },
    Published {
        query: "q20",
        feldera: Some(85.0),
        flink: Some(18.98),
    },
    Published {
        query: "q21",
        feldera: Some(415.0),
        flink: Some(98.49),
    },
    Published {
        query: "q22",
        feldera: Some(394.0),
        flink: Some(129.96),
    },
];

/// The published figures of `query`.
fn published(query: &str) -> Option<&'static Published> {
    NEXMARK.iter().find(|p| p.query == query)
}

/// The name a Nexmark query's measurements carry.
fn nexmark_name(query: &str) -> String {
    format!("nexmark-{query}")
}

/// What `cargo xtask bench` was asked.
struct Options {
    quick: bool,
    /// Another build of `streamwork-bench` to run in the same rounds, for a
    /// side-by-side comparison (the build of an earlier commit, say).
    against: Option<std::path::PathBuf>,
    /// Only these workloads (all when empty).
    workloads: Vec<String>,
    /// Nexmark queries to run in the same rounds (none without `--nexmark`).
    queries: Vec<String>,
    /// Rounds (default 9; 1 with `--quick`).
    rounds: Option<u32>,
    /// The sink bench instead of the workloads.
    sinks: bool,
    /// Draw the chart of a kept results file again, instead of running.
    chart: Option<std::path::PathBuf>,
}

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        quick: false,
        against: None,
        workloads: Vec::new(),
        queries: Vec::new(),
        rounds: None,
        sinks: false,
        chart: None,
    };
    let mut only_nexmark = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--sinks" => options.sinks = true,
            "--against" => {
                let path = args
                    .next()
                    .context("`--against` needs a streamwork-bench binary")?;
                options.against = Some(path.into());
            }
            "--workloads" => {
                let list = args
                    .next()
                    .context("`--workloads` needs a list, as in W1,W2")?;
                options.workloads = list.split(',').map(str::to_string).collect();
            }
            "--nexmark" => {
                options.queries = NEXMARK.iter().map(|p| p.query.to_string()).collect();
            }
            "--queries" => {
                let list = args
                    .next()
                    .context("`--queries` needs a list, as in q0,q5")?;
                options.queries = list.split(',').map(str::to_string).collect();
                only_nexmark = true;
            }
            "--chart" => {
                let path = args.next().context(
                    "`--chart` needs a results file, as in benches/results/2026-12-05.json",
                )?;
                options.chart = Some(path.into());
            }
            "--rounds" => {
                let rounds = args.next().context("`--rounds` needs a number")?;
                options.rounds = Some(rounds.parse().context("`--rounds` needs a number")?);
            }
            other => bail!(
                "unknown argument `{other}`: expected --quick, --against BINARY, --workloads W1,W2,..., --nexmark, --queries q0,q5,..., --rounds N, --sinks, --chart RESULTS.json"
            ),
        }
    }
    if only_nexmark && options.workloads.is_empty() {
        // `--queries` alone runs those queries and no workload.
        options.workloads.push(String::new());
    }
    for query in &options.queries {
        if published(query).is_none() {
            bail!("unknown Nexmark query `{query}`: expected q0 to q22");
        }
    }
    for workload in options.workloads.iter().filter(|w| !w.is_empty()) {
        if !WORKLOADS.contains(&workload.as_str()) {
            bail!("unknown workload `{workload}`: expected one of {WORKLOADS:?}");
        }
    }
    Ok(options)
}

/// Runs one configuration once, in a fresh process of `binary`.
fn measure(
    binary: &std::path::Path,
    workload: &str,
    parallelism: u32,
    events: u64,
    runs: &str,
    latency: bool,
) -> anyhow::Result<Measurement> {
    let mut command = Command::new(binary);
    command
        .args(["--workload", workload])
        .args(["--parallelism", &parallelism.to_string()])
        .args(["--events", &events.to_string()])
        .args(["--runs", runs]);
    if latency {
        command.arg("--latency");
    }
    if is_state(workload) {
        // A tenth of the events load every key; the rest update the hot 1%,
        // with a checkpoint every 100 ms (the figures for 10 million keys
        // and one second: `streamwork-bench --workload STATE-STORED --keys
        // 10000000 --interval-ms 1000 --events 2500000000`).
        command
            .args(["--keys", &(events / 10).to_string()])
            .args(["--interval-ms", "100"]);
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !output.status.success() {
        bail!(
            "{workload} at parallelism {parallelism} failed ({}): {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line = String::from_utf8(output.stdout)?;
    serde_json::from_str(line.trim())
        .with_context(|| format!("reading the result of {workload}: {line}"))
}

/// How often a query run exactly once checkpoints: twenty times as often
/// as the 10 s of the benchmark issue, so that a run of a few seconds
/// takes several (a stricter test of their cost, never a gentler one).
const CHECKPOINT_INTERVAL: &str = "500ms";

/// The name of a query's measurements run exactly once.
fn exactly_once_name(query: &str) -> String {
    format!("nexmark-{query}-exactly-once")
}

/// Runs one Nexmark query once, in a fresh process of `binary`, into the
/// blackhole, on the built-in generator: at most once, or `exactly_once`
/// with a checkpoint every [`CHECKPOINT_INTERVAL`] into a fresh directory.
fn measure_nexmark(
    binary: &std::path::Path,
    query: &str,
    parallelism: u32,
    events: u64,
    exactly_once: bool,
) -> anyhow::Result<Measurement> {
    let mut command = Command::new(binary);
    command
        .args(["--query", query, "--output", "none", "--json-summary"])
        .args(["--events", &events.to_string()])
        .args(["--parallelism", &parallelism.to_string()]);
    let checkpoints =
        project_root().join(format!("target/bench/checkpoints-{query}-{parallelism}"));
    if exactly_once {
        let _ = std::fs::remove_dir_all(&checkpoints);
        command
            .arg("--checkpoint-dir")
            .arg(&checkpoints)
            .args(["--checkpoint-interval", CHECKPOINT_INTERVAL])
            .args(["--delivery", "exactly-once"]);
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", binary.display()));
    if exactly_once {
        let _ = std::fs::remove_dir_all(&checkpoints);
    }
    let output = output?;
    if !output.status.success() {
        bail!(
            "{query} at parallelism {parallelism} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line = String::from_utf8(output.stdout)?;
    let summary: serde_json::Value = serde_json::from_str(line.trim())
        .with_context(|| format!("reading the summary of {query}: {line}"))?;
    let number = |field: &str| {
        summary[field]
            .as_f64()
            .with_context(|| format!("{query}'s summary has no `{field}`: {line}"))
    };
    let elapsed_s = number("elapsed_s")?;
    Ok(Measurement {
        workload: if exactly_once {
            exactly_once_name(query)
        } else {
            nexmark_name(query)
        },
        parallelism,
        events,
        records: number("results")? as u64,
        checksum: 0,
        elapsed_s,
        events_per_sec: number("events_per_sec")?,
        ns_per_event: elapsed_s * 1e9 / events as f64,
        baseline_events_per_sec: 0.0,
        p50_latency_us: None,
        p99_latency_us: None,
        peak_rss_bytes: summary["peak_rss_bytes"].as_u64(),
        state: None,
        cpu_s: Some(number("cpu_s")?),
        rounds: 0,
        events_per_sec_low: None,
        events_per_sec_high: None,
        checkpoints: exactly_once.then(|| summary["checkpoints"].as_u64().unwrap_or(0)),
    })
}

/// Every round of each configuration, in order of first appearance.
type Rounds = Vec<Vec<Measurement>>;

fn keep(rounds: &mut Rounds, slot: usize, measurement: Measurement) {
    if rounds.len() <= slot {
        rounds.resize_with(slot + 1, Vec::new);
    }
    rounds[slot].push(measurement);
}

/// The median round of each configuration, with its spread.
fn medians(rounds: Rounds) -> Vec<Measurement> {
    rounds
        .into_iter()
        .filter_map(Measurement::median_of)
        .collect()
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let options = options(args)?;
    let quick = options.quick;
    if options.sinks {
        return crate::sinks::run(quick, options.rounds);
    }
    if let Some(path) = &options.chart {
        return redraw(path);
    }
    // On a shared machine the speed of a run varies by a quarter or more,
    // and for seconds at a time. So every workload and parallelism runs once
    // per round (two runs in a fresh process, the first a warm-up), round
    // after round, and each reports its median round and the spread of all
    // of them: a slow spell hits every configuration alike instead of the
    // one that happened to run in it, and shows as spread, not as a figure.
    // With `--against`, the other binary runs each configuration in the
    // same round, right before or after (alternating), so that both see
    // the same machine.
    let (events, rounds) = if quick {
        (1_000_000u64, 1u32)
    } else {
        (10_000_000, 9)
    };
    run_command(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "streamwork-benches",
            "--bin",
            "streamwork-bench",
        ],
    )?;
    let binary = project_root().join("target/release/streamwork-bench");
    let nexmark = project_root().join("target/release/streamwork-nexmark");
    if !options.queries.is_empty() {
        run_command("cargo", &["build", "--release", "-p", "streamwork-nexmark"])?;
    }
    let rounds = options.rounds.unwrap_or(rounds).max(1);
    let workloads: Vec<&str> = WORKLOADS
        .iter()
        .copied()
        .filter(|w| options.workloads.is_empty() || options.workloads.iter().any(|o| o == w))
        .collect();
    let mut nexmark_rounds = Rounds::new();
    let runs = if quick { "1" } else { "2" };
    let mut this_rounds = Rounds::new();
    let mut against_rounds = Rounds::new();
    for round in 0..rounds {
        let mut slot = 0;
        for workload in &workloads {
            for &parallelism in PARALLELISM {
                // Latency (W2) is measured once, in the first round.
                let latency = round == 0;
                let this_first = round % 2 == 0;
                if this_first {
                    let m = measure(&binary, workload, parallelism, events, runs, latency)?;
                    keep(&mut this_rounds, slot, m);
                }
                if let Some(against) = options.against.as_ref().filter(|_| !is_recent(workload)) {
                    let m = measure(against, workload, parallelism, events, runs, latency)?;
                    keep(&mut against_rounds, slot, m);
                }
                if !this_first {
                    let m = measure(&binary, workload, parallelism, events, runs, latency)?;
                    keep(&mut this_rounds, slot, m);
                }
                slot += 1;
            }
        }
        // The queries in the same round, parallelism 1 and 2 back to
        // back, each at most once and exactly once (which goes first
        // alternates by round).
        let mut slot = 0;
        for query in &options.queries {
            for &parallelism in PARALLELISM {
                for exactly_once in [round % 2 == 1, round % 2 == 0] {
                    let m = measure_nexmark(&nexmark, query, parallelism, events, exactly_once)?;
                    keep(&mut nexmark_rounds, slot + usize::from(exactly_once), m);
                }
                slot += 2;
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let mut results = medians(this_rounds);
    if !results.is_empty() {
        print_table(&results);
    }
    let queries = medians(nexmark_rounds);
    if !queries.is_empty() {
        print_nexmark_table(&queries);
        print_exactly_once_table(&queries);
    }
    results.extend(queries);
    print_parallelism_table(&results);
    if let Some(against) = &options.against {
        let others = medians(against_rounds);
        print_comparison(&results, &others, against);
    }
    let dir = project_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    eprintln!("wrote {}", path.display());
    // A run against another build compares two builds, not this one's
    // figures of the day: it keeps nothing.
    if !quick && options.against.is_none() {
        let kept = project_root().join("benches/results");
        std::fs::create_dir_all(&kept)?;
        let day = crate::chart::today();
        let json = kept.join(format!("{day}.json"));
        let results = with_earlier_of_the_day(&json, results)?;
        std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
        let svg = kept.join(format!("{day}.svg"));
        std::fs::write(&svg, chart(&results, &day))?;
        eprintln!("kept {} and {}", json.display(), svg.display());
    } else if options.against.is_some() {
        eprintln!("a run against another build keeps nothing under benches/results");
    }
    Ok(())
}

/// `results`, then what an earlier run of the same day kept in `path` and
/// this run did not measure again (a workload or query at a parallelism,
/// with or without checkpoints): a second run of the day adds to its file
/// rather than replacing it.
fn with_earlier_of_the_day(
    path: &std::path::Path,
    mut results: Vec<Measurement>,
) -> anyhow::Result<Vec<Measurement>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(results);
    };
    let earlier: Vec<Measurement> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a results file", path.display()))?;
    let key = |m: &Measurement| (m.workload.clone(), m.parallelism, m.checkpoints.is_some());
    let measured: std::collections::HashSet<_> = results.iter().map(key).collect();
    results.extend(earlier.into_iter().filter(|m| !measured.contains(&key(m))));
    Ok(results)
}

/// The Nexmark queries: throughput and per-core throughput against the
/// bar of each.
fn print_nexmark_table(results: &[Measurement]) {
    println!();
    println!(
        "{:<8} {:>3} {:>11} {:>9} {:>13} {:>7} {:>8} {:>10} {:>14} {:>11} {:>6}",
        "query",
        "par",
        "events",
        "elapsed",
        "events/s",
        "spread",
        "CPU s",
        "peak RSS",
        "K ev/core-s",
        "bar K",
        "meets"
    );
    for m in results.iter().filter(|m| m.checkpoints.is_none()) {
        let query = m.workload.trim_start_matches("nexmark-");
        let bar = published(query).map_or(0.0, Published::bar);
        let per_core = m.events_per_core_sec().unwrap_or(0.0) / 1e3;
        println!(
            "{:<8} {:>3} {:>11} {:>8.3}s {:>13.0} {:>6.1}% {:>8.3} {:>9.1}M {:>14.0} {:>11.0} {:>6}",
            query,
            m.parallelism,
            m.events,
            m.elapsed_s,
            m.events_per_sec,
            100.0 * m.spread(),
            m.cpu_s.unwrap_or(0.0),
            m.peak_rss_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
            per_core,
            bar,
            if per_core >= bar { "yes" } else { "NO" }
        );
    }
    println!(
        "blackhole output, built-in generator; K ev/core-s: thousands of events per second of CPU time (user + system, every thread); bar: five times Feldera's published per-core figure or ten times Flink's, whichever is higher (the exactly-once bar, for comparison)"
    );
}

/// Each query exactly once against at most once, per core, and against
/// its bar: five times Feldera's published per-core figure or ten times
/// Flink's, whichever is higher.
fn print_exactly_once_table(results: &[Measurement]) {
    println!();
    println!(
        "{:<6} {:>3} {:>13} {:>13} {:>8} {:>6} {:>9} {:>8} {:>11} {:>6}",
        "query",
        "par",
        "AMO K/core-s",
        "EO K/core-s",
        "EO/AMO",
        "ckpts",
        "spread",
        "bar K",
        "set by",
        "meets"
    );
    for figures in NEXMARK {
        let query = figures.query;
        for &parallelism in PARALLELISM {
            let find = |name: String| {
                results
                    .iter()
                    .find(|m| m.workload == name && m.parallelism == parallelism)
            };
            let (Some(amo), Some(eo)) = (find(nexmark_name(query)), find(exactly_once_name(query)))
            else {
                continue;
            };
            let (Some(a), Some(e)) = (amo.events_per_core_sec(), eo.events_per_core_sec()) else {
                continue;
            };
            let eo_bar = figures.bar();
            println!(
                "{:<6} {:>3} {:>13.0} {:>13.0} {:>7.0}% {:>6} {:>8.1}% {:>8.0} {:>11} {:>6}",
                query,
                parallelism,
                a / 1e3,
                e / 1e3,
                100.0 * e / a,
                eo.checkpoints.unwrap_or(0),
                100.0 * eo.spread(),
                eo_bar,
                figures.bar_source(),
                if e / 1e3 >= eo_bar { "yes" } else { "NO" }
            );
        }
    }
    println!(
        "AMO: at most once, no checkpoints; EO: exactly once, a checkpoint every {CHECKPOINT_INTERVAL} (ckpts: completed during the median round); K/core-s: thousands of events per CPU second; bar: five times Feldera's published per-core figure or ten times Flink's, whichever is higher"
    );
}

/// Parallelism 2 against 1, in wall time and per core, for every workload
/// and query measured at both.
fn print_parallelism_table(results: &[Measurement]) {
    println!();
    println!(
        "{:<14} {:>13} {:>13} {:>9} {:>13} {:>13} {:>9}",
        "workload", "p1 ev/s", "p2 ev/s", "p2/p1", "p1 ev/core-s", "p2 ev/core-s", "per core"
    );
    for one in results.iter().filter(|m| m.parallelism == 1) {
        let Some(two) = results
            .iter()
            .find(|m| m.parallelism == 2 && m.workload == one.workload)
        else {
            continue;
        };
        let (Some(c1), Some(c2)) = (one.events_per_core_sec(), two.events_per_core_sec()) else {
            continue;
        };
        println!(
            "{:<14} {:>13.0} {:>13.0} {:>8.2}× {:>13.0} {:>13.0} {:>8.0}%",
            one.workload,
            one.events_per_sec,
            two.events_per_sec,
            two.events_per_sec / one.events_per_sec,
            c1,
            c2,
            100.0 * c2 / c1
        );
    }
    println!(
        "p2/p1: wall-time throughput at parallelism 2 over 1 (above 1.00× pays); per core: events per CPU second at 2 as a share of 1"
    );
}

/// This build's median round of each configuration beside the other build's.
fn print_comparison(this: &[Measurement], other: &[Measurement], against: &std::path::Path) {
    println!();
    println!("against {}:", against.display());
    println!(
        "{:<8} {:>3} {:>13} {:>13} {:>8} {:>10} {:>10}",
        "workload", "par", "this ev/s", "other ev/s", "ratio", "this RSS", "other RSS"
    );
    for a in this {
        let Some(b) = other
            .iter()
            .find(|b| b.workload == a.workload && b.parallelism == a.parallelism)
        else {
            continue;
        };
        println!(
            "{:<8} {:>3} {:>13.0} {:>13.0} {:>7.3}× {:>9.1}M {:>9.1}M",
            a.workload,
            a.parallelism,
            a.events_per_sec,
            b.events_per_sec,
            a.events_per_sec / b.events_per_sec,
            a.peak_rss_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
            b.peak_rss_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
        );
    }
    println!("ratio: this build's events/s divided by the other's (1.00× = as fast)");
}

fn print_table(results: &[Measurement]) {
    println!(
        "{:<12} {:>3} {:>11} {:>9} {:>13} {:>7} {:>9} {:>10} {:>8} {:>9} {:>9} {:>11} {:>20}",
        "workload",
        "par",
        "events",
        "elapsed",
        "events/s",
        "spread",
        "ns/event",
        "peak RSS",
        "vs loop",
        "p50 µs",
        "p99 µs",
        "records",
        "checksum"
    );
    for m in results {
        let ratio = m.baseline_events_per_sec / m.events_per_sec;
        let latency = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
        println!(
            "{:<12} {:>3} {:>11} {:>8.3}s {:>13.0} {:>6.1}% {:>9.2} {:>9.1}M {:>7.2}× {:>9} {:>9} {:>11} {:>20}",
            m.workload,
            m.parallelism,
            m.events,
            m.elapsed_s,
            m.events_per_sec,
            100.0 * m.spread(),
            m.ns_per_event,
            m.peak_rss_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
            ratio,
            latency(m.p50_latency_us),
            latency(m.p99_latency_us),
            m.records,
            m.checksum
        );
    }
    println!(
        "events/s: the median round; spread: fastest round less slowest, as a share of the median; vs loop: the hand-written single-threaded loop's events/s divided by Streamwork's (1.00× = as fast as the loop)"
    );
    print_state_table(results);
}

/// The state workloads' checkpoints and restores.
fn print_state_table(results: &[Measurement]) {
    let state: Vec<_> = results
        .iter()
        .filter_map(|m| m.state.as_ref().map(|s| (m, s)))
        .collect();
    if state.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<12} {:>3} {:>9} {:>9} {:>7} {:>10} {:>10} {:>12} {:>12} {:>10} {:>10}",
        "workload",
        "par",
        "keys",
        "ckpt/none",
        "ckpts",
        "pause ms",
        "ckpt ms",
        "first B",
        "later B",
        "restore ms",
        "rescale ms"
    );
    for (m, s) in state {
        let later = s.bytes.iter().skip(1).sum::<u64>() / (s.bytes.len().max(2) as u64 - 1);
        println!(
            "{:<12} {:>3} {:>9} {:>8.2}× {:>7} {:>10.2} {:>10.1} {:>12} {:>12} {:>10.2} {:>10.2}",
            m.workload,
            m.parallelism,
            s.keys,
            m.events_per_sec / s.unchecked_events_per_sec,
            s.checkpoints,
            s.longest_pause_ms,
            s.longest_checkpoint_ms,
            s.bytes.first().copied().unwrap_or(0),
            later,
            s.restore_load_ms + s.restore_instance_ms,
            s.rescale_load_ms + s.rescale_instance_ms,
        );
    }
    println!(
        "ckpt/none: events/s with a checkpoint every 100 ms over events/s without; pause: the longest a task thread waited for a checkpoint; first B: bytes of the first checkpoint; later B: mean bytes of the others; restore, rescale: loading the final checkpoint and the longest instance restore, at the same parallelism and one more"
    );
}

/// Draws the chart of the results file at `path` again, beside it (the
/// same name, `.svg`).
fn redraw(path: &std::path::Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let results: Vec<Measurement> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a results file", path.display()))?;
    let day = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("results");
    let svg = path.with_extension("svg");
    std::fs::write(&svg, chart(&results, day))?;
    eprintln!("drew {}", svg.display());
    Ok(())
}

/// The chart of a run: the Nexmark queries' per-core throughput against
/// Feldera's and Flink's published per-core figures, and each workload's per-core
/// throughput at parallelism 1 and 2.
fn chart(results: &[Measurement], day: &str) -> String {
    use crate::chart::{Group, Panel, draw};
    let per_core = |workload: &str, parallelism: u32| {
        results
            .iter()
            .find(|m| m.workload == workload && m.parallelism == parallelism)
            .and_then(Measurement::events_per_core_sec)
    };
    let mut panels = Vec::new();
    let queries: Vec<Group> = NEXMARK
        .iter()
        .filter(|p| per_core(&nexmark_name(p.query), 1).is_some())
        .map(|p| Group {
            label: p.query.to_string(),
            values: vec![
                per_core(&nexmark_name(p.query), 1),
                per_core(&exactly_once_name(p.query), 1),
                per_core(&exactly_once_name(p.query), 2),
                p.feldera.map(|k| k * 1e3),
                p.flink.map(|k| k * 1e3),
            ],
        })
        .collect();
    if !queries.is_empty() {
        panels.push(Panel {
            title: "Nexmark: events per core-second (median round)".to_string(),
            unit: "events per core-second".to_string(),
            series: vec![
                "Streamwork p1, at most once".to_string(),
                format!("p1, exactly once (checkpoint every {CHECKPOINT_INTERVAL})"),
                format!("p2, exactly once (checkpoint every {CHECKPOINT_INTERVAL})"),
                "Feldera, published (16 cores / 16)".to_string(),
                "Flink 1.13, published (throughput / cores)".to_string(),
            ],
            groups: queries,
        });
    }
    let workloads: Vec<Group> = WORKLOADS
        .iter()
        .filter(|w| per_core(w, 1).is_some())
        .map(|w| Group {
            label: w.to_string(),
            values: vec![per_core(w, 1), per_core(w, 2)],
        })
        .collect();
    if !workloads.is_empty() {
        panels.push(Panel {
            title: "Workloads: events per core-second, parallelism 2 against 1 (median round)"
                .to_string(),
            unit: "events per core-second".to_string(),
            series: vec!["parallelism 1".to_string(), "parallelism 2".to_string()],
            groups: workloads,
        });
    }
    draw(
        &format!("cargo xtask bench, {day}: medians of interleaved rounds"),
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_has_its_published_figures_and_the_higher_bar() {
        let queries: Vec<&str> = NEXMARK.iter().map(|p| p.query).collect();
        let expected: Vec<String> = (0..=22).map(|i| format!("q{i}")).collect();
        assert_eq!(queries, expected);
        let bar = |q: &str| {
            let p = published(q).unwrap();
            (p.bar().round(), p.bar_source())
        };
        assert_eq!(bar("q0"), (2180.0, "5x Feldera"));
        assert_eq!(bar("q6"), (1250.0, "5x Feldera"), "Flink runs no q6");
        assert_eq!(bar("q10"), (578.0, "10x Flink"), "Feldera publishes no q10");
        assert_eq!(bar("q13"), (1307.0, "10x Flink"));
        assert_eq!(bar("q19"), (440.0, "10x Flink"));
    }
}
