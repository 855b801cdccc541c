//! `/metrics` without the job page: what the runtime reports through the
//! `metrics` facade, rendered by metrics-exporter-prometheus, is valid
//! Prometheus text (checked line by line against the exposition format),
//! hostile component names included, with the checkpoint and restore
//! series. (Its own test binary: the recorder is global to the process.)

use std::io::{Read, Write};
use std::time::Duration;

use streamwork::prelude::*;

fn get(address: std::net::SocketAddr, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    body.to_string()
}

/// A label value of the exposition format, unescaped: `\\`, `\"` and `\n`
/// are the only escapes; anything else after a backslash is invalid.
fn label_value(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => out.push('\\'),
                Some((_, '"')) => out.push('"'),
                Some((_, 'n')) => out.push('\n'),
                other => return Err(format!("bad escape {other:?}")),
            },
            '\n' => return Err("a raw line break in a label value".into()),
            c => out.push(c),
        }
    }
    Err("an unterminated label value".into())
}

/// A sample: its metric name, labels and value.
type Sample = (String, Vec<(String, String)>, f64);

/// One sample line, parsed; an error says why the line is not valid
/// exposition text.
fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("bad metric name in {line:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest
                .split_once("=\"")
                .ok_or(format!("bad label in {line:?}"))?;
            let (value, after) = label_value(after)?;
            labels.push((key.trim_start_matches(',').to_string(), value));
            rest = after;
        }
    }
    let value = rest.trim();
    let value = value.split_whitespace().next().unwrap_or("");
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value in {line:?}"))?,
    };
    Ok((name.to_string(), labels, value))
}

#[test]
fn metrics_without_the_page_are_valid_prometheus_text_with_hostile_names() {
    let server = streamwork::web::serve_metrics("127.0.0.1:0").unwrap();
    let hostile = "bad \"name\" \\ with\na line break";
    let dir = std::env::temp_dir().join(format!("streamwork-metrics-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for _run in 0..2 {
        // The second run restores the first's final checkpoint.
        let mut job = JobBuilder::new("metrics-endpoint");
        let numbers = job.source("numbers", 1, GeneratorSource::new(|i| i).take(20_000));
        let odd = job.operator(hostile, 2, filter(|n: &u64| n % 2 == 1), numbers);
        job.sink("out", 1, CollectSink::<u64>::new(), odd);
        let options = RunOptions {
            checkpoints: Some(
                CheckpointConfig::new(&dir, Duration::from_millis(5))
                    .delivery(Delivery::AtLeastOnce),
            ),
            ..RunOptions::default()
        };
        job.build().unwrap().run_with(options).unwrap();
    }
    let text = get(server.address(), "/metrics");
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            let kind = words.next();
            assert!(
                matches!(kind, Some("HELP") | Some("TYPE")),
                "a comment is HELP or TYPE: {line:?}"
            );
            continue;
        }
        samples.push(sample(line).unwrap_or_else(|e| panic!("{e}\n{text}")));
    }
    let find = |name: &str, component: Option<&str>| {
        samples.iter().find(|(n, labels, _)| {
            n == name
                && labels
                    .iter()
                    .any(|(k, v)| k == "job" && v == "metrics-endpoint")
                && component.is_none_or(|c| labels.iter().any(|(k, v)| k == "component" && v == c))
        })
    };
    let records_in = find("streamwork_records_in_total", Some(hostile))
        .unwrap_or_else(|| panic!("the hostile component's series:\n{text}"));
    assert_eq!(records_in.2, 20_000.0);
    assert!(
        find("streamwork_utilization", Some("out")).is_some(),
        "{text}"
    );
    // At least each run's final checkpoint.
    assert!(
        find("streamwork_checkpoints_total", None).is_some_and(|s| s.2 >= 2.0),
        "{text}"
    );
    assert!(
        find("streamwork_last_checkpoint_bytes", None).is_some(),
        "{text}"
    );
    assert!(
        find("streamwork_restored_checkpoint_id", None).is_some(),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
