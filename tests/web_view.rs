//! The job page: `/plan.json`, Prometheus `/metrics`, and the page itself in
//! a real headless Chromium (skipped, saying so, where none is installed;
//! `.ci/run` installs it so CI never skips).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use streamwork::prelude::*;

#[derive(Clone)]
struct SleepySink;

impl Sink for SleepySink {
    type In = u64;
    fn write(&mut self, _: Record<u64>) -> Result<(), ConnectorError> {
        std::thread::sleep(Duration::from_micros(50));
        Ok(())
    }
}

#[operator]
fn stage(value: u64, out: &mut Collector<u64>) {
    out.emit(value + 1);
}

fn start() -> (JobHandle, streamwork::web::WebView) {
    let graph = job! {
        name "page";
        source numbers = GeneratorSource::new(|i| i);
        operator staged[2] = Stage <- numbers.shuffle();
        sink slow = SleepySink <- staged.global().capacity(2);
    }
    .unwrap();
    graph.start_with_ui("127.0.0.1:0").unwrap()
}

fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

#[test]
fn plan_and_prometheus_metrics_are_served() {
    let (job, page) = start();
    let plan: serde_json::Value = serde_json::from_str(&get(page.address(), "/plan.json")).unwrap();
    let components: Vec<(String, u64)> = plan["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["parallelism"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        components,
        vec![
            ("numbers".into(), 1),
            ("staged".into(), 2),
            ("slow".into(), 1)
        ]
    );
    assert_eq!(plan["edges"].as_array().unwrap().len(), 2);
    assert_eq!(plan["edges"][1]["grouping"], "global");
    // Let the monitor look a few times.
    std::thread::sleep(Duration::from_millis(800));
    let metrics = get(page.address(), "/metrics");
    let series = |name: &str, component: &str| {
        metrics
            .lines()
            .any(|l| l.starts_with(name) && l.contains(&format!("component=\"{component}\"")))
    };
    assert!(
        series("streamwork_backpressure_ratio", "staged"),
        "{metrics}"
    );
    assert!(series("streamwork_records_in_total", "slow"), "{metrics}");
    assert!(metrics.contains("# TYPE streamwork_utilization gauge"));
    let page_html = get(page.address(), "/");
    assert!(
        page_html.contains("<svg")
            && !page_html.contains("http://cdn")
            && !page_html.contains("https://")
    );
    job.stop();
    job.join().unwrap();
}

#[test]
fn a_long_poll_answers_with_the_next_look_of_the_monitor() {
    let (job, page) = start();
    let look = |path: &str| -> u64 {
        let m: serde_json::Value = serde_json::from_str(&get(page.address(), path)).unwrap();
        m["look"].as_u64().unwrap()
    };
    let first = look("/metrics.json");
    // Each long poll waits at most 2 s; the monitor looks every 250 ms. A
    // bounded number of tries keeps the test independent of machine load.
    let mut next = first;
    for _ in 0..50 {
        next = look(&format!("/metrics.json?after={first}"));
        if next > first {
            break;
        }
    }
    assert!(
        next > first,
        "the monitor never looked again after look {first}"
    );
    job.stop();
    job.join().unwrap();
    // After the end, a long poll answers at once with the last look.
    let last = look(&format!("/metrics.json?after={}", u64::MAX - 1));
    assert!(last >= next);
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The installed Chromium, or `None` after saying the test is skipped
/// (never where `STREAMWORK_REQUIRE_BROWSER` is set, as in CI).
fn browser() -> Option<&'static str> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("STREAMWORK_REQUIRE_BROWSER").is_none(),
            "STREAMWORK_REQUIRE_BROWSER is set but no Chromium is installed"
        );
        println!("skipped: no Chromium installed (apt-get install chromium); .ci/run installs it");
    }
    found
}

/// The page at `address` as headless `browser` leaves it after two
/// seconds of virtual time (a profile of its own, named after `name`).
fn dump_dom(browser: &str, address: SocketAddr, name: &str) -> String {
    let profile = std::env::temp_dir().join(format!(
        "streamwork-chromium-{name}-pid{}",
        std::process::id()
    ));
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=2000", "--dump-dom"])
        .arg(format!("http://{address}/"))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_page_draws_the_graph_and_its_metrics_change_in_chromium() {
    let Some(browser) = browser() else { return };
    let (job, page) = start();
    let dom = dump_dom(browser, page.address(), "live");
    job.stop();
    job.join().unwrap();
    for node in ["node-numbers", "node-staged", "node-slow"] {
        assert!(
            dom.contains(&format!("id=\"{node}\"")),
            "the graph has no {node}: {dom}"
        );
    }
    let attribute = |name: &str| -> u64 {
        let start = dom
            .find(&format!("{name}=\""))
            .unwrap_or_else(|| panic!("no {name} in {dom}"))
            + name.len()
            + 2;
        dom[start..].split('"').next().unwrap().parse().unwrap()
    };
    assert!(attribute("data-updates") >= 2, "the metrics refreshed");
    assert!(
        attribute("data-last-total") > attribute("data-first-total"),
        "the metrics changed between refreshes"
    );
    assert!(
        dom.contains("busy ") && dom.contains("/s"),
        "the nodes show rates and utilization"
    );
}

/// A source of a partitioned log, for a job that runs as stages.
#[derive(Clone)]
struct Lines;

impl Source for Lines {
    type Out = Collector<String>;
    fn split_input(&self) -> Option<String> {
        Some("lines".to_string())
    }
    fn poll(&mut self, _: &mut Collector<String>) -> Result<SourcePoll, ConnectorError> {
        Ok(SourcePoll::Finished)
    }
}

/// The page of a job run as stages elsewhere: its plan and its stages.
fn staged_page() -> streamwork::web::WebView {
    let graph = job! {
        name "word_count";
        source lines = Lines;
        operator words = map(|l: String| l) <- lines;
        operator counted[4] = map(|w: String| (w, 1u64)) <- words.key(|w: &String| w.clone());
        operator totalled[3] = map(|c: (String, u64)| c) <- counted.key(|c: &(String, u64)| c.0.len());
        sink out = CollectSink::new() <- totalled;
    }
    .unwrap();
    let stages = streamwork::scaleout::stages::StagePlan::of(&graph).unwrap();
    streamwork::web::serve_plan("127.0.0.1:0", graph.plan().with_stages(stages.rows("wc"))).unwrap()
}

#[test]
fn the_plan_of_a_job_run_as_stages_shows_its_stages_and_topics() {
    let page = staged_page();
    let plan: serde_json::Value = serde_json::from_str(&get(page.address(), "/plan.json")).unwrap();
    assert_eq!(plan["live"], false);
    let stages = plan["stages"].as_array().unwrap();
    let rows: Vec<(String, String, String)> = stages
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["reads"][0].as_str().unwrap().to_string(),
                s["writes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(","),
            )
        })
        .collect();
    let row = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        rows,
        [
            row("lines", "lines", "wc-counted-in-repartition"),
            row(
                "counted",
                "wc-counted-in-repartition",
                "wc-totalled-in-repartition"
            ),
            row("totalled", "wc-totalled-in-repartition", ""),
        ]
    );
    assert_eq!(stages[1]["partitions"], 4);
    // No run reports here.
    let mut stream = TcpStream::connect(page.address()).unwrap();
    write!(
        stream,
        "GET /metrics.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
}

#[test]
fn the_page_of_a_job_run_as_stages_lists_them_in_chromium() {
    let Some(browser) = browser() else { return };
    let page = staged_page();
    let dom = dump_dom(browser, page.address(), "stages");
    assert_eq!(dom.matches("class=\"stage\"").count(), 3, "{dom}");
    for text in [
        "wc-counted-in-repartition",
        "wc-totalled-in-repartition",
        "totalled → out",
        "node-counted",
        "run by the processes of its consumer group",
    ] {
        assert!(dom.contains(text), "no `{text}` in the page: {dom}");
    }
}
