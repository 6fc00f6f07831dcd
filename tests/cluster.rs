//! A real cluster on loopback (3 nats-servers with JetStream, Wink nodes, HAProxy), driven by
//! real clients while the harness kills things: every acknowledged PUT must read back
//! byte-exact through HAProxy and from each of its owners, `wink cluster verify` must be clean,
//! and no unacknowledged PUT may be half-visible (docs/CLUSTER.md).
#![cfg(feature = "cluster")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::cluster::{eventually, try_call, Cluster, D};
use wink::cluster::message::partition_of;

const PARTITIONS: u32 = 16;

/// A PUT a client made, and what came of it.
#[derive(Clone, Debug)]
struct Attempt {
    title: String,
    rev: u64,
    body: Vec<u8>,
    /// The ETag's tid and the stream sequence of an acknowledged (201) PUT.
    acked: Option<(String, u64)>,
}

fn body_of(client: usize, i: u64) -> Vec<u8> {
    // 2 to 10 KiB, different for every PUT.
    let len = 2048 + ((client as u64 * 7919 + i * 104_729) % 8192) as usize;
    let head = format!("<p>client {client} put {i}</p>");
    let mut b = head.into_bytes();
    b.extend((0..len).map(|k| b'a' + ((k as u64 + i + client as u64) % 26) as u8));
    b
}

/// A client: PUTs through the router until told to stop. Each PUT is a new revision of one of
/// its 8 titles.
fn client(router: String, n: usize, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<Attempt>>>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let title = format!("C{n}_T{}", i % 8);
        let body = body_of(n, i);
        let url = format!("{router}/{D}/sys/key_rev_value/html/{title}/{i}");
        let answer = try_call(
            &agent,
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
                Some((tid, seq))
            }
            Ok(a) => {
                // Anything but 201 while things are killed must be a 5xx, never a 4xx.
                assert!(a.status >= 500, "PUT {url}: {} {:?}", a.status, a.body);
                None
            }
            Err(_) => None,
        };
        let failed = acked.is_none();
        out.lock().unwrap().push(Attempt {
            title,
            rev: i,
            body,
            acked,
        });
        if failed {
            thread::sleep(Duration::from_millis(100));
        }
    }
}

fn owners(status: &serde_json::Value, title: &str) -> Vec<String> {
    let p = partition_of(D, title, PARTITIONS) as usize;
    status["map"]["owners"][p]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn acknowledged_puts_survive_kills_leader_changes_and_a_new_node() {
    if !common::cluster::tools("the loopback cluster test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..8)
        .map(|n| {
            let (router, stop, out) = (cluster.router.clone(), stop.clone(), attempts.clone());
            thread::spawn(move || client(router, n, stop, out))
        })
        .collect();
    let acked = || {
        attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.acked.is_some())
            .count()
    };
    // Progress between the harms is counted in acknowledged PUTs, not in seconds.
    let progress = |more: usize| {
        let target = acked() + more;
        eventually(&format!("{more} more acknowledged PUTs"), || {
            acked() >= target
        });
    };
    progress(200);
    cluster.ctl("kill", "n2");
    progress(200);
    cluster.ctl("start", "n2");
    progress(200);
    let leader = cluster.stream_leader().expect("the stream has a leader");
    cluster.ctl("kill", &leader);
    progress(100);
    cluster.ctl("start", &leader);
    progress(100);
    cluster.ctl("add", "n4");
    let (code, out, err) = cluster.wink("rebalance", &[]);
    assert_eq!(
        code,
        0,
        "wink cluster rebalance: {out} {err}\n{}",
        cluster.log("n4")
    );
    progress(200);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client");
    }

    let attempts = attempts.lock().unwrap().clone();
    let last_seq = attempts
        .iter()
        .filter_map(|a| a.acked.as_ref().map(|x| x.1))
        .max()
        .unwrap();
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(code, 0, "wink cluster verify: {out} {err}");

    // n4 took partitions over.
    let (code, out, _) = cluster.wink("status", &[]);
    assert_eq!(code, 0);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let n4 = status["map"]["owners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o.as_array().unwrap().iter().any(|n| n == "n4"))
        .count();
    assert!(n4 > 0, "n4 owns no partition: {status}");

    let urls: std::collections::BTreeMap<String, String> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| (n.to_string(), cluster.node(n).0))
        .collect();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let min = last_seq.to_string();
    let mut checked = 0;
    for a in &attempts {
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
                for o in owners(&status, &a.title) {
                    let url = &urls[&o];
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
    assert!(checked >= 1000, "only {checked} acknowledged PUTs");
    eprintln!(
        "cluster test: {checked} acknowledged PUTs of {} read back; stream at {last_seq}",
        attempts.len()
    );
}
