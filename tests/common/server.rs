//! Running `wink serve` for a test: the real binary on an ephemeral loopback port, and a small
//! HTTP client (ureq) that returns every answer, errors included, as (status, headers, body).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const D: &str = "en.wikipedia.org";

/// A running server; killed (SIGKILL) when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub root: PathBuf,
    /// Its standard error so far (read by a thread: a pipe nobody reads would fill, and the
    /// server's logs would then drop lines).
    err: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `wink serve ROOT --listen 127.0.0.1:0 ARGS…` and waits for its `listening on` line.
    pub fn start(root: &Path, args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wink"));
        cmd.arg("serve").arg(root).args(["--listen", "127.0.0.1:0"]);
        cmd.args(args);
        Server::spawn(cmd, root)
    }

    /// Starts the server from `cmd` (which must print the `listening on` line).
    pub fn spawn(mut cmd: Command, root: &Path) -> Server {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wink serve starts");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("a line from wink serve");
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = child.kill();
            panic!("wink serve did not start: {line:?} {err}");
        };
        let err = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stderr.take().map(|mut e| {
            let err = err.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = e.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    err.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        });
        Server {
            addr: addr.to_string(),
            child,
            root: root.to_path_buf(),
            err,
            reader,
        }
    }

    /// What the server wrote to its standard error so far (its logs).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// `http://ADDR`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `http://ADDR/DOMAIN/sys/key_rev_value/BUCKET` + `rest`.
    pub fn p(&self, bucket: &str, rest: &str) -> String {
        self.url(&format!("/{D}/sys/key_rev_value/{bucket}{rest}"))
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit (at most `timeout`); returns its status and stderr.
    pub fn terminate(&mut self, timeout: Duration) -> (ExitStatus, String) {
        // SAFETY: kill(2) with a pid this test started and a valid signal number.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return (status, self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "wink serve did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("JSON body ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Asserts a problem+json answer with `status` and the HyperSwitch type `kind`.
    pub fn problem(&self, status: u16, kind: &str) -> serde_json::Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let j = self.json();
        assert_eq!(
            j["type"],
            format!("https://mediawiki.org/wiki/HyperSwitch/errors/{kind}")
        );
        assert!(j["title"].as_str().is_some_and(|t| t.ends_with('.')), "{j}");
        assert!(j["method"].as_str().is_some(), "{j}");
        assert!(j["uri"].as_str().is_some_and(|u| u.starts_with('/')), "{j}");
        j
    }
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

/// One request; `body` is sent when given. A transport failure fails the test.
pub fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    try_call(agent, method, url, headers, body).unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

/// One request that may fail at the transport (a node killed under it): `Err` then.
pub fn try_call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Answer, String> {
    let mut req = agent.request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(e.to_string()),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .map(|n| {
            let v = resp.header(&n).unwrap_or("").to_string();
            (n.to_ascii_lowercase(), v)
        })
        .collect();
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

pub fn get(agent: &ureq::Agent, url: &str) -> Answer {
    call(agent, "GET", url, &[], None)
}

pub fn put(agent: &ureq::Agent, url: &str, content_type: &str, body: &[u8]) -> Answer {
    call(
        agent,
        "PUT",
        url,
        &[("Content-Type", content_type)],
        Some(body),
    )
}

/// Creates bucket `name` with `settings` (JSON), expecting 201.
pub fn create_bucket(server: &Server, name: &str, settings: &str) {
    let a = call(
        &agent(),
        "PUT",
        &server.p(name, ""),
        &[("Content-Type", "application/json")],
        Some(settings.as_bytes()),
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
}

/// A metric's value (an unlabelled sample) from the server's `/metrics`, rounded up.
pub fn metric(s: &Server, name: &str) -> u64 {
    let text = String::from_utf8(get(&agent(), &s.url("/metrics")).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v.ceil() as u64)
        .unwrap_or_else(|| panic!("{name} in /metrics"))
}

/// Every file under `dir` with its bytes.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}
