//! A replica whose missing messages have left the stream (past its max age) cannot catch up by
//! replay: it must say so, refuse to answer for its partitions (503), and never serve the
//! holes as if they were the cluster's state.
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::cluster::{eventually, get_json, try_call, Cluster, D};
use wink::cluster::message::partition_of;

const PARTITIONS: u32 = 16;

#[test]
fn a_replica_behind_the_streams_retention_says_so_and_refuses() {
    if !common::cluster::tools("the cluster retention test") {
        return;
    }
    // Messages live 2 seconds in this cluster's stream.
    let cluster = Cluster::up_with(3, 2, PARTITIONS, &["--stream-max-age", "2"]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let (code, out, _) = cluster.wink("status", &[]);
    assert_eq!(code, 0);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let owned_by_n2 = |t: &str| {
        let p = partition_of(D, t, PARTITIONS) as usize;
        status["map"]["owners"][p]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "n2")
    };
    let title = (0..100)
        .map(|i| format!("R{i}"))
        .find(|t| owned_by_n2(t))
        .unwrap();
    let put = |rev: u64| {
        let url = format!(
            "{}/{D}/sys/key_rev_value/html/{title}/{rev}",
            cluster.router
        );
        let a = try_call(
            &agent,
            "PUT",
            &url,
            &[("Content-Type", "text/html")],
            Some(b"<p/>"),
        )
        .unwrap();
        assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
        a.header("x-wink-seq").unwrap().parse::<u64>().unwrap()
    };
    let (n2, _) = cluster.node("n2");
    let first = put(1);
    eventually("n2 applies the first write", || {
        get_json(&format!("{n2}/_cluster")).is_some_and(|s| s["scanned"].as_u64() >= Some(first))
    });
    cluster.ctl("kill", "n2");
    put(2);
    // Wait until the stream has dropped what n2 missed.
    let nats = cluster.state()["nats"][0]["monitor"]
        .as_str()
        .unwrap()
        .to_string();
    eventually("the stream expires its messages", || {
        get_json(&format!("{nats}/jsz?streams=true")).is_some_and(|j| {
            j["account_details"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| {
                    a["stream_detail"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["name"] == "WINK" && s["state"]["messages"] == 0)
                })
        })
    });
    cluster.ctl("start", "n2");
    eventually("n2 says it is behind", || {
        get_json(&format!("{n2}/_cluster")).is_some_and(|s| {
            s["behind"]
                .as_str()
                .is_some_and(|w| w.contains("re-snapshot"))
        })
    });
    let url = format!("{n2}/{D}/sys/key_rev_value/html/{title}");
    let a = try_call(&agent, "GET", &url, &[("x-wink-forwarded", "1")], None).unwrap();
    assert_eq!(a.status, 503, "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("re-snapshot"));
    // Through the router the other owner answers, with the revision n2 missed.
    let latest = format!("{}/{D}/sys/key_rev_value/html/{title}", cluster.router);
    let a = try_call(&agent, "GET", &latest, &[], None).unwrap();
    assert_eq!(a.status, 200);
    assert!(
        a.header("etag").unwrap().starts_with("\"2/"),
        "{:?}",
        a.headers
    );
}
