//! The job page (the book's job view, chapter 9): an HTTP server, off by
//! default, serving the job graph drawn as a picture with live metrics
//! (rates, utilization, backpressure and the bottleneck highlighted),
//! `/plan.json`, `/metrics.json` (`?after=N` waits for the monitor's next
//! look after the `N`-th: a long poll) and Prometheus `/metrics`. Every asset
//! is served by the job itself: the page works offline.
//!
//! ```no_run
//! fn run_with_page(graph: streamwork::runtime::JobGraph) -> Result<(), Box<dyn std::error::Error>> {
//!     let plan = graph.plan();
//!     let job = streamwork::runtime::start(graph)?;
//!     let page = streamwork::web::serve("127.0.0.1:7000", plan, job.live_metrics())?;
//!     println!("job page at http://{}/", page.address());
//!     job.join()?;
//!     Ok(())
//! }
//! ```
//!
//! Not here: authentication (bind it to 127.0.0.1, the default in the
//! examples), controlling the job.

#![warn(missing_docs)]

mod json;
mod prometheus;

pub use prometheus::{recorder, render, serve_metrics};

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use streamwork_runtime::JobPlan;
use streamwork_runtime::LiveMetrics;
use tiny_http::{Header, Request, Response, Server};

/// The page, with its script and styles inline.
const PAGE: &str = include_str!("page.html");

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
const TEXT_PROMETHEUS: &str = "text/plain; version=0.0.4";
const TEXT: &str = "text/plain";

/// The longest a `/metrics.json?after=N` request waits for a new look.
const LONG_POLL_LIMIT: Duration = Duration::from_secs(2);

/// The web view could not start.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// Another `metrics` recorder was installed first: the runtime's
    /// metrics go to it, and this crate cannot render them.
    #[error(
        "cannot serve Prometheus metrics: {reason} (the application installed its own `metrics` recorder first: export through it)"
    )]
    Recorder {
        /// What `metrics-exporter-prometheus` said.
        reason: String,
    },
    /// The address could not be bound.
    #[error("cannot serve the job page on {address}: {reason} (is the port free?)")]
    Bind {
        /// The address asked for.
        address: String,
        /// Why.
        reason: String,
    },
}

/// The same as `Display`: what `main` prints when it returns the error.
impl std::fmt::Debug for WebError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A running job page; dropping it stops the server.
pub struct WebView {
    server: Arc<Server>,
    address: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl WebView {
    /// The address it listens on (useful when asked for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for WebView {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves the page of the job with `plan`, reading `metrics`, on `address`.
pub fn serve(address: &str, plan: JobPlan, metrics: LiveMetrics) -> Result<WebView, WebError> {
    serve_with(address, plan, Some(metrics))
}

/// Serves the page of a job that runs elsewhere, its plan only: the graph
/// and, for a job run as stages across processes
/// ([`JobPlan::with_stages`](streamwork_runtime::JobPlan::with_stages)),
/// its stages and their topics. `/metrics.json` answers 404: each
/// process's partition jobs report in its own log and report.
///
/// ```no_run
/// # fn page(graph: streamwork::runtime::JobGraph) -> Result<(), Box<dyn std::error::Error>> {
/// let stages = streamwork::scaleout::stages::StagePlan::of(&graph)?;
/// let page = streamwork::web::serve_plan("127.0.0.1:7000", graph.plan().with_stages(stages.rows("wc")))?;
/// println!("job page at http://{}/", page.address());
/// # Ok(())
/// # }
/// ```
pub fn serve_plan(address: &str, plan: JobPlan) -> Result<WebView, WebError> {
    serve_with(address, plan, None)
}

fn serve_with(
    address: &str,
    plan: JobPlan,
    metrics: Option<LiveMetrics>,
) -> Result<WebView, WebError> {
    let exposition = recorder()?;
    let plan_json = json::plan(&plan, metrics.is_some());
    listen(address, "streamwork-web", move |request| {
        let url = request.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        match (path, &metrics) {
            ("/" | "/index.html", _) => respond(request, PAGE.to_string(), HTML, 200),
            ("/plan.json", _) => respond(request, plan_json.clone(), JSON, 200),
            ("/metrics.json", None) => respond(
                request,
                "no run of this job reports here: each process's partition jobs report in its log"
                    .to_string(),
                TEXT,
                404,
            ),
            ("/metrics.json", Some(metrics)) => match long_poll_after(query) {
                // A long poll waits on its own thread, so it never
                // holds up the page or another reader.
                Some(after) => {
                    let metrics = metrics.clone();
                    let spawned = std::thread::Builder::new()
                        .name("streamwork-web-poll".into())
                        .spawn(move || {
                            let look = metrics.wait_for_look(after, LONG_POLL_LIMIT);
                            let body = json::metrics(&metrics.snapshot(), look);
                            respond(request, body, JSON, 200);
                        });
                    if let Err(e) = spawned {
                        tracing::warn!("job page: cannot start a long poll: {e}");
                    }
                }
                None => {
                    let body = json::metrics(&metrics.snapshot(), metrics.looks());
                    respond(request, body, JSON, 200);
                }
            },
            ("/metrics", _) => respond(request, exposition.render(), TEXT_PROMETHEUS, 200),
            _ => respond(request, "not found".to_string(), TEXT, 404),
        }
    })
}

/// Listens on `address` and answers each request with `answer`, on a
/// thread named `thread_name`, until the returned view is dropped.
pub(crate) fn listen(
    address: &str,
    thread_name: &str,
    mut answer: impl FnMut(Request) + Send + 'static,
) -> Result<WebView, WebError> {
    let server = Server::http(address).map_err(|e| WebError::Bind {
        address: address.to_string(),
        reason: e.to_string(),
    })?;
    let bound = server.server_addr().to_ip().ok_or_else(|| WebError::Bind {
        address: address.to_string(),
        reason: "not an IP address".to_string(),
    })?;
    let server = Arc::new(server);
    let thread = {
        let server = server.clone();
        std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || {
                for request in server.incoming_requests() {
                    answer(request);
                }
            })
            .ok()
    };
    Ok(WebView {
        server,
        address: bound,
        thread,
    })
}

/// `after=N` in a query string: the look the reader has already seen.
fn long_poll_after(query: &str) -> Option<u64> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("after="))
        .and_then(|n| n.parse().ok())
}

fn respond(request: tiny_http::Request, body: String, content_type: &str, status: u16) {
    let header = Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .unwrap_or_else(|()| unreachable!("a valid header"));
    let response = Response::from_string(body)
        .with_header(header)
        .with_status_code(status);
    if let Err(e) = request.respond(response) {
        tracing::debug!("job page: a response failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::long_poll_after;

    #[test]
    fn the_long_poll_reads_after_from_the_query() {
        assert_eq!(long_poll_after("after=7"), Some(7));
        assert_eq!(long_poll_after("x=1&after=12"), Some(12));
        assert_eq!(long_poll_after(""), None);
        assert_eq!(long_poll_after("after=many"), None);
    }
}
