//! A real cluster on loopback (3 nats-servers with JetStream, Wink nodes, HAProxy), driven by
//! real clients while the harness kills things: every acknowledged PUT must read back
//! byte-exact through HAProxy and from each of its owners, `wink cluster verify` must be clean,
//! and no unacknowledged PUT may be half-visible (docs/CLUSTER.md).
#![cfg(feature = "cluster")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use common::cluster::{check_acked, eventually, writer, Cluster};

const PARTITIONS: u32 = 16;

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
            thread::spawn(move || writer(router, n, stop, out))
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

    let checked = check_acked(&cluster, &attempts, &status, PARTITIONS, last_seq);
    assert!(checked >= 1000, "only {checked} acknowledged PUTs");
    eprintln!(
        "cluster test: {checked} acknowledged PUTs of {} read back; stream at {last_seq}",
        attempts.len()
    );
}
