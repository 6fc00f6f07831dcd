//! `wink serve` at its limits: the connection bound, the in-flight body bytes, the header and
//! body timeouts, a full disk (507 for puts while reads go on, puts again once there is room),
//! and the refusal to listen beyond loopback without a token.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::server::{agent, call, create_bucket, get, put, Server, D};

/// Reads what the server sends until it closes or `timeout` passes.
fn read_all(s: &mut TcpStream, timeout: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn connections_past_the_limit_get_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &["--max-connections", "2"]);
    // Two idle keep-alive connections take both slots.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(&s.addr).unwrap();
    third
        .write_all(b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8(read_all(&mut third, Duration::from_secs(10))).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("service_unavailable"), "{answer}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(&agent(), &s.url("/_health")).status,
        200,
        "slots are given back"
    );
    let m = String::from_utf8(get(&agent(), &s.url("/metrics")).body).unwrap();
    assert!(m.contains("wink_http_connections_refused_total 1"), "{m}");
}

#[test]
fn in_flight_body_bytes_are_bounded_and_slow_bodies_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        &dir.path().join("root"),
        &[
            "--max-body",
            "100000",
            "--max-inflight",
            "150000",
            "--body-timeout",
            "2",
        ],
    );
    create_bucket(&s, "b", "{}");
    // A slow client declares 100,000 bytes and sends 90,000: its buffer holds 100,000 of the
    // 150,000 (a body is charged for the buffer it has, as its bytes arrive).
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "PUT /{D}/sys/key_rev_value/b/T/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    );
    slow.write_all(head.as_bytes()).unwrap();
    slow.write_all(&[b'x'; 90_000]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Refused once its buffer would pass the bound (a client library that insists on writing
    // the whole body first may see a broken pipe: this one reads the answer).
    let mut second = TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "PUT /{D}/sys/key_rev_value/b/T/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"
    );
    second.write_all(head.as_bytes()).unwrap();
    let _ = second.write_all(&vec![b'x'; 60_000]);
    let answer = String::from_utf8(read_all(&mut second, Duration::from_secs(10))).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("service_unavailable"), "{answer}");
    // A small one still fits.
    assert_eq!(
        put(&agent(), &s.p("b", "/T/3"), "text/html", b"small").status,
        201
    );
    // The slow body times out: 408, nothing stored, its bytes given back.
    let started = Instant::now();
    let answer = String::from_utf8(read_all(&mut slow, Duration::from_secs(10))).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(8));
    get(&agent(), &s.p("b", "/T/1")).problem(404, "not_found");
    assert_eq!(
        put(
            &agent(),
            &s.p("b", "/T/2"),
            "text/html",
            &vec![b'x'; 60_000]
        )
        .status,
        201
    );
}

#[test]
fn a_client_that_never_finishes_its_head_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &["--header-timeout", "1"]);
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(b"GET /_health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = Instant::now();
    let answer = read_all(&mut c, Duration::from_secs(15));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "closed after {took:?}");
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(get(&agent(), &s.url("/_health")).status, 200);
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .arg("serve")
        .arg(dir.path().join("root"))
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without --token-file"),
        "{err}"
    );
    assert!(!dir.path().join("root").exists(), "nothing created");
    let token = dir.path().join("token");
    std::fs::write(&token, "secret\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wink"));
    cmd.arg("serve")
        .arg(dir.path().join("root"))
        .args(["--listen", "0.0.0.0:0", "--token-file"])
        .arg(&token);
    let s = Server::spawn(cmd, &dir.path().join("root"));
    let port = s.addr.rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}/_health");
    assert_eq!(get(&agent(), &url).status, 200);
    // A second server on the same root is refused: the root is in use.
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .arg("serve")
        .arg(dir.path().join("root"))
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wink serve` in a mount namespace of its own, on a 48 MiB tmpfs at `mnt`.
fn serve_on_small_disk(mnt: &Path) -> Option<Server> {
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("-r");
    }
    let script = format!(
        "mount -t tmpfs -o size=48m tmpfs {m} && exec {wink} serve {m}/root --listen 127.0.0.1:0 \
         --maintenance-interval 0",
        m = mnt.display(),
        wink = env!("CARGO_BIN_EXE_wink")
    );
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]);
    let probe = Command::new("unshare")
        .args(if root {
            vec!["-m", "true"]
        } else {
            vec!["-r", "-m", "true"]
        })
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        common::require::skip(
            "full-disk test",
            "cannot make a mount namespace (unshare -m; not root and no user namespaces)",
        );
        return None;
    }
    Some(Server::spawn(cmd, &mnt.join("root")))
}

#[test]
fn a_full_disk_is_507_for_puts_while_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let Some(s) = serve_on_small_disk(&mnt) else {
        return;
    };
    create_bucket(
        &s,
        "b",
        r#"{"renders":"all","revisions":"all","container_bytes":4194304}"#,
    );
    let ag = agent();
    assert_eq!(
        put(&ag, &s.p("b", "/Kept/1"), "text/html", b"kept").status,
        201
    );
    // The tmpfs as the server sees it, through its mount namespace: fill most of it.
    let inside = Path::new("/proc").join(s.pid().to_string()).join("root");
    let filler = inside.join(mnt.strip_prefix("/").unwrap()).join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let mb = vec![7u8; 1 << 20];
    while f.write_all(&mb).is_ok() {}
    drop(f);
    let mut full = None;
    for i in 0..64 {
        let a = put(
            &ag,
            &s.p("b", &format!("/Big/{i}")),
            "text/html",
            &vec![b'b'; 256 << 10],
        );
        if a.status != 201 {
            full = Some(a);
            break;
        }
    }
    let a = full.expect("the disk fills up");
    let j = a.problem(507, "insufficient_storage");
    // The client is told what happened; the file and the OS's words are in the error log.
    let detail = j["detail"].as_str().unwrap();
    assert!(detail.contains("disk is full"), "{j}");
    assert!(!detail.contains(&*s.root.to_string_lossy()), "{j}");
    // Reads go on.
    assert_eq!(get(&ag, &s.p("b", "/Kept")).body, b"kept");
    assert_eq!(get(&agent(), &s.url("/_health")).status, 200);
    // Once there is room again, puts are taken again.
    std::fs::remove_file(&filler).unwrap();
    let a = put(&ag, &s.p("b", "/After/1"), "text/html", b"after");
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(get(&ag, &s.p("b", "/After")).body, b"after");
    assert_eq!(call(&ag, "GET", &s.p("b", "/Kept"), &[], None).status, 200);
}
