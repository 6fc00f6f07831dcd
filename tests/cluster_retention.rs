//! A replica whose missing messages have left the stream (past its max age) cannot catch up by
//! replay: it says so and refuses to answer for its partitions (503) while no other owner can
//! give it a copy, never serving the holes as the cluster's state; once one can, it copies the
//! partitions from that owner (renders and take-downs) and replays the stream from there.
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::cluster::{eventually, get_json, owners, try_call, Cluster, D};

const PARTITIONS: u32 = 16;

#[test]
fn a_replica_behind_the_streams_retention_copies_its_partitions_from_another_owner() {
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
    let of_n2: Vec<String> = (0..400)
        .map(|i| format!("R{i}"))
        .filter(|t| owners(&status, t, PARTITIONS).contains(&"n2".to_string()))
        .collect();
    // `title`'s partition is also owned by `other`, which is stopped while n2 starts again.
    let title = of_n2[0].clone();
    let other = owners(&status, &title, PARTITIONS)
        .into_iter()
        .find(|o| o != "n2")
        .unwrap();
    let call = |method: &str, url: &str, body: Option<&[u8]>| {
        try_call(&agent, method, url, &[("Content-Type", "text/html")], body).unwrap()
    };
    let at = |t: &str| format!("{}/{D}/sys/key_rev_value/html/{t}", cluster.router);
    let put = |t: &str, rev: u64| {
        let a = call(
            "PUT",
            &format!("{}/{rev}", at(t)),
            Some(format!("<p>{t} {rev}</p>").as_bytes()),
        );
        assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
        a.header("x-wink-seq").unwrap().parse::<u64>().unwrap()
    };
    let (n2, _) = cluster.node("n2");
    let first = put(&title, 1);
    eventually("n2 applies the first write", || {
        get_json(&format!("{n2}/_cluster")).is_some_and(|s| s["scanned"].as_u64() >= Some(first))
    });
    cluster.ctl("kill", "n2");
    // What n2 misses: new revisions of 40 of its titles, a revision taken down, a whole title
    // taken down, a take-down lifted.
    let mut last = put(&title, 2);
    for t in &of_n2[1..41] {
        put(t, 1);
        last = put(t, 2);
    }
    let (down_rev, down_title, lifted) = (&of_n2[1], &of_n2[2], &of_n2[3]);
    for (url, method) in [
        (format!("{}/1", at(down_rev)), "DELETE"),
        (at(down_title), "DELETE"),
        (format!("{}/2", at(lifted)), "DELETE"),
        (format!("{}/2/_lift", at(lifted)), "POST"),
    ] {
        let a = call(method, &url, None);
        assert!(a.status < 300, "{method} {url}: {}", a.status);
        last = last.max(a.header("x-wink-seq").map_or(0, |s| s.parse().unwrap()));
    }
    let (other_url, _) = cluster.node(&other);
    eventually("the other owner applies everything", || {
        get_json(&format!("{other_url}/_cluster"))
            .is_some_and(|s| s["scanned"].as_u64() >= Some(last))
    });
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
    // No owner of `title`'s partition but n2 is up: n2 cannot be made whole, and says so.
    cluster.ctl("kill", &other);
    cluster.ctl("start", "n2");
    eventually("n2 says it is behind", || {
        get_json(&format!("{n2}/_cluster")).is_some_and(|s| {
            s["behind"]
                .as_str()
                .is_some_and(|w| w.contains("no other owner gave a copy"))
        })
    });
    let url = format!("{n2}/{D}/sys/key_rev_value/html/{title}");
    let a = try_call(&agent, "GET", &url, &[("x-wink-forwarded", "1")], None).unwrap();
    assert_eq!(a.status, 503, "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("behind the stream's retention"));
    // The other owner is back: n2 copies from it, then applies the stream.
    cluster.ctl("start", &other);
    eventually("n2 is whole again", || {
        get_json(&format!("{n2}/_cluster"))
            .is_some_and(|s| s["behind"].is_null() && s["ready"] == true)
    });
    let direct = |t: &str, rest: &str| {
        let url = format!("{n2}/{D}/sys/key_rev_value/html/{t}{rest}");
        try_call(&agent, "GET", &url, &[("x-wink-forwarded", "1")], None).unwrap()
    };
    for t in of_n2[..41].iter().filter(|t| *t != down_title) {
        let a = direct(t, "");
        assert_eq!(a.status, 200, "{t} from n2");
        let want = if t == lifted { 1 } else { 2 };
        assert!(
            a.header("etag").unwrap().starts_with(&format!("\"{want}/")),
            "{t}: {:?}",
            a.headers
        );
        assert_eq!(a.body, format!("<p>{t} {want}</p>").as_bytes(), "{t}");
    }
    assert_eq!(direct(down_rev, "/1").status, 404);
    assert_eq!(direct(down_title, "").status, 404);
    // The take-downs hold on n2: a PUT of a taken-down revision is refused by the cluster.
    let a = call(
        "PUT",
        &format!("{}/1", at(down_rev)),
        Some(b"<p>again</p>".as_slice()),
    );
    assert_eq!(a.status, 409, "{}", String::from_utf8_lossy(&a.body));
    assert!(
        cluster.log("n2").contains("copied from"),
        "n2's log names the copies"
    );
    // Copies are named by the node that made them; anything else is 4xx, no file touched.
    for (method, path, want) in [
        ("GET", "/_cluster/copy/html/html.1/0", 404),
        ("GET", "/_cluster/copy/html/..%2F..%2Fstore/0", 404),
        ("DELETE", "/_cluster/copy/html/html", 404),
        ("POST", "/_cluster/copy/No%20such", 400),
        ("GET", "/_cluster/copy/html", 405),
    ] {
        let a = try_call(&agent, method, &format!("{n2}{path}"), &[], None).unwrap();
        assert_eq!(a.status, want, "{method} {path}");
    }
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(code, 0, "wink cluster verify: {out} {err}");
}
