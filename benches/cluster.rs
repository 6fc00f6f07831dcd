//! The cluster against its parts, one run on loopback (docs/PERFORMANCE.md § Cluster):
//!
//! 1. acknowledged PUTs/s and p99 through HAProxy into a 3-node cluster (R=2, stream R=3),
//!    beside JetStream alone acking the same messages from a plain publisher (same number in
//!    flight), and beside one `wink serve`;
//! 2. GETs/s through HAProxy (with the share of them a node forwarded) beside the same GETs
//!    sent by the client straight to the owner the router's map names, at 64 and 4 in flight,
//!    and beside one node;
//! 3. catch-up of a new replica (snapshot of a peer + replay, then rebalance) in MB/s beside a
//!    plain copy of a node's data root.
//!
//!   cargo build --release && flock /tmp/wink-bench.lock cargo bench --bench cluster
//!
//! Env: `WINK_BENCH_PUTS` (default 20000), `WINK_BENCH_INFLIGHT` (64), `WINK_BENCH_BYTES` (8192),
//! `WINK_BENCH_ONLY=reads` (the PUTs through HAProxy that fill the cluster, then the GETs: for
//! trying the router's settings), `WINK_BENCH_ONLY=puts` (JetStream alone and the cluster's
//! PUTs, nothing after: for trying the write path).

use std::path::{Path, PathBuf};

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wink::cluster::message::partition_of;

#[path = "../tests/common/show_map.rs"]
mod show_map;

const D: &str = "en.wikipedia.org";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn wink() -> PathBuf {
    repo().join("target/release/wink")
}

fn script(name: &str, args: &[&str]) {
    let out = Command::new(repo().join("cluster").join(name))
        .args(args)
        .env("WINK", wink())
        .output()
        .expect("a cluster script runs");
    assert!(
        out.status.success(),
        "cluster/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn body(i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("<p>{i}</p>").into_bytes();
    b.extend((0..len.saturating_sub(b.len())).map(|k| b'a' + ((k + i) % 26) as u8));
    b
}

/// Runs `n` requests over `inflight` threads; answers (requests/s, p50, p99 in ms).
fn load(
    n: usize,
    inflight: usize,
    f: impl Fn(&ureq::Agent, usize) -> bool + Sync,
) -> (f64, f64, f64) {
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(n));
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..inflight {
            s.spawn(|| {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(60))
                    .build();
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t = Instant::now();
                    if !f(&agent, i) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    mine.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                lat.lock().unwrap().extend(mine);
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let failed = failed.into_inner();
    // A failed request is not counted as done; say so rather than stop the run.
    if failed > 0 {
        println!("  ({failed} of {n} requests failed)");
    }
    let mut lat = lat.into_inner().unwrap();
    lat.sort_by(|a, b| a.total_cmp(b));
    let q = |f: f64| lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)];
    ((n - failed) as f64 / secs, q(0.5), q(0.99))
}

fn put(agent: &ureq::Agent, base: &str, i: usize, len: usize) -> bool {
    let url = format!("{base}/{D}/sys/key_rev_value/html/T{}/{}", i % 5000, i + 1);
    agent
        .put(&url)
        .set("Content-Type", "text/html")
        .send_bytes(&body(i, len))
        .is_ok_and(|r| r.status() == 201)
}

fn get(agent: &ureq::Agent, base: &str, i: usize) -> bool {
    let url = format!("{base}/{D}/sys/key_rev_value/html/T{}", i % 5000);
    agent.get(&url).call().is_ok_and(|r| {
        let mut body = Vec::new();
        r.status() == 200 && r.into_reader().read_to_end(&mut body).is_ok() && !body.is_empty()
    })
}

use std::io::Read as _;

/// [`get`], counting in `forwarded` the answers a node relayed from an owner.
fn get_counted(agent: &ureq::Agent, base: &str, i: usize, forwarded: &AtomicUsize) -> bool {
    let url = format!("{base}/{D}/sys/key_rev_value/html/T{}", i % 5000);
    agent.get(&url).call().is_ok_and(|r| {
        if r.header("x-wink-forwarded-to").is_some() {
            forwarded.fetch_add(1, Ordering::Relaxed);
        }
        let mut body = Vec::new();
        r.status() == 200 && r.into_reader().read_to_end(&mut body).is_ok() && !body.is_empty()
    })
}

/// The node HAProxy's partition map sends each partition to, read through its runtime API.
fn router_map(state: &serde_json::Value) -> Vec<String> {
    use std::io::Write as _;
    let admin = state["router_admin"]
        .as_str()
        .expect("a router with a runtime API");
    let map = state["router_map"].as_str().unwrap();
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    writeln!(s, "show map {map}").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    show_map::parse(&answer)
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

/// JetStream alone: the same messages published by a plain client to a stream like the
/// cluster's (R=3, file storage), `inflight` acks outstanding.
fn jetstream_alone(nats: Vec<String>, n: usize, inflight: usize, len: usize) -> (f64, f64, f64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = async_nats::connect(nats).await.expect("NATS");
        let js = async_nats::jetstream::new(client);
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH".into(),
            subjects: vec!["bench.>".into()],
            num_replicas: 3,
            storage: async_nats::jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("the bench stream");
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..inflight {
            let (js, next) = (js.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return lat;
                    }
                    let t = Instant::now();
                    let msg = async_nats::jetstream::message::PublishMessage::build()
                        .payload(body(i, len).into())
                        .message_id(format!("bench|{i}"));
                    let ack = js
                        .send_publish(format!("bench.{}", i % 64), msg)
                        .await
                        .expect("publish");
                    ack.await.expect("ack");
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let secs = started.elapsed().as_secs_f64();
        lat.sort_by(|a, b| a.total_cmp(b));
        let q = |f: f64| lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)];
        (n as f64 / secs, q(0.5), q(0.99))
    })
}

/// CPU seconds (user + system) each process of the cluster has used so far.
fn cpu(state: &serde_json::Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut add = |name: String, pid: Option<u64>| {
        let Some(pid) = pid else { return };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split(' ').collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime: fields 14 and 15 of stat, 11 and 12 after the command's ") ".
        out.push((name, (ticks(11) + ticks(12)) / 100.0));
    };
    for kind in ["nats", "nodes"] {
        for n in state[kind].as_array().into_iter().flatten() {
            add(
                n["name"].as_str().unwrap_or("?").to_string(),
                n["pid"].as_u64(),
            );
        }
    }
    add("haproxy".into(), state["haproxy"]["pid"].as_u64());
    out
}

fn cpu_used(before: &[(String, f64)], after: &[(String, f64)]) -> String {
    let mut parts = Vec::new();
    let mut total = 0.0;
    for (name, a) in after {
        let b = before.iter().find(|(n, _)| n == name).map_or(0.0, |x| x.1);
        parts.push(format!("{name} {:.1}", a - b));
        total += a - b;
    }
    format!("CPU s: {} (total {total:.1})", parts.join(", "))
}

fn du(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == ".snapshots") {
                    continue;
                }
                total += du(&p);
            } else if let Ok(m) = e.metadata() {
                total += m.len();
            }
        }
    }
    total
}

/// One line of figures.
fn report(what: &str, (rate, p50, p99): (f64, f64, f64), extra: &str) {
    println!("{what}: {rate:.0}/s p50 {p50:.2} ms p99 {p99:.2} ms{extra}");
}

/// A cluster's `cluster.json` under `dir`, its router's URL and its NATS servers' URLs.
fn cluster_state(dir: &Path) -> (serde_json::Value, String, Vec<String>) {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    let router = state["router"].as_str().unwrap().to_string();
    let nats = state["nats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["url"].as_str().unwrap().to_string())
        .collect();
    (state, router, nats)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env("WINK_BENCH_PUTS", 20_000);
    let inflight = env("WINK_BENCH_INFLIGHT", 64);
    let len = env("WINK_BENCH_BYTES", 8192);
    assert!(wink().exists(), "build first: cargo build --release");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    script("up", &[&d, "--nodes", "3", "--replicas", "2"]);
    // Whatever happens below, the cluster's processes stop before its directory goes.
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new(repo().join("cluster/down"))
                .arg(&self.0)
                .output();
        }
    }
    let down = Down(d.clone());
    let (state, router, nats) = cluster_state(dir.path());
    let n1 = state["nodes"][0]["url"].as_str().unwrap().to_string();
    let n1_data = PathBuf::from(state["nodes"][0]["data"].as_str().unwrap());
    println!(
        "cluster bench: {n} PUTs of {len} bytes, {inflight} in flight, \
         3 nats-servers (R=3), 3 nodes (R=2)"
    );

    let only = std::env::var("WINK_BENCH_ONLY").unwrap_or_default();
    let reads_only = only == "reads";
    let before = cpu(&state);
    let figures = if reads_only {
        (f64::NAN, 0.0, 0.0)
    } else {
        jetstream_alone(nats, n, inflight, len)
    };
    report("jetstream alone (acked publishes)", figures, "");
    println!("  {}", cpu_used(&before, &cpu(&state)));
    let js_rate = figures.0;

    let before = cpu(&state);
    let figures = load(n, inflight, |a, i| put(a, &router, i, len));
    let share = format!(" ({:.0}% of JetStream's)", 100.0 * figures.0 / js_rate);
    report("cluster PUT through HAProxy (acked)", figures, &share);
    // The nodes go on applying after the last ack: let them finish before counting.
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "  {} (with the apply that followed)",
        cpu_used(&before, &cpu(&state))
    );

    let durable_rate = figures.0;

    let figures = if reads_only {
        (f64::NAN, 0.0, 0.0)
    } else {
        load(n, inflight, |a, i| put(a, &n1, n + i, len))
    };
    let share = format!(" ({:.0}% of JetStream's)", 100.0 * figures.0 / js_rate);
    report(
        "cluster PUT to one node, no HAProxy (acked)",
        figures,
        &share,
    );
    if only == "puts" {
        return;
    }

    // Reads: every node must have applied everything first.
    let out = Command::new(wink())
        .args(["cluster", "verify"])
        .arg(dir.path().join("cluster.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The same GETs sent by the client itself to the node the router's map names.
    let owner_of = router_map(&state);
    let url_of = |name: &str| -> String {
        let nodes = state["nodes"].as_array().unwrap();
        let node = nodes.iter().find(|x| x["name"] == name).expect("a node");
        node["url"].as_str().unwrap().to_string()
    };
    let urls: Vec<String> = (0..5000)
        .map(|t| {
            let p = partition_of(D, &format!("T{t}"), owner_of.len() as u32) as usize;
            url_of(&owner_of[p])
        })
        .collect();
    // Loaded (as many in flight as the PUTs), then nearly idle: the router's hop shows best
    // where no queue hides it.
    for inflight in [inflight, 4] {
        let forwarded = AtomicUsize::new(0);
        let figures = load(n, inflight, |a, i| get_counted(a, &router, i, &forwarded));
        let share = format!(
            " ({:.2}% forwarded by the node HAProxy chose)",
            100.0 * forwarded.load(Ordering::Relaxed) as f64 / n as f64
        );
        report(
            &format!("cluster GET through HAProxy, {inflight} in flight"),
            figures,
            &share,
        );
        let routed_p50 = figures.1;
        let forwarded = AtomicUsize::new(0);
        let figures = load(n, inflight, |a, i| {
            get_counted(a, &urls[i % 5000], i, &forwarded)
        });
        let share = format!(
            " (router p50 {:.2}× this; {} forwarded)",
            routed_p50 / figures.1,
            forwarded.load(Ordering::Relaxed)
        );
        report(
            &format!("cluster GET straight to an owner (no HAProxy), {inflight} in flight"),
            figures,
            &share,
        );
    }
    let figures = load(n, inflight, |a, i| get(a, &n1, i));
    let what = "cluster GET from one node (n1, forwarding what it does not own)";
    report(what, figures, "");
    if reads_only {
        return;
    }

    // Catch-up of a new replica: snapshot of a peer + replay, then rebalance onto it.
    let bytes = du(&n1_data);
    let started = Instant::now();
    script("ctl", &[&d, "add", "n4"]);
    let added = started.elapsed().as_secs_f64();
    let out = Command::new(wink())
        .args(["cluster", "rebalance"])
        .arg(dir.path().join("cluster.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rebalance: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let total = started.elapsed().as_secs_f64();
    println!(
        "new replica n4: snapshot+start {added:.2} s, with rebalance (replay of its new \
         partitions) {total:.2} s; {:.1} MB of a peer's data: {:.1} MB/s",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / total
    );
    let copy_to = dir.path().join("plain-copy");
    let started = Instant::now();
    let status = Command::new("cp")
        .args(["-r"])
        .arg(&n1_data)
        .arg(&copy_to)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = Command::new("sync").arg("-f").arg(&copy_to).status();
    let copy = started.elapsed().as_secs_f64();
    println!(
        "plain copy (cp -r + sync) of n1's data: {copy:.2} s, {:.1} MB/s",
        bytes as f64 / 1e6 / copy
    );
    drop(down);

    // One node alone.
    let single = tempfile::tempdir().unwrap();
    let mut child = Command::new(wink())
        .arg("serve")
        .arg(single.path())
        .args(["--listen", "127.0.0.1:0", "--maintenance-interval", "0"])
        // As nginx runs here: no access log.
        .args(["--access-log", "off"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let base = format!(
        "http://{}",
        line.trim().strip_prefix("listening on ").unwrap()
    );
    let agent = ureq::agent();
    let created = agent
        .put(&format!("{base}/{D}/sys/key_rev_value/html"))
        .call();
    assert!(created.is_ok());
    let figures = load(n, inflight, |a, i| put(a, &base, i, len));
    report("one wink serve PUT", figures, "");
    let figures = load(n, inflight, |a, i| get(a, &base, i));
    report("one wink serve GET", figures, "");
    let _ = child.kill();
    let _ = child.wait();

    // The same PUTs against a cluster with the previous default: nats-servers syncing every
    // 2 minutes, nodes acknowledging anyway (a power cut may lose those acks).
    let unsafe_dir = tempfile::tempdir().unwrap();
    let u = unsafe_dir.path().to_str().unwrap().to_string();
    script(
        "up",
        &[&u, "--nodes", "3", "--replicas", "2", "--unsafe-nats-sync"],
    );
    let _down = Down(u.clone());
    let (_, router, nats) = cluster_state(unsafe_dir.path());
    let figures = jetstream_alone(nats, n, inflight, len);
    report("jetstream alone, default sync (every 2 min)", figures, "");
    let unsafe_js = figures.0;
    let figures = load(n, inflight, |a, i| put(a, &router, i, len));
    let share = format!(" ({:.0}% of JetStream's)", 100.0 * figures.0 / unsafe_js);
    report("cluster PUT through HAProxy, unsafe acks", figures, &share);
    println!(
        "durable acks cost: cluster PUTs/s {:.2}x the unsafe default's; JetStream alone with \
         sync always {:.2}x its default",
        durable_rate / figures.0,
        js_rate / unsafe_js
    );
}
