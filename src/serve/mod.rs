//! `wink serve`: the render store as an HTTP service — RESTBase's key_rev_value API over a data
//! root whose directories are buckets (render stores). The routes, errors and metrics, with
//! examples, are in docs/HTTP.md; the decisions behind them too.
//!
//! | file | concept |
//! |---|---|
//! | [`routes`] | paths, methods, answers |
//! | [`registry`] | the buckets: writer, group commit, maintenance, per-thread read handles |
//! | [`commit`] | group commit: one commit for every put waiting, each answered after it |
//! | [`problem`] | errors as `application/problem+json`, store errors as statuses |
//! | [`spec`] | a bucket's settings from JSON (RESTBase's retention policy, Wink's fields) |
//! | [`limits`] | body size, body time, in-flight body bytes |
//! | [`connections`] | accepting, the connection bound, header timeout, draining |
//! | [`auth`] | bearer token for changes; no open listener without one |
//! | [`metrics`] | Prometheus counters and histograms |
//! | [`shutdown`] | SIGTERM and SIGINT |
//!
//! Compiled with the `server` feature (on by default); an embedder of the library that turns
//! default features off compiles none of it.

pub mod auth;
pub mod commit;
pub mod connections;
pub mod cursor;
pub mod limits;
pub mod metrics;
pub mod problem;
pub mod registry;
pub mod routes;
pub mod shutdown;
pub mod spec;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::maintenance::background::MaintenanceOptions;
use crate::vfs::WriterLock;

pub use auth::Auth;

/// The default address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7233";

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The data root: one directory per bucket (created when missing).
    pub root: PathBuf,
    pub listen: SocketAddr,
    /// Worker threads (reads run on them); 0: one per core.
    pub threads: usize,
    /// The largest request body.
    pub max_body: u64,
    /// Request body bytes held across all requests at once.
    pub max_inflight: u64,
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// How long a stop waits for in-flight requests.
    pub drain_timeout: Duration,
    pub auth: Auth,
    /// Background maintenance of every bucket (`None`: off).
    pub maintenance: Option<MaintenanceOptions>,
    /// The pause between two whole-store counts of the buckets (for `/_health` and `/metrics`).
    pub stat_interval: Duration,
    /// This server as a node of a cluster (`--cluster FILE`, docs/CLUSTER.md).
    #[cfg(feature = "cluster")]
    pub cluster: Option<crate::cluster::ClusterConfig>,
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
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            auth: Auth::none(),
            maintenance: Some(MaintenanceOptions::default()),
            stat_interval: Duration::from_secs(300),
            #[cfg(feature = "cluster")]
            cluster: None,
        }
    }
}

/// Runs the server until SIGTERM or SIGINT; `ready` is called with the bound address once
/// requests are taken. Returns after a graceful stop (in-flight requests finished, queued puts
/// committed, buckets closed).
pub fn run(opts: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<()> {
    auth::check_listen(&opts.listen, &opts.auth)?;
    if opts.max_body == 0 || opts.max_connections == 0 {
        return Err(Error::invalid(
            "--max-body and --max-connections: at least 1",
        ));
    }
    // Durably: a bucket made in a root whose own name a power cut takes is lost with it.
    crate::vfs::Vfs::create_dir_all(&crate::vfs::RealFs, &opts.root)?;
    // One server per data root: a second one would find every bucket's writer lock taken.
    let lock_path = opts.root.join(".serve.lock");
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, None, e))?;
    let _root_lock = WriterLock::acquire(&lock_path, false)?;

    let metrics = Arc::new(metrics::Metrics::default());
    let registry = registry::Registry::open(&opts.root, opts.maintenance.clone(), metrics.clone())?;
    let app = Arc::new(routes::App {
        registry,
        metrics,
        auth: opts.auth.clone(),
        limits: limits::BodyLimits::new(opts.max_body, opts.max_inflight, opts.body_timeout),
        cursors: cursor::CursorKey::load_or_create(&opts.root)?,
        #[cfg(feature = "cluster")]
        cluster: std::sync::OnceLock::new(),
    });
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|e| Error::io(&opts.root, None, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io(&opts.root, None, e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::io(&opts.root, None, e))?;

    let stats = start_stats(app.clone(), opts.stat_interval);
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
        drain_timeout: opts.drain_timeout,
    };
    let served = rt.block_on(async {
        #[cfg(feature = "cluster")]
        if let Some(cfg) = opts.cluster.clone() {
            let node = crate::cluster::node::Node::start(cfg, app.clone())
                .await
                .map_err(std::io::Error::other)?;
            let _ = app.cluster.set(node);
        }
        let listener = tokio::net::TcpListener::from_std(listener)?;
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
        Ok::<(), std::io::Error>(())
    });
    // The workers' read handles go with their threads.
    rt.shutdown_timeout(Duration::from_secs(5));
    stats.stop();
    app.registry.close();
    served.map_err(|e| Error::io(&opts.root, None, e))
}

/// The thread that counts every bucket's store now and then.
struct Stats {
    stop: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn start_stats(app: Arc<routes::App>, interval: Duration) -> Stats {
    let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("wink-stats".into())
        .spawn(move || {
            let mut handles = HashMap::new();
            loop {
                app.registry.refresh_stats(&mut handles);
                let (lock, cv) = &*flag;
                let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cv
                    .wait_timeout_while(guard, interval, |stopped| !*stopped)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            }
        })
        .ok();
    Stats { stop, thread }
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
