//! A loopback cluster for a test: `cluster/up` (3 nats-servers, Wink nodes, HAProxy) under a
//! temporary directory, `cluster/ctl`, and `cluster/down` when dropped. Needs nats-server and
//! haproxy, which `cluster/install` fetches or installs; without them the test is skipped (a
//! failure in CI, see require.rs).
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use wink::cluster::message::partition_of;

use super::require;

pub const D: &str = "en.wikipedia.org";

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
    pub router: String,
    /// Held until the cluster is down: see [`ONE_AT_A_TIME`].
    _alone: MutexGuard<'static, ()>,
}

/// Clusters of one test binary run one at a time. A cluster is 3 NATS servers, its nodes,
/// HAProxy and the test's writers: two of them on CI's two cores starved each other until
/// elections and leases, which the fault tests watch, came late, and a JetStream start took
/// minutes. Cargo runs the binaries in turn, so this is one cluster on the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether cluster/install could provide nats-server and haproxy; skipped (loudly) otherwise.
pub fn tools(what: &str) -> bool {
    let out = Command::new(repo().join("cluster/install")).output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            require::skip(
                what,
                &format!(
                    "cluster/install failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ),
            );
            false
        }
        Err(e) => {
            require::skip(what, &format!("cluster/install did not run: {e}"));
            false
        }
    }
}

fn script(name: &str, args: &[&str]) -> std::process::Output {
    Command::new(repo().join("cluster").join(name))
        .args(args)
        .env("WINK", env!("CARGO_BIN_EXE_wink"))
        .output()
        .unwrap_or_else(|e| panic!("cluster/{name} runs: {e}"))
}

impl Cluster {
    /// `cluster/up DIR --nodes N --replicas R --partitions P`.
    pub fn up(nodes: usize, replicas: usize, partitions: u32) -> Cluster {
        Cluster::up_with(nodes, replicas, partitions, &[])
    }

    /// `cluster/up` with more options.
    pub fn up_with(nodes: usize, replicas: usize, partitions: u32, more: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Cluster::up_in(dir, nodes, replicas, partitions, more)
    }

    /// `cluster/up` in `dir`, which may hold mounts already (a power-cut filesystem under a
    /// server's store or a node's data root).
    pub fn up_in(
        dir: tempfile::TempDir,
        nodes: usize,
        replicas: usize,
        partitions: u32,
        more: &[&str],
    ) -> Cluster {
        // A test that failed while holding the lock has let its cluster down all the same.
        let alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let d = dir.path().to_str().expect("UTF-8").to_string();
        let (n, r, p) = (
            nodes.to_string(),
            replicas.to_string(),
            partitions.to_string(),
        );
        let mut args = vec![
            d.as_str(),
            "--nodes",
            &n,
            "--replicas",
            &r,
            "--partitions",
            &p,
        ];
        args.extend_from_slice(more);
        let out = script("up", &args);
        let file = dir.path().join("cluster.json");
        let mut cluster = Cluster {
            router: String::new(),
            file,
            dir,
            _alone: alone,
        };
        assert!(
            out.status.success(),
            "cluster/up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let state = cluster.state();
        cluster.router = state["router"].as_str().expect("router").to_string();
        cluster
    }

    /// DIR/cluster.json.
    pub fn state(&self) -> serde_json::Value {
        let text = std::fs::read(&self.file).expect("cluster.json");
        serde_json::from_slice(&text).expect("cluster.json is JSON")
    }

    /// HAProxy's map as the nodes keep it (runtime API `show map`): partition → node name.
    pub fn router_map(&self) -> Vec<(u32, String)> {
        let state = self.state();
        let (admin, map) = (
            state["router_admin"].as_str().unwrap(),
            state["router_map"].as_str().unwrap(),
        );
        super::show_map::parse(&runtime(admin, &format!("show map {map}")))
    }

    pub fn ctl(&self, action: &str, name: &str) {
        let out = self.try_ctl(action, name);
        assert!(
            out.status.success(),
            "cluster/ctl {action} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // What it said on the way (a nats-server started again, no quorum yet) goes with the
        // test's output.
        if !out.stderr.is_empty() {
            eprint!(
                "cluster/ctl {action} {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// `cluster/ctl DIR ACTION NAME`, which may fail.
    pub fn try_ctl(&self, action: &str, name: &str) -> std::process::Output {
        let d = self.dir.path().to_str().expect("UTF-8");
        script("ctl", &[d, action, name])
    }

    /// `cluster/down DIR`.
    pub fn down(&self) -> std::process::Output {
        let d = self.dir.path().to_str().expect("UTF-8");
        script("down", &[d])
    }

    /// Every process on the machine whose command line names a path inside the cluster's
    /// directory (the nats-servers, nodes and HAProxy it started), read from /proc.
    pub fn processes(&self) -> Vec<(u32, Vec<String>)> {
        processes_under(self.dir.path())
    }

    /// `wink cluster VERB cluster.json ARGS`: exit code, stdout and stderr.
    pub fn wink(&self, verb: &str, args: &[&str]) -> (i32, String, String) {
        wink_cluster(verb, self.file.as_os_str(), args)
    }

    /// A node's (or nats server's) URL and data root.
    pub fn node(&self, name: &str) -> (String, PathBuf) {
        let state = self.state();
        let n = state["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("no node {name}"));
        (
            n["url"].as_str().expect("url").to_string(),
            PathBuf::from(n["data"].as_str().expect("data")),
        )
    }

    /// The nats-server leading the stream WINK, from the servers' monitoring endpoints.
    pub fn stream_leader(&self) -> Option<String> {
        let state = self.state();
        for n in state["nats"].as_array().expect("nats") {
            let url = format!("{}/jsz?streams=true", n["monitor"].as_str()?);
            let Some(j) = get_json(&url) else { continue };
            for a in j["account_details"].as_array().into_iter().flatten() {
                for s in a["stream_detail"].as_array().into_iter().flatten() {
                    if s["name"] == "WINK" {
                        if let Some(l) = s["cluster"]["leader"].as_str() {
                            return Some(l.to_string());
                        }
                    }
                }
            }
        }
        None
    }

    /// The log of a node or nats server, for a failure's message.
    pub fn log(&self, name: &str) -> String {
        let path = self.dir.path().join(name).join("log");
        let mut bytes = Vec::new();
        if let Ok(mut f) = std::fs::File::open(path) {
            let _ = f.read_to_end(&mut bytes);
        }
        let start = bytes.len().saturating_sub(4000);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let d = self.dir.path().to_str().unwrap_or_default().to_string();
        let _ = script("down", &[&d]);
    }
}

pub use super::server::try_call;

/// The command line of process `pid`, from /proc (None once it has gone).
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.pop();
    Some(args)
}

/// Whether `pid` runs (a zombie does not).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The running processes with an argument inside `dir`.
pub fn processes_under(dir: &Path) -> Vec<(u32, Vec<String>)> {
    let inside = format!("{}/", dir.display());
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !running(pid) {
            continue;
        }
        if let Some(args) = cmdline(pid) {
            if args.iter().skip(1).any(|a| a.starts_with(&inside)) {
                out.push((pid, args));
            }
        }
    }
    out
}

pub fn get_json(url: &str) -> Option<serde_json::Value> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    let a = try_call(&agent, "GET", url, &[], None).ok()?;
    serde_json::from_slice(&a.body).ok()
}

/// Waits (bounded: 60 s) until `f` holds; panics naming `what` otherwise.
/// `wink cluster VERB TARGET ARGS` (TARGET a cluster.json or a node's or the router's URL):
/// exit code, stdout and stderr.
pub fn wink_cluster(
    verb: &str,
    target: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(["cluster", verb])
        .arg(target)
        .args(args)
        .output()
        .expect("wink cluster runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A title as one path segment: every byte but the unreserved ones percent-encoded.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(what, Duration::from_secs(60), f)
}

/// [`eventually`] with its own bound, for a recovery whose pace is the NATS servers' elections
/// on a loaded machine rather than ours.
pub fn eventually_within(what: &str, bound: Duration, mut f: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while started.elapsed() < bound {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not within {} s", bound.as_secs());
}

/// A PUT a client made, and what came of it.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub title: String,
    pub rev: u64,
    pub body: Vec<u8>,
    /// The ETag's tid and the stream sequence of an acknowledged (201) PUT.
    pub acked: Option<(String, u64)>,
}

fn body_of(client: usize, i: u64) -> Vec<u8> {
    // 2 to 10 KiB, different for every PUT.
    let len = 2048 + ((client as u64 * 7919 + i * 104_729) % 8192) as usize;
    let head = format!("<p>client {client} put {i}</p>");
    let mut b = head.into_bytes();
    b.extend((0..len).map(|k| b'a' + ((k as u64 + i + client as u64) % 26) as u8));
    b
}

/// One PUT of revision `i` of `title` with a body of client `n`'s: what came of it. Anything
/// but a 201 must be a 5xx (a transport error counts as one), never a 4xx; a 201 must carry a
/// real stream sequence.
pub fn put_once(agent: &ureq::Agent, router: &str, n: usize, title: String, i: u64) -> Attempt {
    let body = body_of(n, i);
    let url = format!("{router}/{D}/sys/key_rev_value/html/{title}/{i}");
    let answer = try_call(
        agent,
        "PUT",
        &url,
        &[("Content-Type", "text/html")],
        Some(&body),
    );
    let acked = match &answer {
        Ok(a) if a.status == 201 => {
            let etag = a
                .header("etag")
                .expect("an ETag")
                .trim_matches('"')
                .to_string();
            let tid = etag.split_once('/').expect("REV/TID").1.to_string();
            let seq: u64 = a.header("x-wink-seq").expect("x-wink-seq").parse().unwrap();
            assert!(seq > 0, "PUT {url}: 201 with x-wink-seq 0");
            Some((tid, seq))
        }
        Ok(a) => {
            assert!(a.status >= 500, "PUT {url}: {} {:?}", a.status, a.body);
            None
        }
        Err(_) => None,
    };
    Attempt {
        title,
        rev: i,
        body,
        acked,
    }
}

/// A client: PUTs through the router until told to stop. Each PUT is a new revision of one of
/// its 8 titles.
pub fn writer(router: String, n: usize, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<Attempt>>>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let a = put_once(&agent, &router, n, format!("C{n}_T{}", i % 8), i);
        let failed = a.acked.is_none();
        out.lock().unwrap().push(a);
        if failed {
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Clients PUTting through a router ([`writer`] each), and what they saw.
pub struct Writers {
    stop: Arc<AtomicBool>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Writers {
    /// Starts `n` clients.
    pub fn start(router: &str, n: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..n)
            .map(|i| {
                let (router, stop, out) = (router.to_string(), stop.clone(), attempts.clone());
                thread::spawn(move || writer(router, i, stop, out))
            })
            .collect();
        Writers {
            stop,
            attempts,
            threads,
        }
    }

    /// How many PUTs were acknowledged so far.
    pub fn acked(&self) -> usize {
        self.attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.acked.is_some())
            .count()
    }

    /// Waits until `more` PUTs beyond those acknowledged now are acknowledged (progress between
    /// harms is counted in acknowledged PUTs, not in seconds), at most `patience`.
    pub fn progress_within(&self, more: usize, patience: Duration) {
        let target = self.acked() + more;
        let started = std::time::Instant::now();
        while self.acked() < target {
            assert!(
                started.elapsed() < patience,
                "{more} more acknowledged PUTs: not within {} s",
                patience.as_secs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`Writers::progress_within`] 60 s.
    pub fn progress(&self, more: usize) {
        self.progress_within(more, Duration::from_secs(60));
    }

    /// Stops the clients; answers every PUT they made.
    pub fn stop(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().expect("a client");
        }
        let attempts = self.attempts.lock().unwrap().clone();
        attempts
    }
}

/// The highest stream sequence of an acknowledged PUT.
pub fn last_seq(attempts: &[Attempt]) -> u64 {
    attempts
        .iter()
        .filter_map(|a| a.acked.as_ref().map(|x| x.1))
        .max()
        .unwrap_or(0)
}

/// One command to HAProxy's runtime API; its answer.
fn runtime(admin: &str, command: &str) -> String {
    let mut s = std::net::TcpStream::connect(admin).expect("the runtime API listens");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, format!("{command}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

/// `wink cluster verify` must pass; answers `wink cluster status` (JSON) after it.
pub fn verified_status(cluster: &Cluster) -> serde_json::Value {
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(code, 0, "wink cluster verify: {out} {err}");
    let (code, out, err) = cluster.wink("status", &[]);
    assert_eq!(code, 0, "wink cluster status: {err}");
    serde_json::from_str(&out).expect("status is JSON")
}

/// The owners of `title`'s partition, from `wink cluster status`'s JSON.
pub fn owners(status: &serde_json::Value, title: &str, partitions: u32) -> Vec<String> {
    let p = partition_of(D, title, partitions) as usize;
    status["map"]["owners"][p]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Every acknowledged PUT reads back byte-exact through the router and from each owner of its
/// partition; an unacknowledged one is absent or whole, never other bytes. Answers how many
/// acknowledged PUTs were checked.
pub fn check_acked(
    cluster: &Cluster,
    attempts: &[Attempt],
    status: &serde_json::Value,
    partitions: u32,
    last_seq: u64,
) -> usize {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let min = last_seq.to_string();
    let mut checked = 0;
    for a in attempts {
        let path = format!("/{D}/sys/key_rev_value/html/{}/{}", a.title, a.rev);
        match &a.acked {
            Some((tid, _)) => {
                let exact = format!("{path}/{tid}");
                let via_router = try_call(
                    &agent,
                    "GET",
                    &format!("{}{exact}", cluster.router),
                    &[("x-wink-min-seq", &min)],
                    None,
                )
                .unwrap();
                assert_eq!(via_router.status, 200, "{exact} through HAProxy");
                assert!(
                    via_router.body == a.body,
                    "{exact}: other bytes through HAProxy"
                );
                for o in owners(status, &a.title, partitions) {
                    let url = cluster.node(&o).0;
                    // Forwarded: the owner answers from its own store.
                    let direct = try_call(
                        &agent,
                        "GET",
                        &format!("{url}{exact}"),
                        &[("x-wink-min-seq", &min), ("x-wink-forwarded", "1")],
                        None,
                    )
                    .unwrap();
                    assert_eq!(direct.status, 200, "{exact} from owner {o}");
                    assert!(direct.body == a.body, "{exact}: other bytes from owner {o}");
                }
                checked += 1;
            }
            None => {
                // Unacknowledged: absent, or there whole (JetStream may have stored it and lost
                // only the ack); never other bytes.
                let r = try_call(
                    &agent,
                    "GET",
                    &format!("{}{path}", cluster.router),
                    &[("x-wink-min-seq", &min)],
                    None,
                )
                .unwrap();
                assert!(
                    r.status == 404 || (r.status == 200 && r.body == a.body),
                    "unacknowledged {path}: {} with {} bytes",
                    r.status,
                    r.body.len()
                );
            }
        }
    }
    checked
}

/// The PID of node `name` as cluster.json lists it (`None` while it is stopped).
pub fn node_pid(cluster: &Cluster, name: &str) -> Option<u64> {
    let state = cluster.state();
    state["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .and_then(|n| n["pid"].as_u64())
}

/// Sends `sig` (`-STOP`, `-CONT`, …) to `pid` with kill(1).
pub fn signal(pid: u64, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} {pid}");
}
