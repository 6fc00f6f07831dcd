//! Store compaction on the shared corpus, in one run (docs/PERFORMANCE.md § Compaction):
//!
//! 1. speed: an unthrottled `maintenance::compact` beside plain copies of the same live bytes;
//! 2. space: container bytes, live and dead bytes before the compaction and after it;
//! 3. foreground `get_latest` latency (p50/p99) idle, then while a compaction throttled at
//!    `WINK_COMPACT_MBPS` (default 100 MB/s) runs, and the page cache the compaction leaves.
//!
//! `cargo bench --bench compact` prints a table of medians over `WINK_COMPACT_RUNS` runs
//! (default 5) and the targets (PASS/GAP).
//!
//! The store (built twice per run: one for 1–2, a fresh one for 3) lives in the target directory
//! (a disk file system, never a tmpfs), containers of `WINK_COMPACT_CONTAINER_MIB` (default 64).
//! Churn: every revision of the corpus (`WINK_CORPUS`, default `../shared/corpus/`, 20 documents
//! × 1,150 revisions, 129 MB; `WINK_COMPACT_COPIES` > 1 adds copies of each document as more
//! titles) is put `WINK_COMPACT_RENDERS` times (default 5, new tids: re-renders), revisions of all
//! titles interleaved by their position in their own history, the store's `ManualClock` advanced
//! 60 s per put. Policy: revisions `recent:TTL` with TTL = `WINK_COMPACT_RECENT` (default 0.75) of
//! the whole timeline, renders `latest:1:3600`, then take-downs (one whole title, the current
//! revision of two others) and the clock moved 3601 s on: every pushed-out render is past its grace,
//! revisions superseded in the first quarter of the timeline are past their TTL.
//!
//! What is compared in 1 (page cache of every store file dropped with `POSIX_FADV_DONTNEED`
//! before each contender; nothing else is dropped, so other processes are not disturbed):
//! - `compact`: `maintenance::compact` (min_dead 0.25, seal_current, unthrottled), wall time of the call
//!   (survey, title-grouped copy, validation, switch, record rewrite, removal).
//! - `copy live, file order`: the same live values (their extents, found by name through a
//!   read-only `Filesys` of each container rewritten), read with `pread` in offset order into a
//!   4096-aligned buffer and written to one new file, `fdatasync` at the end. The target's baseline.
//! - `copy live, title order`: the same, read in title order (as compaction orders its copy).
//! - `copy sequential`: as many bytes from the start of each container rewritten, in 1 MiB
//!   `pread`s: the disk's ceiling for this many bytes.
//! - `copy containers whole`: every byte of every container compacted (rewritten or dropped), in
//!   1 MiB `pread`s: the other reading of the target ("a copy of the containers compacted"),
//!   compared as container bytes / seconds.
//! - `survey only`: `maintenance::plan_compaction` (a dry run), for where the time goes.
//!
//! MB/s = live bytes copied (the compaction's `read_bytes`) / seconds, for all four; the
//! compaction's (read + written) / seconds, what `max_mbps` limits, is printed beside it.
//!
//! In 3, a second, read-only `Store` handle (opened before the compaction: it keeps reading the
//! generation it opened) does `WINK_COMPACT_READS` (default 1500) idle iterations, then
//! iterations until the compaction ends; the writer handle runs `maintenance::compact` with `max_mbps`
//! on another thread. One iteration: a random title; the page cache of the container datafiles
//! that existed when the phase began dropped (not timed); a timed `get_latest` (cold: the value
//! from disk, the title record from the cached meta files); the same `get_latest` again (warm).
//! Every value read is checked against the title's expected CRC-32 outside the timed section.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wink::clock::ManualClock;
use wink::filesys::{Filesys, OpenOptions};
use wink::maintenance;
use wink::maintenance::compact::{Action, CompactOptions, CompactReport};
use wink::storage::residency;
use wink::store::import::read_manifest;
use wink::store::policy::Renders;
use wink::store::Which;
use wink::store::{Config, Page, Policy, Put, Revisions, Store, StoreOptions, StoreStat};

const DOMAIN: &str = "corpus.example";
const T0: i64 = 1_700_000_000;
/// Store-clock seconds between two puts.
const STEP: i64 = 60;
/// Grace of a pushed-out render.
const GRACE: i64 = 3600;
/// Puts per commit while building.
const BATCH: usize = 100;

/// Prints a progress line (to stderr, with the time since the start).
fn step(what: &str) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    eprintln!("[{:7.1} s] {what}", start.elapsed().as_secs_f64());
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

struct Cfg {
    renders: usize,
    copies: usize,
    container_mib: u64,
    recent: f64,
    reads: usize,
    runs: usize,
    mbps: f64,
    corpus: PathBuf,
}

impl Cfg {
    fn from_env() -> Cfg {
        Cfg {
            renders: env("WINK_COMPACT_RENDERS", 5usize).max(1),
            copies: env("WINK_COMPACT_COPIES", 1usize).max(1),
            container_mib: env("WINK_COMPACT_CONTAINER_MIB", 64u64).max(1),
            recent: env("WINK_COMPACT_RECENT", 0.75f64),
            reads: env("WINK_COMPACT_READS", 1500usize).max(10),
            runs: env("WINK_COMPACT_RUNS", 5usize).max(1),
            mbps: env("WINK_COMPACT_MBPS", 100.0f64),
            corpus: std::env::var_os("WINK_CORPUS").map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
                PathBuf::from,
            ),
        }
    }
}

/// A title of the store: its name and its revisions (shared by the copies of a document).
struct Title {
    name: String,
    doc: usize,
}

struct Corpus {
    docs: Vec<Vec<(u64, Vec<u8>)>>,
    titles: Vec<Title>,
    raw: u64,
}

fn load(cfg: &Cfg) -> Option<Corpus> {
    let entries = read_manifest(&cfg.corpus).ok()?;
    let mut names: Vec<String> = Vec::new();
    let mut docs: Vec<Vec<(u64, Vec<u8>)>> = Vec::new();
    let mut raw = 0;
    for e in entries {
        let bytes = fs::read(&e.path).expect("corpus file");
        raw += bytes.len() as u64;
        let i = match names.iter().position(|n| *n == e.doc) {
            Some(i) => i,
            None => {
                names.push(e.doc.clone());
                docs.push(Vec::new());
                names.len() - 1
            }
        };
        docs[i].push((e.rev, bytes));
    }
    let mut titles = Vec::new();
    for copy in 0..cfg.copies {
        for (doc, name) in names.iter().enumerate() {
            let name = match copy {
                0 => name.clone(),
                c => format!("{name}-copy{c}"),
            };
            titles.push(Title { name, doc });
        }
    }
    Some(Corpus {
        docs,
        titles,
        raw: raw * cfg.copies as u64,
    })
}

fn opts(clock: &Arc<ManualClock>, writable: bool) -> StoreOptions {
    let base = if writable {
        StoreOptions::writer()
    } else {
        StoreOptions::read_only()
    };
    StoreOptions {
        clock: clock.clone(),
        ..base
    }
}

/// A churned store, and what `get_latest` must return for each readable title.
struct Churned {
    dir: PathBuf,
    clock: Arc<ManualClock>,
    store: Store,
    /// (title index, CRC-32 of its latest readable value).
    expected: Vec<(usize, u32)>,
    put_bytes: u64,
}

/// Puts every revision `renders` times, takes three things down and moves the clock past the
/// grace (see the module doc).
fn churn(dir: &Path, cfg: &Cfg, c: &Corpus) -> Churned {
    let mut events: Vec<(f64, usize, usize)> = Vec::new();
    for (t, title) in c.titles.iter().enumerate() {
        let n = c.docs[title.doc].len();
        events.extend((0..n).map(|i| ((i as f64 + 0.5) / n as f64, t, i)));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let span = (events.len() * cfg.renders) as i64 * STEP;
    let ttl = (cfg.recent * span as f64) as i64;
    let config = Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl },
            renders: Renders::Latest {
                count: 1,
                grace: GRACE,
            },
            historical_ttl: ttl,
        },
        container_bytes: cfg.container_mib << 20,
        ..Config::default()
    };
    let clock = Arc::new(ManualClock::new(T0));
    Store::init(dir, &config, &opts(&clock, true)).expect("init");
    let mut store = Store::open(dir, &opts(&clock, true)).expect("open");
    let (mut pending, mut put_bytes) = (0, 0u64);
    let mut batch = store.batch();
    for (_, t, i) in &events {
        let (rev, value) = &c.docs[c.titles[*t].doc][*i];
        for _ in 0..cfg.renders {
            clock.advance(STEP);
            batch
                .put(&Put {
                    domain: DOMAIN,
                    title: &c.titles[*t].name,
                    rev: *rev,
                    tid: None,
                    content_type: "text/html",
                    labels: &wink::store::Labels::NONE,
                    value,
                    historical: false,
                })
                .expect("put");
            put_bytes += value.len() as u64;
            pending += 1;
            if pending == BATCH {
                batch.commit().expect("commit");
                pending = 0;
            }
        }
    }
    batch.commit().expect("commit");
    take_downs(&mut store, c);
    clock.advance(GRACE + 1);
    let expected = c
        .titles
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let got = store
                .get(DOMAIN, &t.name, Which::Latest)
                .expect("get_latest")?;
            Some((i, crc32fast::hash(&got.value)))
        })
        .collect();
    Churned {
        dir: dir.to_path_buf(),
        clock,
        store,
        expected,
        put_bytes,
    }
}

/// One whole title, and the current revision of two others.
fn take_downs(store: &mut Store, c: &Corpus) {
    let n = c.titles.len();
    store
        .take_down(DOMAIN, &c.titles[3 % n].name, None)
        .expect("take down");
    for t in [5 % n, 7 % n] {
        let rev = c.docs[c.titles[t].doc].last().map(|r| r.0).unwrap_or(1);
        store
            .take_down(DOMAIN, &c.titles[t].name, Some(rev))
            .expect("take down");
    }
}

// ---- page cache and files ---------------------------------------------------------------------

fn store_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .expect("store directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn is_container_data(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('c') && name.ends_with(".data")
}

fn fadvise_dontneed(file: &File) {
    let _ = nix::fcntl::posix_fadvise(
        file.as_raw_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
}

/// Drops the page cache of every file of the store (they are all synced: nothing is dirty).
fn drop_store_cache(dir: &Path) {
    for p in store_files(dir) {
        if let Ok(f) = File::open(&p) {
            fadvise_dontneed(&f);
        }
    }
}

/// (resident, total) bytes of the container files (all extensions).
fn container_residency(dir: &Path, only_new_above: u32) -> (u64, u64) {
    let mut out = (0, 0);
    for p in store_files(dir) {
        if container_id(&p) > only_new_above {
            if let Ok((r, t)) = residency(&p) {
                out.0 += r;
                out.1 += t;
            }
        }
    }
    out
}

fn disk_bytes(dir: &Path) -> u64 {
    store_files(dir)
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

fn container_id(p: &Path) -> u32 {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix('c')?.get(..6)?.parse().ok())
        .unwrap_or(0)
}

fn max_container_id(dir: &Path) -> u32 {
    store_files(dir)
        .iter()
        .filter(|p| is_container_data(p))
        .map(|p| container_id(p))
        .max()
        .unwrap_or(0)
}

/// (read_bytes, write_bytes) this thread has caused to be fetched from or sent to the disk
/// (/proc/thread-self/io: page-cache hits are not counted).
fn thread_io() -> (u64, u64) {
    // The process's: a compaction reads on threads of its own (its surveys).
    let text = fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// CPU seconds (user + system) the process has used.
fn cpu_secs() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| secs(u.user_time()) + secs(u.system_time()))
}

fn io_since(start: (u64, u64)) -> (u64, u64) {
    let now = thread_io();
    (now.0.saturating_sub(start.0), now.1.saturating_sub(start.1))
}

/// A 4096-aligned buffer (glibc places large allocations where copies into them are slow on
/// this CPU: docs/PERFORMANCE.md § Machine, ceilings and cold reads).
struct Aligned {
    backing: Vec<u8>,
    off: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let backing = vec![0u8; len + 4096];
        let off = backing.as_ptr().align_offset(4096);
        Aligned { backing, off }
    }

    fn get(&mut self, len: usize) -> &mut [u8] {
        &mut self.backing[self.off..self.off + len]
    }
}

// ---- part 1: speed ----------------------------------------------------------------------------

/// A live value: its container, its datafile extent, its title.
#[derive(Clone, Copy)]
struct Range {
    container: u32,
    offset: u64,
    len: u64,
    title: usize,
}

/// The extents of every readable render in the containers `ids`, found by name.
fn live_ranges(s: &Churned, c: &Corpus, ids: &[u32]) -> Vec<Range> {
    let mut names: Vec<(usize, String)> = Vec::new();
    for (t, title) in c.titles.iter().enumerate() {
        for l in s
            .store
            .list(DOMAIN, &title.name, Page::default())
            .expect("list")
        {
            names.push((t, format!("{DOMAIN}/{}/{}/{}", title.name, l.rev, l.tid)));
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let fs = Filesys::open(&s.dir.join(format!("c{id:06}")), &OpenOptions::read_only())
            .expect("container");
        for (t, name) in &names {
            for e in fs
                .extents(name.as_bytes())
                .expect("extents")
                .unwrap_or_default()
            {
                out.push(Range {
                    container: *id,
                    offset: e.offset,
                    len: e.len,
                    title: *t,
                });
            }
        }
    }
    out
}

/// Copies `ranges` (pread into an aligned buffer, write to one new file, fdatasync at the end);
/// returns its figures.
fn copy_ranges(dir: &Path, out: &Path, ranges: &[Range]) -> Speed {
    drop_store_cache(dir);
    let io = thread_io();
    let largest = ranges.iter().map(|r| r.len).max().unwrap_or(0) as usize;
    let mut buf = Aligned::new(largest);
    let (start, cpu) = (Instant::now(), cpu_secs());
    let mut sources: std::collections::HashMap<u32, File> = std::collections::HashMap::new();
    let mut dst = File::create(out).expect("copy file");
    let mut bytes = 0;
    for r in ranges {
        let src = sources.entry(r.container).or_insert_with(|| {
            File::open(dir.join(format!("c{:06}.data", r.container))).expect("container")
        });
        let b = buf.get(r.len as usize);
        src.read_exact_at(b, r.offset).expect("pread");
        dst.write_all(b).expect("write");
        bytes += r.len;
    }
    dst.sync_data().expect("fdatasync");
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu;
    let disk = io_since(io);
    let resident_after = residency(out).map_or(0, |r| r.0);
    drop(dst);
    let _ = fs::remove_file(out);
    Speed {
        secs,
        cpu,
        bytes,
        resident_after,
        disk,
    }
}

/// 1 MiB reads from the start of each container the plan rewrites, `live` bytes of each (or,
/// `whole`, every byte of every container it rewrites or drops).
fn sequential_ranges(dir: &Path, plan: &CompactReport, whole: bool) -> Vec<Range> {
    let mut out = Vec::new();
    for p in plan.containers.iter().filter(|p| match p.action {
        Action::Rewrite => true,
        Action::Drop => whole,
        _ => false,
    }) {
        let len = fs::metadata(dir.join(format!("c{:06}.data", p.id))).map_or(0, |m| m.len());
        let end = if whole { len } else { p.live.bytes.min(len) };
        let mut at = 0;
        while at < end {
            let n = (end - at).min(1 << 20);
            out.push(Range {
                container: p.id,
                offset: at,
                len: n,
                title: 0,
            });
            at += n;
        }
    }
    out
}

#[derive(Clone, Copy, Default)]
struct Speed {
    secs: f64,
    /// CPU seconds of the process (user + system) over the phase.
    cpu: f64,
    bytes: u64,
    resident_after: u64,
    /// Bytes the disk read and was sent (/proc/thread-self/io).
    disk: (u64, u64),
}

impl Speed {
    fn mbps(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-9)
    }
}

/// One run's figures.
#[derive(Clone, Default)]
struct Run {
    build_secs: f64,
    put_bytes: u64,
    before: StoreStat,
    after: StoreStat,
    disk_before: u64,
    disk_after: u64,
    rewritten: usize,
    dropped: usize,
    kept: usize,
    reclaimed: u64,
    compact: Speed,
    compact_io: u64,
    copy_file: Speed,
    copy_title: Speed,
    copy_seq: Speed,
    copy_whole: Speed,
    survey: Speed,
    resident_before: (u64, u64),
    resident_after_new: (u64, u64),
    // part 3
    idle_cold: Lat,
    idle_warm: Lat,
    busy_cold: Lat,
    busy_warm: Lat,
    busy_secs: f64,
    throttled_io_mbps: f64,
    /// Disk bytes read and written by the compaction thread, and its seconds.
    throttled_disk: (u64, u64),
    throttled_secs: f64,
    busy_resident_new: (u64, u64),
    busy_resident_before: (u64, u64),
    refreshes: usize,
    read_errors: usize,
    first_error: Option<String>,
    load: (String, String),
}

fn part1(s: &mut Churned, c: &Corpus, work: &Path, run: &mut Run) {
    let copts = CompactOptions {
        min_dead: 0.25,
        max_mbps: None,
        seal_current: true,
        dry_run: false,
    };
    step("stat and plan");
    run.before = s.store.stat().expect("stat");
    run.disk_before = disk_bytes(&s.dir);
    let plan = maintenance::plan_compaction(&s.store, &copts).expect("plan");
    let ids: Vec<u32> = plan
        .containers
        .iter()
        .filter(|p| p.action == Action::Rewrite)
        .map(|p| p.id)
        .collect();
    step("live extents by name");
    let mut ranges = live_ranges(s, c, &ids);
    let planned_live: u64 = plan
        .containers
        .iter()
        .filter(|p| p.action == Action::Rewrite)
        .map(|p| p.live.bytes)
        .sum();
    let found: u64 = ranges.iter().map(|r| r.len).sum();
    assert_eq!(found, planned_live, "live extents found by name ≠ planned");
    let out = work.join("copy.out");
    step("copy: live values in file order");
    ranges.sort_by_key(|r| (r.container, r.offset));
    run.copy_file = copy_ranges(&s.dir, &out, &ranges);
    step("copy: live values in title order");
    ranges.sort_by_key(|r| (r.container, r.title, r.offset));
    run.copy_title = copy_ranges(&s.dir, &out, &ranges);
    step("copy: sequential");
    run.copy_seq = copy_ranges(&s.dir, &out, &sequential_ranges(&s.dir, &plan, false));
    step("copy: the containers compacted, whole");
    run.copy_whole = copy_ranges(&s.dir, &out, &sequential_ranges(&s.dir, &plan, true));
    step("survey only (plan_compaction)");
    drop_store_cache(&s.dir);
    let (io, start, cpu) = (thread_io(), Instant::now(), cpu_secs());
    maintenance::plan_compaction(&s.store, &copts).expect("plan");
    run.survey = Speed {
        secs: start.elapsed().as_secs_f64(),
        cpu: cpu_secs() - cpu,
        bytes: planned_live,
        resident_after: 0,
        disk: io_since(io),
    };
    step("compact, unthrottled");
    drop_store_cache(&s.dir);
    let top = max_container_id(&s.dir);
    run.resident_before = container_residency(&s.dir, 0);
    let (io, cpu) = (thread_io(), cpu_secs());
    let report = maintenance::compact(&mut s.store, &copts, |_, _| {}).expect("compact");
    let cpu = cpu_secs() - cpu;
    let disk = io_since(io);
    run.resident_after_new = container_residency(&s.dir, top);
    run.compact = Speed {
        secs: report.seconds,
        cpu,
        bytes: report.read_bytes,
        resident_after: run.resident_after_new.0,
        disk,
    };
    run.compact_io = report.read_bytes + report.written_bytes;
    run.reclaimed = report.reclaimed();
    for p in &report.containers {
        match p.action {
            Action::Rewrite => run.rewritten += 1,
            Action::Drop => run.dropped += 1,
            _ => run.kept += 1,
        }
    }
    run.after = s.store.stat().expect("stat");
    run.disk_after = disk_bytes(&s.dir);
    check_reads(&s.store, c, &s.expected);
}

fn check_reads(store: &Store, c: &Corpus, expected: &[(usize, u32)]) {
    for (t, crc) in expected {
        let got = store
            .get(DOMAIN, &c.titles[*t].name, Which::Latest)
            .expect("get_latest")
            .expect("a readable title");
        assert_eq!(crc32fast::hash(&got.value), *crc, "{}", c.titles[*t].name);
    }
}

// ---- part 3: foreground reads --------------------------------------------------------------

/// Latency percentiles, µs.
#[derive(Clone, Copy, Default)]
struct Lat {
    n: usize,
    p50: f64,
    p99: f64,
}

fn lat(mut v: Vec<Duration>) -> Lat {
    v.sort();
    let at = |q: f64| {
        v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    Lat {
        n: v.len(),
        p50: at(0.5),
        p99: at(0.99),
    }
}

struct Reader<'a> {
    /// A read-only handle: it sees the title records as of its last refresh, and refreshes when
    /// a title it must find is not found (rewritten since: `Store::refresh`), as a server would.
    store: Store,
    dir: &'a Path,
    corpus: &'a Corpus,
    expected: &'a [(usize, u32)],
    /// Container datafiles seen so far, kept open (a removed one is still read by this handle).
    files: std::collections::BTreeMap<PathBuf, File>,
    /// The largest container number when the phase began.
    top: u32,
    rng: wink_harness::synth::Rng,
    cold: Vec<Duration>,
    warm: Vec<Duration>,
    refreshes: usize,
    /// Reads that failed before a refresh, and the first failure.
    errors: usize,
    first_error: Option<String>,
}

impl Reader<'_> {
    /// Drops the cache of every container datafile except the one being written (the highest
    /// number, when it is newer than the phase: a compaction's target, or the empty current).
    fn drop_values(&mut self) {
        // Names only (no stat per file): this runs before every cold read.
        let mut paths: Vec<PathBuf> = fs::read_dir(self.dir)
            .expect("store directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_container_data(p))
            .collect();
        paths.sort();
        let building = paths.last().filter(|p| container_id(p) > self.top).cloned();
        for p in paths {
            if Some(&p) != building.as_ref() && !self.files.contains_key(&p) {
                if let Ok(f) = File::open(&p) {
                    self.files.insert(p, f);
                }
            }
        }
        for (p, f) in &self.files {
            if Some(p) != building.as_ref() {
                fadvise_dontneed(f);
            }
        }
    }

    /// A read as a server with a read-only handle would do it: when the title is not found
    /// (rewritten since the handle's view) or the read fails, refresh the handle and read again.
    /// Failures are counted and reported (see `errors`).
    fn get(&mut self, title: &str) -> wink::store::Got {
        match self.store.get(DOMAIN, title, Which::Latest) {
            Ok(Some(got)) => return got,
            Ok(None) => self.refreshes += 1,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        self.store.refresh().expect("refresh");
        self.store
            .get(DOMAIN, title, Which::Latest)
            .expect("get_latest after a refresh")
            .expect("a readable title")
    }

    fn once(&mut self) {
        let (t, crc) = self.expected[self.rng.below(self.expected.len() as u64) as usize];
        let title = &self.corpus.titles[t].name;
        self.drop_values();
        let start = Instant::now();
        let cold = self.get(title);
        self.cold.push(start.elapsed());
        let start = Instant::now();
        let warm = self.get(title);
        self.warm.push(start.elapsed());
        for got in [cold, warm] {
            assert_eq!(crc32fast::hash(&got.value), crc, "{title}");
        }
    }

    fn take(&mut self) -> (Lat, Lat) {
        (
            lat(std::mem::take(&mut self.cold)),
            lat(std::mem::take(&mut self.warm)),
        )
    }
}

fn part3(s: Churned, c: &Corpus, cfg: &Cfg, run: &mut Run) {
    let reader = Store::open(&s.dir, &opts(&s.clock, false)).expect("read-only handle");
    check_reads(&reader, c, &s.expected);
    let mut r = Reader {
        store: reader,
        dir: &s.dir,
        corpus: c,
        expected: &s.expected,
        files: std::collections::BTreeMap::new(),
        top: max_container_id(&s.dir),
        refreshes: 0,
        errors: 0,
        first_error: None,
        rng: wink_harness::synth::Rng::new(42),
        cold: Vec::new(),
        warm: Vec::new(),
    };
    step("reads, idle");
    for _ in 0..cfg.reads {
        r.once();
    }
    (run.idle_cold, run.idle_warm) = r.take();
    let copts = CompactOptions {
        min_dead: 0.25,
        max_mbps: Some(cfg.mbps),
        seal_current: true,
        dry_run: false,
    };
    step(&format!("reads during a compaction at {} MB/s", cfg.mbps));
    let top = r.top;
    run.busy_resident_before = container_residency(&s.dir, 0);
    let mut writer = s.store;
    let start = Instant::now();
    let job = std::thread::spawn(move || {
        let io = thread_io();
        let report = maintenance::compact(&mut writer, &copts, |_, _| {}).expect("compact");
        (writer, report, io_since(io))
    });
    while !job.is_finished() {
        r.once();
    }
    run.busy_secs = start.elapsed().as_secs_f64();
    let (writer, report, disk) = job.join().expect("compaction thread");
    run.throttled_disk = disk;
    run.throttled_secs = report.seconds;
    (run.busy_cold, run.busy_warm) = r.take();
    run.refreshes = r.refreshes;
    run.read_errors = r.errors;
    run.first_error = r.first_error.take();
    run.throttled_io_mbps =
        (report.read_bytes + report.written_bytes) as f64 / 1e6 / report.seconds.max(1e-9);
    run.busy_resident_new = container_residency(&s.dir, top);
    check_reads(&writer, c, &s.expected);
}

// ---- the run and the table -----------------------------------------------------------------

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn one_run(cfg: &Cfg, c: &Corpus, root: &Path, n: usize) -> Run {
    let mut run = Run {
        load: (loadavg(), String::new()),
        ..Run::default()
    };
    let work = root.join(format!("run{n}"));
    fs::create_dir_all(&work).expect("work directory");
    step(&format!("run {n}: churn (store for speed and space)"));
    let start = Instant::now();
    let mut s = churn(&work.join("store1"), cfg, c);
    run.build_secs = start.elapsed().as_secs_f64();
    run.put_bytes = s.put_bytes;
    part1(&mut s, c, &work, &mut run);
    drop(s);
    let _ = fs::remove_dir_all(work.join("store1"));
    step(&format!("run {n}: churn (store for reads)"));
    let s = churn(&work.join("store2"), cfg, c);
    part3(s, c, cfg, &mut run);
    let _ = fs::remove_dir_all(&work);
    run.load.1 = loadavg();
    print_run(n, &run);
    run
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn print_run(n: usize, r: &Run) {
    println!(
        "run {n}: compact {:.1} MB/s live ({:.2} s, cpu {:.2} s), copies file/title/seq {:.1}/{:.1}/{:.1} MB/s; \
         cold p99 idle {:.0} µs busy {:.0} µs ({} reads in {:.1} s, {} refreshes, {} errors); warm p99 idle {:.0} busy {:.0}; load {} → {}",
        r.compact.mbps(),
        r.compact.secs,
        r.compact.cpu,
        r.copy_file.mbps(),
        r.copy_title.mbps(),
        r.copy_seq.mbps(),
        r.idle_cold.p99,
        r.busy_cold.p99,
        r.busy_cold.n,
        r.busy_secs,
        r.refreshes,
        r.read_errors,
        r.idle_warm.p99,
        r.busy_warm.p99,
        r.load.0,
        r.load.1
    );
}

fn median(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "GAP"
    }
}

fn print_table(cfg: &Cfg, runs: &[Run]) {
    let m = |f: &dyn Fn(&Run) -> f64| median(runs, f);
    let r = &runs[runs.len() / 2];
    println!();
    println!(
        "compaction ({} run{}, medians; one run's counts where marked *)",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    println!("  churn*: {} put in {:.1} s", mb(r.put_bytes), r.build_secs);
    println!(
        "1. speed (page cache of the store dropped before each; MB/s = live bytes copied / s)"
    );
    let live = r.compact.bytes;
    let row = |label: &str, f: &dyn Fn(&Run) -> Speed| {
        println!(
            "  {label:<28} {:>8.1} MB/s  {:>6.2} s  cpu {:>5.2} s  {}  disk read {} written {}*  \
             left in cache {}*",
            m(&|r| f(r).mbps()),
            m(&|r| f(r).secs),
            m(&|r| f(r).cpu),
            mb(live),
            mb(f(r).disk.0),
            mb(f(r).disk.1),
            mb(f(r).resident_after)
        );
    };
    row("compact (unthrottled)", &|r| r.compact);
    println!(
        "  {:<28} {:>8.1} MB/s  (read + written)",
        "  compact I/O",
        m(&|r| r.compact_io as f64 / 1e6 / r.compact.secs)
    );
    row("copy live, file order", &|r| r.copy_file);
    row("copy live, title order", &|r| r.copy_title);
    row("copy sequential", &|r| r.copy_seq);
    row("survey only (dry run)", &|r| r.survey);
    println!(
        "  by container bytes ({} of containers compacted: rewritten or dropped):",
        mb(r.copy_whole.bytes)
    );
    println!(
        "  {:<28} {:>8.1} MB/s  {:>6.2} s",
        "compact (unthrottled)",
        m(&|r| r.copy_whole.bytes as f64 / 1e6 / r.compact.secs),
        m(&|r| r.compact.secs)
    );
    println!(
        "  {:<28} {:>8.1} MB/s  {:>6.2} s  disk read {} written {}*",
        "copy containers whole",
        m(&|r| r.copy_whole.mbps()),
        m(&|r| r.copy_whole.secs),
        mb(r.copy_whole.disk.0),
        mb(r.copy_whole.disk.1)
    );
    println!(
        "  containers*: {} rewritten, {} dropped whole, {} kept",
        r.rewritten, r.dropped, r.kept
    );
    println!("2. space*");
    println!(
        "  before: {} containers, {} container bytes, {} live, {} dead ({:.1}% dead); {} on disk",
        r.before.containers,
        mb(r.before.container_bytes),
        mb(r.before.live_bytes),
        mb(r.before.dead_bytes),
        100.0 * r.before.dead_bytes as f64 / r.before.container_bytes.max(1) as f64,
        mb(r.disk_before)
    );
    println!(
        "  after:  {} containers, {} container bytes, {} live, {} dead; {} on disk",
        r.after.containers,
        mb(r.after.container_bytes),
        mb(r.after.live_bytes),
        mb(r.after.dead_bytes),
        mb(r.disk_after)
    );
    println!(
        "  reclaimed {} (report), {} (container bytes), {} (disk); after / live = {:.3} (container bytes), {:.3} (disk)",
        mb(r.reclaimed),
        mb(r.before.container_bytes - r.after.container_bytes),
        mb(r.disk_before.saturating_sub(r.disk_after)),
        r.after.container_bytes as f64 / r.after.live_bytes.max(1) as f64,
        r.disk_after as f64 / r.after.live_bytes.max(1) as f64
    );
    println!(
        "  page cache: container files {} of {} resident before the compaction, new containers {} of {} after",
        mb(r.resident_before.0),
        mb(r.resident_before.1),
        mb(r.resident_after_new.0),
        mb(r.resident_after_new.1)
    );
    println!(
        "3. get_latest, read-only handle; compaction at max_mbps {} on another thread",
        cfg.mbps
    );
    let lrow = |label: &str, f: &dyn Fn(&Run) -> Lat| {
        println!(
            "  {label:<28} p50 {:>8.0} µs  p99 {:>8.0} µs  ({} reads*)",
            m(&|r| f(r).p50),
            m(&|r| f(r).p99),
            f(r).n
        );
    };
    lrow("cold, idle", &|r| r.idle_cold);
    lrow("cold, during compaction", &|r| r.busy_cold);
    lrow("warm, idle", &|r| r.idle_warm);
    lrow("warm, during compaction", &|r| r.busy_warm);
    println!(
        "  compaction: {:.1} s, I/O {:.1} MB/s (read + written, as counted for max_mbps); disk read {} written {}* = {:.1} MB/s",
        m(&|r| r.busy_secs),
        m(&|r| r.throttled_io_mbps),
        mb(r.throttled_disk.0),
        mb(r.throttled_disk.1),
        m(&|r| (r.throttled_disk.0 + r.throttled_disk.1) as f64 / 1e6 / r.throttled_secs.max(1e-9))
    );
    println!(
        "  page cache: container files {} of {} before, new containers {} of {} after; {} refreshes of the reader*",
        mb(r.busy_resident_before.0),
        mb(r.busy_resident_before.1),
        mb(r.busy_resident_new.0),
        mb(r.busy_resident_new.1),
        r.refreshes
    );
    println!(
        "  reads of the read-only handle that failed, then succeeded after a refresh: {} (runs: {}){}",
        runs.iter().map(|r| r.read_errors).sum::<usize>(),
        runs.iter()
            .map(|r| r.read_errors.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        runs.iter()
            .find_map(|r| r.first_error.as_ref())
            .map_or(String::new(), |e| format!("; first: {e}"))
    );
    println!("targets");
    let ratio = m(&|r| r.compact.mbps() / r.copy_file.mbps());
    println!(
        "  unthrottled compaction ≥ 80% of the copy (live, file order): {:.0}%  {}",
        100.0 * ratio,
        verdict(ratio >= 0.8)
    );
    let whole = m(&|r| r.copy_whole.secs / r.compact.secs);
    println!(
        "  (the same, against a copy of the containers compacted, whole: {:.0}%  {})",
        100.0 * whole,
        verdict(whole >= 0.5)
    );
    for (label, f) in [
        (
            "cold",
            &(|r: &Run| r.busy_cold.p99 / r.idle_cold.p99) as &dyn Fn(&Run) -> f64,
        ),
        ("warm", &|r: &Run| r.busy_warm.p99 / r.idle_warm.p99),
    ] {
        let x = m(f);
        println!(
            "  get_latest p99 during a {} MB/s compaction ≤ 2× idle ({label}): {x:.2}×  {}",
            cfg.mbps,
            verdict(x <= 2.0)
        );
    }
    println!(
        "  load average (1/5/15 min) at start and end of each run: {}",
        runs.iter()
            .map(|r| format!("{} → {}", r.load.0, r.load.1))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

fn main() {
    let cfg = Cfg::from_env();
    let Some(corpus) = load(&cfg) else {
        println!("{}: no corpus: nothing to measure", cfg.corpus.display());
        return;
    };
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(&target).expect("CARGO_TARGET_TMPDIR");
    let root = tempfile::Builder::new()
        .prefix("compact")
        .tempdir_in(&target)
        .expect("temporary directory in the target directory");
    println!(
        "compact: {} titles ({} documents × {}), {} raw, each revision put {} times; containers {} MiB; recent = {} of the timeline; in {}",
        corpus.titles.len(),
        corpus.docs.len(),
        cfg.copies,
        mb(corpus.raw),
        cfg.renders,
        cfg.container_mib,
        cfg.recent,
        root.path().display()
    );
    let runs: Vec<Run> = (1..=cfg.runs)
        .map(|n| one_run(&cfg, &corpus, root.path(), n))
        .collect();
    print_table(&cfg, &runs);
}
