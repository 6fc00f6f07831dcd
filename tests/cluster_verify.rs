//! `wink cluster verify URL` on a real cluster on loopback (3 nats-servers, 3 Wink nodes,
//! HAProxy): the owners' digests over HTTP agree after writes through the router; a render
//! planted in one owner's store only and a title taken down in one owner's store only (both
//! written while that node was stopped) are each found and named, with the owner that holds
//! what; a node that does not own a partition refuses its digest (503).
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::cluster::{owners, put_once, wink_cluster, Cluster, D};
use wink::cluster::message::partition_of;
use wink::store::{Labels, Put, Store, StoreOptions};

const PARTITIONS: u32 = 4;

fn verify(url: &str) -> (i32, String, String) {
    wink_cluster("verify", url, &["--patience", "60"])
}

#[test]
fn verify_over_http_finds_a_planted_render_and_a_one_sided_take_down() {
    if !common::cluster::tools("the cluster verify test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let titles: Vec<String> = (0..12).map(|i| format!("Verify_{i}")).collect();
    for (i, t) in titles.iter().enumerate() {
        let a = put_once(&agent, &cluster.router, 0, t.clone(), 1 + i as u64);
        assert!(a.acked.is_some(), "PUT {t} was not acknowledged");
    }
    let (n1, _) = cluster.node("n1");
    let (code, out, err) = verify(&n1);
    assert_eq!(code, 0, "verify through n1: {out} {err}");
    assert!(out.contains("verified"), "{out}");

    let (code, out, err) = cluster.wink("status", &[]);
    assert_eq!(code, 0, "wink cluster status: {err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();

    // A node that does not own a partition answers 503 for its digest.
    let p = (0..PARTITIONS)
        .find(|p| {
            let owners = status["map"]["owners"][*p as usize].as_array().unwrap();
            owners.len() == 2 && !owners.iter().any(|o| o == "n1")
        })
        .expect("a partition n1 does not own");
    let url = format!("{n1}/_cluster/digest/html/{p}");
    let got = agent.get(&url).call();
    match got {
        Err(ureq::Error::Status(503, _)) => {}
        other => panic!("GET {url}: {other:?}, not 503"),
    }

    // The victim: an owner of the first title's partition; a planted title of that partition.
    let victim = owners(&status, &titles[0], PARTITIONS)[0].clone();
    let other = owners(&status, &titles[0], PARTITIONS)[1].clone();
    let part = partition_of(D, &titles[0], PARTITIONS);
    let planted = (0..)
        .map(|i| format!("Planted_{i}"))
        .find(|t| partition_of(D, t, PARTITIONS) == part)
        .unwrap();
    cluster.ctl("stop", &victim);
    {
        let (_, data) = cluster.node(&victim);
        let mut s = Store::open(&data.join("html"), &StoreOptions::writer()).unwrap();
        s.put(&Put {
            domain: D,
            title: &planted,
            rev: 7,
            tid: None,
            content_type: "text/html",
            labels: &Labels::NONE,
            value: b"<p>planted on one owner only</p>",
            historical: false,
        })
        .unwrap();
        s.take_down(D, &titles[0], None).unwrap();
    }
    cluster.ctl("start", &victim);

    let (code, out, err) = verify(&cluster.router);
    assert_eq!(code, 1, "verify after planting: {out} {err}");
    eprintln!("verify after planting:\n{out}");
    let line_of = |t: &str| {
        out.lines()
            .find(|l| l.contains(&format!("{D}/{t}:")))
            .unwrap_or_else(|| panic!("no difference named for {t}: {out}"))
            .to_string()
    };
    let planted_line = line_of(&planted);
    assert!(
        planted_line.contains(&format!("partition {part}"))
            && planted_line.contains(&format!("{other} holds nothing"))
            && planted_line.contains(&format!("{victim} holds 7/")),
        "{planted_line}"
    );
    let down_line = line_of(&titles[0]);
    assert!(
        down_line.contains(&format!("{victim} holds title taken down")),
        "{down_line}"
    );
    assert!(
        !down_line.contains(&format!("{other} holds title taken down"))
            && down_line.contains(&format!("{other} holds 1/")),
        "{down_line}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(" partition ")).count(),
        2,
        "exactly the two planted differences: {out}"
    );
    assert!(out.contains("2 differences"), "{out}");
}
