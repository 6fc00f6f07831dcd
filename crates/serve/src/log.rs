//! The server's logs, through `tracing`: the access log (one line per request: its id, method,
//! path, status, bytes in and out, duration) and the error log (failures of the server's own,
//! with their files and offsets, under the request's id; buckets that open late; maintenance
//! errors). Text or JSON lines. Each log is written by a thread of its own through a bounded
//! queue: a slow or full log drops lines (and counts them in `/metrics`), it never holds a
//! request up.

use std::path::PathBuf;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::Level;
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{fmt, Layer, Registry};

use wink_engine::{Error, Result};

/// Whether an event's target (its module path) is one of Wink's crates: `wink` (the binary)
/// or a `wink_*` layer (the engine, the service core, this front, the cluster).
fn is_ours(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    krate == "wink" || krate.starts_with("wink_")
}

/// The `tracing` target of the access log's events.
pub const ACCESS: &str = "wink::access";

/// Lines queued for a log's writer at most; past it, lines are dropped.
const QUEUED_LINES: usize = 64 << 10;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `key=value` fields after a timestamp and a level.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where the access log goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// Not written.
    Off,
    /// Standard error, with the error log.
    #[default]
    Stderr,
    /// Appended to this file.
    File(PathBuf),
}

/// The logs' writer threads: dropping this flushes what they hold.
pub struct Logs {
    _guards: Vec<WorkerGuard>,
}

type Boxed = Box<dyn Layer<Registry> + Send + Sync>;

fn layer(format: LogFormat, writer: NonBlocking, access: bool) -> Boxed {
    let fmt = fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .with_target(false)
        .with_level(!access);
    // Wink's own events from INFO up; the libraries' (hyper, async-nats) from WARN up: their
    // DEBUG and TRACE events would flood the log and crowd ours out of its queue.
    let only = filter_fn(move |m| {
        if access {
            return m.target() == ACCESS;
        }
        let level = if is_ours(m.target()) {
            Level::INFO
        } else {
            Level::WARN
        };
        m.target() != ACCESS && *m.level() <= level
    });
    match format {
        LogFormat::Text => Box::new(fmt.with_filter(only)),
        LogFormat::Json => Box::new(fmt.json().flatten_event(true).with_filter(only)),
    }
}

/// The dropped-line counters of the logs this process installed.
static DROPPED: OnceLock<Vec<ErrorCounter>> = OnceLock::new();

fn queue<W: std::io::Write + Send + 'static>(
    w: W,
    counters: &mut Vec<ErrorCounter>,
) -> (NonBlocking, WorkerGuard) {
    let (w, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(QUEUED_LINES)
        .lossy(true)
        .finish(w);
    counters.push(w.error_counter());
    (w, guard)
}

/// Writes the logs' metric: the lines dropped because a log could not keep up.
pub fn render_metrics(out: &mut String) {
    let dropped: usize = DROPPED
        .get()
        .map_or(0, |c| c.iter().map(ErrorCounter::dropped_lines).sum());
    out.push_str(&format!(
        "# HELP wink_log_dropped_lines_total Log lines dropped because a log could not keep \
         up.\n# TYPE wink_log_dropped_lines_total counter\nwink_log_dropped_lines_total \
         {dropped}\n"
    ));
}

/// Starts the logs as this process's `tracing` subscriber. Only the first call in a process
/// installs them; later ones (a second server in one test process) log where the first does.
pub fn start(format: LogFormat, access: &AccessLog) -> Result<Logs> {
    let mut counters = Vec::new();
    let (errors, guard) = queue(std::io::stderr(), &mut counters);
    let mut guards = vec![guard];
    let mut layers = vec![layer(format, errors.clone(), false)];
    match access {
        AccessLog::Off => {}
        AccessLog::Stderr => layers.push(layer(format, errors, true)),
        AccessLog::File(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Error::io(path, None, e))?;
            let (w, guard) = queue(file, &mut counters);
            guards.push(guard);
            layers.push(layer(format, w, true));
        }
    }
    if tracing::subscriber::set_global_default(Registry::default().with(layers)).is_ok() {
        let _ = DROPPED.set(counters);
    }
    Ok(Logs { _guards: guards })
}

/// A request's id: the client's `x-request-id` when it is a sane one (1 to 128 visible ASCII
/// characters), otherwise a new one: this process's random 64 bits, then a count (32 hex
/// digits; unique within the process, and across processes but by chance; no system call).
pub fn request_id(headers: &hyper::HeaderMap) -> String {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(
            || {
                let process = *PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
                format!(
                    "{process:016x}{:016x}",
                    NEXT.fetch_add(1, Ordering::Relaxed)
                )
            },
            str::to_string,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_request_id_is_kept_only_when_sane() {
        let mut h = hyper::HeaderMap::new();
        let (a, b) = (request_id(&h), request_id(&h));
        assert_eq!((a.len(), b.len()), (32, 32));
        assert_ne!(a, b);
        h.insert("x-request-id", "abc-123".parse().unwrap());
        assert_eq!(request_id(&h), "abc-123");
        for bad in ["a b", "", &"x".repeat(129)] {
            h.insert("x-request-id", bad.parse().unwrap());
            assert_ne!(request_id(&h), bad);
        }
    }

    #[test]
    fn every_layer_of_wink_is_ours_and_nothing_else_is() {
        for t in [
            "wink",
            "wink::serve",
            "wink_cluster::seed",
            "wink_serve",
            "wink_service::x",
        ] {
            assert!(is_ours(t), "{t}");
        }
        for t in ["hyper::proto", "async_nats", "winkle::x", "tokio"] {
            assert!(!is_ours(t), "{t}");
        }
    }
}
