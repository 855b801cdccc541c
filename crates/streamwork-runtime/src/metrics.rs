//! Capacity and backpressure (chapter 9): what each task spends its time on,
//! how full its queues are, what edges drop, when sources pause — and the
//! monitor that turns these into rates, utilization and headroom, names the
//! bottleneck, reports thrashing, and publishes it all through the `metrics`
//! facade.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::builder::ComponentKind;
use crate::instance::InstanceCounters;
use streamwork_core::time::Timestamp;

/// What one task (thread) spends its time on, written by the task itself.
/// Busy time is the rest: wall time minus idle minus backpressured.
#[derive(Debug)]
pub struct TaskTimes {
    started: Instant,
    idle_ns: AtomicU64,
    backpressured_ns: AtomicU64,
    /// Fullness of the task's input queues, in thousandths.
    occupancy_permille: AtomicU64,
    /// The event time at the task's input, in milliseconds (`i64::MIN`: none yet).
    watermark_ms: AtomicI64,
}

impl Default for TaskTimes {
    fn default() -> Self {
        TaskTimes {
            started: Instant::now(),
            idle_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            occupancy_permille: AtomicU64::new(0),
            watermark_ms: AtomicI64::new(i64::MIN),
        }
    }
}

impl TaskTimes {
    pub(crate) fn add_idle(&self, d: Duration) {
        self.idle_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_backpressured(&self, d: Duration) {
        self.backpressured_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn set_occupancy(&self, fraction: f64) {
        self.occupancy_permille.store(
            (fraction.clamp(0.0, 1.0) * 1000.0) as u64,
            Ordering::Relaxed,
        );
    }

    pub(crate) fn set_watermark(&self, watermark: Timestamp) {
        self.watermark_ms
            .store(watermark.millis(), Ordering::Relaxed);
    }

    /// The event time at the task's input, once a watermark has arrived and
    /// before the end of input.
    fn watermark(&self) -> Option<i64> {
        let ms = self.watermark_ms.load(Ordering::Relaxed);
        (ms != i64::MIN && ms != Timestamp::MAX.millis()).then_some(ms)
    }

    fn read(&self) -> (u64, u64, u64, f64) {
        (
            self.started.elapsed().as_nanos() as u64,
            self.idle_ns.load(Ordering::Relaxed),
            self.backpressured_ns.load(Ordering::Relaxed),
            self.occupancy_permille.load(Ordering::Relaxed) as f64 / 1000.0,
        )
    }
}

/// A pause request of one component's instances to the sources upstream: the
/// number of its instances whose queue is above the high watermark.
#[derive(Debug, Default)]
pub struct PauseFlag {
    raised: AtomicU32,
    /// Pause episodes started, for thrashing detection.
    episodes: AtomicU64,
}

impl PauseFlag {
    pub(crate) fn raise(&self) {
        if self.raised.fetch_add(1, Ordering::Relaxed) == 0 {
            self.episodes.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn lower(&self) {
        self.raised.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Relaxed) > 0
    }

    /// Pause episodes so far.
    pub(crate) fn episodes(&self) -> u64 {
        self.episodes.load(Ordering::Relaxed)
    }
}

/// The shared, live state of a job's measurements.
pub(crate) struct Registry {
    /// The job's name, the `job` label of its job-wide series.
    pub(crate) job: String,
    pub(crate) components: Vec<ComponentInfo>,
    /// Per edge: (from component, to component, dropped records).
    pub(crate) edges: Vec<(usize, usize, Arc<AtomicU64>)>,
    /// Per component with backpressure watermarks on an input edge.
    pub(crate) pause_flags: Vec<(usize, Arc<PauseFlag>)>,
    pub(crate) monitor: Mutex<MonitorState>,
    /// Notified after every look of the monitor.
    pub(crate) looked: Condvar,
    pub(crate) stop: AtomicBool,
    /// What a run that takes checkpoints records of them (set once, when
    /// the coordinator starts).
    pub(crate) checkpoints: std::sync::OnceLock<crate::checkpoint::CheckpointRecord>,
}

/// One component's instances and their measurements.
pub(crate) struct ComponentInfo {
    pub(crate) name: String,
    pub(crate) kind: ComponentKind,
    pub(crate) counters: Vec<Arc<InstanceCounters>>,
    pub(crate) times: Vec<Arc<TaskTimes>>,
    /// Components feeding this one.
    pub(crate) upstream: Vec<usize>,
}

/// The measurements of one component over the monitor's last interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capacity {
    /// Records received per second.
    pub in_per_sec: f64,
    /// Records emitted per second.
    pub out_per_sec: f64,
    /// Share of wall time the instances were busy, on average.
    pub busy: f64,
    /// Share of wall time waiting for input.
    pub idle: f64,
    /// Share of wall time blocked on a full output.
    pub backpressured: f64,
    /// Fullness of the input queues, on average.
    pub queue_occupancy: f64,
    /// The component's event time: the lowest watermark at its instances'
    /// inputs, in milliseconds (none before the first watermark, or for a
    /// component whose input carries none).
    pub watermark_ms: Option<i64>,
    /// Wall-clock time minus the watermark, in milliseconds: how far event
    /// time trails real time (meaningful when event times are wall-clock
    /// times, as from a live source).
    pub watermark_lag_ms: Option<i64>,
}

impl Capacity {
    /// Utilization: the share of its capacity the component uses.
    pub fn utilization(&self) -> f64 {
        self.busy
    }

    /// Headroom: the share of its capacity left.
    pub fn headroom(&self) -> f64 {
        (1.0 - self.busy).max(0.0)
    }
}

/// One instance's cumulative figures at one look: wall, idle and blocked
/// nanoseconds, records in and out.
type Reading = (u64, u64, u64, u64, u64);

/// What the monitor concluded last.
#[derive(Clone, Debug, Default)]
pub(crate) struct MonitorState {
    pub(crate) capacity: Vec<Capacity>,
    pub(crate) bottleneck: Option<String>,
    pub(crate) thrashing: Option<String>,
    /// How many times the monitor has looked.
    pub(crate) looks: u64,
    last: Vec<Vec<Reading>>,
    last_at: Option<Instant>,
    episodes: Vec<(Instant, u64)>,
    /// Records dropped on each edge at the last look.
    last_dropped: Vec<u64>,
}

/// How often the monitor looks.
pub(crate) const MONITOR_INTERVAL: Duration = Duration::from_millis(250);
/// Pause episodes within [`THRASHING_WINDOW`] that make backpressure a
/// symptom of a permanent shortfall rather than a burst.
const THRASHING_EPISODES: u64 = 10;
const THRASHING_WINDOW: Duration = Duration::from_secs(5);

impl Registry {
    /// One monitoring step: interval rates and time shares per component,
    /// the bottleneck, thrashing; publishes to the `metrics` facade.
    pub(crate) fn observe(&self) {
        let now = Instant::now();
        let mut state = self.monitor.lock().unwrap_or_else(|p| p.into_inner());
        let interval = state
            .last_at
            .map(|t| now.duration_since(t).as_secs_f64())
            .unwrap_or(0.0);
        let mut capacity = Vec::with_capacity(self.components.len());
        let mut last = Vec::with_capacity(self.components.len());
        for (c, component) in self.components.iter().enumerate() {
            let mut readings = Vec::new();
            let mut sum = Capacity::default();
            for (i, (counters, times)) in
                component.counters.iter().zip(&component.times).enumerate()
            {
                let (wall, idle, blocked, occupancy) = times.read();
                let (records_in, records_out) = (counters.records_in(), counters.records_out());
                readings.push((wall, idle, blocked, records_in, records_out));
                let previous = state.last.get(c).and_then(|r| r.get(i)).copied();
                let (dw, di, db, din, dout) = match previous {
                    Some((w, i, b, ri, ro)) => (
                        wall.saturating_sub(w),
                        idle.saturating_sub(i),
                        blocked.saturating_sub(b),
                        records_in.saturating_sub(ri),
                        records_out.saturating_sub(ro),
                    ),
                    None => (wall, idle, blocked, records_in, records_out),
                };
                let dw = dw.max(1) as f64;
                let idle_share = (di as f64 / dw).min(1.0);
                let blocked_share = (db as f64 / dw).min(1.0 - idle_share);
                sum.idle += idle_share;
                sum.backpressured += blocked_share;
                sum.busy += (1.0 - idle_share - blocked_share).max(0.0);
                sum.queue_occupancy += occupancy;
                if interval > 0.0 {
                    sum.in_per_sec += din as f64 / interval;
                    sum.out_per_sec += dout as f64 / interval;
                }
            }
            sum.watermark_ms = component
                .times
                .iter()
                .map(|t| t.watermark())
                .min()
                .flatten();
            sum.watermark_lag_ms = sum.watermark_ms.map(|w| {
                streamwork_core::timer::wall_clock()
                    .millis()
                    .saturating_sub(w)
            });
            let n = component.counters.len().max(1) as f64;
            sum.busy /= n;
            sum.idle /= n;
            sum.backpressured /= n;
            sum.queue_occupancy /= n;
            capacity.push(sum);
            last.push(readings);
        }
        state.last = last;
        state.last_at = Some(now);
        // Components whose input edges dropped records in this interval: under
        // pressure as much as if their upstreams had blocked.
        let mut dropping = vec![false; self.components.len()];
        let dropped: Vec<u64> = self
            .edges
            .iter()
            .map(|(_, _, d)| d.load(Ordering::Relaxed))
            .collect();
        for (i, (_, to, _)) in self.edges.iter().enumerate() {
            if dropped[i] > state.last_dropped.get(i).copied().unwrap_or(0) {
                dropping[*to] = true;
            }
        }
        state.last_dropped = dropped;
        // The bottleneck: the most downstream component that is busy while a
        // component feeding it is blocked on it (or its inputs overflow).
        let bottleneck = (0..self.components.len()).rev().find(|&c| {
            let me = &capacity[c];
            me.busy >= 0.6
                && me.backpressured <= 0.25
                && (dropping[c]
                    || self.components[c]
                        .upstream
                        .iter()
                        .any(|&u| capacity[u].backpressured >= 0.25))
        });
        let bottleneck = bottleneck.map(|c| self.components[c].name.clone());
        if let Some(name) = &bottleneck
            && bottleneck != state.bottleneck
        {
            tracing::warn!(component = %name, "backpressure: `{name}` is the bottleneck: it is busy while the components feeding it wait on it");
        }
        if bottleneck.is_some() {
            state.bottleneck = bottleneck;
        }
        // Thrashing: pause episodes keep recurring.
        let episodes: u64 = self
            .pause_flags
            .iter()
            .map(|(_, f)| f.episodes.load(Ordering::Relaxed))
            .sum();
        state.episodes.push((now, episodes));
        state
            .episodes
            .retain(|(t, _)| now.duration_since(*t) <= THRASHING_WINDOW);
        let recent =
            episodes.saturating_sub(state.episodes.first().map(|(_, e)| *e).unwrap_or(episodes));
        if recent >= THRASHING_EPISODES && state.thrashing.is_none() {
            let (name, utilization) = self
                .pause_flags
                .iter()
                .map(|(c, _)| (self.components[*c].name.clone(), capacity[*c].utilization()))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or_default();
            let report = format!(
                "`{name}` keeps pausing the sources ({recent} times in {} s) at {:.0}% utilization: backpressure here is the symptom of a permanent shortfall of capacity, not of a burst; give `{name}` more parallelism or make it faster",
                THRASHING_WINDOW.as_secs(),
                utilization * 100.0
            );
            tracing::warn!(component = %name, "{report}");
            state.thrashing = Some(report);
        }
        state.capacity = capacity;
        state.looks += 1;
        self.publish(&state);
        drop(state);
        self.looked.notify_all();
    }

    /// Waits until the monitor has looked more than `after` times, or the
    /// job's monitor has stopped, or `timeout` has passed; returns the number
    /// of looks so far.
    pub(crate) fn wait_for_look(&self, after: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut state = self.monitor.lock().unwrap_or_else(|p| p.into_inner());
        while state.looks <= after && !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Bounded waits: a stop is noticed within one monitor interval.
            let wait = (deadline - now).min(MONITOR_INTERVAL);
            state = self
                .looked
                .wait_timeout(state, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.looks
    }

    fn publish(&self, state: &MonitorState) {
        for (component, capacity) in self.components.iter().zip(&state.capacity) {
            let name = component.name.clone();
            let records_in: u64 = component.counters.iter().map(|c| c.records_in()).sum();
            let records_out: u64 = component.counters.iter().map(|c| c.records_out()).sum();
            metrics::counter!("streamwork_records_in_total", "job" => self.job.clone(), "component" => name.clone())
                .absolute(records_in);
            metrics::counter!("streamwork_records_out_total", "job" => self.job.clone(), "component" => name.clone())
                .absolute(records_out);
            metrics::gauge!("streamwork_utilization", "job" => self.job.clone(), "component" => name.clone())
                .set(capacity.utilization());
            metrics::gauge!("streamwork_backpressure_ratio", "job" => self.job.clone(), "component" => name.clone())
                .set(capacity.backpressured);
            metrics::gauge!("streamwork_idle_ratio", "job" => self.job.clone(), "component" => name.clone())
                .set(capacity.idle);
            if let Some(lag) = capacity.watermark_lag_ms {
                metrics::gauge!("streamwork_watermark_lag_ms", "job" => self.job.clone(), "component" => name.clone())
                    .set(lag as f64);
            }
            metrics::gauge!("streamwork_records_in_per_second", "job" => self.job.clone(), "component" => name.clone())
                .set(capacity.in_per_sec);
            metrics::gauge!("streamwork_headroom", "job" => self.job.clone(), "component" => name.clone())
                .set(capacity.headroom());
            let bottleneck = state.bottleneck.as_deref() == Some(name.as_str());
            metrics::gauge!("streamwork_bottleneck", "job" => self.job.clone(), "component" => name.clone())
                .set(f64::from(u8::from(bottleneck)));
            metrics::gauge!("streamwork_queue_occupancy", "job" => self.job.clone(), "component" => name)
                .set(capacity.queue_occupancy);
        }
        let pauses: u64 = self.pause_flags.iter().map(|(_, f)| f.episodes()).sum();
        metrics::counter!("streamwork_source_pauses_total", "job" => self.job.clone())
            .absolute(pauses);
        if let Some(record) = self.checkpoints.get() {
            metrics::counter!("streamwork_input_holds_total", "job" => self.job.clone())
                .absolute(record.input_holds.taken());
        }
        for (from, to, dropped) in &self.edges {
            metrics::counter!(
                "streamwork_dropped_records_total",
                "job" => self.job.clone(),
                "from" => self.components[*from].name.clone(),
                "to" => self.components[*to].name.clone()
            )
            .absolute(dropped.load(Ordering::Relaxed));
        }
    }
}
