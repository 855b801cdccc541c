//! Prometheus exposition of what the runtime reports through the `metrics`
//! facade (records in and out, utilization, backpressure, idle time, queue
//! fill, watermark lag and drops per component; checkpoints and restores),
//! rendered by `metrics-exporter-prometheus`, which escapes label values
//! (a component named with a quote, a backslash or a line break stays one
//! valid sample). Served at `/metrics` by the job page, or alone by
//! [`serve_metrics`], for a job that runs without the page.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::{TEXT_PROMETHEUS, WebError, WebView, listen, respond};

/// The recorder, or what the exporter said when it could not install it.
static RECORDER: OnceLock<Installed> = OnceLock::new();

enum Installed {
    Recorder(PrometheusHandle),
    Refused { reason: String },
}

/// The process's Prometheus recorder, installed on first use as the global
/// `metrics` recorder. Refused if the application installed another one
/// first (its own exporter then has the runtime's metrics).
pub fn recorder() -> Result<PrometheusHandle, WebError> {
    let installed = RECORDER.get_or_init(|| match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => Installed::Recorder(handle),
        Err(e) => Installed::Refused {
            reason: e.to_string(),
        },
    });
    match installed {
        Installed::Recorder(handle) => Ok(handle.clone()),
        Installed::Refused { reason } => Err(WebError::Recorder {
            reason: reason.clone(),
        }),
    }
}

/// Everything recorded so far, in the Prometheus text format.
pub fn render() -> Result<String, WebError> {
    Ok(recorder()?.render())
}

/// Serves `/metrics` (Prometheus text) on `address`, without the job page;
/// dropping the returned view stops it. Jobs started after this call, and
/// those running, report to it.
///
/// ```no_run
/// let metrics = streamwork::web::serve_metrics("127.0.0.1:9184")?;
/// println!("scrape http://{}/metrics", metrics.address());
/// # Ok::<(), streamwork::web::WebError>(())
/// ```
pub fn serve_metrics(address: &str) -> Result<WebView, WebError> {
    let handle = recorder()?;
    listen(address, "streamwork-metrics", move |request| {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        if path == "/metrics" {
            respond(request, handle.render(), TEXT_PROMETHEUS, 200);
        } else {
            respond(request, "not found: try /metrics".into(), "text/plain", 404);
        }
    })
}
