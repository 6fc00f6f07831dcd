//! `wink serve` through a real HTTP client: every route with its statuses, headers and bodies;
//! out-of-order writes; paging; as-of reads; take-downs; bad input that changes nothing; and
//! read-your-writes under concurrent puts.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use common::server::{agent, call, create_bucket, files, get, metric, put, Answer, Server, D};

fn etag_of(a: &Answer) -> String {
    a.header("etag").expect("an ETag").to_string()
}

#[test]
fn routes_statuses_headers_and_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();

    // Buckets: created, exists, other settings, bad settings, not JSON.
    let a = call(&ag, "PUT", &s.p("html", ""), &[], None);
    assert_eq!(
        (a.status, a.json()["message"].as_str()),
        (201, Some("Created."))
    );
    let a = call(&ag, "PUT", &s.p("html", ""), &[], None);
    assert_eq!(
        (a.status, a.json()["message"].as_str()),
        (200, Some("Exists."))
    );
    let policy = r#"{"revisionRetentionPolicy":{"type":"latest","count":1,"grace_ttl":86400}}"#;
    let json = [("Content-Type", "application/json")];
    let a = call(&ag, "PUT", &s.p("html", ""), &json, Some(policy.as_bytes()));
    assert_eq!(a.status, 200, "the defaults are latest:1:86400");
    let a = call(
        &ag,
        "PUT",
        &s.p("html", ""),
        &json,
        Some(br#"{"renders":"all"}"#),
    );
    let j = a.problem(409, "conflict");
    assert!(j["detail"]
        .as_str()
        .unwrap()
        .contains("renders all (the bucket has latest:1:86400)"));
    let a = call(
        &ag,
        "PUT",
        &s.p("x", ""),
        &json,
        Some(br#"{"renders":"sometimes"}"#),
    );
    a.problem(400, "bad_request");
    let a = call(
        &ag,
        "PUT",
        &s.p("x", ""),
        &[("Content-Type", "text/plain")],
        Some(b"{}"),
    );
    a.problem(415, "unsupported_media_type");
    let a = get(&ag, &s.p("x", ""));
    a.problem(404, "not_found");
    create_bucket(&s, "all", r#"{"renders":"all","revisions":"all"}"#);
    let a = get(&ag, &s.p("all", ""));
    assert_eq!(a.json()["settings"]["renders"], "all");
    assert_eq!(a.json()["settings"]["revisions"], "all");

    // Out-of-order writes: revision 1001, then 1000; each reads back with its own ETag.
    let html = "text/html; charset=utf-8";
    let a1001 = put(&ag, &s.p("all", "/Main_Page/1001"), html, b"<p>1001</p>");
    assert_eq!(a1001.status, 201);
    let body = a1001.json();
    assert_eq!(
        (body["message"].as_str(), body["rev"].as_u64()),
        (Some("Created."), Some(1001))
    );
    let tid1001 = body["tid"].as_str().unwrap().to_string();
    assert_eq!(etag_of(&a1001), format!("\"1001/{tid1001}\""));
    let a1000 = put(&ag, &s.p("all", "/Main_Page/1000"), html, b"<p>1000</p>");
    assert_eq!(a1000.status, 201);
    let latest = get(&ag, &s.p("all", "/Main_Page"));
    assert_eq!(
        (latest.status, latest.body.as_slice()),
        (200, &b"<p>1001</p>"[..])
    );
    assert_eq!(latest.header("content-type"), Some(html));
    assert_eq!(latest.header("content-length"), Some("11"));
    assert_eq!(etag_of(&latest), etag_of(&a1001));
    assert!(latest.header("last-modified").unwrap().ends_with(" GMT"));
    let r1000 = get(&ag, &s.p("all", "/Main_Page/1000"));
    assert_eq!(
        (r1000.body.as_slice(), etag_of(&r1000)),
        (&b"<p>1000</p>"[..], etag_of(&a1000))
    );
    let by_tid = get(&ag, &s.p("all", &format!("/Main_Page/1001/{tid1001}")));
    assert_eq!(by_tid.body, b"<p>1001</p>");
    // HEAD: the headers, no body.
    let head = call(&ag, "HEAD", &s.p("all", "/Main_Page"), &[], None);
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-length"), Some("11"));
    assert_eq!(etag_of(&head), etag_of(&a1001));
    // If-None-Match with the current ETag: 304.
    let tag = etag_of(&a1001);
    let a = call(
        &ag,
        "GET",
        &s.p("all", "/Main_Page"),
        &[("If-None-Match", &tag)],
        None,
    );
    assert_eq!((a.status, a.body.len()), (304, 0));
    assert_eq!(a.header("etag"), Some(tag.as_str()));
    let a = call(
        &ag,
        "GET",
        &s.p("all", "/Main_Page"),
        &[("If-None-Match", "\"1/x\"")],
        None,
    );
    assert_eq!(a.status, 200);
    // A tid given by the client; no Content-Type: application/octet-stream.
    let tid = "6fbb6100-e8e2-11d0-a100-2d87cd8ddeb8";
    let a = call(
        &ag,
        "PUT",
        &s.p("all", &format!("/Main_Page/999/{tid}")),
        &[],
        Some(b"x"),
    );
    assert_eq!((a.status, a.json()["tid"].as_str()), (201, Some(tid)));
    let a = get(&ag, &s.p("all", &format!("/Main_Page/999/{tid}")));
    assert_eq!(a.header("content-type"), Some("application/octet-stream"));
    // The tid's time, 1997-06-19 20:27:22.85 UTC (worked out independently of the server).
    assert_eq!(
        a.header("last-modified"),
        Some("Thu, 19 Jun 1997 20:27:22 GMT")
    );

    // A title with '/', spaces and non-ASCII, as one percent-encoded segment.
    let a = put(&ag, &s.p("all", "/AC%2FDC%20%C3%BC/5"), html, b"acdc");
    assert_eq!(a.status, 201);
    assert_eq!(get(&ag, &s.p("all", "/AC%2FDC%20%C3%BC")).body, b"acdc");

    // Listings.
    let a = get(&ag, &s.p("all", "/Main_Page/"));
    let items = a.json()["items"].as_array().unwrap().clone();
    let revs: Vec<u64> = items
        .iter()
        .map(|i| i["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revs, [1001, 1000, 999]);
    assert_eq!(items[0]["state"], "current");
    assert_eq!(items[0]["size"], 11);
    assert_eq!(items[0]["content_type"], html);
    assert!(a.json().get("next").is_none());
    let a = get(&ag, &s.p("all", "/Main_Page/?limit=2"));
    let next = a.json()["next"].as_str().unwrap().to_string();
    let a = get(
        &ag,
        &s.p("all", &format!("/Main_Page/?limit=2&next={next}")),
    );
    assert_eq!(a.json()["items"][0]["revision"], 999);
    let titles = get(&ag, &s.p("all", "/")).json();
    let titles: BTreeSet<&str> = titles["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(titles, BTreeSet::from(["Main_Page", "AC/DC ü"]));
    assert!(
        get(&ag, &s.url("/de.wikipedia.org/sys/key_rev_value/all/")).json()["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    for bad in [
        "/?limit=0",
        "/?limit=1001",
        "/?limit=x",
        "/?next=zz",
        "/Main_Page/?next=1_x",
    ] {
        get(&ag, &s.p("all", bad)).problem(400, "bad_request");
    }

    // As-of reads, by RFC 3339 and by seconds.
    let a = get(&ag, &s.p("all", "/Main_Page?as_of=1997-06-19T20:27:23Z"));
    assert_eq!((a.status, a.body.as_slice()), (200, &b"x"[..]));
    let a = get(
        &ag,
        &s.p("all", "/Main_Page?as_of=1997-06-19T22:27:22.9%2B02:00"),
    );
    assert_eq!(
        (a.status, a.body.as_slice()),
        (200, &b"x"[..]),
        "an offset, a fraction"
    );
    let a = get(&ag, &s.p("all", "/Main_Page?as_of=866752042"));
    a.problem(404, "not_found");
    assert_eq!(
        get(&ag, &s.p("all", "/Main_Page?as_of=866752043")).body,
        b"x"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let a = get(&ag, &s.p("all", &format!("/Main_Page?as_of={}", now + 5)));
    assert_eq!(a.body, b"<p>1001</p>");
    get(&ag, &s.p("all", "/Main_Page?as_of=yesterday")).problem(400, "bad_request");
    get(&ag, &s.p("all", "/Main_Page/1000?as_of=5")).problem(400, "bad_request");

    // Take-downs: a revision, then the title; puts refused until lifted.
    let a = call(&ag, "DELETE", &s.p("all", "/Main_Page/1001"), &[], None);
    assert_eq!((a.status, a.json()["removed"].as_u64()), (200, Some(1)));
    get(&ag, &s.p("all", "/Main_Page/1001")).problem(404, "not_found");
    assert_eq!(get(&ag, &s.p("all", "/Main_Page")).body, b"<p>1000</p>");
    let j = put(&ag, &s.p("all", "/Main_Page/1001"), html, b"again").problem(409, "conflict");
    assert!(j["detail"].as_str().unwrap().contains("taken down"), "{j}");
    let a = call(&ag, "POST", &s.p("all", "/Main_Page/1001/_lift"), &[], None);
    assert_eq!((a.status, a.json()["lifted"].as_bool()), (200, Some(true)));
    let a = call(&ag, "POST", &s.p("all", "/Main_Page/1001/_lift"), &[], None);
    assert_eq!(a.json()["lifted"], false);
    assert_eq!(
        put(&ag, &s.p("all", "/Main_Page/1001"), html, b"again").status,
        201
    );
    let a = call(&ag, "DELETE", &s.p("all", "/Main_Page"), &[], None);
    assert_eq!((a.status, a.json()["removed"].as_u64()), (200, Some(3)));
    get(&ag, &s.p("all", "/Main_Page")).problem(404, "not_found");
    put(&ag, &s.p("all", "/Main_Page/2000"), html, b"new").problem(409, "conflict");
    let a = call(&ag, "POST", &s.p("all", "/Main_Page/_lift"), &[], None);
    assert_eq!(a.json()["lifted"], true);
    assert_eq!(
        put(&ag, &s.p("all", "/Main_Page/2000"), html, b"new").status,
        201
    );

    // Methods a route does not take, paths that are nothing.
    let a = call(&ag, "PATCH", &s.p("all", "/Main_Page"), &[], None);
    a.problem(405, "method_not_allowed");
    assert_eq!(a.header("allow"), Some("GET, HEAD, DELETE"));
    let a = call(
        &ag,
        "DELETE",
        &s.p("all", &format!("/Main_Page/999/{tid}")),
        &[],
        None,
    );
    assert_eq!((a.status, a.header("allow")), (405, Some("GET, HEAD, PUT")));
    call(&ag, "GET", &s.p("all", "/Main_Page/_lift"), &[], None).problem(405, "method_not_allowed");
    call(&ag, "POST", &s.url("/metrics"), &[], None).problem(405, "method_not_allowed");
    get(&ag, &s.url("/")).problem(404, "not_found");
    get(&ag, &s.url("/en.wikipedia.org/sys/other/all/x")).problem(404, "not_found");
    let j = get(&ag, &s.p("nope", "/T")).problem(404, "not_found");
    assert_eq!(j["method"], "get");
    assert_eq!(j["uri"], format!("/{D}/sys/key_rev_value/nope/T"));

    // Health and metrics.
    let h = get(&ag, &s.url("/_health"));
    assert_eq!((h.status, h.json()["status"].as_str()), (200, Some("ok")));
    assert_eq!(h.json()["buckets"]["all"]["status"], "ok");
    assert!(h.json()["buckets"]["html"]["containers"].as_u64().unwrap() >= 1);
    let m = get(&ag, &s.url("/metrics"));
    assert!(m
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(m.body).unwrap();
    for needle in [
        "wink_http_requests_total{route=\"put\",status=\"201\"}",
        "wink_http_requests_total{route=\"get_latest\",status=\"404\"}",
        "wink_http_requests_total{route=\"put\",status=\"409\"} 2",
        "wink_http_request_duration_seconds_bucket{route=\"get_latest\",le=\"+Inf\"}",
        "wink_group_commit_batch_puts_bucket{bucket=\"all\",le=\"+Inf\"}",
        "wink_group_commit_batch_puts_count{bucket=\"all\"}",
        "wink_http_request_bytes_total",
        "wink_http_response_bytes_total",
        "wink_maintenance_rounds_total{bucket=\"all\"}",
        "wink_http_connections_open",
        "wink_http_inflight_bytes 0\n",
        "wink_http_inflight_limit_bytes 536870912\n",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

#[test]
fn paging_through_2500_renders_visits_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    create_bucket(&s, "b", r#"{"renders":"all","revisions":"all"}"#);
    // 16 clients at once: their puts share commits.
    let threads: Vec<_> = (0..16u64)
        .map(|c| {
            let url = s.p("b", "/Long");
            std::thread::spawn(move || {
                let ag = agent();
                (0..2500u64)
                    .filter(|i| i % 16 == c)
                    .map(|i| {
                        let a = put(
                            &ag,
                            &format!("{url}/{}", i / 5),
                            "text/html",
                            format!("{i}").as_bytes(),
                        );
                        assert_eq!(a.status, 201);
                        a.json()["tid"].as_str().unwrap().to_string()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let stored: BTreeSet<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(stored.len(), 2500);
    let ag = agent();
    let mut seen = Vec::new();
    let mut next: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &next {
            Some(n) => s.p("b", &format!("/Long/?limit=100&next={n}")),
            None => s.p("b", "/Long/?limit=100"),
        };
        let page = get(&ag, &url).json();
        pages += 1;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 100);
        seen.extend(items.iter().map(|i| i["tid"].as_str().unwrap().to_string()));
        match page.get("next").and_then(|n| n.as_str()) {
            Some(n) => next = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 25);
    assert_eq!(seen.len(), 2500, "no render twice");
    assert_eq!(
        seen.into_iter().collect::<BTreeSet<_>>(),
        stored,
        "every render once"
    );
    // The batch sizes show commits shared by several puts.
    let text = String::from_utf8(get(&ag, &s.url("/metrics")).body).unwrap();
    let count = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{bucket=\"b\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let (commits, puts) = (
        count("wink_group_commit_batch_puts_count"),
        count("wink_group_commit_batch_puts_sum"),
    );
    assert_eq!(puts, 2500.0);
    assert!(commits < 2500.0, "{commits} commits for 2500 puts");
}

#[test]
fn bad_input_is_4xx_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let token_arg = token.to_str().unwrap();
    let s = Server::start(
        &root,
        &[
            "--token-file",
            token_arg,
            "--max-body",
            "1000",
            "--maintenance-interval",
            "0",
        ],
    );
    let auth = [("Authorization", "Bearer t0ken")];
    let ag = agent();
    let a = call(&ag, "PUT", &s.p("b", ""), &auth, None);
    assert_eq!(a.status, 201);
    let a = call(
        &ag,
        "PUT",
        &s.p("b", "/T/1"),
        &[auth[0], ("Content-Type", "text/html")],
        Some(b"one"),
    );
    assert_eq!(a.status, 201);
    let before = files(&root);
    let long = "t".repeat(1025);
    // (method, URL, headers, body, status, problem type)
    type Case<'a> = (
        &'a str,
        String,
        Vec<(&'a str, &'a str)>,
        Option<Vec<u8>>,
        u16,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "PUT",
            s.p("b", "/T/2"),
            vec![],
            Some(b"x".to_vec()),
            401,
            "unauthorized",
        ),
        (
            "PUT",
            s.p("b", "/T/2"),
            vec![("Authorization", "Bearer t0ke")],
            Some(b"x".to_vec()),
            401,
            "unauthorized",
        ),
        (
            "PUT",
            s.p("b", "/T/2"),
            vec![("Authorization", "t0ken")],
            Some(b"x".to_vec()),
            401,
            "unauthorized",
        ),
        ("DELETE", s.p("b", "/T"), vec![], None, 401, "unauthorized"),
        (
            "POST",
            s.p("b", "/T/_lift"),
            vec![],
            None,
            401,
            "unauthorized",
        ),
        ("PUT", s.p("c", ""), vec![], None, 401, "unauthorized"),
        (
            "PUT",
            s.p("b", "/T/x1"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/-1"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/99999999999999999999999"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/1/not-a-tid"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/1/6ba7b810-9dad-41d1-80b4-00c04fd430c8"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/%FF%FE/1"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/a%00b/1"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", &format!("/{long}/1")),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/2"),
            auth.to_vec(),
            Some(Vec::new()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/2"),
            auth.to_vec(),
            Some(vec![b'x'; 1001]),
            413,
            "payload_too_large",
        ),
        (
            "PUT",
            s.p("nope", "/T/2"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            404,
            "not_found",
        ),
        (
            "PUT",
            s.p("B", "/T/2"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("%2E%2E%2Fescape", ""),
            auth.to_vec(),
            None,
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p(&"b".repeat(65), ""),
            auth.to_vec(),
            None,
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", ""),
            auth.to_vec(),
            Some(b"{".to_vec()),
            415,
            "unsupported_media_type",
        ),
        (
            "PUT",
            s.url("/a%2Fb/sys/key_rev_value/b/T/1"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            400,
            "bad_request",
        ),
        (
            "PUT",
            s.p("b", "/T/1/_lift"),
            auth.to_vec(),
            Some(b"x".to_vec()),
            405,
            "method_not_allowed",
        ),
        (
            "DELETE",
            s.p("b", "/T/1/6fbb6100-e8e2-11d0-a100-2d87cd8ddeb8"),
            auth.to_vec(),
            None,
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            s.p("b", "/T?as_of=soon"),
            vec![],
            None,
            400,
            "bad_request",
        ),
        (
            "GET",
            s.p("b", "/?limit=-1"),
            vec![],
            None,
            400,
            "bad_request",
        ),
    ];
    for (method, url, headers, body, status, kind) in cases {
        let a = call(&ag, method, &url, &headers, body.as_deref());
        assert_eq!(
            a.status,
            status,
            "{method} {url}: {}",
            String::from_utf8_lossy(&a.body)
        );
        a.problem(status, kind);
    }
    // Bad JSON and other settings for the bucket, with the token.
    let json = [auth[0], ("Content-Type", "application/json")];
    for (body, status) in [
        (&b"{"[..], 400),
        (br#"{"renders":"all"}"#, 409),
        (
            br#"{"revisionRetentionPolicy":{"type":"latest","count":0}}"#,
            400,
        ),
        (br#"{"surprise":true}"#, 400),
    ] {
        assert_eq!(
            call(&ag, "PUT", &s.p("b", ""), &json, Some(body)).status,
            status
        );
    }
    // A chunked body past --max-body: refused while it streams in.
    let mut raw = std::net::TcpStream::connect(&s.addr).unwrap();
    use std::io::{Read, Write};
    let head = format!(
        "PUT /{D}/sys/key_rev_value/b/T/3 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0ken\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    raw.write_all(head.as_bytes()).unwrap();
    for _ in 0..3 {
        let _ = raw.write_all(format!("{:x}\r\n{}\r\n", 600, "y".repeat(600)).as_bytes());
    }
    let mut answer = Vec::new();
    raw.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while let Ok(n) = raw.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Raw bytes a client library would not send: a request line that is not HTTP.
    let mut raw = std::net::TcpStream::connect(&s.addr).unwrap();
    raw.write_all(b"PUT /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 4"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(get(&ag, &s.p("b", "/T")).body, b"one");
    let after = files(&root);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &before {
        assert!(after[path] == *bytes, "{} changed", path.display());
    }
}

#[test]
fn an_acknowledged_put_is_seen_by_every_later_read() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &["--threads", "4"]);
    create_bucket(&s, "b", r#"{"renders":"all","revisions":"all"}"#);
    // Writers put and at once read back, on their own connection and on a fresh one; readers
    // follow the writers' acknowledged puts on other connections.
    let clients = 12;
    let rounds = 60;
    let barrier = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (p, barrier) = (s.p("b", ""), barrier.clone());
            std::thread::spawn(move || {
                let (mine, other) = (agent(), agent());
                barrier.wait();
                for r in 0..rounds {
                    // Even clients write new titles (the title index grows), odd ones rewrite one.
                    let title = if c % 2 == 0 {
                        format!("T{c}-{r}")
                    } else {
                        format!("T{c}")
                    };
                    let body = format!("client {c} round {r}");
                    let a = put(
                        &mine,
                        &format!("{p}/{title}/{r}"),
                        "text/plain",
                        body.as_bytes(),
                    );
                    assert_eq!(a.status, 201);
                    let tag = a.header("etag").unwrap().to_string();
                    for ag in [&mine, &other, &agent()] {
                        let g = get(ag, &format!("{p}/{title}"));
                        assert_eq!(g.status, 200, "client {c} round {r}");
                        assert_eq!(
                            (g.body.as_slice(), g.header("etag")),
                            (body.as_bytes(), Some(tag.as_str()))
                        );
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let text = String::from_utf8(get(&agent(), &s.url("/metrics")).body).unwrap();
    assert!(text.contains("wink_read_handle_refreshes_total"), "{text}");
}

#[test]
fn reads_fall_through_to_the_archive_that_maintenance_fills() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &["--maintenance-interval", "1"]);
    create_bucket(
        &s,
        "a",
        r#"{"revisions":"recent:1","renders":"all","archive":"newest"}"#,
    );
    let ag = agent();
    assert_eq!(
        put(&ag, &s.p("a", "/T/1"), "text/html", b"first").status,
        201
    );
    let between = std::time::SystemTime::now();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(
        put(&ag, &s.p("a", "/T/2"), "text/html", b"second").status,
        201
    );
    // Revision 1 leaves the hot tier a second after revision 2 arrived; a maintenance round
    // (every second here) archives it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let h = get(&ag, &s.url("/_health")).json();
        if h["buckets"]["a"]["maintenance"]["archived_revisions"].as_u64() >= Some(1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not archived: {h}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let a = get(&ag, &s.p("a", "/T/1"));
    assert_eq!(
        (a.status, a.body.as_slice()),
        (200, &b"first"[..]),
        "read from the archive"
    );
    assert_eq!(get(&ag, &s.p("a", "/T")).body, b"second");
    let list = get(&ag, &s.p("a", "/T/")).json();
    let states: Vec<(u64, &str)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["revision"].as_u64().unwrap(),
                i["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(states, [(2, "current"), (1, "archived")]);
    let secs = between
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let then = get(&ag, &s.p("a", &format!("/T?as_of={secs:.3}")));
    assert_eq!(
        then.body, b"first",
        "as of before revision 2: the archived revision 1"
    );
    let fallbacks = || metric(&s, "wink_writer_fallback_reads_total");
    let before = fallbacks();
    assert!(before >= 3, "{before}");
    // Misses of titles the archive holds nothing of — never stored, or only hot — are
    // answered by the worker's own handle, without the writer's lock.
    assert_eq!(
        put(&ag, &s.p("a", "/Hot/1"), "text/html", b"hot").status,
        201
    );
    for _ in 0..20 {
        get(&ag, &s.p("a", "/Never_stored")).problem(404, "not_found");
        get(&ag, &s.p("a", "/Hot/7")).problem(404, "not_found");
    }
    assert_eq!(fallbacks(), before);
    // A miss of a title the archive holds some of still asks the writer (checked before the
    // take-down below: once the archive holds nothing of the title, maintenance may rewrite
    // its record, and a worker's handle may or may not have seen that yet).
    get(&ag, &s.p("a", "/T/9")).problem(404, "not_found");
    assert_eq!(fallbacks(), before + 1);
    // A take-down reaches the archive too.
    assert_eq!(
        call(&ag, "DELETE", &s.p("a", "/T/1"), &[], None).status,
        200
    );
    get(&ag, &s.p("a", "/T/1")).problem(404, "not_found");
}

#[test]
fn an_unreadable_bucket_is_503_and_the_others_serve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("bad")).unwrap();
    std::fs::write(root.join("bad/store"), b"this is not a store configuration").unwrap();
    let s = Server::start(&root, &[]);
    let ag = agent();
    let h = get(&ag, &s.url("/_health"));
    assert_eq!(h.status, 503);
    let j = h.json();
    assert_eq!(
        (j["status"].as_str(), j["buckets"]["bad"]["status"].as_str()),
        (Some("degraded"), Some("unreadable"))
    );
    assert!(
        j["buckets"]["bad"]["error"]
            .as_str()
            .unwrap()
            .contains("bad/store"),
        "{j}"
    );
    let a = get(&ag, &s.p("bad", "/T"));
    a.problem(503, "service_unavailable");
    assert!(a.header("retry-after").is_some());
    call(&ag, "PUT", &s.p("bad", ""), &[], None).problem(503, "service_unavailable");
    put(&ag, &s.p("bad", "/T/1"), "text/html", b"x").problem(503, "service_unavailable");
    create_bucket(&s, "good", "{}");
    assert_eq!(
        put(&ag, &s.p("good", "/T/1"), "text/html", b"x").status,
        201
    );
    assert_eq!(get(&ag, &s.p("good", "/T")).body, b"x");
    let m = String::from_utf8(get(&ag, &s.url("/metrics")).body).unwrap();
    assert!(m.contains("wink_bucket_unreadable 1"), "{m}");
    assert_eq!(
        std::fs::read(root.join("bad/store")).unwrap(),
        b"this is not a store configuration"
    );
}
