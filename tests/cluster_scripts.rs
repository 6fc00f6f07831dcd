//! The loopback cluster's scripts (cluster/up, cluster/ctl, cluster/down) and `wink cluster` over
//! real nats-servers and HAProxy: a cluster whose nodes need a token, overlapping `cluster/ctl`
//! runs that must leave `cluster.json` true, a `cluster/down` that leaves no process behind, and
//! NATS servers started one by one after all of them stopped (docs/CLUSTER.md, § Commands).
#![cfg(feature = "cluster")]

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{cmdline, eventually, node_pid, running, signal, try_call, Cluster, D};
use wink::cluster::admin::Admin;
use wink::cluster::message::partition_of;

const TOKEN: &str = "the-scripts-test-token";

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

fn put(router: &str, title: &str, rev: u64, token: Option<&str>) -> Result<u16, String> {
    let url = format!("{router}/{D}/sys/key_rev_value/html/{title}/{rev}");
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "text/html")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b));
    }
    let body = format!("<p>{title} revision {rev}</p>");
    try_call(&agent(), "PUT", &url, &headers, Some(body.as_bytes())).map(|a| a.status)
}

/// Every process that cluster.json lists is either marked stopped (pid null) or runs with the
/// command line it was started with; and every nats-server and node running from the cluster's
/// directory is listed.
fn assert_cluster_json_true(cluster: &Cluster) {
    let state = cluster.state();
    let mut listed = Vec::new();
    let entries = state["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .chain(state["nats"].as_array().unwrap())
        .chain(std::iter::once(&state["haproxy"]));
    for e in entries {
        let Some(pid) = e["pid"].as_u64() else {
            continue;
        };
        let pid = pid as u32;
        let argv: Vec<String> = e["argv"]
            .as_array()
            .expect("argv beside a pid")
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert!(running(pid), "{} lists pid {pid}, which is gone", e["name"]);
        assert_eq!(
            cmdline(pid),
            Some(argv),
            "{}: pid {pid} is not ours",
            e["name"]
        );
        listed.push(pid);
    }
    for (pid, args) in cluster.processes() {
        let haproxy = args[0].ends_with("haproxy");
        // An HAProxy replaced by a reload may still be finishing; nothing else is unlisted.
        assert!(
            haproxy || listed.contains(&pid),
            "pid {pid} ({args:?}) runs but cluster.json does not list it:\n{state:#}"
        );
    }
}

/// Runs `cluster/ctl` actions at once; answers each one's success and stderr.
fn at_once(cluster: &Cluster, actions: &[(&str, &str)]) -> Vec<(bool, String)> {
    thread::scope(|s| {
        let runs: Vec<_> = actions
            .iter()
            .map(|(action, name)| s.spawn(move || cluster.try_ctl(action, name)))
            .collect();
        runs.into_iter()
            .map(|r| {
                let out = r.join().expect("a ctl run");
                (
                    out.status.success(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            })
            .collect()
    })
}

#[test]
fn scripts_with_a_token_run_serialized_and_down_leaves_nothing() {
    if !common::cluster::tools("the cluster scripts test") {
        return;
    }
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let token_arg = token_file.to_str().unwrap();
    let cluster = Cluster::up_with(3, 2, 8, &["--token-file", token_arg]);
    let router = cluster.router.clone();
    assert_eq!(cluster.state()["token_file"], token_arg);

    // Changes need the token, through HAProxy and at each node; reads do not.
    assert_eq!(put(&router, "Tok", 1, None), Ok(401));
    assert_eq!(put(&router, "Tok", 1, Some("not-the-token")), Ok(401));
    let (n1, _) = cluster.node("n1");
    assert_eq!(put(&n1, "Tok", 1, None), Ok(401));
    eventually("a PUT with the token is acknowledged", || {
        put(&router, "Tok", 1, Some(TOKEN)) == Ok(201)
    });
    let read = format!("{router}/{D}/sys/key_rev_value/html/Tok/1");
    eventually("the render reads back without a token", || {
        try_call(&agent(), "GET", &read, &[], None)
            .is_ok_and(|a| a.status == 200 && a.body == b"<p>Tok revision 1</p>")
    });

    // `wink cluster`'s requests that change something carry the token of cluster.json, or of
    // --token-file; its reads need none.
    let admin = Admin::open(&cluster.file, None).unwrap();
    let snapshot = format!("{n1}/_cluster/snapshot/html");
    let (status, body) = admin.call("POST".parse().unwrap(), &snapshot).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let wrong = secrets.path().join("wrong");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let outsider = Admin::open(&cluster.file, Some(&wrong)).unwrap();
    let (status, _) = outsider.call("POST".parse().unwrap(), &snapshot).unwrap();
    assert_eq!(status, 401);
    let (status, _) = outsider
        .call("GET".parse().unwrap(), &format!("{n1}/_cluster"))
        .unwrap();
    assert_eq!(status, 200);
    let (code, _, err) = cluster.wink("status", &["--token-file", "/nonexistent/token"]);
    assert_ne!(code, 0, "a token file that cannot be read is an error");
    assert!(err.contains("/nonexistent/token"), "{err}");

    // A node added to a protected cluster: the peer's snapshot needs the token.
    cluster.ctl("add", "n4");
    let (code, out, err) = cluster.wink("rebalance", &["--token-file", token_arg]);
    assert_eq!(code, 0, "rebalance: {out}{err}");
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(code, 0, "verify: {out}{err}");
    assert_cluster_json_true(&cluster);

    // Overlapping ctl runs whose outcome does not depend on their order: every one succeeds
    // and cluster.json lists what runs.
    cluster.ctl("kill", "n2");
    assert_eq!(
        node_pid(&cluster, "n2"),
        None,
        "a killed node is marked stopped"
    );
    let runs = at_once(&cluster, &[("start", "n2"), ("add", "n5"), ("kill", "n3")]);
    for (ok, err) in &runs {
        assert!(ok, "an overlapping ctl run failed: {err}");
    }
    assert_cluster_json_true(&cluster);
    let n2 = node_pid(&cluster, "n2").expect("n2 runs");
    assert!(cmdline(n2 as u32).is_some_and(|a| a.iter().any(|x| x.ends_with("/n2/data"))));
    assert!(node_pid(&cluster, "n5").is_some(), "n5 runs");
    assert_eq!(node_pid(&cluster, "n3"), None, "n3 stopped");

    // Overlapping runs whose outcome depends on their order: either may fail, but cluster.json
    // stays true.
    for _ in 0..2 {
        at_once(
            &cluster,
            &[("kill", "n2"), ("start", "n2"), ("start", "n3")],
        );
        assert_cluster_json_true(&cluster);
    }
    let (n5, _) = cluster.node("n5");
    assert_eq!(
        put(&n5, "Tok", 2, None),
        Ok(401),
        "an added node needs the token"
    );

    // `wink cluster replay` changes something on a node: it carries the token.
    let wrong_arg = wrong.to_str().unwrap();
    let (code, out, err) = cluster.wink("replay", &["n1", "--token-file", wrong_arg]);
    assert_ne!(code, 0, "replay with the wrong token: {out}");
    assert!(err.contains("401"), "{out}{err}");
    let (code, out, err) = cluster.wink("replay", &["n1"]);
    assert_eq!(code, 0, "replay with cluster.json's token: {out}{err}");

    // A process cluster.json has lost track of (a run killed between starting it and writing
    // cluster.json) is still ours to stop.
    let lost = cluster.state()["nodes"][0]["pid"].as_u64();
    let mut state = cluster.state();
    state["nodes"][0]["pid"] = serde_json::Value::Null;
    std::fs::write(&cluster.file, serde_json::to_vec(&state).unwrap()).unwrap();
    let before = cluster.processes();
    assert!(before.len() >= 5, "{before:?}");
    if let Some(pid) = lost {
        assert!(before.iter().any(|(p, _)| u64::from(*p) == pid));
    }
    let out = cluster.down();
    assert!(
        out.status.success(),
        "cluster/down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = cluster.processes();
    assert!(left.is_empty(), "cluster/down left {left:?}");
}

#[test]
fn nats_servers_start_one_by_one_after_all_stopped() {
    if !common::cluster::tools("the cluster scripts test") {
        return;
    }
    let cluster = Cluster::up(3, 2, 8);
    let router = cluster.router.clone();
    eventually("a first PUT is acknowledged", || {
        put(&router, "Outage", 1, None) == Ok(201)
    });
    for n in ["nats-1", "nats-2", "nats-3"] {
        cluster.ctl("stop", n);
    }
    let during = put(&router, "Outage", 2, None);
    assert!(
        during.as_ref().map_or(true, |s| *s >= 500),
        "a PUT without NATS: {during:?}"
    );
    // The first server back has no JetStream quorum; starting it must still succeed.
    cluster.ctl("start", "nats-1");
    cluster.ctl("start", "nats-2");
    // Two of three form a quorum: writes come back (the nodes reconnect, the stream elects a
    // leader). Bounded, and not a measure of speed.
    let started = Instant::now();
    let mut rev = 2;
    loop {
        rev += 1;
        let got = put(&router, "Outage", rev, None);
        if got == Ok(201) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "no PUT acknowledged within 180 s of two NATS servers back: {got:?}\n{}",
            cluster.log("n1")
        );
        thread::sleep(Duration::from_millis(500));
    }
    cluster.ctl("start", "nats-3");
    eventually("a PUT with all three servers back", || {
        rev += 1;
        put(&router, "Outage", rev, None) == Ok(201)
    });
}

#[test]
fn haproxy_ends_requests_that_a_frozen_node_took() {
    if !common::cluster::tools("the cluster scripts test") {
        return;
    }
    let cluster = Cluster::up(3, 2, 8);
    let router = cluster.router.clone();
    eventually("a first PUT is acknowledged", || {
        put(&router, "Frozen", 1, None) == Ok(201)
    });
    // Some of the titles below must be routed to n1 when it freezes: its partitions reach the
    // router's map once its lease is live (within seconds of the start).
    let titles: Vec<String> = (0..24).map(|i| format!("Frozen_{i}")).collect();
    eventually("the router sends some of the titles to n1", || {
        let map = cluster.router_map();
        titles.iter().any(|t| {
            let p = partition_of(D, t, 8);
            map.iter().any(|(q, node)| *q == p && node == "n1")
        })
    });
    let pid = node_pid(&cluster, "n1").expect("n1 runs");
    // Longer than HAProxy's server timeout (20 s) by far: a request that n1 took when it froze
    // must end while n1 is still frozen.
    let freeze = Duration::from_secs(50);
    signal(pid, "-STOP");
    let frozen_at = Instant::now();
    let answers: Vec<(Result<u16, String>, Duration)> = thread::scope(|s| {
        let runs: Vec<_> = titles
            .iter()
            .map(|t| {
                let url = format!("{router}/{D}/sys/key_rev_value/html/{t}");
                s.spawn(move || {
                    let got = try_call(&agent(), "GET", &url, &[], None).map(|a| a.status);
                    (got, frozen_at.elapsed())
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let thawed_after = frozen_at.elapsed();
    if thawed_after < freeze {
        thread::sleep(freeze - thawed_after);
    }
    signal(pid, "-CONT");
    for (got, after) in &answers {
        assert!(
            *after < freeze,
            "a request ended only after {after:?}, with n1 frozen for {freeze:?}: {got:?}"
        );
        // 404 from a live node; 504 from HAProxy for what n1 took; 503 from a node that found
        // no owner answering.
        assert!(
            matches!(got, Ok(404) | Ok(503) | Ok(504)),
            "a GET of a missing title while n1 froze: {got:?}"
        );
    }
    // The titles HAProxy hashed to n1 were sent there before its health checks failed.
    assert!(
        answers.iter().any(|(got, _)| *got == Ok(504)),
        "no request reached the frozen node: {answers:?}"
    );
}
