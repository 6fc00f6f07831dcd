//! The same documents written three ways, in one run: a filesys-ao, one file per document in a
//! 64K-directory tree (the seed's "old way"), and one plain sequential file (the disk's ceiling).
//!
//! `cargo bench --bench fs_compare` prints one table and the project's targets (PASS/GAP).
//!
//! What is written: every revision of `../shared/corpus/` (1,150 HTML snapshots, 129 MB),
//! repeated as copies `doc/rev/copy` until at least `WINK_BENCH_BYTES` bytes (default 2 GiB;
//! `WINK_BENCH_BYTES=256M` for a quick run). Without the corpus, a generated stand-in of 1,150
//! documents with the same size distribution (lognormal, median ~100 KB, 0.2–800 KB) is used.
//!
//! The contenders, each in a fresh directory of a temporary directory in the target directory
//! (a disk file system, never a tmpfs), after `sync; echo 3 > /proc/sys/vm/drop_caches`:
//!
//! - (a) `filesys-ao`: `Filesys::create` (ao, default options, drop-behind on), one `put` per
//!   document, one `Filesys::sync` at the end.
//! - (b) `file per doc`: 256×256 directories (made before the timed run and not counted in it),
//!   `open(O_CREAT|O_TRUNC)`, `write`, `close` per document, then one `syncfs(2)` at the end.
//! - (c) `one big file`: one `write` per document into one file, one `fdatasync` at the end.
//!
//! Durability is the same for all three: nothing is made durable while writing, and the run ends
//! with one barrier after which every document (and its name) survives a power loss. For (b)
//! that barrier is `syncfs` — the cheapest way to get it for 10⁴ files (an `fsync` per file and
//! per directory would cost one journal commit each).
//!
//! Figures: write MiB/s = document bytes / wall time including the final sync; user and system
//! CPU of the writer; `Cached` and `Slab + Buffers` growth in /proc/meminfo over the write; bytes
//! of the written files resident in the page cache afterwards (mincore); disk space (st_blocks ×
//! 512, directories included); and random reads of `WINK_BENCH_READS` documents (default 10,000,
//! distinct, random order), cold then warm. "Cold" = `echo 1 > drop_caches` (page cache only:
//! dentries and inodes stay, as an index would on a serving node), then for (a) `BASE.idx` read
//! once (data pages not cached, index resident: the cold of docs/PERFORMANCE.md § Machine,
//! ceilings and cold reads). "Warm" = the same reads again. (c)'s reads are raw `pread`s of the
//! same byte ranges of the big file into a 4096-aligned buffer: the cold-read baseline. (a) reads
//! with `Filesys::read` (returns a new `Vec`); (b) with `open`, `pread` into a 4096-aligned buffer,
//! `close`. Every byte read is compared with the source, outside the timed section.
//!
//! Other settings: `WINK_BENCH_HTSIZE` (initial index cells of (a), default the library's),
//! `WINK_BENCH_FILEINCR` (preallocation step of (a)'s datafile, default the library's),
//! `WINK_BENCH_DROP=3` (cold reads after `echo 3`: dentries and inodes dropped as well),
//! `WINK_BENCH_TREE_SYNC=fsync` ((b) ends with an fsync of every file and directory instead of
//! syncfs), `WINK_BENCH_ONLY=a,c` (run some contenders only), `WINK_CORPUS` (another corpus
//! directory).

use std::fs::{self, File, OpenOptions as StdOpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wink::filesys::{file_path, Filesys, FsOptions, OpenOptions};
use wink::storage::residency;

const DEFAULT_BYTES: u64 = 2 << 30;
const DEFAULT_READS: usize = 10_000;
const TREE_FANOUT: u32 = 256;
/// A put slower than this is counted as a stall in (a)'s notes.
const SLOW_PUT: Duration = Duration::from_millis(20);
/// Documents the generated stand-in has (as many as the corpus).
const STAND_IN_DOCS: usize = 1150;

/// Prints a progress line (to stderr, with the time since the start), so slow steps show.
fn step(what: &str) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    eprintln!("[{:7.1} s] {what}", start.elapsed().as_secs_f64());
}

fn main() {
    step("loading documents");
    let cfg = Config::from_env();
    let set = DocSet::load(&cfg);
    let root = tempfile::Builder::new()
        .prefix("fs_compare")
        .tempdir_in(target_tmpdir())
        .expect("temporary directory in the target directory");
    println!("fs_compare: {}", set.describe());
    println!("  in {} ({})", root.path().display(), fs_type(root.path()));
    if !can_drop_caches() {
        println!("  WARNING: cannot write /proc/sys/vm/drop_caches (not root?): cold reads fall back to fadvise DONTNEED, and meminfo deltas are noisier");
    }
    let sample = set.sample(cfg.reads);
    let mut rows = Vec::new();
    if cfg.runs('c') {
        rows.push(run_big_file(&root.path().join("c"), &set, &sample));
    }
    if cfg.runs('a') {
        rows.push(run_filesys(&root.path().join("a"), &set, &sample, &cfg));
    }
    if cfg.runs('b') {
        rows.push(run_tree(
            &root.path().join("b"),
            &set,
            &sample,
            cfg.fsync_each,
        ));
    }
    print_table(&rows, set.total_bytes);
    print_targets(&rows, set.total_bytes);
}

// ---- configuration and documents ----------------------------------------------------------

struct Config {
    bytes: u64,
    reads: usize,
    htsize: Option<u64>,
    fileincr: Option<u64>,
    fsync_each: bool,
    only: Option<String>,
    corpus: PathBuf,
}

impl Config {
    fn from_env() -> Config {
        let bytes = env("WINK_BENCH_BYTES").map_or(DEFAULT_BYTES, |v| parse_size(&v));
        let reads = env("WINK_BENCH_READS").map_or(DEFAULT_READS, |v| {
            v.parse().expect("WINK_BENCH_READS: a number")
        });
        let htsize =
            env("WINK_BENCH_HTSIZE").map(|v| v.parse().expect("WINK_BENCH_HTSIZE: a number"));
        let fileincr = env("WINK_BENCH_FILEINCR").map(|v| parse_size(&v));
        let corpus = std::env::var_os("WINK_CORPUS").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
            PathBuf::from,
        );
        Config {
            bytes,
            reads,
            htsize,
            fileincr,
            fsync_each: env("WINK_BENCH_TREE_SYNC").is_some_and(|v| v == "fsync"),
            only: env("WINK_BENCH_ONLY"),
            corpus,
        }
    }

    fn runs(&self, which: char) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(which))
    }
}

/// An environment variable; unset and empty are the same.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// "2G", "256M", "1000000".
fn parse_size(s: &str) -> u64 {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'G') => (&s[..s.len() - 1], 1u64 << 30),
        Some(b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'K') => (&s[..s.len() - 1], 1 << 10),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .expect("WINK_BENCH_BYTES: a size such as 2G, 256M or 1000000")
        * mult
}

fn target_tmpdir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR");
    dir
}

/// One document to write: `name` = "doc/rev/copy", its bytes = `sources[src]`.
struct Doc {
    name: String,
    src: usize,
}

struct DocSet {
    sources: Vec<Vec<u8>>,
    docs: Vec<Doc>,
    total_bytes: u64,
    from_corpus: bool,
}

impl DocSet {
    fn load(cfg: &Config) -> DocSet {
        let (names, sources, from_corpus) = match read_corpus(&cfg.corpus) {
            Some((names, sources)) => (names, sources, true),
            None => {
                let (names, sources) = stand_in();
                (names, sources, false)
            }
        };
        let mut docs = Vec::new();
        let mut total = 0u64;
        let mut copy = 0;
        while total < cfg.bytes {
            for (src, name) in names.iter().enumerate() {
                if total >= cfg.bytes {
                    break;
                }
                docs.push(Doc {
                    name: format!("{name}/{copy}"),
                    src,
                });
                total += sources[src].len() as u64;
            }
            copy += 1;
        }
        DocSet {
            sources,
            docs,
            total_bytes: total,
            from_corpus,
        }
    }

    fn bytes(&self, i: usize) -> &[u8] {
        &self.sources[self.docs[i].src]
    }

    fn describe(&self) -> String {
        let mut sizes: Vec<usize> = self
            .docs
            .iter()
            .map(|d| self.sources[d.src].len())
            .collect();
        sizes.sort_unstable();
        format!(
            "{} documents, {} ({} bytes), median {} KB, max {} KB, from {}",
            self.docs.len(),
            mib(self.total_bytes),
            self.total_bytes,
            sizes[sizes.len() / 2] / 1000,
            sizes[sizes.len() - 1] / 1000,
            if self.from_corpus {
                "the corpus (all revisions, repeated)"
            } else {
                "a generated stand-in (corpus not found)"
            }
        )
    }

    /// Up to `n` distinct document indices in random order (the same for every contender).
    fn sample(&self, n: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.docs.len()).collect();
        let mut rng = Rng(0x5eed_f00d);
        for i in (1..idx.len()).rev() {
            idx.swap(i, rng.below(i as u64 + 1) as usize);
        }
        idx.truncate(n);
        idx
    }
}

/// The corpus's revisions as (names "doc/rev", bytes), in manifest order.
fn read_corpus(dir: &Path) -> Option<(Vec<String>, Vec<Vec<u8>>)> {
    let manifest = fs::read_to_string(dir.join("manifest.tsv")).ok()?;
    let (mut names, mut sources) = (Vec::new(), Vec::new());
    for line in manifest.lines().skip(1) {
        let mut cols = line.split('\t');
        let (Some(doc), Some(rev)) = (cols.next(), cols.next()) else {
            continue;
        };
        sources.push(fs::read(dir.join(doc).join(format!("{rev}.html"))).ok()?);
        names.push(format!("{doc}/{rev}"));
    }
    (!names.is_empty()).then_some((names, sources))
}

/// Generated documents with the corpus's size distribution: lognormal, median 100 KB,
/// clamped to 0.2–800 KB; HTML-like text.
fn stand_in() -> (Vec<String>, Vec<Vec<u8>>) {
    let mut rng = Rng(42);
    let words: &[&[u8]] = &[
        b"<p>",
        b"</p>\n",
        b"privacy ",
        b"the ",
        b"terms ",
        b"service ",
        b"<div class=\"c\">",
        b"</div>",
        b"data ",
        b"user ",
    ];
    let (mut names, mut sources) = (Vec::new(), Vec::new());
    for i in 0..STAND_IN_DOCS {
        let size = (100_000.0 * (rng.normal() * 1.1).exp()).clamp(200.0, 800_000.0) as usize;
        let mut doc = Vec::with_capacity(size + 16);
        while doc.len() < size {
            doc.extend_from_slice(words[rng.below(words.len() as u64) as usize]);
        }
        doc.truncate(size);
        sources.push(doc);
        names.push(format!("gen{:02}/{:04}", i % 20, i / 20 + 1));
    }
    (names, sources)
}

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal variate (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

// ---- system figures ------------------------------------------------------------------------

/// /proc/meminfo fields in bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Meminfo {
    cached: i64,
    buffers: i64,
    slab: i64,
}

impl Meminfo {
    fn read() -> Meminfo {
        let text = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mut m = Meminfo::default();
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(key), Some(kb)) = (
                parts.next(),
                parts.next().and_then(|v| v.parse::<i64>().ok()),
            ) else {
                continue;
            };
            match key {
                "Cached:" => m.cached = kb * 1024,
                "Buffers:" => m.buffers = kb * 1024,
                "Slab:" => m.slab = kb * 1024,
                _ => {}
            }
        }
        m
    }

    fn metadata(&self) -> i64 {
        self.slab + self.buffers
    }
}

/// User and system CPU time of this process.
fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value for it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn can_drop_caches() -> bool {
    StdOpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .is_ok()
}

/// `sync; echo level > /proc/sys/vm/drop_caches`. False when not allowed.
fn drop_caches(level: u8) -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", format!("{level}\n")).is_ok()
}

/// Drops the page cache of `files` (for the cold reads), by drop_caches or, failing that, fadvise.
/// `WINK_BENCH_DROP=3` drops dentries and inodes too (a node whose file metadata is not cached).
fn make_cold(files: &[PathBuf]) {
    step("dropping the page cache for cold reads");
    let level = if env("WINK_BENCH_DROP").is_some_and(|v| v == "3") {
        3
    } else {
        1
    };
    if drop_caches(level) {
        return;
    }
    for f in files {
        if let Ok(file) = File::open(f) {
            let _ = nix::fcntl::posix_fadvise(
                file.as_raw_fd(),
                0,
                0,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            );
        }
    }
}

fn fs_type(path: &Path) -> String {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut best = (0, String::from("unknown"));
    for line in mounts.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() > 2 && path.starts_with(cols[1]) && cols[1].len() >= best.0 {
            best = (cols[1].len(), format!("{} on {}", cols[2], cols[1]));
        }
    }
    best.1
}

/// Bytes of `files` resident in the page cache, by mincore.
fn resident(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| residency(f).map(|(r, _)| r).unwrap_or(0))
        .sum()
}

/// st_blocks × 512 of everything under `dir` (directories included).
fn disk_used(dir: &Path) -> u64 {
    let mut total = fs::symlink_metadata(dir)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0);
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => total += disk_used(&path),
                _ => {
                    total += fs::symlink_metadata(&path)
                        .map(|m| m.blocks() * 512)
                        .unwrap_or(0)
                }
            }
        }
    }
    total
}

// ---- measuring -----------------------------------------------------------------------------

/// What one contender measured.
struct Row {
    label: &'static str,
    write: Duration,
    user: Duration,
    sys: Duration,
    cached_delta: i64,
    resident: u64,
    meta_delta: i64,
    disk: u64,
    cold: Vec<Duration>,
    warm: Vec<Duration>,
    notes: Vec<String>,
}

/// Times a write phase (fresh caches before it) and takes the figures after it.
struct WritePhase {
    start: Instant,
    cpu: (Duration, Duration),
    mem: Meminfo,
}

impl WritePhase {
    fn begin() -> WritePhase {
        step("sync; drop caches");
        drop_caches(3);
        step("writing");
        let mem = Meminfo::read();
        WritePhase {
            start: Instant::now(),
            cpu: cpu_times(),
            mem,
        }
    }

    /// Ends the timed part; `files` are the data files, `dir` holds everything written.
    fn end(self, label: &'static str, files: &[PathBuf], dir: &Path) -> Row {
        let write = self.start.elapsed();
        let cpu = cpu_times();
        let mem = Meminfo::read();
        step(&format!(
            "{label}: written and synced in {:.2} s; measuring residency and disk use",
            write.as_secs_f64()
        ));
        Row {
            label,
            write,
            user: cpu.0 - self.cpu.0,
            sys: cpu.1 - self.cpu.1,
            cached_delta: mem.cached - self.mem.cached,
            resident: resident(files),
            meta_delta: mem.metadata() - self.mem.metadata(),
            disk: disk_used(dir),
            cold: Vec::new(),
            warm: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// Puts that took long: how many, in all, the longest.
#[derive(Default)]
struct Stalls {
    count: u32,
    total: Duration,
    max: Duration,
}

impl Stalls {
    fn add(&mut self, t: Duration) {
        self.count += 1;
        self.total += t;
        self.max = self.max.max(t);
    }
}

impl std::fmt::Display for Stalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} taking {:.2} s in all (longest {:.0} ms)",
            self.count,
            self.total.as_secs_f64(),
            self.max.as_secs_f64() * 1e3
        )
    }
}

/// A 4096-aligned buffer (glibc places large allocations where copies into them are slow on
/// this CPU; docs/PERFORMANCE.md § Machine, ceilings and cold reads).
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

/// Times `read(i)` for each sampled document, checking the bytes it returns (untimed).
fn time_reads(
    set: &DocSet,
    sample: &[usize],
    mut read: impl FnMut(usize) -> (Duration, bool),
) -> Vec<Duration> {
    step("timing reads");
    let mut times = Vec::with_capacity(sample.len());
    for &i in sample {
        let (t, ok) = read(i);
        assert!(ok, "document {} read back wrong", set.docs[i].name);
        times.push(t);
    }
    times
}

fn largest(set: &DocSet) -> usize {
    set.sources.iter().map(Vec::len).max().unwrap_or(0)
}

// ---- (c) one big file ----------------------------------------------------------------------

fn run_big_file(dir: &Path, set: &DocSet, sample: &[usize]) -> Row {
    fs::create_dir_all(dir).expect("create dir");
    let path = dir.join("all.bin");
    let mut offsets = Vec::with_capacity(set.docs.len());
    let phase = WritePhase::begin();
    let mut f = File::create(&path).expect("create big file");
    let mut at = 0u64;
    for i in 0..set.docs.len() {
        offsets.push(at);
        f.write_all(set.bytes(i)).expect("write");
        at += set.bytes(i).len() as u64;
    }
    f.sync_data().expect("fdatasync");
    let mut row = phase.end("(c) one big file", std::slice::from_ref(&path), dir);
    let file = File::open(&path).expect("open big file");
    let mut buf = Aligned::new(largest(set));
    let mut pread = |i: usize| {
        let want = set.bytes(i);
        let b = buf.get(want.len());
        let t = Instant::now();
        file.read_exact_at(b, offsets[i]).expect("pread");
        let t = t.elapsed();
        (t, b == want)
    };
    make_cold(std::slice::from_ref(&path));
    row.cold = time_reads(set, sample, &mut pread);
    row.warm = time_reads(set, sample, &mut pread);
    row.notes
        .push("reads: raw pread of the same byte ranges into a 4096-aligned buffer".into());
    drop(file);
    step("removing (c)");
    fs::remove_dir_all(dir).expect("remove (c)");
    row
}

// ---- (a) filesys-ao ------------------------------------------------------------------------

fn run_filesys(dir: &Path, set: &DocSet, sample: &[usize], cfg: &Config) -> Row {
    fs::create_dir_all(dir).expect("create dir");
    let base = dir.join("fs");
    let mut opts = FsOptions {
        ao: true,
        ..FsOptions::default()
    };
    if let Some(h) = cfg.htsize {
        opts.htsize = h;
    }
    if let Some(f) = cfg.fileincr {
        opts.fileincr = f;
    }
    let phase = WritePhase::begin();
    let mut fs = Filesys::create(&base, &opts, &OpenOptions::writer()).expect("create filesys");
    // Puts that stall are told apart from the steady state, and those that committed (an index
    // growth commits first) from those that waited for writeback.
    let (mut growth, mut other) = (Stalls::default(), Stalls::default());
    for (i, d) in set.docs.iter().enumerate() {
        let commits = fs.commits();
        let t = Instant::now();
        fs.put(d.name.as_bytes(), 0, set.bytes(i)).expect("put");
        let t = t.elapsed();
        if fs.commits() > commits {
            growth.add(t);
        } else if t >= SLOW_PUT {
            other.add(t);
        }
    }
    let t = Instant::now();
    fs.sync().expect("sync");
    let final_sync = t.elapsed();
    let commits = fs.commits();
    let htsize = fs.index().htsize();
    drop(fs);
    let files: Vec<PathBuf> = ["data", "idx", "time", "jnl"]
        .iter()
        .map(|e| file_path(&base, e))
        .filter(|p| p.exists())
        .collect();
    let mut row = phase.end("(a) filesys-ao", &files, dir);
    row.notes.push(format!("filesys: {commits} commits during the run (index growth and the final sync), final HTSIZE {htsize}, initial {}; FILEINCR {}", opts.htsize, opts.fileincr));
    let fs = Filesys::open(&base, &OpenOptions::read_only()).expect("open read-only");
    let mut read = |i: usize| {
        let t = Instant::now();
        let got = fs.read(set.docs[i].name.as_bytes()).expect("read");
        let t = t.elapsed();
        (t, got == set.bytes(i))
    };
    make_cold(&files);
    let idx = fs::read(file_path(&base, "idx")).expect("re-warm the index");
    row.notes.push(format!(
        "filesys: puts that committed (index growth): {growth}; other puts ≥ {} ms: {other}; the final sync: {:.0} ms",
        SLOW_PUT.as_millis(),
        final_sync.as_secs_f64() * 1e3
    ));
    row.notes.push(format!(
        "cold (a): BASE.idx ({}) read once after the drop",
        mib(idx.len() as u64)
    ));
    drop(idx);
    row.cold = time_reads(set, sample, &mut read);
    row.warm = time_reads(set, sample, &mut read);
    drop(fs);
    step("removing (a)");
    fs::remove_dir_all(dir).expect("remove (a)");
    row
}

// ---- (b) one file per document in a 64K-directory tree ------------------------------------

/// `dir/xx/yy/name` with '/' in the name written as '%'; xx, yy from an FNV-1a hash.
fn tree_path(dir: &Path, name: &str) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    dir.join(format!("{:02x}", h & 0xff))
        .join(format!("{:02x}", (h >> 8) & 0xff))
        .join(name.replace('/', "%"))
}

/// The POSIX way to make every file of the tree and its name durable.
fn fsync_tree(dir: &Path, paths: &[PathBuf]) {
    for p in paths {
        File::open(p)
            .and_then(|f| f.sync_all())
            .expect("fsync a file");
    }
    for a in 0..TREE_FANOUT {
        let outer = dir.join(format!("{a:02x}"));
        for b in 0..TREE_FANOUT {
            File::open(outer.join(format!("{b:02x}")))
                .and_then(|f| f.sync_all())
                .expect("fsync a directory");
        }
        File::open(&outer)
            .and_then(|f| f.sync_all())
            .expect("fsync a directory");
    }
}

fn run_tree(dir: &Path, set: &DocSet, sample: &[usize], fsync_each: bool) -> Row {
    step("making the 64K-directory tree");
    for a in 0..TREE_FANOUT {
        for b in 0..TREE_FANOUT {
            fs::create_dir_all(dir.join(format!("{a:02x}")).join(format!("{b:02x}")))
                .expect("make the tree");
        }
    }
    let paths: Vec<PathBuf> = set.docs.iter().map(|d| tree_path(dir, &d.name)).collect();
    let phase = WritePhase::begin();
    for (i, p) in paths.iter().enumerate() {
        let mut f = File::create(p).expect("create");
        f.write_all(set.bytes(i)).expect("write");
    }
    let barrier = if fsync_each {
        fsync_tree(dir, &paths);
        "an fsync of every file and directory"
    } else {
        let root = File::open(dir).expect("open tree root");
        // SAFETY: syncfs takes an open descriptor; it touches no user memory.
        let rc = unsafe { libc::syncfs(root.as_raw_fd()) };
        assert_eq!(rc, 0, "syncfs: {}", std::io::Error::last_os_error());
        "syncfs"
    };
    let mut row = phase.end("(b) file per doc", &paths, dir);
    row.notes.push(format!(
        "(b): {} directories made before the timed run (its disk figure includes them); final barrier: {barrier}",
        TREE_FANOUT * TREE_FANOUT
    ));
    let mut buf = Aligned::new(largest(set));
    let mut read = |i: usize| {
        let want = set.bytes(i);
        let b = buf.get(want.len());
        let t = Instant::now();
        let f = File::open(&paths[i]).expect("open");
        f.read_exact_at(b, 0).expect("pread");
        drop(f);
        let t = t.elapsed();
        (t, b == want)
    };
    make_cold(&paths);
    row.cold = time_reads(set, sample, &mut read);
    row.warm = time_reads(set, sample, &mut read);
    step("removing (b)");
    fs::remove_dir_all(dir).expect("remove (b)");
    row
}

// ---- output --------------------------------------------------------------------------------

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn smib(bytes: i64) -> String {
    format!("{:+.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn pct(part: f64, whole: u64) -> String {
    format!("{:.2}%", 100.0 * part / whole as f64)
}

fn percentile(times: &[Duration], p: f64) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    let mut v = times.to_vec();
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn throughput(row: &Row, total: u64) -> f64 {
    total as f64 / (1 << 20) as f64 / row.write.as_secs_f64()
}

fn find<'a>(rows: &'a [Row], prefix: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.label.starts_with(prefix))
}

fn print_table(rows: &[Row], total: u64) {
    let ceiling = find(rows, "(c)").map(|c| throughput(c, total));
    let raw_p50 = find(rows, "(c)").map(|c| percentile(&c.cold, 0.5));
    println!();
    println!("| contender | write MiB/s | × (c) | write s | user s | sys s | Cached Δ | resident after | Slab+Buffers Δ | disk used | cold p50 µs | cold p99 µs | × raw p50 | warm p50 µs | warm p99 µs |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let mbs = throughput(r, total);
        let cold50 = percentile(&r.cold, 0.5);
        println!(
            "| {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {} ({}) | {} ({}) | {} ({}) | {} | {} | {} | {} | {} | {} |",
            r.label,
            mbs,
            ceiling.map_or("-".into(), |c| format!("{:.2}", mbs / c)),
            r.write.as_secs_f64(),
            r.user.as_secs_f64(),
            r.sys.as_secs_f64(),
            smib(r.cached_delta),
            pct(r.cached_delta as f64, total),
            mib(r.resident),
            pct(r.resident as f64, total),
            smib(r.meta_delta),
            pct(r.meta_delta as f64, total),
            mib(r.disk),
            us(cold50),
            us(percentile(&r.cold, 0.99)),
            raw_p50.map_or("-".into(), |p| format!("{:.2}", cold50.as_secs_f64() / p.as_secs_f64())),
            us(percentile(&r.warm, 0.5)),
            us(percentile(&r.warm, 0.99)),
        );
    }
    println!();
    println!(
        "Reads: {} documents each, cold then warm.",
        rows.first().map_or(0, |r| r.cold.len())
    );
    for r in rows {
        for n in &r.notes {
            println!("  {}: {n}", r.label);
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "GAP "
    }
}

fn print_targets(rows: &[Row], total: u64) {
    let Some(a) = find(rows, "(a)") else { return };
    println!();
    println!("Targets for (a):");
    if let Some(c) = find(rows, "(c)") {
        let ratio = throughput(a, total) / throughput(c, total);
        println!(
            "  {} throughput ≥ 80% of (c): {:.0}% ({:.0} vs {:.0} MiB/s)",
            verdict(ratio >= 0.8),
            ratio * 100.0,
            throughput(a, total),
            throughput(c, total)
        );
        let (p, raw) = (percentile(&a.cold, 0.5), percentile(&c.cold, 0.5));
        let x = p.as_secs_f64() / raw.as_secs_f64();
        println!(
            "  {} cold random read p50 ≤ 1.5× raw pread p50: {x:.2}× ({} vs {} µs)",
            verdict(x <= 1.5),
            us(p),
            us(raw)
        );
    }
    let res = a.resident as f64 / total as f64;
    println!(
        "  {} resident after the run ≤ 1% of bytes written: {}",
        verdict(res <= 0.01),
        pct(a.resident as f64, total)
    );
    let meta = a.meta_delta as f64 / total as f64;
    println!(
        "  {} kernel metadata growth ≤ 1% of bytes written: {} ({})",
        verdict(meta <= 0.01),
        pct(a.meta_delta as f64, total),
        smib(a.meta_delta)
    );
}
