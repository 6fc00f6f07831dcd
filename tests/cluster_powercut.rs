//! Power cuts of a whole loopback cluster: every nats-server's store and every node's data root
//! is on cutfs (tools/cutfs, a filesystem that loses whatever was not fsynced), 8 clients PUT
//! through HAProxy, and at random moments the power of every machine goes at once (every unsynced
//! byte and name lost, every nats-server and node SIGKILLed). The filesystems are mounted again,
//! the servers and nodes started again, and the writes go on. At the end, every PUT answered 201
//! reads back byte-exact through the router and from each owner of its partition, and
//! `wink cluster verify` finds the owners in agreement (docs/CLUSTER.md § What a 201 means).
#![cfg(feature = "cluster")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{check_acked, writer, Attempt, Cluster};
use common::powercut::{self, PowerCut, Rng};

const PARTITIONS: u32 = 16;
const NODES: usize = 3;
const CUTS: usize = 10;

/// A cluster whose every store is on its own cutfs mount. The mounts are dropped first (their
/// processes killed, then unmounted), then the cluster (HAProxy stopped, the directory removed).
struct Rig {
    mounts: Vec<PowerCut>,
    cluster: Cluster,
}

impl Rig {
    fn up() -> Rig {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let backing = tmp.path().join("backing");
        let mut mounts = Vec::new();
        for i in 1..=3 {
            let name = format!("nats-{i}");
            // nats-server fsyncs its files, never a directory: it relies on ext4's and XFS's
            // journal, which an fsync commits (cutfs's journaled names).
            mounts.push(PowerCut::with_names(
                &backing.join(&name),
                &tmp.path().join(&name).join("js"),
                cutfs::Names::Journaled,
            ));
        }
        for i in 1..=NODES {
            let name = format!("n{i}");
            mounts.push(PowerCut::new(
                &backing.join(&name),
                &tmp.path().join(&name).join("data"),
            ));
        }
        let cluster = Cluster::up_in(tmp, NODES, 2, PARTITIONS, &[]);
        Rig { mounts, cluster }
    }

    /// The power of every machine goes at once; then the machines come back: the filesystems
    /// show what was durable, and the nats-servers (one by one, as an operator would) and the
    /// nodes start again.
    fn cut_and_restart(&mut self) {
        PowerCut::cut_all(&mut self.mounts);
        // A nats-server keeps no file open between writes, so the mounts do not find them all:
        // every server and node goes, by its pid.
        let state = self.cluster.state();
        for p in ["nats", "nodes"] {
            for n in state[p].as_array().expect("processes") {
                if let Some(pid) = n["pid"].as_i64() {
                    // SAFETY: kill(2) with a pid and a signal number.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
        }
        for p in ["nats", "nodes"] {
            for n in state[p].as_array().expect("processes") {
                if let Some(pid) = n["pid"].as_u64() {
                    let started = Instant::now();
                    while common::cluster::running(pid as u32) {
                        assert!(
                            started.elapsed() < Duration::from_secs(30),
                            "pid {pid} lives"
                        );
                        thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        }
        for m in &mut self.mounts {
            m.remount();
        }
        for i in 1..=3 {
            self.cluster.ctl("start", &format!("nats-{i}"));
        }
        for i in 1..=NODES {
            self.cluster.ctl("start", &format!("n{i}"));
        }
    }
}

fn acked(attempts: &Mutex<Vec<Attempt>>) -> usize {
    attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.acked.is_some())
        .count()
}

/// Waits until `more` PUTs beyond those acknowledged now are acknowledged (bounded: 180 s, as
/// a JetStream cluster that just restarted on two busy cores may take a minute to elect).
fn progress(attempts: &Mutex<Vec<Attempt>>, more: usize, rig: &Rig) {
    let target = acked(attempts) + more;
    let started = Instant::now();
    while acked(attempts) < target {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{more} more acknowledged PUTs not within 180 s; n1's log:\n{}\nnats-1's log:\n{}",
            rig.cluster.log("n1"),
            rig.cluster.log("nats-1")
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_acknowledged_write_survives_power_cuts_of_the_whole_cluster() {
    let what = "power cuts of a cluster (tests/cluster_powercut.rs)";
    if !powercut::available(what) || !common::cluster::tools(what) {
        return;
    }
    let mut rng = Rng(powercut::seed(what));
    let mut rig = Rig::up();
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..8)
        .map(|n| {
            let (router, stop, out) = (rig.cluster.router.clone(), stop.clone(), attempts.clone());
            thread::spawn(move || writer(router, n, stop, out))
        })
        .collect();
    for cut in 0..CUTS {
        // A random moment: after some writes, and some milliseconds into the next ones.
        progress(&attempts, 10 + rng.below(60) as usize, &rig);
        thread::sleep(Duration::from_millis(rng.below(300)));
        let before = acked(&attempts);
        rig.cut_and_restart();
        eprintln!("cut {}: {} PUTs acknowledged so far", cut + 1, before);
    }
    progress(&attempts, 50, &rig);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client");
    }
    let attempts = attempts.lock().unwrap().clone();
    let last = attempts
        .iter()
        .filter_map(|a| a.acked.as_ref().map(|x| x.1))
        .max()
        .unwrap_or(0);
    let (code, out, err) = rig.cluster.wink("verify", &[]);
    assert_eq!(
        code, 0,
        "wink cluster verify after {CUTS} cuts: {out} {err}"
    );
    let (code, out, err) = rig.cluster.wink("status", &[]);
    assert_eq!(code, 0, "wink cluster status: {err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let checked = check_acked(&rig.cluster, &attempts, &status, PARTITIONS, last);
    eprintln!(
        "{CUTS} power cuts: {checked} acknowledged PUTs of {} read back byte-exact through the \
         router and from every owner",
        attempts.len()
    );
}
