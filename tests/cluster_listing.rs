//! A domain's titles listed over a real cluster on loopback (3 nats-servers with JetStream, Wink
//! nodes, HAProxy): through each node and the router, page by page, the listing is every title
//! once, in order, whichever node serves each page, and while a node stops and the partitions
//! move between pages; a forged cursor, or one of another listing, is 400 (docs/CLUSTER.md §
//! Listings).
#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::cluster::{eventually, get_json, put_once, Cluster, D};
use common::server::{agent, call, try_call, Answer};
use wink::cluster::message::partition_of;

const PARTITIONS: u32 = 16;
const TITLES: usize = 120;

fn listing(base: &str, bucket: &str, limit: usize, next: Option<&str>) -> String {
    let mut url = format!("{base}/{D}/sys/key_rev_value/{bucket}/?limit={limit}");
    if let Some(n) = next {
        url.push_str("&next=");
        url.push_str(n);
    }
    url
}

/// One page from `base`: its titles and its cursor. A 503 (no owner of some partition answers
/// yet, while the placement changes) is asked again, as a client told to retry would, for a
/// bounded time; any other status fails the test.
fn page(base: &str, limit: usize, next: Option<&str>) -> (Vec<String>, Option<String>) {
    let url = listing(base, "html", limit, next);
    let started = Instant::now();
    loop {
        match try_call(&agent(), "GET", &url, &[], None) {
            Ok(a) if a.status == 200 => {
                let j = a.json();
                let items: Vec<String> = j["items"]
                    .as_array()
                    .expect("items")
                    .iter()
                    .map(|t| t.as_str().expect("a title").to_string())
                    .collect();
                assert!(items.len() <= limit, "GET {url}: {} items", items.len());
                let next = j["next"].as_str().map(str::to_string);
                assert!(next.is_some() || j.get("next").is_none(), "GET {url}: {j}");
                return (items, next);
            }
            Ok(a) if a.status == 503 && started.elapsed() < Duration::from_secs(60) => {}
            Ok(a) => panic!(
                "GET {url}: {} {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            ),
            Err(e) if started.elapsed() < Duration::from_secs(60) => {
                eprintln!("GET {url}: {e}; again");
            }
            Err(e) => panic!("GET {url}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The whole listing, page `i` asked of `bases[i % len]`, `between(i)` run before page `i`.
fn list_all(bases: &[String], limit: usize, mut between: impl FnMut(usize)) -> Vec<String> {
    let (mut all, mut next) = (Vec::new(), None);
    for i in 0.. {
        between(i);
        let (items, n) = page(&bases[i % bases.len()], limit, next.as_deref());
        all.extend(items);
        match n {
            Some(n) => next = Some(n),
            None => return all,
        }
        assert!(i < 10 * TITLES, "the listing does not end");
    }
    unreachable!()
}

#[test]
fn titles_are_listed_over_every_partition_whatever_serves_each_page() {
    if !common::cluster::tools("the cluster listing test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let a = agent();
    // Written out of order, so that no store holds them sorted.
    let mut expected: Vec<String> = (0..TITLES)
        .map(|i| format!("Page_{:05}", (i * 7919) % 10_007))
        .collect();
    for (i, t) in expected.iter().enumerate() {
        let put = put_once(&a, &cluster.router, 0, t.clone(), 1 + i as u64 % 3);
        assert!(put.acked.is_some(), "PUT {t} was not acknowledged");
    }
    expected.sort();
    let nodes: Vec<String> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| cluster.node(n).0)
        .collect();

    // Through the router: every title, once, in order (once the owners have applied them).
    let router = vec![cluster.router.clone()];
    eventually("the listing through the router holds every title", || {
        list_all(&router, 1000, |_| ()) == expected
    });
    // Through each node alone, a few titles a page.
    for n in &nodes {
        assert_eq!(
            list_all(std::slice::from_ref(n), 7, |_| ()),
            expected,
            "{n}"
        );
    }
    // Each page from another node: a cursor is any node's.
    assert_eq!(list_all(&nodes, 11, |_| ()), expected);
    // The single-node limit's edges: one title a page, and the whole listing in one.
    let (one, next) = page(&nodes[1], 1, None);
    assert_eq!(one, expected[..1]);
    assert!(next.is_some());
    let (whole, next) = page(&nodes[2], 1000, None);
    assert_eq!((whole, next), (expected.clone(), None));

    // A node stopped between pages: its partitions' other owners answer.
    let survivors = vec![nodes[0].clone(), nodes[1].clone(), cluster.router.clone()];
    let listed = list_all(&survivors, 9, |i| {
        if i == 3 {
            cluster.ctl("stop", "n3");
        }
    });
    assert_eq!(listed, expected, "with n3 stopped after the third page");
    cluster.ctl("start", "n3");

    // Partitions moved between pages (a node added, the map rebalanced onto it): the listing
    // goes on from the last title, served by the new node too.
    let listed = list_all(&nodes, 8, |i| {
        if i == 2 {
            cluster.ctl("add", "n4");
            let (code, out, err) = cluster.wink("rebalance", &[]);
            assert_eq!(code, 0, "wink cluster rebalance: {out} {err}");
        }
    });
    assert_eq!(
        listed, expected,
        "with the map rebalanced onto n4 after the second page"
    );
    let n4 = vec![cluster.node("n4").0, cluster.router.clone()];
    assert_eq!(list_all(&n4, 13, |_| ()), expected, "through n4");

    // A cursor edited by hand, or given for another bucket or domain, is 400 on any node.
    let (_, next) = page(&nodes[0], 5, None);
    let next = next.expect("a cursor");
    let mut forged = next.clone().into_bytes();
    forged[3] = if forged[3] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let made = call(
        &a,
        "PUT",
        &format!("{}/{D}/sys/key_rev_value/books", cluster.router),
        &[("Content-Type", "application/json")],
        Some(b""),
    );
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let other_domain = listing(&nodes[1], "html", 5, Some(&next)).replace(D, "de.wikipedia.org");
    for url in [
        listing(&nodes[1], "html", 5, Some(&forged)),
        listing(&nodes[2], "books", 5, Some(&next)),
        other_domain,
        listing(&nodes[0], "html", 5, Some("not-a-cursor")),
    ] {
        let got: Answer = call(&a, "GET", &url, &[], None);
        assert_eq!(
            got.status,
            400,
            "GET {url}: {}",
            String::from_utf8_lossy(&got.body)
        );
    }
    // The same cursor, untouched, still works there.
    let (items, _) = page(&nodes[1], 5, Some(&next));
    assert_eq!(items, expected[5..10]);

    // The owners' route: a partition's titles past a title, in order, from an owner; 503 from a
    // node that does not own the partition; 400 for a query out of bounds.
    let status = get_json(&format!("{}/_cluster", nodes[0])).expect("n1's status");
    let owned: Vec<u32> = status["owned"]
        .as_array()
        .expect("owned")
        .iter()
        .map(|p| p.as_u64().expect("a partition") as u32)
        .collect();
    let mine = owned[0];
    let foreign = (0..PARTITIONS)
        .find(|p| !owned.contains(p))
        .expect("n1 does not own every partition");
    let route = |partitions: &str, limit: &str, after: &str| {
        format!(
            "{}/_cluster/titles/html/{D}?partitions={partitions}&limit={limit}{after}",
            nodes[0]
        )
    };
    let of_mine: Vec<&String> = expected
        .iter()
        .filter(|t| partition_of(D, t, PARTITIONS) == mine)
        .collect();
    assert!(of_mine.len() > 2, "partition {mine} holds {of_mine:?}");
    // After the rebalance above n1 vouches again once it has caught up: until then, 503.
    let mut got = None;
    eventually("n1 answers for its partition", || {
        let a = call(&a, "GET", &route(&mine.to_string(), "1000", ""), &[], None);
        let ok = a.status == 200;
        got = Some(a);
        ok
    });
    let got = got.unwrap();
    assert_eq!(got.json(), serde_json::json!(of_mine));
    let after = format!("&after={}", of_mine[0]);
    let got = call(&a, "GET", &route(&mine.to_string(), "1", &after), &[], None);
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.json(), serde_json::json!([of_mine[1]]));
    let both = format!("{mine},{foreign}");
    let got = call(&a, "GET", &route(&both, "10", ""), &[], None);
    assert_eq!(got.status, 503, "{}", String::from_utf8_lossy(&got.body));
    let beyond = PARTITIONS.to_string();
    for url in [
        route(&mine.to_string(), "0", ""),
        route(&mine.to_string(), "1002", ""),
        route(&beyond, "10", ""),
        route("", "10", ""),
    ] {
        let got = call(&a, "GET", &url, &[], None);
        assert_eq!(
            got.status,
            400,
            "GET {url}: {}",
            String::from_utf8_lossy(&got.body)
        );
    }
}
