//! Micro-benchmarks of the basic formats, each beside the plain system call it is built on.
//!
//! `cargo bench --bench formats` (about two minutes on the 2-core dev machine). Groups:
//!
//! - `append/{kvseq,plain_write}/{1KiB,64KiB}`: appends into the page cache (no fsync). The
//!   plain contender writes the very bytes a kvseq entry consists of, with `write()`, to a file
//!   in the same directory. A fresh file is started every 64 MiB so dirty pages never pile up
//!   into writeback; the superblock flush at the end of each batch is timed.
//! - `append_durable/{kvseq,plain_write}/8MiB`: 128 × 64 KiB appends to a fresh file, then
//!   `sync()` (kvseq: fdatasync, superblock write, fdatasync) or one `fdatasync()` (plain).
//! - `read_warm/{kvseq_read,kvseq_read_value_at,pread}/{1KiB,64KiB}`: one entry at a random
//!   pointer of a 64 MiB file that is in the page cache. `kvseq_read` returns owned key and
//!   value; `kvseq_read_value_at` reads the layout, then the value into a 4096-aligned buffer;
//!   `pread` reads the entry's bytes into a 4096-aligned buffer (the floor).
//! - `scan_warm/{kvseq_iter,pread_256KiB,pread_256KiB_vec}/1KiB`: every entry of the 64 MiB file,
//!   with values; the plain contenders read the file in 256 KiB chunks into a 4096-aligned buffer
//!   and into a plain `vec!` buffer.
//! - `hindex/{lookup_hit,lookup_miss,insert}/load{0.50,0.75}`: a CELLSZ 2 table holding 1M keys
//!   at that load (HTSIZE = 1M / load, load limit raised to 0.9 so nothing grows), warm. A hit
//!   includes reading and comparing the key from the kvseq. `insert` inserts the last 5% of the
//!   1M keys, i.e. at loads from 0.95·load to load; the table is restored from a snapshot
//!   (untimed) whenever those keys run out.
//!
//! Ratios of medians are printed at the end (from criterion's `estimates.json` files).

use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use wink::format::hindex::{HIndex, HIndexOptions};
use wink::format::kvseq::{KvSeq, KvSeqOptions};
use wink::storage::MemStorage;
use wink::KvPointer;

const KEY: &[u8] = b"bench-key-000001";
const SIZES: [(usize, &str); 2] = [(1 << 10, "1KiB"), (64 << 10, "64KiB")];
/// A new file is started after this many bytes, so dirty pages never reach writeback.
const FILE_CAP: u64 = 64 << 20;
/// Size of the files read by the read and scan benchmarks.
const READ_FILE: u64 = 64 << 20;
const DURABLE_ENTRIES: u64 = 128;
const HINDEX_KEYS: u64 = 1_000_000;
/// Keys inserted (timed) on top of a snapshot holding the others.
const INSERT_POOL: u64 = HINDEX_KEYS / 20;
const HINDEX_KEY_LEN: usize = 14;

/// The exact bytes of one kvseq entry with default options (what the plain contender writes).
fn encoded_entry(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mem = MemStorage::new("encode");
    let mut kv =
        KvSeq::create(Box::new(mem.clone()), &KvSeqOptions::default()).expect("create in memory");
    let ptr = kv.append(key, value).expect("append in memory");
    let end = kv.filesize();
    drop(kv);
    mem.to_vec()[ptr.0 as usize..end as usize].to_vec()
}

/// A 4096-aligned window of `len` bytes inside `backing` (glibc places large allocations at
/// offsets that make copies slow on this CPU; see docs/PERFORMANCE.md § Machine, ceilings and
/// cold reads).
fn aligned(backing: &mut Vec<u8>, len: usize) -> &mut [u8] {
    backing.resize(len + 4096, 0);
    let off = backing.as_ptr().align_offset(4096);
    &mut backing[off..off + len]
}

/// One way of appending the same entries to a file.
trait Appender: Sized {
    const NAME: &'static str;
    fn create(path: &Path) -> Self;
    fn append(&mut self, key: &[u8], value: &[u8], encoded: &[u8]);
    /// What a batch ends with: making the appends visible (`durable` = false) or durable.
    fn finish(&mut self, durable: bool);
}

struct KvSeqAppender(KvSeq);

impl Appender for KvSeqAppender {
    const NAME: &'static str = "kvseq";
    fn create(path: &Path) -> Self {
        KvSeqAppender(KvSeq::create_path(path, &KvSeqOptions::default()).expect("create kvseq"))
    }
    fn append(&mut self, key: &[u8], value: &[u8], _encoded: &[u8]) {
        black_box(self.0.append(key, value).expect("append"));
    }
    fn finish(&mut self, durable: bool) {
        if durable {
            self.0.sync().expect("sync");
        } else {
            self.0.flush().expect("flush");
        }
    }
}

struct PlainAppender(File);

impl Appender for PlainAppender {
    const NAME: &'static str = "plain_write";
    fn create(path: &Path) -> Self {
        PlainAppender(File::create(path).expect("create file"))
    }
    fn append(&mut self, _key: &[u8], _value: &[u8], encoded: &[u8]) {
        self.0.write_all(encoded).expect("write");
    }
    fn finish(&mut self, durable: bool) {
        if durable {
            self.0.sync_data().expect("fdatasync");
        }
    }
}

/// Times `iters` appends of `value`, in files of at most `per_file` entries; creating and
/// removing the files is not timed.
fn time_appends<A: Appender>(
    dir: &Path,
    value: &[u8],
    iters: u64,
    per_file: u64,
    durable: bool,
) -> Duration {
    let encoded = encoded_entry(KEY, value);
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let path = dir.join(format!("{}.append", A::NAME));
        let _ = fs::remove_file(&path);
        let mut a = A::create(&path);
        let n = per_file.min(iters - done);
        let start = Instant::now();
        for _ in 0..n {
            a.append(KEY, value, &encoded);
        }
        a.finish(durable);
        total += start.elapsed();
        drop(a);
        fs::remove_file(&path).expect("remove");
        done += n;
    }
    total
}

fn bench_append(c: &mut Criterion, dir: &Path) {
    let mut g = c.benchmark_group("append");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (size, label) in SIZES {
        let value = vec![0x5a; size];
        let entry = encoded_entry(KEY, &value).len() as u64;
        let per_file = FILE_CAP / entry;
        g.throughput(Throughput::Bytes(entry));
        g.bench_function(BenchmarkId::new(KvSeqAppender::NAME, label), |b| {
            b.iter_custom(|iters| {
                time_appends::<KvSeqAppender>(dir, &value, iters, per_file, false)
            })
        });
        g.bench_function(BenchmarkId::new(PlainAppender::NAME, label), |b| {
            b.iter_custom(|iters| {
                time_appends::<PlainAppender>(dir, &value, iters, per_file, false)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("append_durable");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.sampling_mode(SamplingMode::Flat);
    let value = vec![0x5a; 64 << 10];
    let entry = encoded_entry(KEY, &value).len() as u64;
    g.throughput(Throughput::Bytes(entry * DURABLE_ENTRIES));
    let batches = |iters: u64, f: &dyn Fn(u64) -> Duration| {
        (0..iters).map(|_| f(DURABLE_ENTRIES)).sum::<Duration>()
    };
    g.bench_function(BenchmarkId::new(KvSeqAppender::NAME, "8MiB"), |b| {
        b.iter_custom(|iters| {
            batches(iters, &|n| {
                time_appends::<KvSeqAppender>(dir, &value, n, n, true)
            })
        })
    });
    g.bench_function(BenchmarkId::new(PlainAppender::NAME, "8MiB"), |b| {
        b.iter_custom(|iters| {
            batches(iters, &|n| {
                time_appends::<PlainAppender>(dir, &value, n, n, true)
            })
        })
    });
    g.finish();
}

/// A small deterministic generator (benchmarks must not depend on a random seed).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Writes a `READ_FILE`-sized kvseq of `size`-byte values; returns its pointers.
fn build_read_file(path: &Path, size: usize) -> Vec<KvPointer> {
    let _ = fs::remove_file(path);
    let mut kv = KvSeq::create_path(path, &KvSeqOptions::default()).expect("create");
    let value = vec![0xa5; size];
    let mut ptrs = Vec::new();
    while kv.filesize() < READ_FILE {
        ptrs.push(kv.append(KEY, &value).expect("append"));
    }
    kv.sync().expect("sync");
    ptrs
}

fn bench_read(c: &mut Criterion, dir: &Path) {
    let files: Vec<(usize, &str, PathBuf, Vec<KvPointer>)> = SIZES
        .iter()
        .map(|&(size, label)| {
            let path = dir.join(format!("read-{label}.kvseq"));
            let ptrs = build_read_file(&path, size);
            (size, label, path, ptrs)
        })
        .collect();
    let mut g = c.benchmark_group("read_warm");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (size, label, path, ptrs) in &files {
        let (size, label) = (*size, *label);
        let kv = KvSeq::open_path(path, false).expect("open");
        let file = File::open(path).expect("open");
        let entry_len = (kv.layout(ptrs[0]).expect("layout").end - ptrs[0].0) as usize;
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let order: Vec<KvPointer> = (0..4096)
            .map(|_| ptrs[(rng.next() % ptrs.len() as u64) as usize])
            .collect();
        let mut backing = Vec::new();
        for p in ptrs {
            black_box(kv.read(*p).expect("warm-up read"));
        }
        g.throughput(Throughput::Bytes(size as u64));
        let mut i = 0;
        g.bench_function(BenchmarkId::new("kvseq_read", label), |b| {
            b.iter(|| {
                i = (i + 1) % order.len();
                let e = kv.read(order[i]).expect("read");
                black_box(e.value.len())
            })
        });
        g.bench_function(BenchmarkId::new("kvseq_read_value_at", label), |b| {
            let buf = aligned(&mut backing, size);
            b.iter(|| {
                i = (i + 1) % order.len();
                let layout = kv.layout(order[i]).expect("layout");
                kv.read_value_at(&layout, 0, buf).expect("read_value_at");
                black_box(buf[size - 1])
            })
        });
        g.bench_function(BenchmarkId::new("pread", label), |b| {
            let buf = aligned(&mut backing, entry_len);
            b.iter(|| {
                i = (i + 1) % order.len();
                file.read_exact_at(buf, order[i].0).expect("pread");
                black_box(buf[entry_len - 1])
            })
        });
    }
    g.finish();
    let (_, label, path, _) = &files[0];
    bench_scan(c, path, label);
    for (_, _, path, _) in &files {
        fs::remove_file(path).expect("remove");
    }
}

fn bench_scan(c: &mut Criterion, path: &Path, label: &str) {
    let kv = &KvSeq::open_path(path, false).expect("open");
    let file = File::open(path).expect("open");
    let data = kv.filesize() - kv.first().0;
    let mut g = c.benchmark_group("scan_warm");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Bytes(data));
    g.bench_function(BenchmarkId::new("kvseq_iter", label), |b| {
        b.iter(|| {
            let mut n = 0u64;
            for e in kv.iter_entries(kv.first(), false) {
                n += e.expect("entry").value.map_or(0, |v| v.len() as u64);
            }
            black_box(n)
        })
    });
    let read_all = |buf: &mut [u8]| {
        let mut at = kv.first().0;
        while at < kv.filesize() {
            let n = buf.len().min((kv.filesize() - at) as usize);
            file.read_exact_at(&mut buf[..n], at).expect("pread");
            at += n as u64;
        }
        black_box(buf[0])
    };
    let mut backing = Vec::new();
    let buf = aligned(&mut backing, 256 << 10);
    g.bench_function(BenchmarkId::new("pread_256KiB", label), |b| {
        b.iter(|| read_all(buf))
    });
    // The same reads into a plain `vec!` buffer, which glibc places 16 bytes past a page boundary
    // (the placement of the glibc memcpy trap, docs/PERFORMANCE.md § Machine, ceilings and cold
    // reads): shows what that costs the kernel's copy.
    let mut plain = vec![0u8; 256 << 10];
    g.bench_function(BenchmarkId::new("pread_256KiB_vec", label), |b| {
        b.iter(|| read_all(&mut plain))
    });
    g.finish();
}

fn hindex_key(prefix: &[u8; 4], i: u64) -> [u8; HINDEX_KEY_LEN] {
    let mut key = [0u8; HINDEX_KEY_LEN];
    key[..4].copy_from_slice(prefix);
    key[4..].copy_from_slice(format!("{i:010}").as_bytes());
    key
}

/// The datafile for the hindex benchmarks: 1M entries `key-NNNNNNNNNN` → 16 bytes.
fn build_keys(path: &Path) -> (KvSeq, Vec<KvPointer>) {
    let _ = fs::remove_file(path);
    let mut kv = KvSeq::create_path(path, &KvSeqOptions::default()).expect("create");
    let ptrs = (0..HINDEX_KEYS)
        .map(|i| {
            kv.append(&hindex_key(b"key-", i), &i.to_be_bytes().repeat(2))
                .expect("append")
        })
        .collect();
    kv.sync().expect("sync");
    (kv, ptrs)
}

fn open_writable(path: &Path) -> HIndex {
    let mut index = HIndex::open_path(path, true).expect("open hindex");
    index.set_max_load(0.9).expect("load limit");
    index
}

fn bench_hindex(c: &mut Criterion, dir: &Path) {
    let kv_path = dir.join("keys.kvseq");
    let (kv, ptrs) = build_keys(&kv_path);
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let hits: Vec<[u8; HINDEX_KEY_LEN]> = (0..65536)
        .map(|_| hindex_key(b"key-", rng.next() % HINDEX_KEYS))
        .collect();
    let misses: Vec<[u8; HINDEX_KEY_LEN]> = (0..65536).map(|i| hindex_key(b"mis-", i)).collect();
    let prefilled = HINDEX_KEYS - INSERT_POOL;
    let mut g = c.benchmark_group("hindex");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (load, label) in [(0.5, "load0.50"), (0.75, "load0.75")] {
        let path = dir.join("bench.hindex");
        let snapshot = dir.join("bench.hindex.snapshot");
        let _ = fs::remove_file(&path);
        let opts = HIndexOptions {
            htsize: (HINDEX_KEYS as f64 / load).ceil() as u64,
            max_load: 0.9,
            ..HIndexOptions::default()
        };
        let mut index = HIndex::create_path(&path, &opts).expect("create hindex");
        for i in 0..prefilled {
            index
                .insert(&hindex_key(b"key-", i), ptrs[i as usize], &kv)
                .expect("insert");
        }
        index.flush().expect("flush");
        fs::copy(&path, &snapshot).expect("snapshot");
        for i in prefilled..HINDEX_KEYS {
            index
                .insert(&hindex_key(b"key-", i), ptrs[i as usize], &kv)
                .expect("insert");
        }
        // Durable before measuring, so the kernel's writeback of the new table does not compete
        // with the lookups for the two cores.
        index.sync(0).expect("sync");
        assert_eq!(index.live(), HINDEX_KEYS);
        assert_eq!(
            index.htsize(),
            opts.htsize,
            "the table must not grow during the benchmark"
        );

        let mut i = 0;
        g.bench_function(BenchmarkId::new("lookup_hit", label), |b| {
            b.iter(|| {
                i = (i + 1) % hits.len();
                black_box(
                    index
                        .lookup(&hits[i], &kv)
                        .expect("lookup")
                        .expect("present"),
                )
            })
        });
        g.bench_function(BenchmarkId::new("lookup_miss", label), |b| {
            b.iter(|| {
                i = (i + 1) % misses.len();
                assert!(index.lookup(&misses[i], &kv).expect("lookup").is_none());
            })
        });
        drop(index);

        let mut next = HINDEX_KEYS; // pool exhausted: restore first
        let mut index: Option<HIndex> = None;
        g.bench_function(BenchmarkId::new("insert", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    if next == HINDEX_KEYS {
                        drop(index.take());
                        fs::copy(&snapshot, &path).expect("restore");
                        index = Some(open_writable(&path));
                        next = prefilled;
                    }
                    let t = index.as_mut().expect("restored above");
                    let n = (iters - done).min(HINDEX_KEYS - next);
                    let start = Instant::now();
                    for k in next..next + n {
                        black_box(
                            t.insert(&hindex_key(b"key-", k), ptrs[k as usize], &kv)
                                .expect("insert"),
                        );
                    }
                    total += start.elapsed();
                    next += n;
                    done += n;
                }
                total
            })
        });
        if let Some(t) = &index {
            assert_eq!(
                t.htsize(),
                opts.htsize,
                "the table must not grow during the benchmark"
            );
        }
        drop(index);
        fs::remove_file(&path).expect("remove");
        fs::remove_file(&snapshot).expect("remove");
    }
    g.finish();
    drop(kv);
    fs::remove_file(&kv_path).expect("remove");
}

/// Where criterion keeps its results (its own rule: CRITERION_HOME, else the target directory).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("criterion")
}

/// The median time (ns per iteration) criterion measured for `group/function/param`.
fn median_ns(group: &str, function: &str, param: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(group)
        .join(function)
        .join(param)
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn print_ratios() {
    println!("\nRatios of medians (this run):");
    let pairs = [
        ("append", "kvseq", "plain_write", "1KiB"),
        ("append", "kvseq", "plain_write", "64KiB"),
        ("append_durable", "kvseq", "plain_write", "8MiB"),
        ("read_warm", "kvseq_read", "pread", "1KiB"),
        ("read_warm", "kvseq_read", "pread", "64KiB"),
        ("read_warm", "kvseq_read_value_at", "pread", "1KiB"),
        ("read_warm", "kvseq_read_value_at", "pread", "64KiB"),
        ("scan_warm", "kvseq_iter", "pread_256KiB", "1KiB"),
        ("scan_warm", "pread_256KiB_vec", "pread_256KiB", "1KiB"),
    ];
    println!(
        "{:<16} {:<22} {:<14} {:>7} {:>12} {:>12}",
        "group", "ours", "baseline", "param", "time ratio", "speed ratio"
    );
    for (group, ours, base, param) in pairs {
        if let (Some(a), Some(b)) = (median_ns(group, ours, param), median_ns(group, base, param)) {
            println!(
                "{group:<16} {ours:<22} {base:<14} {param:>7} {:>12.2} {:>12.2}",
                a / b,
                b / a
            );
        }
    }
    for label in ["load0.50", "load0.75"] {
        for f in ["lookup_hit", "lookup_miss", "insert"] {
            if let Some(ns) = median_ns("hindex", f, label) {
                println!("hindex {f:<12} {label}: {ns:>8.0} ns/op");
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    // Real files on the same file system as the build (not a tmpfs /tmp).
    let dir = tempfile::Builder::new()
        .prefix("wink-bench-")
        .tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .expect("tempdir");
    bench_append(&mut c, dir.path());
    bench_read(&mut c, dir.path());
    bench_hindex(&mut c, dir.path());
    c.final_summary();
    print_ratios();
}
