//! `wink serve` against nginx serving the same renders as static files, with wrk, on loopback.
//!
//!     flock /tmp/wink-bench.lock cargo bench --bench serve [-- --titles N --seconds S]
//!
//! Installs wrk and nginx from Debian's packages when missing (benches/serve/install.sh). One
//! run: 100,000 titles (one render each, 2–16 KiB, mean ~8 KiB) loaded into a store and into a
//! file-per-render tree; then
//! - GET of a random title's latest render at 16 and 64 connections, warm and cold (page cache
//!   dropped before the run): requests/s, p50, p99 for each server, and wink's ratios;
//! - durable PUTs of 8 KiB renders to wink at 1, 16 and 64 connections: puts/s, p50, p99, the
//!   mean group-commit batch, the server's RSS, and the page cache the PUTs left holding the
//!   bucket's files (mincore) against the bytes written;
//! - the same page-cache measure for `wink put` run once per render (a process each) and for
//!   `wink import` of a corpus of files: every file of the data root counted (containers,
//!   indexes, title records, journals), and the files that grew the most named.
//!
//! `WINK_BENCH_ONLY=put` skips nginx and the GETs (the write path's figures alone).
//!
//! `WINK_BENCH_BIN=PATH` runs another build of `wink` (a before/after comparison on the same
//! data, in one session).
//!
//! Both servers and wrk share the machine's cores: the figures are ratios of one run, with the
//! load average printed beside them. Nothing here is a test: no figure fails anything.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wink::store::{Config, Put, Store, StoreOptions};

const DOMAIN: &str = "d";

struct Opts {
    titles: u64,
    seconds: u64,
    dir: PathBuf,
}

fn opts() -> Opts {
    let mut o = Opts {
        titles: 100_000,
        seconds: 10,
        dir: PathBuf::from("/tmp/wink-bench-serve"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--titles" => o.titles = value.parse().expect("--titles N"),
            "--seconds" => o.seconds = value.parse().expect("--seconds S"),
            "--dir" => o.dir = PathBuf::from(value),
            // cargo bench passes --bench.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// The render of title `i`: HTML-like text, 2–16 KiB.
fn render(i: u64) -> Vec<u8> {
    let len = 2048 + (i.wrapping_mul(2_654_435_761) % (14 * 1024)) as usize;
    let mut v = Vec::with_capacity(len);
    let mut n = 0u64;
    while v.len() < len {
        let p = format!("<p id=\"p{n}\">Title {i}, paragraph {n}: some text of a wiki page.</p>\n");
        v.extend_from_slice(p.as_bytes());
        n += 1;
    }
    v.truncate(len);
    v
}

fn tree_path(tree: &Path, i: u64) -> PathBuf {
    tree.join(format!("{}/{i}/latest.html", i % 1000))
}

/// Loads the store (`root/b`) and the tree with the same renders, once per title count.
fn load(o: &Opts) {
    let marker = o.dir.join(format!("loaded-{}", o.titles));
    if marker.exists() {
        println!("data: reusing {}", o.dir.display());
        return;
    }
    let _ = std::fs::remove_dir_all(&o.dir);
    std::fs::create_dir_all(&o.dir).unwrap();
    let started = Instant::now();
    let dir = o.dir.join("root/b");
    Store::init(&dir, &Config::default(), &StoreOptions::writer()).unwrap();
    let mut store = Store::open(&dir, &StoreOptions::writer()).unwrap();
    let tree = o.dir.join("tree");
    for chunk in (0..o.titles).collect::<Vec<_>>().chunks(1000) {
        let mut batch = store.batch();
        for &i in chunk {
            let value = render(i);
            batch
                .put(&Put {
                    domain: DOMAIN,
                    title: &format!("T{i}"),
                    rev: 1,
                    tid: None,
                    content_type: "text/html",
                    labels: &wink::store::Labels::NONE,
                    value: &value,
                    historical: false,
                })
                .unwrap();
            let path = tree_path(&tree, i);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &value).unwrap();
        }
        batch.commit().unwrap();
    }
    drop(store);
    Command::new("sync").status().unwrap();
    std::fs::write(&marker, b"").unwrap();
    println!(
        "data: {} titles in the store and the tree, {:.1} s",
        o.titles,
        started.elapsed().as_secs_f64()
    );
}

/// One wrk run's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    errors: u64,
}

fn micros(text: &str) -> f64 {
    let (num, unit) = text
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((text, "us"), |at| text.split_at(at));
    let v: f64 = num.trim().parse().unwrap_or(f64::NAN);
    match unit {
        "us" => v,
        "ms" => v * 1e3,
        "s" => v * 1e6,
        _ => f64::NAN,
    }
}

fn wrk(url: &str, script: &Path, conns: u32, seconds: u64, arg: &str) -> Run {
    let threads = conns.clamp(1, 2);
    let out = Command::new("wrk")
        .args([
            &format!("-t{threads}"),
            &format!("-c{conns}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-s",
        ])
        .arg(script)
        .arg(url)
        .args(["--", arg])
        .output()
        .expect("wrk runs (benches/serve/install.sh)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut run = Run::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["50%", v] => run.p50_us = micros(v),
            ["99%", v] => run.p99_us = micros(v),
            ["Requests/sec:", v] => run.rps = v.parse().unwrap_or(0.0),
            ["Non-2xx", "or", "3xx", "responses:", n] => {
                run.errors += n.parse::<u64>().unwrap_or(0)
            }
            ["Socket", "errors:", ..] => {
                run.errors += line
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse::<u64>().ok())
                    .sum::<u64>()
            }
            _ => {}
        }
    }
    if run.rps == 0.0 {
        eprintln!(
            "wrk said:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    run
}

fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", b"3\n").is_ok()
}

fn rss_kib(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .sum()
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

struct Wink {
    child: Child,
    addr: String,
}

impl Drop for Wink {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the server this program started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn start_wink(root: &Path) -> Wink {
    // WINK_BENCH_BIN runs another build of the server against the same data (a before/after
    // comparison in one session); the default is this checkout's.
    let mut child = Command::new(wink_bin())
        .arg("serve")
        .arg(root)
        .args(["--listen", "127.0.0.1:0", "--maintenance-interval", "0"])
        // As nginx runs here: no access log.
        .args(["--access-log", "off"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    Wink { child, addr }
}

struct Nginx {
    child: Child,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the master process this program started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// The master and its workers.
    fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.child.id()];
        let out = Command::new("pgrep")
            .args(["-P", &self.child.id().to_string()])
            .output()
            .unwrap();
        pids.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        pids
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx as a static server is best configured: sendfile, open-file cache, no access log, one
/// worker per core, keep-alive without a request limit.
fn start_nginx(o: &Opts) -> Nginx {
    let port = free_port();
    let dir = o.dir.join("nginx");
    std::fs::create_dir_all(&dir).unwrap();
    let conf = format!(
        "worker_processes 2;\nworker_rlimit_nofile 20000;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n\
         keepalive_requests 10000000;\n  open_file_cache max=16000 inactive=120s;\n\
         default_type text/html;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         server {{ listen 127.0.0.1:{port}; root {tree}; }}\n}}\n",
        d = dir.display(),
        tree = o.dir.join("tree").display()
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("/usr/sbin/nginx")
        .arg("-c")
        .arg(&path)
        .spawn()
        .expect("nginx runs (benches/serve/install.sh)");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Nginx { child, port }
}

fn scripts(o: &Opts) -> (PathBuf, PathBuf, PathBuf) {
    let dir = o.dir.join("lua");
    std::fs::create_dir_all(&dir).unwrap();
    let n = o.titles;
    let seed = "math.randomseed(os.time() + math.floor(os.clock() * 1e6))";
    let wink = dir.join("get_wink.lua");
    std::fs::write(
        &wink,
        format!(
            "{seed}\nrequest = function()\n  return wrk.format(\"GET\", \
             \"/{DOMAIN}/sys/key_rev_value/b/T\" .. math.random(0, {}))\nend\n",
            n - 1
        ),
    )
    .unwrap();
    let nginx = dir.join("get_nginx.lua");
    std::fs::write(
        &nginx,
        format!(
            "{seed}\nrequest = function()\n  local i = math.random(0, {})\n  \
             return wrk.format(\"GET\", \"/\" .. (i % 1000) .. \"/\" .. i .. \"/latest.html\")\nend\n",
            n - 1
        ),
    )
    .unwrap();
    let put = dir.join("put_wink.lua");
    std::fs::write(
        &put,
        format!(
            "local n = 0\nlocal threads = 0\nlocal body = string.rep(\"<p>8 KiB of html</p>\", 410) \
             .. string.rep(\"x\", 8192 - 410 * 20)\n\
             setup = function(thread)\n  thread:set(\"id\", threads)\n  threads = threads + 1\nend\n\
             init = function(args)\n  tag = args[1]\nend\n\
             request = function()\n  n = n + 1\n  return wrk.format(\"PUT\", \
             \"/{DOMAIN}/sys/key_rev_value/p/W\" .. tag .. \"-\" .. id .. \"-\" .. n .. \"/1\", \
             {{[\"Content-Type\"] = \"text/html\"}}, body)\nend\n"
        ),
    )
    .unwrap();
    (wink, nginx, put)
}

/// A figure from `/metrics`.
fn metric(addr: &str, line_start: &str) -> f64 {
    let body = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    body.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The disk's floor for a commit at this minute: median and p99 of a 4 KiB append + fdatasync,
/// in microseconds (a group commit makes several of them).
fn fdatasync_floor(dir: &Path) -> (f64, f64) {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![1u8; 4096];
    let mut times: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            f.write_all(&block).unwrap();
            f.sync_data().unwrap();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    times.sort_by(f64::total_cmp);
    (times[100], times[197])
}

/// Bytes resident in the page cache of every file under `dir`, at any depth, by path.
fn resident_files(dir: &Path) -> std::collections::BTreeMap<PathBuf, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                let r = wink::storage::residency(&p).map_or(0, |(r, _)| r);
                out.insert(p, r);
            }
        }
    }
    out
}

/// What the page cache gained over `before`, per file of `dir`: the total, and a line naming
/// the files that gained most (as a percentage of `written`).
fn grown(
    dir: &Path,
    before: &std::collections::BTreeMap<PathBuf, u64>,
    written: f64,
) -> (f64, String) {
    let after = resident_files(dir);
    let mut per: Vec<(u64, String)> = after
        .iter()
        .map(|(p, r)| {
            let g = r.saturating_sub(before.get(p).copied().unwrap_or(0));
            let name = p.strip_prefix(dir).unwrap_or(p).display().to_string();
            (g, name)
        })
        .filter(|(g, _)| *g > 0)
        .collect();
    per.sort_by_key(|p| std::cmp::Reverse(p.0));
    let total: u64 = per.iter().map(|(g, _)| g).sum();
    let mut line = String::new();
    for (g, name) in per.iter().take(5) {
        let _ = write!(
            line,
            "{name} {:.2}%  ",
            100.0 * *g as f64 / written.max(1.0)
        );
    }
    (total as f64, line)
}

fn wink_bin() -> std::ffi::OsString {
    std::env::var_os("WINK_BENCH_BIN")
        .unwrap_or_else(|| std::ffi::OsString::from(env!("CARGO_BIN_EXE_wink")))
}

/// `wink put` once per 8 KiB render (a process each, one commit each) into a fresh store, then
/// `wink import` of a corpus of files into another: the page cache each left, of the bytes
/// written, every file of the store counted. The sources' own pages are dropped first.
fn cli_writes(o: &Opts, summary: &mut String) {
    let dir = o.dir.join("cli");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let st = Command::new(wink_bin())
            .args(args)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "wink {args:?}");
    };
    let value_path = dir.join("value.html");
    std::fs::write(&value_path, render(7).repeat(2).split_at(8192).0).unwrap();
    let puts = dir.join("puts");
    run(&["init".as_ref(), puts.as_os_str()]);
    let before = resident_files(&puts);
    let n = 1000u64;
    let t = Instant::now();
    for i in 0..n {
        let title = format!("T{i}");
        run(&[
            "put".as_ref(),
            puts.as_os_str(),
            DOMAIN.as_ref(),
            title.as_ref(),
            "1".as_ref(),
            value_path.as_os_str(),
        ]);
    }
    let secs = t.elapsed().as_secs_f64();
    let written = n as f64 * 8192.0;
    let (g, files) = grown(&puts, &before, written);
    println!(
        "\n== wink put, a process per 8 KiB render: {n} puts in {secs:.1} s; page cache grown \
         {:.2}% of {:.1} MB written\n   {files}",
        100.0 * g / written,
        written / 1e6
    );
    let _ = writeln!(
        summary,
        "wink put x{n}: page cache grown {:.2}% of bytes written (target 5%)",
        100.0 * g / written
    );

    // A corpus of 20,000 renders of 2–16 KiB, ten revisions of 2,000 documents.
    let corpus = dir.join("corpus");
    let mut manifest = String::from("doc\trev\ttimestamp\tbytes\tsha1\n");
    let mut written = 0f64;
    for i in 0..20_000u64 {
        let (doc, rev) = (i % 2000, 1 + i / 2000);
        let bytes = render(i);
        let d = corpus.join(format!("doc{doc}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("{rev}.html")), &bytes).unwrap();
        let _ = writeln!(
            manifest,
            "doc{doc}\t{rev}\t{}\t{}\t-",
            1_600_000_000 + i,
            bytes.len()
        );
        written += bytes.len() as f64;
    }
    std::fs::write(corpus.join("manifest.tsv"), manifest).unwrap();
    drop_cache_under(&corpus);
    let store = dir.join("import");
    run(&["init".as_ref(), store.as_os_str()]);
    let before = resident_files(&store);
    let t = Instant::now();
    run(&["import".as_ref(), store.as_os_str(), corpus.as_os_str()]);
    let secs = t.elapsed().as_secs_f64();
    let (g, files) = grown(&store, &before, written);
    let (src, _) = grown(&corpus, &std::collections::BTreeMap::new(), written);
    println!(
        "\n== wink import, 20,000 renders of files ({:.1} MB) in {secs:.1} s; page cache grown \
         {:.2}% of the bytes (the corpus read: {:.1}%)\n   {files}",
        written / 1e6,
        100.0 * g / written,
        100.0 * src / written
    );
    let _ = writeln!(
        summary,
        "wink import: page cache grown {:.2}% of bytes written (target 5%)",
        100.0 * g / written
    );
}

/// Drops the page cache of every file under `dir` (this run's files only).
fn drop_cache_under(dir: &Path) {
    for p in resident_files(dir).keys() {
        let f = std::fs::File::open(p).unwrap();
        let _ = nix::fcntl::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
    }
}

fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The GET phase: wink and nginx, warm and cold, at 16 and 64 connections.
fn gets(o: &Opts, wink_server: &Wink, get_wink: &Path, get_nginx: &Path, summary: &mut String) {
    let wink_url = format!("http://{}", wink_server.addr);
    let nginx = start_nginx(o);
    let nginx_url = format!("http://127.0.0.1:{}", nginx.port);
    // Both serve the same bytes.
    for i in [0, o.titles / 2, o.titles - 1] {
        let body = |url: String| {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut ureq::get(&url).call().unwrap().into_reader(), &mut v)
                .unwrap();
            v
        };
        let w = body(format!("{wink_url}/{DOMAIN}/sys/key_rev_value/b/T{i}"));
        let n = body(format!("{nginx_url}/{}/{i}/latest.html", i % 1000));
        assert!(w == render(i) && n == w, "title {i}: the servers differ");
    }

    println!(
        "\n== GET latest, {} titles, {} s per run, wrk -t2",
        o.titles, o.seconds
    );
    println!(
        "{:<6} {:>5} {:<6} {:>10} {:>9} {:>9} {:>7} {:>9}",
        "cache", "conns", "server", "req/s", "p50 us", "p99 us", "errors", "RSS MiB"
    );
    // Warm both once: every title read at least about once.
    let warm_secs = o.seconds.max(5);
    wrk(&wink_url, get_wink, 64, warm_secs, "");
    wrk(&nginx_url, get_nginx, 64, warm_secs, "");
    for cache in ["warm", "cold"] {
        for conns in [16u32, 64] {
            let mut pair = Vec::new();
            for (name, url, script) in [
                ("wink", &wink_url, &get_wink),
                ("nginx", &nginx_url, &get_nginx),
            ] {
                if cache == "cold" && !drop_caches() {
                    println!("cold: cannot drop the page cache (not root); skipped");
                    continue;
                }
                let seconds = if cache == "cold" {
                    o.seconds.div_ceil(2)
                } else {
                    o.seconds
                };
                let r = wrk(url, script, conns, seconds, "");
                let rss = if name == "wink" {
                    rss_kib(&[wink_server.child.id()])
                } else {
                    rss_kib(&nginx.pids())
                };
                println!(
                    "{cache:<6} {conns:>5} {name:<6} {:>10.0} {:>9.0} {:>9.0} {:>7} {:>9.1}",
                    r.rps,
                    r.p50_us,
                    r.p99_us,
                    r.errors,
                    rss as f64 / 1024.0
                );
                pair.push(r);
            }
            if let [w, n] = pair.as_slice() {
                let _ = writeln!(
                    summary,
                    "GET {cache} c{conns}: wink/nginx req/s {:.2}x, p50 {:.2}x, p99 {:.2}x \
                     (wink p99 {:.2} ms)",
                    w.rps / n.rps,
                    w.p50_us / n.p50_us,
                    w.p99_us / n.p99_us,
                    w.p99_us / 1e3
                );
            }
        }
    }
    drop(nginx);
}

fn main() {
    let o = opts();
    let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/serve/install.sh");
    assert!(
        Command::new(&install).status().unwrap().success(),
        "install.sh"
    );
    println!("load average before: {}", uptime());
    load(&o);
    let (get_wink, get_nginx, put_wink) = scripts(&o);
    // The PUTs' bucket of an earlier run: each run writes ~1 GB more into it otherwise, and the
    // page cache it measures is of this run's puts alone.
    let _ = std::fs::remove_dir_all(o.dir.join("root/p"));
    let wink_server = start_wink(&o.dir.join("root"));
    let wink_url = format!("http://{}", wink_server.addr);
    let mut summary = String::new();
    let only_put = std::env::var("WINK_BENCH_ONLY").is_ok_and(|v| v == "put");
    if !only_put {
        gets(&o, &wink_server, &get_wink, &get_nginx, &mut summary);
    }

    println!(
        "\n== durable PUT of 8 KiB renders to wink, {} s per run",
        o.seconds
    );
    println!(
        "{:>5} {:>9} {:>9} {:>9} {:>10} {:>9} {:>11} {:>10}",
        "conns", "puts/s", "p50 us", "p99 us", "mean batch", "RSS MiB", "written MB", "cached %"
    );
    let (floor50, floor99) = fdatasync_floor(&o.dir);
    println!("(4 KiB append + fdatasync now: p50 {floor50:.0} us, p99 {floor99:.0} us)");
    let _ = writeln!(
        summary,
        "disk floor: 4 KiB append + fdatasync p50 {floor50:.0} us, p99 {floor99:.0} us"
    );
    let created = ureq::put(&format!("{wink_url}/{DOMAIN}/sys/key_rev_value/p")).call();
    assert!(created.is_ok(), "bucket p");
    // Every file of the data root is counted (the bucket's, and the root's own).
    let root = o.dir.join("root");
    let mut per_file = String::new();
    for conns in [1u32, 16, 64] {
        let batch_sum = metric(
            &wink_server.addr,
            "wink_group_commit_batch_puts_sum{bucket=\"p\"}",
        );
        let batch_count = metric(
            &wink_server.addr,
            "wink_group_commit_batch_puts_count{bucket=\"p\"}",
        );
        let resident_before = resident_files(&root);
        let r = wrk(&wink_url, &put_wink, conns, o.seconds, &format!("c{conns}"));
        let puts = metric(
            &wink_server.addr,
            "wink_group_commit_batch_puts_sum{bucket=\"p\"}",
        ) - batch_sum;
        let commits = metric(
            &wink_server.addr,
            "wink_group_commit_batch_puts_count{bucket=\"p\"}",
        ) - batch_count;
        let written = puts * 8192.0;
        let (grown, files) = grown(&root, &resident_before, written);
        let _ = writeln!(per_file, "   c{conns}: {files}");
        println!(
            "{conns:>5} {:>9.0} {:>9.0} {:>9.0} {:>10.1} {:>9.1} {:>11.1} {:>10.2}",
            r.rps,
            r.p50_us,
            r.p99_us,
            puts / commits.max(1.0),
            rss_kib(&[wink_server.child.id()]) as f64 / 1024.0,
            written / 1e6,
            100.0 * grown / written.max(1.0)
        );
        if r.errors > 0 {
            println!("      ({} errors)", r.errors);
        }
        let _ = writeln!(
            summary,
            "PUT c{conns}: {:.0} puts/s (target at c64: 20000), p99 {:.2} ms, page cache grown \
             {:.2}% of bytes written (target 5%)",
            r.rps,
            r.p99_us / 1e3,
            100.0 * grown / written.max(1.0)
        );
    }
    println!("page cache grown, the files that grew most, of the bytes written:\n{per_file}");
    let peak = peak_rss_kib(wink_server.child.id()) as f64 / 1024.0;
    let _ = writeln!(summary, "wink serve peak RSS {peak:.1} MiB (target 256)");
    drop(wink_server);
    cli_writes(&o, &mut summary);
    println!("\n== summary\n{summary}");
    println!("load average after: {}", uptime());
}
