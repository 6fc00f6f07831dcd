//! A real cluster on loopback (3 nats-servers with JetStream, Wink nodes, HAProxy), driven by
//! real clients while the harness kills things: every acknowledged PUT must read back
//! byte-exact through HAProxy and from each of its owners, `wink cluster verify` must be clean,
//! and no unacknowledged PUT may be half-visible (docs/CLUSTER.md).
#![cfg(feature = "cluster")]

mod common;

use common::cluster::{check_acked, last_seq, verified_status, Cluster, Writers};

const PARTITIONS: u32 = 16;

#[test]
fn acknowledged_puts_survive_kills_leader_changes_and_a_new_node() {
    if !common::cluster::tools("the loopback cluster test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let writers = Writers::start(&cluster.router, 8);
    let progress = |more: usize| writers.progress(more);
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
    let attempts = writers.stop();
    let last_seq = last_seq(&attempts);
    let status = verified_status(&cluster);

    // n4 took partitions over.
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
    conditional_puts_race_to_one_winner(&cluster);
}

/// Clients racing to make one revision with `If-None-Match: *`, through the router to several
/// nodes: the conditions travel in the messages and every owner checks them at the same point of
/// the stream, so one gets 201 and the others 412, and a read after its sequence has its bytes.
fn conditional_puts_race_to_one_winner(cluster: &Cluster) {
    use common::server::{agent, call};
    let url = format!(
        "{}/{}/sys/key_rev_value/html/Conditional/1",
        cluster.router,
        common::cluster::D
    );
    let answers: Vec<(u16, Vec<u8>, Option<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let url = url.clone();
                scope.spawn(move || {
                    let body = format!("<p>client {i}</p>").into_bytes();
                    let a = call(
                        &agent(),
                        "PUT",
                        &url,
                        &[("Content-Type", "text/html"), ("If-None-Match", "*")],
                        Some(&body),
                    );
                    let seq = a.header("x-wink-seq").map(str::to_string);
                    (a.status, body, seq)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    let won: Vec<_> = answers.iter().filter(|a| a.0 == 201).collect();
    assert_eq!(won.len(), 1, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 412),
        "{statuses:?}"
    );
    let seq = won[0].2.clone().expect("x-wink-seq");
    let read = call(&agent(), "GET", &url, &[("x-wink-min-seq", &seq)], None);
    assert_eq!(
        (read.status, read.body.as_slice()),
        (200, won[0].1.as_slice())
    );
}
