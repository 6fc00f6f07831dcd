//! `wink serve` against clients that send what they should not: cursors edited by hand or
//! carried to another listing, tids far in the future. Each answer is a 4xx that changes nothing
//! and names no file; the server goes on as before.

mod common;

use common::server::{agent, call, create_bucket, get, metric, put, Server};
use wink::store::key;

const HTML: &str = "text/html; charset=utf-8";

/// A tid `secs` seconds past now.
fn tid_in(secs: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    key::tid_at(now + secs, 7, *b"client").to_string()
}

#[test]
fn a_cursor_is_taken_only_from_this_server_and_for_its_listing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "a", "{}");
    create_bucket(&s, "b", "{}");
    for t in 0..30 {
        for bucket in ["a", "b"] {
            assert_eq!(
                put(&ag, &s.p(bucket, &format!("/T{t}/1")), HTML, b"x").status,
                201
            );
        }
    }
    for rev in 2..6 {
        put(&ag, &s.p("a", &format!("/T0/{rev}")), HTML, b"y");
    }
    let next = |url: String| get(&ag, &url).json()["next"].as_str().unwrap().to_string();
    let titles = next(s.p("a", "/?limit=5"));
    let renders = next(s.p("a", "/T0/?limit=2"));
    // Cursors given by the server page on.
    assert_eq!(get(&ag, &s.p("a", &format!("/?next={titles}"))).status, 200);
    assert_eq!(
        get(&ag, &s.p("a", &format!("/T0/?next={renders}"))).status,
        200
    );
    // A position typed by hand (a store cursor's own shape), a cursor changed by one
    // character, one given for another bucket, domain or title, a render cursor for titles.
    let mut changed = titles.clone().into_bytes();
    changed[3] = if changed[3] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    let other_domain = s
        .p("a", &format!("/?next={titles}"))
        .replace("en.wikipedia.org", "de.wikipedia.org");
    for url in [
        s.p("a", "/?next=h4369"),
        s.p("a", "/?next=a1"),
        s.p("a", &format!("/?next={changed}")),
        s.p("b", &format!("/?next={titles}")),
        other_domain,
        s.p("a", &format!("/T1/?next={renders}")),
        s.p("a", &format!("/?next={renders}")),
        s.p("a", &format!("/?next={}", "A".repeat(5000))),
    ] {
        let a = get(&ag, &url);
        let j = a.problem(400, "bad_request");
        let detail = j["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("invalid next"), "{url}: {j}");
        assert!(
            !String::from_utf8_lossy(&a.body).contains(&*dir.path().to_string_lossy()),
            "{url}: a path in the answer"
        );
    }
    // A restart keeps the key: a cursor given before it still pages.
    drop(s);
    let s = Server::start(&dir.path().join("root"), &[]);
    assert_eq!(get(&ag, &s.p("a", &format!("/?next={titles}"))).status, 200);
}

#[test]
fn a_tid_far_past_the_clock_is_refused_and_moves_no_clock() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    // The year 3000: refused, nothing stored.
    let far = key::tid_at(32_503_680_000, 1, *b"future").to_string();
    let a = put(&ag, &s.p("b", &format!("/Evil/1/{far}")), HTML, b"evil");
    let j = a.problem(400, "bad_request");
    assert!(
        j["detail"]
            .as_str()
            .unwrap()
            .contains("past this server's clock"),
        "{j}"
    );
    assert_eq!(get(&ag, &s.p("b", "/Evil")).status, 404);
    // Two hours ahead: refused; half an hour ahead (a client's clock running fast): taken.
    put(
        &ag,
        &s.p("b", &format!("/Evil/1/{}", tid_in(7200))),
        HTML,
        b"x",
    )
    .problem(400, "bad_request");
    let soon = tid_in(1800);
    assert_eq!(
        put(&ag, &s.p("b", &format!("/Evil/1/{soon}")), HTML, b"soon").status,
        201
    );
    // A tid-less PUT of the same revision comes after it; of another title, the clock's own.
    let a = put(&ag, &s.p("b", "/Evil/1"), HTML, b"after");
    assert_eq!(a.status, 201);
    let a = put(&ag, &s.p("b", "/Other/1"), HTML, b"other");
    assert_eq!(a.status, 201);
    let tid = a.json()["tid"].as_str().unwrap().to_string();
    let made = key::tid_unix_secs(key::parse_tid(&tid).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((made - now).abs() < 60, "{tid} is the clock's");
    // A read as of now finds the render the clock made.
    let url = s.p("b", &format!("/Other?as_of={}", now + 1));
    let a = call(&ag, "GET", &url, &[], None);
    assert_eq!((a.status, a.body.as_slice()), (200, b"other".as_slice()));
}

#[test]
fn restbase_bucket_bodies_create_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    // RESTBase's key_rev_value bucket, as its storage module asks for it.
    let body = br#"{"valueType":"blob","keyType":"string","version":2,
        "compression":[{"algorithm":"deflate","block_size":256}],
        "updates":{"pattern":"timeseries"},"default_time_to_live":0,
        "revisionRetentionPolicy":{"type":"latest_hash","count":1,"grace_ttl":86400}}"#;
    let json = [("Content-Type", "application/json")];
    let a = call(&ag, "PUT", &s.p("parsoid", ""), &json, Some(body));
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    // The same body again: it exists with those settings.
    assert_eq!(
        call(&ag, "PUT", &s.p("parsoid", ""), &json, Some(body)).status,
        200
    );
    assert_eq!(put(&ag, &s.p("parsoid", "/T/1"), HTML, b"x").status, 201);
    // A misspelt setting is still refused.
    let a = call(
        &ag,
        "PUT",
        &s.p("other", ""),
        &json,
        Some(br#"{"valuetype":"blob"}"#),
    );
    a.problem(400, "bad_request");
}

#[test]
fn head_works_wherever_get_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    put(&ag, &s.p("b", "/T/1"), HTML, b"<p>x</p>");
    for url in [
        s.url("/_health"),
        s.url("/metrics"),
        s.p("b", ""),
        s.p("b", "/"),
        s.p("b", "/T/"),
        s.p("b", "/T"),
        s.p("b", "/T/1"),
    ] {
        let g = get(&ag, &url);
        let h = call(&ag, "HEAD", &url, &[], None);
        assert_eq!((h.status, g.status), (200, 200), "{url}");
        assert!(h.body.is_empty(), "HEAD {url} has a body");
        assert_eq!(h.header("content-type"), g.header("content-type"), "{url}");
        // /metrics changes between two requests; the others give the GET's length.
        if !url.ends_with("/metrics") {
            let len = g.body.len().to_string();
            assert_eq!(h.header("content-length"), Some(len.as_str()), "{url}");
        }
    }
    let a = call(&ag, "POST", &s.p("b", "/"), &[], None);
    a.problem(405, "method_not_allowed");
    assert_eq!(a.header("allow"), Some("GET, HEAD"));
}

#[test]
fn every_answer_says_how_to_cache_it_and_reads_honour_if_match() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let a = put(&ag, &s.p("b", "/T/1"), HTML, b"<p>x</p>");
    let restbase = "private, max-age=0, s-maxage=0, must-revalidate";
    for (method, url, cache) in [
        ("PUT", s.p("b", "/T/2"), restbase),
        ("GET", s.p("b", "/T"), "no-cache"),
        ("GET", s.p("b", "/T/"), restbase),
        ("GET", s.p("b", "/Nothing"), restbase),
        ("GET", s.url("/_health"), restbase),
        ("GET", s.url("/nowhere"), restbase),
    ] {
        let a = call(&ag, method, &url, &[("Content-Type", HTML)], Some(b"y"));
        assert_eq!(a.header("cache-control"), Some(cache), "{method} {url}");
        assert_eq!(
            a.header("x-content-type-options"),
            Some("nosniff"),
            "{method} {url}"
        );
    }
    // If-Match on a read: the render's tag (or *) passes; another tag, or a weak one, is 412.
    let tag = get(&ag, &s.p("b", "/T/1"))
        .header("etag")
        .unwrap()
        .to_string();
    drop(a);
    let url = s.p("b", "/T/1");
    for (given, status) in [
        (tag.clone(), 200),
        ("*".to_string(), 200),
        (format!("\"0/x\", {tag}"), 200),
        (
            "\"1/00000000-0000-1000-8000-000000000000\"".to_string(),
            412,
        ),
        (format!("W/{tag}"), 412),
    ] {
        let a = get_with(&ag, &url, "If-Match", &given);
        assert_eq!(a.status, status, "If-Match: {given}");
        if status == 412 {
            a.problem(412, "precondition_failed");
        }
    }
    // A miss stays a miss.
    let a = get_with(&ag, &s.p("b", "/None"), "If-Match", "*");
    assert_eq!(a.status, 404);
    // The process's own figures, by the names Prometheus's client libraries use.
    // (CPU time is counted in 10 ms ticks: a quiet server may have used none yet.)
    metric(&s, "process_cpu_seconds_total");
    for name in [
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
    ] {
        assert!(metric(&s, name) > 0, "{name}");
    }
}

/// The value of a metric line `name VALUE` in `/metrics`, as a whole number.
#[test]
fn request_bodies_are_charged_for_the_bytes_they_hold() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        &dir.path().join("root"),
        &[
            "--max-inflight",
            "1048576",
            "--max-body",
            "1048576",
            "--body-timeout",
            "30",
        ],
    );
    create_bucket(&s, "b", "{}");
    let path = |t: &str| format!("/en.wikipedia.org/sys/key_rev_value/b/{t}/1");
    // Eight heads that declare a 1 MiB body each and send nothing: they hold no buffer.
    let silent: Vec<std::net::TcpStream> = (0..8)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
            let head = format!(
                "PUT {} HTTP/1.1\r\nHost: x\r\nContent-Type: text/html\r\n\
                 Content-Length: 1048576\r\n\r\n",
                path(&format!("Silent{i}"))
            );
            c.write_all(head.as_bytes()).unwrap();
            c
        })
        .collect();
    // A body sent as 100,000 chunks of one byte: charged its 100,000 bytes, not a KiB a chunk.
    let mut flood = std::net::TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "PUT {} HTTP/1.1\r\nHost: x\r\nContent-Type: text/html\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        path("Flood")
    );
    flood.write_all(head.as_bytes()).unwrap();
    flood.write_all(&b"1\r\nx\r\n".repeat(100_000)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let held = metric(&s, "wink_http_inflight_bytes");
    assert!(
        held <= 256 << 10,
        "{held} bytes held for 100,000 body bytes"
    );
    // Meanwhile a 600 KB body fits in the 1 MiB bound.
    let big = vec![b'x'; 600_000];
    assert_eq!(put(&agent(), &s.url(&path("Big")), HTML, &big).status, 201);
    // The flood ends: stored whole.
    flood.write_all(b"0\r\n\r\n").unwrap();
    let mut answer = [0u8; 12];
    std::io::Read::read_exact(&mut flood, &mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 201");
    assert_eq!(
        get(&agent(), &s.url(&path("Flood"))).body,
        vec![b'x'; 100_000]
    );
    drop(silent);
}

#[test]
fn a_bucket_locked_when_the_server_starts_serves_once_the_lock_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let bucket = root.join("b");
    std::fs::create_dir_all(&root).unwrap();
    let opts = wink::store::StoreOptions::writer();
    wink::store::Store::init(&bucket, &wink::store::Config::default(), &opts).unwrap();
    // Another writer (a `wink put`, an import) holds the bucket as the server starts.
    let writer = wink::store::Store::open(&bucket, &opts).unwrap();
    let s = Server::start(&root, &[]);
    let ag = agent();
    put(&ag, &s.p("b", "/T/1"), HTML, b"x").problem(503, "service_unavailable");
    drop(writer);
    // Tried again every few seconds: it serves without a restart.
    let started = std::time::Instant::now();
    loop {
        let a = put(&ag, &s.p("b", "/T/1"), HTML, b"x");
        if a.status == 201 {
            break;
        }
        assert_eq!(a.status, 503);
        assert!(started.elapsed().as_secs() < 60, "still 503 a minute later");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(get(&ag, &s.p("b", "/T/1")).body, b"x");
    assert_eq!(get(&ag, &s.url("/_health")).status, 200);
}

#[test]
fn a_client_that_reads_nothing_is_cut_off_and_gives_its_answer_back() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &["--write-timeout", "2"]);
    create_bucket(&s, "b", "{}");
    let big = vec![b'x'; 32 << 20];
    assert_eq!(put(&agent(), &s.p("b", "/Big/1"), HTML, &big).status, 201);
    // Ten clients ask for 32 MiB and never read: the kernel's buffers fill, the writes stall.
    let stalled: Vec<std::net::TcpStream> = (0..10)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
            let req = "GET /en.wikipedia.org/sys/key_rev_value/b/Big HTTP/1.1\r\nHost: x\r\n\r\n";
            c.write_all(req.as_bytes()).unwrap();
            c
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert!(
        metric(&s, "wink_http_connections_open") > 5,
        "the stalled answers are open"
    );
    // Past the write timeout their connections are cut: only this request's own is open.
    let started = std::time::Instant::now();
    while metric(&s, "wink_http_connections_open") > 1 {
        assert!(
            started.elapsed().as_secs() < 30,
            "stalled connections still open"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(get(&agent(), &s.p("b", "/Big")).body.len(), 32 << 20);
    drop(stalled);
}

/// A GET with one request header.
fn get_with(ag: &ureq::Agent, url: &str, name: &str, value: &str) -> common::server::Answer {
    call(ag, "GET", url, &[(name, value)], None)
}

/// Sends a request head and reads the first status line the server sends back.
fn first_status(addr: &str, head: &str) -> (std::net::TcpStream, String) {
    use std::io::{BufRead as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(c.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    (c, line.trim_end().to_string())
}

#[test]
fn a_put_is_refused_before_its_body_is_sent_or_read_past_the_buckets_limit() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "secret\n").unwrap();
    let s = Server::start(
        &dir.path().join("root"),
        &["--token-file", token.to_str().unwrap()],
    );
    let ag = agent();
    let made = call(
        &ag,
        "PUT",
        &s.p("b", ""),
        &[
            ("Authorization", "Bearer secret"),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"max_value": 100000}"#),
    );
    assert_eq!(made.status, 201);
    let head = |bucket: &str, auth: &str, len: u64| {
        format!(
            "PUT /en.wikipedia.org/sys/key_rev_value/{bucket}/T/1 HTTP/1.1\r\nHost: x\r\n\
             Content-Type: text/html\r\n{auth}Content-Length: {len}\r\n\
             Expect: 100-continue\r\n\r\n"
        )
    };
    let auth = "Authorization: Bearer secret\r\n";
    // No token, no bucket, a body over the bucket's max_value: the final answer comes first,
    // and no `100 Continue` asks the client for its 10 MB.
    for (h, status) in [
        (head("b", "", 10_000_000), "401"),
        (head("nope", auth, 10_000_000), "404"),
        (head("b", auth, 10_000_000), "413"),
    ] {
        let (_c, line) = first_status(&s.addr, &h);
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
    }
    // A body the server will take: `100 Continue`, then the body, then 201.
    let (mut c, line) = first_status(&s.addr, &head("b", auth, 5));
    assert_eq!(line, "HTTP/1.1 100 Continue");
    c.write_all(b"hello").unwrap();
    let mut rest = [0u8; 64];
    let n = c.read(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest[..n]).into_owned();
    assert!(rest.contains("HTTP/1.1 201"), "{rest:?}");
    // A chunked body with no length: cut off at the first chunk past max_value, not read whole.
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.write_all(
        "PUT /en.wikipedia.org/sys/key_rev_value/b/Chunked/1 HTTP/1.1\r\nHost: x\r\n\
         Content-Type: text/html\r\nAuthorization: Bearer secret\r\n\
         Transfer-Encoding: chunked\r\nx-request-id: chunked-flood\r\n\r\n"
            .as_bytes(),
    )
    .unwrap();
    let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
    let mut sent = 0usize;
    let mut answer = String::new();
    c.set_read_timeout(Some(std::time::Duration::from_millis(20)))
        .unwrap();
    while sent < 64 << 20 {
        if c.write_all(chunk.as_bytes()).is_err() {
            break;
        }
        sent += 0x4000;
        let mut buf = [0u8; 512];
        if let Ok(n) = c.read(&mut buf) {
            answer = String::from_utf8_lossy(&buf[..n]).into_owned();
            break;
        }
    }
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{answer:?} after {sent}"
    );
    assert!(sent < 8 << 20, "{sent} bytes sent before the 413");
    assert_eq!(get(&ag, &s.p("b", "/Chunked")).status, 404);
    // The access log says how little of it was read.
    let line = wait_for_log(&s, "request_id=chunked-flood");
    let bytes_in: u64 = field(&line, "bytes_in").parse().unwrap();
    assert!(bytes_in < 200_000, "{line}");
}

/// The value of `key=` in a text log line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// The first line of the server's standard error that contains `what` (logs are written by a
/// thread of their own: waited for).
fn wait_for_log(s: &Server, what: &str) -> String {
    let started = std::time::Instant::now();
    loop {
        if let Some(l) = s.stderr().lines().find(|l| l.contains(what)) {
            return l.to_string();
        }
        assert!(
            started.elapsed().as_secs() < 10,
            "no log line with {what}:\n{}",
            s.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn every_request_is_logged_with_its_id_and_failures_name_files_only_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let access = dir.path().join("access.log");
    let s = Server::start(
        &root,
        &[
            "--access-log",
            access.to_str().unwrap(),
            "--log-format",
            "json",
        ],
    );
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let marker = b"<p>a value to damage: 0123456789abcdef</p>";
    assert_eq!(put(&ag, &s.p("b", "/T/1"), HTML, marker).status, 201);
    // A client's id is kept and echoed; a request without one gets one.
    let a = get_with(&ag, &s.p("b", "/T"), "x-request-id", "client-7");
    assert_eq!(a.header("x-request-id"), Some("client-7"));
    let made = get(&ag, &s.p("b", "/Nope"));
    let made_id = made.header("x-request-id").unwrap().to_string();
    assert_eq!(made_id.len(), 32);
    // Damage the value on disk: its read is a 500 that names no file, and the error log has
    // the file and offset under the answer's request id.
    let data = root.join("b").join("c000001.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap();
    bytes[at + 5] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let a = get_with(&ag, &s.p("b", "/T"), "x-request-id", "broken-1");
    let j = a.problem(500, "server_error");
    let detail = j["detail"].as_str().unwrap();
    assert!(detail.contains("broken-1"), "{detail}");
    assert!(
        !String::from_utf8_lossy(&a.body).contains(&*dir.path().to_string_lossy()),
        "a path in the answer: {detail}"
    );
    let logged = wait_for_log(&s, "broken-1");
    assert!(logged.contains("c000001.data"), "{logged}");
    assert!(logged.contains("ERROR"), "{logged}");
    // The access log: one JSON object per request, with the fields an operator needs.
    let started = std::time::Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&access).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        if lines.len() >= 5 || started.elapsed().as_secs() > 10 {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(lines.len(), 5, "{lines:?}");
    let find = |id: &str| lines.iter().find(|l| l["request_id"] == id).unwrap();
    let put_line = &lines[1];
    assert_eq!(
        (put_line["method"].as_str(), put_line["status"].as_u64()),
        (Some("PUT"), Some(201))
    );
    assert_eq!(put_line["bytes_in"].as_u64(), Some(marker.len() as u64));
    let kept = find("client-7");
    assert_eq!(kept["path"], "/en.wikipedia.org/sys/key_rev_value/b/T");
    assert_eq!(kept["bytes_out"].as_u64(), Some(marker.len() as u64));
    assert!(kept["us"].as_u64().is_some());
    assert_eq!(find(&made_id)["status"].as_u64(), Some(404));
    assert_eq!(find("broken-1")["status"].as_u64(), Some(500));
}

fn gunzip(body: &[u8]) -> String {
    use std::io::Read as _;
    let mut text = String::new();
    flate2::read::GzDecoder::new(body)
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[test]
fn answers_are_gzipped_for_clients_that_accept_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let page = "<p>a paragraph of a wiki page</p>\n".repeat(300);
    assert_eq!(
        put(&ag, &s.p("b", "/T/1"), HTML, page.as_bytes()).status,
        201
    );
    assert_eq!(
        put(&ag, &s.p("b", "/Small/1"), HTML, b"<p>tiny</p>").status,
        201
    );
    let gz = get_with(&ag, &s.p("b", "/T"), "Accept-Encoding", "gzip");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert!(gz
        .header("vary")
        .is_some_and(|v| v.contains("accept-encoding")));
    assert!(gz.body.len() * 5 < page.len(), "{} bytes", gz.body.len());
    assert_eq!(gunzip(&gz.body), page);
    // Not asked, refused (q=0), or too small to gain: sent as stored.
    for (url, accept) in [
        (s.p("b", "/T"), "identity"),
        (s.p("b", "/T"), "gzip;q=0"),
        (s.p("b", "/Small"), "gzip"),
    ] {
        let a = get_with(&ag, &url, "Accept-Encoding", accept);
        assert_eq!(a.header("content-encoding"), None, "{url} {accept}");
    }
    let a = get(&ag, &s.p("b", "/T"));
    assert_eq!(
        (a.header("content-encoding"), a.body.len()),
        (None, page.len())
    );
    // JSON listings too.
    for t in 0..40 {
        put(
            &ag,
            &s.p("b", &format!("/A_rather_long_title_number_{t}/1")),
            HTML,
            b"x",
        );
    }
    let a = get_with(&ag, &s.p("b", "/"), "Accept-Encoding", "gzip");
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let j: serde_json::Value = serde_json::from_str(&gunzip(&a.body)).unwrap();
    assert_eq!(j["items"].as_array().unwrap().len(), 42);
}

#[test]
fn buckets_and_connections_are_bounded_by_the_descriptor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // 1,024 descriptors, 2 workers, at most 4 buckets: the connections are lowered to fit.
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(format!(
        "ulimit -n 1024 && exec {} serve {} --listen 127.0.0.1:0 --threads 2 \
             --max-buckets 4 --header-timeout 60",
        env!("CARGO_BIN_EXE_wink"),
        root.display()
    ));
    let s = Server::spawn(cmd, &root);
    let warned = wait_for_log(&s, "--max-connections 4096 lowered to");
    let room: usize = warned
        .rsplit("lowered to ")
        .next()
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{warned}"));
    assert!((16..1024).contains(&room), "{warned}");
    let ag = agent();
    for b in ["a", "b", "c", "d"] {
        create_bucket(&s, b, "{}");
    }
    let a = put(&ag, &s.p("e", ""), "application/json", b"{}");
    let j = a.problem(507, "insufficient_storage");
    assert!(
        j["detail"].as_str().unwrap().contains("--max-buckets"),
        "{j}"
    );
    // An existing one is still "exists".
    assert_eq!(
        put(&ag, &s.p("a", ""), "application/json", b"{}").status,
        200
    );
    // Clients that fill every connection slot: the next one is answered 503, not left waiting.
    let idle: Vec<std::net::TcpStream> = (0..room)
        .map(|_| std::net::TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (_c, line) = first_status(&s.addr, "GET /_health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(line.starts_with("HTTP/1.1 503"), "{line}");
    drop(idle);
    // Too few descriptors for the buckets asked for: refused at start, exit status 2.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 300 && exec {} serve {} --listen 127.0.0.1:0 --max-buckets 100",
            env!("CARGO_BIN_EXE_wink"),
            dir.path().join("other").display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("descriptor limit"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn heads_longer_than_the_api_needs_are_problems_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let long = s.p("b", &format!("/{}", "x".repeat(10_000)));
    get(&ag, &long).problem(414, "uri_too_long");
    let big = "v".repeat(8000);
    let a = call(
        &ag,
        "GET",
        &s.p("b", "/T"),
        &[("x-one", &big), ("x-two", &big), ("x-three", &big)],
        None,
    );
    a.problem(431, "request_header_fields_too_large");
    // The server goes on.
    assert_eq!(get(&ag, &s.url("/_health")).status, 200);
}

/// A put with `If-None-Match: *` or `If-Match`: checked by the bucket's writer against what it
/// holds, so that of two clients racing to make a revision only one gets 201.
#[test]
fn conditional_puts_are_checked_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let cput = |path: &str, name: &str, value: &str, body: &[u8]| {
        call(
            &ag,
            "PUT",
            &s.p("b", path),
            &[("Content-Type", HTML), (name, value)],
            Some(body),
        )
    };
    // If-None-Match: * makes a revision only when it has no render.
    let first = cput("/T/1", "If-None-Match", "*", b"first");
    assert_eq!(first.status, 201);
    let tag = first.header("etag").unwrap().to_string();
    cput("/T/1", "If-None-Match", "*", b"second").problem(412, "precondition_failed");
    assert_eq!(get(&ag, &s.p("b", "/T/1")).body, b"first");
    // If-Match: the revision's newest render must carry the tag (strongly; `*`: exist).
    cput(
        "/T/1",
        "If-Match",
        "\"1/00000000-0000-1000-8000-000000000000\"",
        b"x",
    )
    .problem(412, "precondition_failed");
    cput("/T/1", "If-Match", &format!("W/{tag}"), b"x").problem(412, "precondition_failed");
    cput("/T/2", "If-Match", "*", b"x").problem(412, "precondition_failed");
    assert_eq!(get(&ag, &s.p("b", "/T/2")).status, 404);
    let second = cput("/T/1", "If-Match", &tag, b"second");
    assert_eq!(second.status, 201);
    assert_ne!(second.header("etag").unwrap(), tag);
    assert_eq!(get(&ag, &s.p("b", "/T/1")).body, b"second");
    // The old tag no longer matches; a PUT naming a render is checked against that render.
    cput("/T/1", "If-Match", &tag, b"third").problem(412, "precondition_failed");
    let tid = tag.trim_matches('"').split_once('/').unwrap().1.to_string();
    cput(&format!("/T/1/{tid}"), "If-None-Match", "*", b"again")
        .problem(412, "precondition_failed");
    assert_eq!(
        cput(&format!("/T/1/{tid}"), "If-Match", &tag, b"again").status,
        201
    );
    // Racing clients: one 201, every other one 412, and the winner's bytes are what is read.
    let url = s.p("b", "/Race/1");
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let url = url.clone();
                scope.spawn(move || {
                    let body = format!("client {i}");
                    let a = call(
                        &agent(),
                        "PUT",
                        &url,
                        &[("Content-Type", HTML), ("If-None-Match", "*")],
                        Some(body.as_bytes()),
                    );
                    (a.status, body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<&(u16, String)> = answers.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    assert!(
        answers.iter().all(|(s, _)| *s == 201 || *s == 412),
        "{answers:?}"
    );
    assert_eq!(get(&ag, &url).body, won[0].1.as_bytes());
}

/// A render sent in a content coding is stored as sent, with its Content-Encoding and
/// Content-Language, and served back byte for byte under them: the server's own gzip leaves an
/// answer that has a coding alone, whatever the client accepts. ETags and conditional reads are
/// as for any render. More than one coding is refused (415), a malformed label 400, and nothing
/// of either is stored.
#[test]
fn a_render_in_a_content_coding_is_kept_and_served_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    let page: String = (0..3000u64)
        .map(|i| format!("<p>Absatz {i}: {}</p>\n", i * 7919 % 10007))
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, page.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() > 1024, "large enough for the server's own gzip");
    let labelled = [
        ("Content-Type", HTML),
        ("Content-Encoding", "gzip"),
        ("Content-Language", "de"),
    ];
    let put = call(&ag, "PUT", &s.p("b", "/T/1"), &labelled, Some(&gz));
    assert_eq!(put.status, 201);
    let tag = put.header("etag").unwrap().to_string();
    for accept in [None, Some("gzip"), Some("identity"), Some("br, gzip;q=0.5")] {
        let headers: Vec<(&str, &str)> =
            accept.map(|a| ("Accept-Encoding", a)).into_iter().collect();
        for method in ["GET", "HEAD"] {
            let a = call(&ag, method, &s.p("b", "/T/1"), &headers, None);
            assert_eq!(a.status, 200, "{method} {accept:?}");
            assert_eq!(
                a.header("content-encoding"),
                Some("gzip"),
                "{method} {accept:?}"
            );
            assert_eq!(
                a.header("content-language"),
                Some("de"),
                "{method} {accept:?}"
            );
            assert_eq!(a.header("content-type"), Some(HTML));
            assert_eq!(a.header("etag"), Some(tag.as_str()));
            assert_eq!(
                a.header("content-length"),
                Some(gz.len().to_string().as_str())
            );
            if method == "GET" {
                assert_eq!(a.body, gz, "byte for byte, {accept:?}");
                assert_eq!(gunzip(&a.body), page);
            }
        }
    }
    let a = call(
        &ag,
        "GET",
        &s.p("b", "/T"),
        &[("If-None-Match", &tag)],
        None,
    );
    assert_eq!(a.status, 304);
    let listed = get(&ag, &s.p("b", "/T/"));
    let item = &listed.json()["items"][0];
    assert_eq!(
        (&item["content_encoding"], &item["content_language"]),
        (&serde_json::json!("gzip"), &serde_json::json!("de")),
        "{item}"
    );
    // identity is no coding: the render is plain, and the server may gzip it on the way.
    let plain = call(
        &ag,
        "PUT",
        &s.p("b", "/P/1"),
        &[("Content-Type", HTML), ("Content-Encoding", "identity")],
        Some(page.as_bytes()),
    );
    assert_eq!(plain.status, 201);
    let a = get(&ag, &s.p("b", "/P/1"));
    assert_eq!(
        (a.header("content-encoding"), a.header("content-language")),
        (None, None)
    );
    assert_eq!(a.body, page.as_bytes());
    let a = get_with(&ag, &s.p("b", "/P/1"), "Accept-Encoding", "gzip");
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&a.body), page);
    // Refused: two codings, a coding that is no token, a language that is no header text.
    for (name, value, status) in [
        ("Content-Encoding", "gzip, br", 415),
        ("Content-Encoding", "identity, gzip, br", 415),
        ("Content-Encoding", "g/zip", 400),
        ("Content-Language", "de\tfr", 400),
    ] {
        let a = call(
            &ag,
            "PUT",
            &s.p("b", "/T/2"),
            &[("Content-Type", HTML), (name, value)],
            Some(&gz),
        );
        assert_eq!(a.status, status, "{name}: {value}");
    }
    assert_eq!(get(&ag, &s.p("b", "/T/2")).status, 404);
}
