//! Title listings of the whole cluster over real nats-servers and HAProxy on loopback
//! (docs/CLUSTER.md § Read): `GET P/` through the router or any node pages over every
//! partition in key order, a cursor one node gave is taken by the others, a listing goes on
//! across an owner frozen between its pages, and a forged or foreign cursor is 400.
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::cluster::{enc, eventually, node_pid, signal, try_call, Cluster, D};

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

fn listing(base: &str) -> String {
    format!("{base}/{D}/sys/key_rev_value/html/")
}

/// One page: (titles, next cursor), or the status of a failed answer.
fn page(
    base: &str,
    limit: usize,
    next: Option<&str>,
) -> Result<(Vec<String>, Option<String>), u16> {
    let mut url = format!("{}?limit={limit}", listing(base));
    if let Some(n) = next {
        url.push_str(&format!("&next={}", enc(n)));
    }
    let a = try_call(&agent(), "GET", &url, &[], None).map_err(|_| 0u16)?;
    if a.status != 200 {
        return Err(a.status);
    }
    let v: serde_json::Value = serde_json::from_slice(&a.body).expect("JSON");
    let items = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    Ok((items, v["next"].as_str().map(str::to_string)))
}

/// A whole listing, page `i` asked of `bases[i % bases.len()]`; `between(i)` runs after page i.
fn list_all(bases: &[String], limit: usize, mut between: impl FnMut(usize)) -> Vec<String> {
    let mut all = Vec::new();
    let mut next: Option<String> = None;
    for i in 0.. {
        let base = &bases[i % bases.len()];
        let mut got = None;
        eventually(&format!("page {i} from {base}"), || {
            got = page(base, limit, next.as_deref()).ok();
            got.is_some()
        });
        let (items, n) = got.unwrap();
        assert!(
            items.len() <= limit,
            "{} titles in a page of {limit}",
            items.len()
        );
        all.extend(items);
        between(i);
        match n {
            Some(n) => next = Some(n),
            None => break,
        }
    }
    all
}

#[test]
fn a_title_listing_pages_over_the_whole_cluster_in_key_order() {
    if !common::cluster::tools("the cluster listings test") {
        return;
    }
    let cluster = Cluster::up(3, 2, 16);
    let router = cluster.router.clone();
    let mut titles: Vec<String> = (0..80).map(|i| format!("Listed_{i:03}")).collect();
    titles.extend((0..6).map(|i| format!("Café_{i}")));
    titles.extend((0..4).map(|i| format!("AC/DC_{i}")));
    for t in &titles {
        let url = format!("{}{}/1", listing(&router), enc(t));
        let body = format!("<p>{t}</p>");
        eventually(&format!("PUT {t}"), || {
            try_call(
                &agent(),
                "PUT",
                &url,
                &[("Content-Type", "text/html")],
                Some(body.as_bytes()),
            )
            .map(|a| a.status)
                == Ok(201)
        });
    }
    titles.sort();
    let state = cluster.state();
    let nodes: Vec<String> = state["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["url"].as_str().unwrap().to_string())
        .collect();

    // Through the router, and through each node alone: the same titles, once each, in order.
    // A 201 waits for one owner's apply, and a listing asks one owner of each partition: the
    // other may still be applying, so the first listing is awaited.
    eventually("the router lists every title", || {
        list_all(std::slice::from_ref(&router), 7, |_| {}) == titles
    });
    for base in std::iter::once(&router).chain(&nodes) {
        let got = list_all(std::slice::from_ref(base), 7, |_| {});
        assert_eq!(got, titles, "listing through {base}");
    }
    // Each page from another node: every node takes the cursor another gave.
    assert_eq!(
        list_all(&nodes, 11, |_| {}),
        titles,
        "pages from n1, n2, n3 in turn"
    );

    // An owner frozen after the first page: the rest is listed by the other owners.
    let n1 = node_pid(&cluster, "n1").expect("n1 runs");
    let others = vec![nodes[1].clone(), nodes[2].clone()];
    let frozen = std::panic::catch_unwind(|| {
        list_all(&others, 9, |i| {
            if i == 0 {
                signal(n1, "-STOP");
            }
        })
    });
    signal(n1, "-CONT");
    let got = frozen.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert_eq!(got, titles, "listing across a frozen owner");

    // A cursor edited by hand, or one given for another domain's listing, is refused.
    let (_, next) = page(&router, 5, None).expect("a first page");
    let next = next.expect("more than 5 titles");
    let mut forged = next.clone();
    forged.replace_range(0..1, if next.starts_with('A') { "B" } else { "A" });
    assert_eq!(page(&router, 5, Some(&forged)), Err(400), "a forged cursor");
    let other = format!(
        "{router}/de.wikipedia.org/sys/key_rev_value/html/?next={}",
        enc(&next)
    );
    let a = try_call(&agent(), "GET", &other, &[], None).expect("an answer");
    assert_eq!(a.status, 400, "another domain's cursor");
}
