//! The service's counters, in Prometheus's text format (`GET /metrics`).
//!
//! Everything a request touches is an atomic in a fixed table (route × status, a latency
//! histogram per route), so counting takes no lock on the request path. Per-bucket figures come
//! from the bucket registry when the page is rendered.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use wink_service::Histogram;

/// What a request was, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    BucketPut,
    BucketGet,
    Titles,
    Latest,
    AsOf,
    Revision,
    Render,
    Renders,
    Put,
    TakeDown,
    Lift,
    Other,
}

impl Route {
    const ALL: [Route; 14] = [
        Route::Health,
        Route::Metrics,
        Route::BucketPut,
        Route::BucketGet,
        Route::Titles,
        Route::Latest,
        Route::AsOf,
        Route::Revision,
        Route::Render,
        Route::Renders,
        Route::Put,
        Route::TakeDown,
        Route::Lift,
        Route::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Health => "health",
            Route::Metrics => "metrics",
            Route::BucketPut => "bucket_put",
            Route::BucketGet => "bucket_get",
            Route::Titles => "titles",
            Route::Latest => "get_latest",
            Route::AsOf => "get_as_of",
            Route::Revision => "get_revision",
            Route::Render => "get_render",
            Route::Renders => "renders",
            Route::Put => "put",
            Route::TakeDown => "take_down",
            Route::Lift => "lift",
            Route::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The statuses the service answers with; anything else is counted in one more slot, "other".
const STATUSES: [u16; 14] = [
    200, 201, 304, 400, 401, 404, 405, 408, 409, 413, 415, 500, 503, 507,
];
const STATUS_SLOTS: usize = STATUSES.len() + 1;

fn status_slot(status: u16) -> usize {
    STATUSES
        .iter()
        .position(|s| *s == status)
        .unwrap_or(STATUSES.len())
}

/// Upper bounds of the latency histogram, seconds.
const LATENCY: [f64; 16] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The service-wide counters.
#[derive(Debug)]
pub struct Metrics {
    requests: Vec<AtomicU64>,
    latency: Vec<Histogram>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub connections_open: AtomicU64,
    pub connections_refused: AtomicU64,
    pub inflight_refused: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: (0..Route::ALL.len() * STATUS_SLOTS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            latency: Route::ALL
                .iter()
                .map(|_| Histogram::new(&LATENCY))
                .collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            inflight_refused: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn request(&self, route: Route, status: u16, took: Duration, out_bytes: u64) {
        self.requests[route.index() * STATUS_SLOTS + status_slot(status)]
            .fetch_add(1, Ordering::Relaxed);
        self.latency[route.index()].observe(took.as_secs_f64());
        self.bytes_out.fetch_add(out_bytes, Ordering::Relaxed);
    }

    /// The service-wide part of the metrics page.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP wink_http_requests_total Requests answered, by route and status.\n");
        out.push_str("# TYPE wink_http_requests_total counter\n");
        for route in Route::ALL {
            for slot in 0..STATUS_SLOTS {
                let n = self.requests[route.index() * STATUS_SLOTS + slot].load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let status = STATUSES
                    .get(slot)
                    .map_or("other".to_string(), |s| s.to_string());
                let _ = writeln!(
                    out,
                    "wink_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                    route.as_str()
                );
            }
        }
        out.push_str(
            "# HELP wink_http_request_duration_seconds Time from a request's head to its answer.\n",
        );
        out.push_str("# TYPE wink_http_request_duration_seconds histogram\n");
        for route in Route::ALL {
            let h = &self.latency[route.index()];
            if h.count() > 0 {
                let labels = format!("route=\"{}\",", route.as_str());
                h.render(out, "wink_http_request_duration_seconds", &labels);
            }
        }
        let counters: [(&str, &str, &AtomicU64); 4] = [
            (
                "wink_http_request_bytes_total",
                "Request body bytes read.",
                &self.bytes_in,
            ),
            (
                "wink_http_response_bytes_total",
                "Response body bytes sent.",
                &self.bytes_out,
            ),
            (
                "wink_http_connections_refused_total",
                "Connections answered 503 because the connection limit was reached.",
                &self.connections_refused,
            ),
            (
                "wink_http_inflight_refused_total",
                "Requests answered 503 because the in-flight body bytes were at their limit.",
                &self.inflight_refused,
            ),
        ];
        wink_service::histogram::render_counters(out, &counters);
        let _ = writeln!(
            out,
            "# HELP wink_http_connections_open Connections open now.\n\
             # TYPE wink_http_connections_open gauge\nwink_http_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
    }
}

/// The process's own figures, under the names every Prometheus client library gives them:
/// CPU seconds, resident memory, open and allowed file descriptors, start time (Linux's /proc;
/// a figure that cannot be read is left out).
pub fn render_process(out: &mut String) {
    use std::fmt::Write;
    let mut gauge = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as f64;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis (the command may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // Fields 14, 15 (utime, stime), 22 (starttime) and 24 (rss) of proc(5), from field 3 on.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(user), Some(system)) = (field(14), field(15)) {
        gauge(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            (user + system) / ticks,
        );
    }
    if let Some(rss) = field(24) {
        gauge(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss * page,
        );
    }
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("btime ")
                    .map(|v| v.trim().parse::<f64>().ok())
            })
        })
        .flatten();
    if let (Some(boot), Some(start)) = (boot, field(22)) {
        gauge(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds.",
            boot + start / ticks,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            fds.count() as f64,
        );
    }
    if let Ok((soft, _)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        gauge(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            soft as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_count_by_route_and_status() {
        let m = Metrics::default();
        m.request(Route::Latest, 200, Duration::from_micros(50), 10);
        m.request(Route::Latest, 200, Duration::from_micros(50), 10);
        m.request(Route::Put, 418, Duration::from_millis(2), 0);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("wink_http_requests_total{route=\"get_latest\",status=\"200\"} 2"));
        assert!(out.contains("wink_http_requests_total{route=\"put\",status=\"other\"} 1"));
        assert!(out.contains("wink_http_response_bytes_total 20"));
    }
}
