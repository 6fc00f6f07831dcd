//! The write path against the disk's own figures, measured in the same run:
//!
//!     flock /work/notes/bench.lock cargo bench --bench commit [-- --dir D --puts N --load-mib M]
//!
//! - **commit latency**: one 8 KiB put committed at a time (what `wink serve` does at 1
//!   connection), p50 and p99, beside a 4 KiB append + fdatasync to a file in the same
//!   directory (the sync floor), interleaved with the puts so that both see the same disk;
//! - **load**: renders of 2–16 KiB loaded with one commit at the end and with a commit per
//!   1,000 puts, MB/s of render bytes, beside a plain `write` + `fdatasync` of the same number
//!   of bytes to one file in the same directory (the durable sequential write ceiling);
//! - **page cache**: after each phase, the bytes of every file of the store resident in the page
//!   cache (mincore; the title records and indexes counted too), against the bytes written.
//!
//! The fdatasyncs of one commit are counted by `benches/syscalls.sh` (strace). Nothing here is a
//! test: no figure fails anything.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use wink::store::{Config, Put, Store, StoreOptions};

struct Opts {
    dir: PathBuf,
    puts: usize,
    load_mib: u64,
}

fn opts() -> Opts {
    let mut o = Opts {
        dir: PathBuf::from("/tmp/wink-bench-commit"),
        puts: 400,
        load_mib: 512,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--dir" => o.dir = PathBuf::from(value),
            "--puts" => o.puts = value.parse().expect("--puts N"),
            "--load-mib" => o.load_mib = value.parse().expect("--load-mib M"),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// Render `i`: HTML-like text of `len` bytes.
fn render(i: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 100);
    let mut n = 0u64;
    while v.len() < len {
        let p = format!("<p id=\"p{n}\">Title {i}, paragraph {n}: some text of a wiki page.</p>\n");
        v.extend_from_slice(p.as_bytes());
        n += 1;
    }
    v.truncate(len);
    v
}

fn load_len(i: u64) -> usize {
    2048 + (i.wrapping_mul(2_654_435_761) % (14 * 1024)) as usize
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Bytes of the files directly under `dir` resident in the page cache, and their total length.
fn resident(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let (r, len) = wink::storage::residency(&p).unwrap();
            total.0 += r;
            total.1 += len;
        }
    }
    total
}

/// Drops the page cache of every file under `dir` (only this run's files: the rest of the
/// machine keeps its cache).
fn drop_cache(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let f = std::fs::File::open(&p).unwrap();
            f.sync_all().unwrap();
            let _ = nix::fcntl::posix_fadvise(
                std::os::unix::io::AsRawFd::as_raw_fd(&f),
                0,
                0,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            );
        }
    }
}

fn fresh_store(dir: &Path) -> Store {
    let _ = std::fs::remove_dir_all(dir);
    Store::init(dir, &Config::default(), &StoreOptions::writer()).unwrap();
    Store::open(dir, &StoreOptions::writer()).unwrap()
}

fn put<'a>(title: &'a str, value: &'a [u8]) -> Put<'a> {
    Put {
        domain: "d",
        title,
        rev: 1,
        tid: None,
        content_type: "text/html",
        labels: &wink::store::Labels::NONE,
        value,
        historical: false,
    }
}

/// One 8 KiB put committed at a time, interleaved with 4 KiB append + fdatasync probes.
fn commit_latency(o: &Opts) {
    let dir = o.dir.join("latency");
    let mut store = fresh_store(&dir);
    drop_cache(&dir);
    let probe_path = o.dir.join("probe");
    let mut probe = std::fs::File::create(&probe_path).unwrap();
    let block = vec![7u8; 4096];
    let (mut commits, mut floor) = (Vec::new(), Vec::new());
    let mut written = 0u64;
    for i in 0..o.puts {
        let value = render(i as u64, 8192);
        let title = format!("T{i}");
        let t = Instant::now();
        store.put(&put(&title, &value)).unwrap();
        commits.push(t.elapsed().as_secs_f64() * 1e6);
        written += value.len() as u64;
        let t = Instant::now();
        probe.write_all(&block).unwrap();
        probe.sync_data().unwrap();
        floor.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (cached, _) = resident(&dir);
    commits.sort_by(f64::total_cmp);
    floor.sort_by(f64::total_cmp);
    let (c50, c99, f50, f99) = (
        pct(&commits, 0.5),
        pct(&commits, 0.99),
        pct(&floor, 0.5),
        pct(&floor, 0.99),
    );
    println!(
        "commit latency, one 8 KiB put a commit ({} puts): p50 {c50:.0} us, p99 {c99:.0} us; \
         4 KiB append + fdatasync: p50 {f50:.0} us, p99 {f99:.0} us; ratio p50 {:.2}x, \
         p99 {:.2}x (target p50 <= 1.3x)",
        o.puts,
        c50 / f50,
        c99 / f99
    );
    println!(
        "  page cache after the puts: {:.1} KiB resident of {:.1} KiB written ({:.1}%, target \
         <= 5%)",
        cached as f64 / 1024.0,
        written as f64 / 1024.0,
        100.0 * cached as f64 / written as f64
    );
    drop(store);
    let _ = std::fs::remove_file(&probe_path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plain write + fdatasync of `bytes` bytes to one new file in `dir`, MB/s.
fn plain_write(dir: &Path, bytes: u64) -> f64 {
    let path = dir.join("plain");
    let _ = std::fs::remove_file(&path);
    let chunk = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    let mut f = std::fs::File::create(&path).unwrap();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_data().unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    bytes as f64 / secs / 1e6
}

/// Loads renders of about `o.load_mib` MiB, committing every `every` puts (0: once at the end).
fn load(o: &Opts, every: usize) -> (f64, u64, u64) {
    let dir = o.dir.join("load");
    let mut store = fresh_store(&dir);
    drop_cache(&dir);
    let target = o.load_mib << 20;
    // The renders are made before the clock starts: the load measures the store, not this.
    let mut values = Vec::new();
    let mut bytes = 0u64;
    let mut i = 0u64;
    while bytes < target {
        let v = render(i, load_len(i));
        bytes += v.len() as u64;
        values.push(v);
        i += 1;
    }
    let titles: Vec<String> = (0..values.len()).map(|i| format!("T{i}")).collect();
    let t = Instant::now();
    let mut batch = store.batch();
    for (n, v) in values.iter().enumerate() {
        batch.put(&put(&titles[n], v)).unwrap();
        if every > 0 && (n + 1) % every == 0 {
            batch.commit().unwrap();
            batch = store.batch();
        }
    }
    batch.commit().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let (cached, _) = resident(&dir);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    (bytes as f64 / secs / 1e6, bytes, cached)
}

fn main() {
    let o = opts();
    std::fs::create_dir_all(&o.dir).unwrap();
    println!(
        "wink commit bench: {} (load average {})",
        o.dir.display(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    commit_latency(&o);
    for every in [0usize, 1000] {
        let (mbs, bytes, cached) = load(&o, every);
        let plain = plain_write(&o.dir, bytes);
        let how = if every == 0 {
            "one commit at the end".to_string()
        } else {
            format!("a commit per {every} puts")
        };
        println!(
            "load, {how}: {mbs:.0} MB/s of {:.0} MiB; plain write + fdatasync of the same bytes: \
             {plain:.0} MB/s; ratio {:.2} (target >= 0.80); page cache left: {:.1}% of the bytes \
             (target <= 5%)",
            bytes as f64 / (1 << 20) as f64,
            mbs / plain,
            100.0 * cached as f64 / bytes as f64
        );
    }
}
