//! `wink serve`: the render store as an HTTP service — RESTBase's key_rev_value API over a data
//! root whose directories are buckets (render stores). The routes, errors and metrics, with
//! examples, are in docs/HTTP.md; the decisions behind them too.
//!
//! The HTTP front, on the service core (the crate `wink_service`: buckets, group commit, specs,
//! writes, the read gate), which knows no HTTP. Its files, all private to the crate:
//!
//! | file | concept |
//! |---|---|
//! | `routes.rs` | paths, methods, answers; the read gate asked before reads |
//! | `problem.rs` | errors as `application/problem+json`: the only place statuses are decided |
//! | `limits.rs` | body size, body time, in-flight body bytes |
//! | `connections.rs` | accepting, the connection bound, header and write deadlines, draining |
//! | `auth.rs` | bearer token for changes; no open listener without one |
//! | `cursor.rs` | listing cursors, sealed so that a forged one is refused |
//! | `forward.rs` | reads relayed to a peer the gate names; node-to-node connections |
//! | `metrics.rs` | Prometheus counters and histograms |
//! | `log.rs` | the access log and the error log (`tracing`), request ids |
//! | `shutdown.rs` | SIGTERM and SIGINT |
//!
//! What it offers the `wink` binary: [`run`] with its [`ServeOptions`], [`Auth`], [`AccessLog`]
//! and [`LogFormat`]. What it offers a layer above it (the cluster): [`run_with`], which puts
//! the layer's [`Front`] (its writes, its read gate, its own routes as an [`Extension`]) in place
//! of this node's, and the pieces those routes answer with ([`App`], [`Answer`], [`json`],
//! [`Problem`]) and forward with ([`http1_connect`], [`MIN_SEQ`]).
//!
//! ```no_run
//! use wink_serve::{run, ServeOptions};
//!
//! let opts = ServeOptions::new("/srv/wink".into());
//! run(opts, |addr| println!("listening on {addr}"))?;
//! # Ok::<(), wink_engine::Error>(())
//! ```

#![warn(missing_docs)]

mod auth;
mod connections;
mod cursor;
mod forward;
mod limits;
mod log;
mod metrics;
mod problem;
mod routes;
mod shutdown;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wink_engine::maintenance::background::MaintenanceOptions;
use wink_engine::vfs::WriterLock;
use wink_engine::{Error, Result};
use wink_service::registry::Registry;
use wink_service::{LocalGate, LocalWrites, ReadGate, Writes};

pub use auth::Auth;
pub use forward::{http1_connect, MIN_SEQ};
pub use log::{AccessLog, LogFormat};
pub use problem::Problem;
pub use routes::{json, Answer, App, Extension};

/// The default address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7233";

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The data root: one directory per bucket (created when missing).
    pub root: PathBuf,
    /// The address to listen on ([`DEFAULT_LISTEN`]: loopback only).
    pub listen: SocketAddr,
    /// Worker threads (reads run on them); 0: one per core.
    pub threads: usize,
    /// The largest request body.
    pub max_body: u64,
    /// Request body bytes held across all requests at once.
    pub max_inflight: u64,
    /// Connections served at once; past them a client gets 503.
    pub max_connections: usize,
    /// Buckets this server holds at most (a `PUT` of one more is 507).
    pub max_buckets: usize,
    /// How long a request's head may take to arrive.
    pub header_timeout: Duration,
    /// How long a request's body may make no progress.
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress before the connection is cut.
    pub write_timeout: Duration,
    /// How long a stop waits for in-flight requests.
    pub drain_timeout: Duration,
    /// The bearer token changes need.
    pub auth: Auth,
    /// Background maintenance of every bucket (`None`: off).
    pub maintenance: Option<MaintenanceOptions>,
    /// The pause between two whole-store counts of the buckets (for `/_health` and `/metrics`).
    pub stat_interval: Duration,
    /// How log lines are written.
    pub log_format: log::LogFormat,
    /// Where the access log goes (the error log goes to standard error).
    pub access_log: log::AccessLog,
}

impl ServeOptions {
    /// The defaults, serving `root`.
    pub fn new(root: PathBuf) -> ServeOptions {
        ServeOptions {
            root,
            // A constant that parses.
            listen: DEFAULT_LISTEN
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7233))),
            threads: 0,
            max_body: 64 << 20,
            max_inflight: 512 << 20,
            max_connections: 4096,
            max_buckets: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            auth: Auth::none(),
            maintenance: Some(MaintenanceOptions::default()),
            stat_interval: Duration::from_secs(300),
            log_format: log::LogFormat::Text,
            access_log: log::AccessLog::Stderr,
        }
    }
}

/// Where writes go and where reads are answered, with the routes of a layer above the front.
pub struct Front {
    /// Where writes go.
    pub writes: Arc<dyn Writes>,
    /// Where reads are answered.
    pub gate: Arc<dyn ReadGate>,
    /// The layer's own routes, answered before the API's.
    pub extension: Option<Arc<dyn Extension>>,
    /// The key that seals listing cursors when every node of the service must take the cursors
    /// any of them gave (a cluster's, behind a router); `None`: the data root's own key.
    pub cursor_secret: Option<[u8; 32]>,
}

impl Front {
    /// This node alone: writes to its buckets' group commits, reads answered here.
    pub fn local(registry: Arc<Registry>) -> Front {
        Front {
            writes: Arc::new(LocalWrites::new(registry)),
            gate: Arc::new(LocalGate),
            extension: None,
            cursor_secret: None,
        }
    }
}

/// Runs the server until SIGTERM or SIGINT; `ready` is called with the bound address once
/// requests are taken. Returns after a graceful stop (in-flight requests finished, queued puts
/// committed, buckets closed).
pub fn run(opts: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<()> {
    run_with(
        opts,
        |registry| async move { Ok(Front::local(registry)) },
        ready,
    )
}

/// Runs the server as [`run`] does, with the [`Front`] that `front` makes from the opened
/// buckets, on the server's runtime, before the server says it is up.
pub fn run_with<F, Made>(opts: ServeOptions, front: F, ready: impl FnOnce(SocketAddr)) -> Result<()>
where
    F: FnOnce(Arc<Registry>) -> Made,
    Made: std::future::Future<Output = Result<Front>>,
{
    auth::check_listen(&opts.listen, &opts.auth)?;
    if opts.max_body == 0 || opts.max_connections == 0 || opts.max_buckets == 0 {
        return Err(Error::invalid(
            "--max-body, --max-connections and --max-buckets: at least 1",
        ));
    }
    // Durably: a bucket made in a root whose own name a power cut takes is lost with it.
    wink_engine::vfs::Vfs::create_dir_all(&wink_engine::vfs::RealFs, &opts.root)?;
    // One server per data root: a second one would find every bucket's writer lock taken.
    let lock_path = opts.root.join(".serve.lock");
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, None, e))?;
    let _root_lock = WriterLock::acquire(&lock_path, false)?;
    let _logs = log::start(opts.log_format, &opts.access_log)?;

    let registry = Arc::new(Registry::open(
        &opts.root,
        opts.maintenance.clone(),
        opts.max_buckets,
    )?);
    let mut opts = opts;
    opts.max_connections = fit_descriptors(&opts, registry.buckets().len())?;
    let cursors = cursor::CursorKey::load_or_create(&opts.root)?;
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|e| Error::io(&opts.root, None, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io(&opts.root, None, e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::io(&opts.root, None, e))?;

    let stats = start_stats(registry.clone(), opts.stat_interval);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if opts.threads > 0 {
        rt.worker_threads(opts.threads);
    }
    let rt = rt
        .thread_name("wink-serve")
        .enable_all()
        .build()
        .map_err(|e| Error::io(&opts.root, None, e))?;
    let limits = connections::ConnLimits {
        max_connections: opts.max_connections,
        header_timeout: opts.header_timeout,
        write_timeout: opts.write_timeout,
        drain_timeout: opts.drain_timeout,
    };
    let served = rt.block_on(async {
        let Front {
            writes,
            gate,
            extension,
            cursor_secret,
        } = front(registry.clone()).await?;
        let cursors = cursor_secret.map_or(cursors, cursor::CursorKey::from_secret);
        let app = Arc::new(routes::App {
            registry: registry.clone(),
            writes,
            metrics: Arc::new(metrics::Metrics::default()),
            auth: opts.auth.clone(),
            limits: limits::BodyLimits::new(opts.max_body, opts.max_inflight, opts.body_timeout),
            cursors,
            gate,
            extension,
        });
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::io(&opts.root, None, e))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Signal handlers are in place before the server says it is up.
        let signals = tokio::spawn(async move {
            let which = shutdown::signalled().await;
            let _ = tx.send(which);
        });
        tokio::task::yield_now().await;
        ready(bound);
        connections::serve(listener, app.clone(), limits, async {
            let _ = rx.await;
        })
        .await;
        signals.abort();
        Ok::<(), Error>(())
    });
    // The workers' read handles go with their threads.
    rt.shutdown_timeout(Duration::from_secs(5));
    stats.stop();
    registry.close();
    served
}

/// Descriptors a bucket holds at most: its writer's files (title records, the current container
/// and its journals, the archive, the lock) and each worker thread's read handle's.
fn descriptors_per_bucket(workers: usize) -> u64 {
    16 + 8 * workers as u64
}

/// Descriptors kept for everything else: the listener, the logs, the cluster's connections,
/// snapshots and copies, the stat thread's handles being renewed.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The fewest connections worth serving.
const MIN_CONNECTIONS: u64 = 16;

/// Raises the descriptor limit to its hard limit and checks that the buckets (`--max-buckets`,
/// or as many as exist) and the connections fit in it. Returns the connections to serve at
/// once: `--max-connections`, lowered (with a warning) when the descriptors cannot hold them, so
/// that a client past them gets 503 instead of waiting on a listener that cannot accept.
fn fit_descriptors(opts: &ServeOptions, buckets_now: usize) -> Result<usize> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| Error::io(&opts.root, None, std::io::Error::from(e)))?;
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let workers = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let buckets = opts.max_buckets.max(buckets_now) as u64;
    let held = RESERVED_DESCRIPTORS
        + connections::OVERFLOW as u64
        + buckets.saturating_mul(descriptors_per_bucket(workers));
    let room = limit.saturating_sub(held);
    if room < MIN_CONNECTIONS {
        return Err(Error::invalid(format!(
            "the descriptor limit ({limit}) cannot hold {buckets} buckets of {} descriptors each \
             and {MIN_CONNECTIONS} connections: raise it (ulimit -n) or lower --max-buckets",
            descriptors_per_bucket(workers)
        )));
    }
    if room < opts.max_connections as u64 {
        tracing::warn!(
            descriptor_limit = limit,
            buckets,
            "--max-connections {} lowered to {room}: the descriptor limit cannot hold more",
            opts.max_connections
        );
        return Ok(room as usize);
    }
    Ok(opts.max_connections)
}

/// The thread that counts every bucket's store now and then.
struct Stats {
    stop: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How often buckets that could not be opened are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(2);

fn start_stats(registry: Arc<Registry>, interval: Duration) -> Stats {
    let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("wink-stats".into())
        .spawn(move || {
            let mut handles = HashMap::new();
            let mut refreshed: Option<std::time::Instant> = None;
            let mut errors_seen: HashMap<String, u64> = HashMap::new();
            loop {
                // Buckets that could not be opened are tried again at every tick; new buckets
                // get their figures at the first tick after they are made.
                for name in registry.retry_failed() {
                    tracing::warn!(bucket = %name, "the bucket opened, and serves");
                }
                log_maintenance_errors(&registry, &mut errors_seen);
                if refreshed.is_none_or(|t| t.elapsed() >= interval) {
                    registry.refresh_stats(&mut handles);
                    refreshed = Some(std::time::Instant::now());
                } else {
                    registry.refresh_missing_stats(&mut handles);
                }
                let (lock, cv) = &*flag;
                let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cv
                    .wait_timeout_while(guard, interval.min(RETRY_EVERY), |stopped| !*stopped)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            }
        })
        .ok();
    Stats { stop, thread }
}

/// Writes to the error log each maintenance error met since the last look (the last of them,
/// and how many there were).
fn log_maintenance_errors(registry: &Registry, seen: &mut HashMap<String, u64>) {
    for b in registry.buckets() {
        let Some(status) = b.maintenance() else {
            continue;
        };
        let before = seen.insert(b.name.clone(), status.errors).unwrap_or(0);
        if status.errors > before {
            tracing::error!(
                bucket = %b.name,
                errors = status.errors - before,
                "maintenance: {}",
                status.last_error.as_deref().unwrap_or("an error")
            );
        }
    }
}

impl Stats {
    fn stop(mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
