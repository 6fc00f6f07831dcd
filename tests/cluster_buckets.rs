//! Buckets made through the API of a real cluster on loopback (3 nats-servers with JetStream,
//! Wink nodes, HAProxy): `PUT P` through the router makes the bucket for every node, again is
//! idempotent, with other settings is 409; its renders are written and read through the router
//! and from each owner; a node that was down when it was made, a node restarted, and a node added
//! after serve it (docs/CLUSTER.md § Buckets).
#![cfg(feature = "cluster")]

mod common;

use common::cluster::{eventually, get_json, owners, verified_status, Cluster, D};
use common::server::{agent, call, Answer};

const PARTITIONS: u32 = 8;

/// RESTBase's own bucket body, as its key_rev_value module sends it.
const RESTBASE: &[u8] = br#"{"valueType":"blob","keyType":"string","version":2,
    "compression":[{"algorithm":"deflate","block_size":256}],"updates":{"pattern":"timeseries"},
    "default_time_to_live":0,"retention_policy":{"type":"latest_hash","count":2,"grace_ttl":10}}"#;

fn p(base: &str, bucket: &str, tail: &str) -> String {
    format!("{base}/{D}/sys/key_rev_value/{bucket}{tail}")
}

fn put_bucket(base: &str, bucket: &str, body: &[u8]) -> Answer {
    call(
        &agent(),
        "PUT",
        &p(base, bucket, ""),
        &[("Content-Type", "application/json")],
        Some(body),
    )
}

/// PUTs `n` renders into `bucket` through the router: (title, body, stream sequence) of each.
fn put_renders(cluster: &Cluster, bucket: &str, n: usize) -> Vec<(String, Vec<u8>, u64)> {
    put_renders_at(&cluster.router, bucket, n)
}

/// PUTs `n` renders into `bucket` through `base`.
fn put_renders_at(base: &str, bucket: &str, n: usize) -> Vec<(String, Vec<u8>, u64)> {
    (0..n)
        .map(|i| {
            let title = format!("{bucket}_T{i}");
            let body = format!("<p>{bucket} render {i}</p>").into_bytes();
            let a = call(
                &agent(),
                "PUT",
                &p(base, bucket, &format!("/{title}/1")),
                &[("Content-Type", "text/html")],
                Some(&body),
            );
            assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
            let seq = a.header("x-wink-seq").expect("x-wink-seq").parse().unwrap();
            (title, body, seq)
        })
        .collect()
}

/// Each render reads back byte-exact through the router and from each owner of its partition
/// (asked as a forwarded read: the owner answers from its own store).
fn check_renders(cluster: &Cluster, bucket: &str, renders: &[(String, Vec<u8>, u64)]) {
    let status = verified_status(cluster);
    let min = renders.iter().map(|r| r.2).max().unwrap_or(0).to_string();
    for (title, body, _) in renders {
        let tail = format!("/{title}/1");
        let a = call(
            &agent(),
            "GET",
            &p(&cluster.router, bucket, &tail),
            &[("x-wink-min-seq", &min)],
            None,
        );
        assert_eq!(
            (a.status, &a.body),
            (200, body),
            "{bucket}{tail} through HAProxy"
        );
        for o in owners(&status, title, PARTITIONS) {
            let url = cluster.node(&o).0;
            let a = call(
                &agent(),
                "GET",
                &p(&url, bucket, &tail),
                &[("x-wink-min-seq", &min), ("x-wink-forwarded", "1")],
                None,
            );
            assert_eq!(
                (a.status, &a.body),
                (200, body),
                "{bucket}{tail} from owner {o}"
            );
        }
    }
}

/// Waits until node `name` answers `GET P` of `bucket` with its settings.
fn serves(cluster: &Cluster, name: &str, bucket: &str, renders: &str) {
    let url = p(&cluster.node(name).0, bucket, "");
    eventually(&format!("{name} serves bucket {bucket}"), || {
        get_json(&url).is_some_and(|j| j["settings"]["renders"] == renders)
    });
}

#[test]
fn a_bucket_made_through_the_router_is_served_by_every_node() {
    if !common::cluster::tools("the cluster buckets test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let nodes = ["n1", "n2", "n3"];

    // Unknown: a read and a write are 404, through the router and on a node.
    let missing = call(&agent(), "GET", &p(&cluster.router, "books", ""), &[], None);
    missing.problem(404, "not_found");
    let write = call(
        &agent(),
        "PUT",
        &p(&cluster.node("n1").0, "books", "/Early/1"),
        &[("Content-Type", "text/html")],
        Some(b"<p>early</p>"),
    );
    write.problem(404, "not_found");

    // Made through the router with RESTBase's body: 201, then every node serves it.
    let made = put_bucket(&cluster.router, "books", RESTBASE);
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    for n in nodes {
        serves(&cluster, n, "books", "latest:2:10");
    }
    // Again, through the router and on each node, with RESTBase's body or Wink's: 200.
    for base in [cluster.router.clone()]
        .into_iter()
        .chain(nodes.iter().map(|n| cluster.node(n).0))
    {
        for body in [RESTBASE, br#"{"renders":"latest:2:10"}"#, b""] {
            let again = put_bucket(&base, "books", body);
            assert_eq!(
                again.status,
                200,
                "{}",
                String::from_utf8_lossy(&again.body)
            );
            assert_eq!(again.json()["message"], "Exists.");
        }
        // Other settings: 409, as on one node, and the bucket is unchanged.
        let other = put_bucket(&base, "books", br#"{"renders":"all"}"#);
        let j = other.problem(409, "conflict");
        assert!(j["detail"].to_string().contains("latest:2:10"), "{j}");
    }
    // Clients racing to make one bucket through every node: the catalog's compare-and-set makes
    // it once (one 201, the others 200).
    let bases: Vec<String> = nodes.iter().map(|n| cluster.node(n).0).collect();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let base = bases[i % bases.len()].clone();
                scope.spawn(move || put_bucket(&base, "raced", br#"{"renders":"all"}"#).status)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [200, 200, 200, 200, 200, 201], "{statuses:?}");
    for n in nodes {
        serves(&cluster, n, "raced", "all");
    }

    // A body that is no bucket's settings: 400, and no bucket.
    let bad = put_bucket(&cluster.router, "nothing", br#"{"renders":"some"}"#);
    bad.problem(400, "bad_request");
    call(
        &agent(),
        "GET",
        &p(&cluster.router, "nothing", ""),
        &[],
        None,
    )
    .problem(404, "not_found");

    // Its renders, written through the router, read back through it and from every owner; the
    // declared bucket keeps working beside it.
    let books = put_renders(&cluster, "books", 24);
    let html = put_renders(&cluster, "html", 4);
    check_renders(&cluster, "books", &books);
    check_renders(&cluster, "html", &html);

    // A node that reads the catalog once an hour: a bucket made through another node reaches
    // it through the messages of its writes (opened before they are applied, never skipped).
    let config = std::path::PathBuf::from(cluster.state()["config"].as_str().unwrap());
    let original = std::fs::read(&config).unwrap();
    let mut slow: serde_json::Value = serde_json::from_slice(&original).unwrap();
    slow["catalog_read_ms"] = 3_600_000.into();
    std::fs::write(&config, serde_json::to_vec(&slow).unwrap()).unwrap();
    cluster.ctl("stop", "n2");
    cluster.ctl("start", "n2");
    std::fs::write(&config, &original).unwrap();
    let n1 = cluster.node("n1").0;
    let made = put_bucket(&n1, "quiet", b"");
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let quiet = put_renders_at(&n1, "quiet", 24);
    check_renders(&cluster, "quiet", &quiet);
    serves(&cluster, "n2", "quiet", "latest:1:86400");

    // A node down while a bucket is made: it serves the bucket, and the renders written to it
    // meanwhile, once it is back.
    cluster.ctl("kill", "n3");
    let made = put_bucket(&cluster.router, "late", br#"{"renders":"all"}"#);
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let late = put_renders(&cluster, "late", 16);
    cluster.ctl("start", "n3");
    serves(&cluster, "n3", "late", "all");
    check_renders(&cluster, "late", &late);

    // A node restarted after the buckets were made serves them, with what they hold.
    cluster.ctl("stop", "n2");
    cluster.ctl("start", "n2");
    serves(&cluster, "n2", "books", "latest:2:10");
    serves(&cluster, "n2", "late", "all");
    check_renders(&cluster, "books", &books);

    // A node added after serves them too, and once it owns partitions, from its own store.
    cluster.ctl("add", "n4");
    serves(&cluster, "n4", "books", "latest:2:10");
    serves(&cluster, "n4", "late", "all");
    let (code, out, err) = cluster.wink("rebalance", &[]);
    assert_eq!(code, 0, "wink cluster rebalance: {out} {err}");
    let more = put_renders(&cluster, "late", 4);
    check_renders(&cluster, "books", &books);
    check_renders(&cluster, "late", &late);
    check_renders(&cluster, "late", &more);
    let status = verified_status(&cluster);
    let n4_owns = (0..books.len())
        .filter(|i| owners(&status, &books[*i].0, PARTITIONS).contains(&"n4".to_string()))
        .count();
    assert!(
        n4_owns > 0,
        "n4 owns no partition of a books title: {status}"
    );
}
