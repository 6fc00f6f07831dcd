//! `wink serve [ROOT] [--listen ADDR] [--threads N] [--max-body BYTES] [--token-file F] …`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use wink::maintenance::background::MaintenanceOptions;
use wink::serve::{AccessLog, LogFormat};
use wink::serve::{Auth, ServeOptions, DEFAULT_LISTEN};
use wink::{Error, Result};

use crate::Status;

const AFTER_HELP: &str = "\
Serves the buckets under ROOT (one render store per directory, created by PUT of a bucket) over
HTTP: RESTBase's key_rev_value API under /{domain}/sys/key_rev_value/{bucket}, /_health and
/metrics (see docs/HTTP.md). Prints `listening on ADDR` on stdout once requests are taken.

A PUT is answered 201 only once the render is durable; concurrent PUTs to a bucket share one
commit. Each bucket's background maintenance (cull, archive, compaction) runs in the server.
SIGTERM or SIGINT stops it gracefully: no new connections, requests under way finished, queued
puts committed, exit status 0.

Logs: one access-log line per request (request id, method, path, status, bytes in and out,
microseconds) and an error log (failures with their files and offsets, under the request id that
the client's answer names; maintenance errors), on standard error unless --access-log says
otherwise. A client's `x-request-id` is kept when sane, else one is made; answers carry it.

Changes (PUT, DELETE, POST) need `Authorization: Bearer TOKEN` when --token-file is given;
listening beyond loopback without one is refused (exit status 2).";

/// Serve the render stores under a data root over HTTP.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The data root: one directory per bucket (created when missing).
    #[arg(default_value = "wink-data")]
    root: PathBuf,
    /// The address to listen on (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    max_body: u64,
    /// Request body bytes held at once across all requests (503 past it).
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 20)]
    max_inflight: u64,
    /// Connections served at once (503 past it).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_connections: usize,
    /// Buckets held at most (a PUT of one more is 507); with the connections, checked at start
    /// against the descriptor limit.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_buckets: usize,
    /// Seconds a request's head may take to arrive.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    header_timeout: f64,
    /// Seconds a request's body may take to arrive (408 past it).
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    body_timeout: f64,
    /// Seconds an answer's write may wait for a client that reads nothing (then it is cut).
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    write_timeout: f64,
    /// A file whose first line is the bearer token that changes need.
    #[arg(long, value_name = "F")]
    token_file: Option<PathBuf>,
    /// Seconds between background maintenance rounds of each bucket (0: no maintenance).
    #[arg(long, value_name = "S", default_value_t = 600)]
    maintenance_interval: u64,
    /// Limit on compaction I/O in the background, MB/s.
    #[arg(long, value_name = "MBPS", default_value_t = 100.0)]
    maintenance_mbps: f64,
    /// Seconds between whole-bucket counts for /_health and /metrics.
    #[arg(long, value_name = "S", default_value_t = 300)]
    stat_interval: u64,
    /// How log lines are written: `text` (key=value) or `json` (one object a line).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Where the access log goes: `stderr` (with the error log), `off`, or a file to append to.
    #[arg(long, value_name = "WHERE", default_value = "stderr")]
    access_log: String,
    /// Run as a node of the cluster this file describes (docs/CLUSTER.md).
    #[cfg(feature = "cluster")]
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// This node's name in the cluster (default: the file's `name`).
    #[cfg(feature = "cluster")]
    #[arg(long, value_name = "NAME", requires = "cluster")]
    name: Option<String>,
}

fn seconds(v: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Error::invalid(format!("{what} {v}: a number of seconds > 0")))
}

pub fn run(args: &Args) -> Result<Status> {
    let mut opts = ServeOptions::new(args.root.clone());
    opts.listen = args.listen;
    opts.threads = args.threads;
    opts.max_body = args.max_body;
    opts.max_inflight = args.max_inflight;
    opts.max_connections = args.max_connections;
    opts.max_buckets = args.max_buckets;
    opts.header_timeout = seconds(args.header_timeout, "--header-timeout")?;
    opts.write_timeout = seconds(args.write_timeout, "--write-timeout")?;
    opts.body_timeout = seconds(args.body_timeout, "--body-timeout")?;
    opts.stat_interval = Duration::from_secs(args.stat_interval.max(1));
    opts.log_format = match args.log_format.as_str() {
        "json" => LogFormat::Json,
        _ => LogFormat::Text,
    };
    opts.access_log = match args.access_log.as_str() {
        "stderr" => AccessLog::Stderr,
        "off" => AccessLog::Off,
        path => AccessLog::File(PathBuf::from(path)),
    };
    if let Some(path) = &args.token_file {
        opts.auth = Auth::from_file(path)?;
    }
    opts.maintenance = match args.maintenance_interval {
        0 => None,
        secs => Some(MaintenanceOptions {
            interval: Duration::from_secs(secs),
            max_mbps: Some(args.maintenance_mbps),
            ..MaintenanceOptions::default()
        }),
    };
    let ready = |addr| {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
    };
    #[cfg(feature = "cluster")]
    if let Some(path) = &args.cluster {
        let mut cfg = wink::cluster::ClusterConfig::read(path)?;
        if let Some(name) = &args.name {
            cfg.name = name.clone();
        }
        if cfg.node(&cfg.name).is_none() {
            return Err(Error::invalid(format!(
                "{}: this node, {:?}, is not one of its nodes (--name)",
                path.display(),
                cfg.name
            )));
        }
        wink::cluster::serve(opts, cfg, ready)?;
        return Ok(0);
    }
    wink::serve::run(opts, ready)?;
    Ok(0)
}
