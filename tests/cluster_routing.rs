//! HAProxy routing each key straight to a live owner, over real nats-servers and HAProxy on
//! loopback (docs/CLUSTER.md § Routing straight to an owner): the router computes a request's
//! partition from its path as the nodes do (titles with percent-encoded bytes and slashes too),
//! the nodes keep its map naming live owners, and with an owner frozen the map moves to the
//! other owner, so reads are answered without a forward.
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::cluster::{eventually, node_pid, signal, try_call, Cluster, D};

const PARTITIONS: u32 = 16;

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

fn url(router: &str, title: &str) -> String {
    // Every byte but the unreserved ones percent-encoded: `/` in a title is `%2F`.
    let encoded: String = title
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("{router}/{D}/sys/key_rev_value/html/{encoded}")
}

fn titles() -> Vec<String> {
    let mut t: Vec<String> = (0..90).map(|i| format!("Routed_{i}")).collect();
    t.extend((0..20).map(|i| format!("Café_{i}")));
    t.extend((0..10).map(|i| format!("AC/DC_{i}")));
    t
}

/// GETs every title through the router; answers how many were forwarded by the node that took
/// them. Every answer must be the title's own body.
fn forwarded(router: &str, titles: &[String]) -> usize {
    let mut forwarded = 0;
    for t in titles {
        let a = try_call(&agent(), "GET", &url(router, t), &[], None)
            .unwrap_or_else(|e| panic!("GET {t}: {e}"));
        assert_eq!(
            a.status,
            200,
            "GET {t}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.body, format!("<p>{t}</p>").as_bytes(), "GET {t}");
        if a.headers.iter().any(|(k, _)| k == "x-wink-forwarded-to") {
            forwarded += 1;
        }
    }
    forwarded
}

#[test]
fn the_router_sends_each_key_to_a_live_owner() {
    if !common::cluster::tools("the cluster routing test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let router = cluster.router.clone();
    let titles = titles();
    for t in &titles {
        let body = format!("<p>{t}</p>");
        eventually(&format!("PUT {t} is acknowledged"), || {
            try_call(
                &agent(),
                "PUT",
                &format!("{}/1", url(&router, t)),
                &[("Content-Type", "text/html")],
                Some(body.as_bytes()),
            )
            .map(|a| a.status)
                == Ok(201)
        });
    }

    // Steady state: the map names an owner of every partition, and at most 2% of reads are
    // forwarded (none, when HAProxy's partition is the nodes').
    let state = cluster.state();
    let url_of = |name: &str| -> String {
        let nodes = state["nodes"].as_array().unwrap();
        let n = nodes.iter().find(|n| n["name"] == name).expect("a node");
        n["url"].as_str().unwrap().to_string()
    };
    // Whether `node` says it owns partition p.
    let owns = |node: &str, p: u32| -> bool {
        let s = common::cluster::get_json(&format!("{}/_cluster", url_of(node)))
            .unwrap_or_else(|| panic!("{node}'s status"));
        s["owned"]
            .as_array()
            .expect("owned")
            .iter()
            .any(|o| o.as_u64() == Some(p.into()))
    };
    let map = cluster.router_map();
    assert_eq!(map.len(), PARTITIONS as usize, "{map:?}");
    for (p, node) in &map {
        assert!(owns(node, *p), "partition {p} routed to {node}");
    }
    let n = titles.len();
    let share = forwarded(&router, &titles);
    assert!(share * 50 <= n, "{share} of {n} reads forwarded");

    // An owner frozen: once its lease has lapsed, the nodes point its partitions at the other
    // owner, and reads through the router are answered without a forward again.
    let n1 = node_pid(&cluster, "n1").expect("n1 runs");
    signal(n1, "-STOP");
    let moved = std::panic::catch_unwind(|| {
        eventually("the map names no frozen node", || {
            cluster.router_map().iter().all(|(_, node)| node != "n1")
        });
        let map = cluster.router_map();
        assert_eq!(map.len(), PARTITIONS as usize, "{map:?}");
        for (p, node) in &map {
            assert!(owns(node, *p), "partition {p} routed to {node}");
        }
        forwarded(&router, &titles)
    });
    signal(n1, "-CONT");
    let share = moved.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(
        share * 50 <= n,
        "{share} of {n} reads forwarded with n1 frozen"
    );

    // Thawed, n1 takes its partitions back.
    eventually("the map names n1 again", || {
        cluster
            .router_map()
            .iter()
            .any(|(p, node)| node == "n1" && owns(node, *p))
    });
}
