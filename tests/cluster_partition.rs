//! A node cut off from NATS (its connections go through proxies that the test closes): it
//! refuses writes with 503, keeps answering reads of what it applied, refuses to vouch for a
//! sequence it has not applied, and catches up once the proxies let it through again.
#![cfg(feature = "cluster")]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::cluster::{eventually, get_json, try_call, Cluster, D};
use wink::cluster::message::partition_of;

const PARTITIONS: u32 = 16;

/// A TCP proxy on a loopback port to `target`, which can be cut (listener closed, every
/// connection shut down) and restored on the same port.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, c, s) = (open.clone(), conns.clone(), stop.clone());
        thread::spawn(move || {
            let mut listener = Some(listener);
            while !s.load(Ordering::SeqCst) {
                if !o.load(Ordering::SeqCst) {
                    listener = None;
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let l = match &listener {
                    Some(l) => l,
                    None => match TcpListener::bind(("127.0.0.1", port)) {
                        Ok(l) => listener.insert(l),
                        Err(_) => {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    },
                };
                l.set_nonblocking(true).unwrap();
                match l.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(&target) else {
                            continue;
                        };
                        let mut all = c.lock().unwrap();
                        all.push(client.try_clone().unwrap());
                        all.push(server.try_clone().unwrap());
                        drop(all);
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Proxy {
            port,
            open,
            conns,
            stop,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_node_cut_off_from_nats_refuses_writes_serves_reads_and_catches_up() {
    if !common::cluster::tools("the cluster partition test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let p = |base: &str, title: &str, rev: u64| {
        format!("{base}/{D}/sys/key_rev_value/html/{title}/{rev}")
    };
    let put = |base: &str, title: &str, rev: u64, body: &[u8]| {
        try_call(
            &agent,
            "PUT",
            &p(base, title, rev),
            &[("Content-Type", "text/html")],
            Some(body),
        )
        .unwrap()
    };
    let body = |title: &str, rev: u64| format!("<p>{title} revision {rev}</p>").into_bytes();

    // n3 goes through proxies to NATS.
    cluster.ctl("stop", "n3");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cluster.dir().join("config.json")).unwrap()).unwrap();
    let proxies: Vec<Proxy> = config["nats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            Proxy::start(
                u.as_str()
                    .unwrap()
                    .trim_start_matches("nats://")
                    .to_string(),
            )
        })
        .collect();
    let mut own = config.clone();
    own["nats"] = proxies
        .iter()
        .map(|p| serde_json::Value::from(format!("nats://127.0.0.1:{}", p.port)))
        .collect();
    let own_path = cluster.dir().join("config-n3.json");
    std::fs::write(&own_path, serde_json::to_vec(&own).unwrap()).unwrap();
    let (n3, n3_data) = cluster.node("n3");
    let _n3 = Killed(
        Command::new(env!("CARGO_BIN_EXE_wink"))
            .arg("serve")
            .arg(&n3_data)
            .args(["--listen", n3.trim_start_matches("http://")])
            .arg("--cluster")
            .arg(&own_path)
            .args(["--name", "n3", "--maintenance-interval", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let status = || get_json(&format!("{n3}/_cluster"));
    eventually("n3 answers", || status().is_some());

    let (n1, _) = cluster.node("n1");
    let (code, out, _) = cluster.wink("status", &[]);
    assert_eq!(code, 0);
    let map: serde_json::Value = serde_json::from_str(&out).unwrap();
    let owns = |title: &str| {
        let part = partition_of(D, title, PARTITIONS) as usize;
        map["map"]["owners"][part]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "n3")
    };
    let titles: Vec<String> = (0..40)
        .map(|i| format!("P{i}"))
        .filter(|t| owns(t))
        .collect();
    assert!(
        titles.len() >= 5,
        "n3 owns too few of the titles: {titles:?}"
    );
    let mut last = 0;
    for t in &titles {
        let a = put(&cluster.router, t, 1, &body(t, 1));
        assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
        last = last.max(a.header("x-wink-seq").unwrap().parse::<u64>().unwrap());
    }
    eventually("n3 applies what was written", || {
        status().is_some_and(|s| s["scanned"].as_u64() >= Some(last) && s["ready"] == true)
    });

    // Bad requests change nothing and say why: over the message limit (NATS max_payload 8 MB),
    // the reserved domain, an undeclared bucket, a sequence that is not a number.
    let big = vec![b'x'; 9 << 20];
    let a = put(&cluster.router, "Big", 1, &big);
    assert_eq!(a.status, 413, "{}", String::from_utf8_lossy(&a.body));
    let reserved = format!(
        "{}/wink.cluster/sys/key_rev_value/html/applied/1",
        cluster.router
    );
    let a = try_call(&agent, "PUT", &reserved, &[], Some(b"x")).unwrap();
    assert_eq!(a.status, 400);
    let undeclared = format!("{}/{D}/sys/key_rev_value/other/T/1", cluster.router);
    let a = try_call(&agent, "PUT", &undeclared, &[], Some(b"x")).unwrap();
    assert_eq!(a.status, 404);
    let a = try_call(
        &agent,
        "GET",
        &p(&n3, &titles[0], 1),
        &[("x-wink-min-seq", "-1")],
        None,
    )
    .unwrap();
    assert_eq!(a.status, 400);
    let a = try_call(&agent, "GET", &p(&cluster.router, "Big", 1), &[], None).unwrap();
    assert_eq!(a.status, 404, "a refused PUT stored nothing");

    // The cut.
    for p in &proxies {
        p.cut();
    }
    eventually("n3 notices the cut", || {
        status().is_some_and(|s| s["nats"] == false)
    });
    let refused = put(&n3, "P_new", 1, b"<p>during the cut</p>");
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    // Reads it can vouch for: what it applied, from its own store.
    for t in &titles {
        let a = try_call(&agent, "GET", &p(&n3, t, 1), &[], None).unwrap();
        assert_eq!(
            (a.status, a.body.clone()),
            (200, body(t, 1)),
            "{t} from n3 during the cut"
        );
    }
    // The rest of the cluster goes on; n3 does not vouch for what it has not seen.
    let later = put(&n1, &titles[0], 2, &body(&titles[0], 2));
    assert_eq!(later.status, 201);
    let seq = later.header("x-wink-seq").unwrap().to_string();
    let unseen = try_call(
        &agent,
        "GET",
        &p(&n3, &titles[0], 2),
        &[("x-wink-min-seq", &seq), ("x-wink-forwarded", "1")],
        None,
    )
    .unwrap();
    assert_eq!(
        unseen.status, 503,
        "n3 vouched for sequence {seq} during the cut"
    );

    // Reconnected, it catches up.
    for p in &proxies {
        p.restore();
    }
    eventually("n3 reconnects", || {
        status().is_some_and(|s| s["nats"] == true)
    });
    eventually("n3 catches up", || {
        try_call(
            &agent,
            "GET",
            &p(&n3, &titles[0], 2),
            &[("x-wink-min-seq", &seq), ("x-wink-forwarded", "1")],
            None,
        )
        .is_ok_and(|a| a.status == 200 && a.body == body(&titles[0], 2))
    });
    let again = put(&n3, "P_new", 1, b"<p>after the cut</p>");
    assert_eq!(
        again.status,
        201,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    // n3 runs outside cluster/ctl here: verify the others' agreement with it after all.
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(code, 0, "wink cluster verify: {out} {err}");

    // verify finds a difference: a render slipped into one owner's store behind the cluster's
    // back (n1 stopped, `wink put` into its bucket, n1 started again).
    let n1_title = (0..200)
        .map(|i| format!("Q{i}"))
        .find(|t| {
            let part = partition_of(D, t, PARTITIONS) as usize;
            map["map"]["owners"][part]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "n1")
        })
        .unwrap();
    cluster.ctl("stop", "n1");
    let (_, n1_data) = cluster.node("n1");
    let mut put_cmd = Command::new(env!("CARGO_BIN_EXE_wink"))
        .arg("put")
        .arg(n1_data.join("html"))
        .args([D, n1_title.as_str(), "1"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    put_cmd
        .stdin
        .take()
        .unwrap()
        .write_all(b"<p>only on n1</p>")
        .unwrap();
    assert!(put_cmd.wait().unwrap().success());
    cluster.ctl("start", "n1");
    let (code, out, err) = cluster.wink("verify", &[]);
    assert_eq!(
        code, 1,
        "wink cluster verify missed a difference: {out} {err}"
    );
    assert!(out.contains(&n1_title), "{out}");
}
