//! Archive figures in one run: formats 1 and 2 on the shared corpus — size as % of raw (bulk,
//! and incremental with an archive run after every 10 revisions per title), archiving MB/s, and
//! one-revision read p50/p99 (the title's entry found in its map, then the revision, as the
//! store reads) with the archive's caches (blocks, revisions, maps) empty (page cache warm), warm
//! (caches as earlier reads left them), and cold (caches empty and the archive datafile's pages
//! dropped with `POSIX_FADV_DONTNEED` before each read; with, per cold read, the CPU time it took,
//! the raw bytes it decoded and the bytes it had read from the disk, none of them noisy as its
//! wall-clock time is on a shared machine); where format 2's bytes are — then the
//! same on a generated title of 10,000 revisions, and the baselines (per-revision zstd -19 and
//! gzip -6, zstd -19 blocks of 4 and 16 MiB, zstd -19 --long over the whole corpus as one stream
//! and per title, xz -9e per title, brotli -q 11 in blocks of 16 MiB). The load average is
//! printed before and after: the machine is shared.
//!
//! Format 3 (units of a run's revisions) beside them; the generated title and a reverting one
//! (vandal edits and their reverts) in bulk and in runs of 10, each with its own `zstd -19
//! --long` one-stream baseline.
//!
//! `cargo bench --bench archive` (env: WINK_FORMATS=v1,v2,v3 the formats measured,
//! WINK_ARCHIVE_LEVEL for format 2's level,
//! WINK_ARCHIVE_CHAIN_MIB, WINK_BASELINES=0 to skip the baselines, WINK_READS,
//! WINK_GENERATED=N revisions of the generated title, 0 to skip it, WINK_MODES=bulk or runs for
//! one archive mode, WINK_KEEP=1 to keep the archives in target/bench-archive and measure the
//! reads of those found there again without archiving: for profiling reads).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wink::archive::v2::map::Base;
use wink::archive::{Archive, ArchiveOptions, Item};
use wink::clock::{Clock, ManualClock};
use wink::filesys::OpenOptions;
use wink::store::import::{read_manifest, CorpusEntry};
use wink::vfs::{RealFs, Vfs};
use wink_harness::synth::Rng;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Title {
    key: Vec<u8>,
    revs: Vec<(u64, Vec<u8>)>,
    /// Each revision's tid, as `wink import` makes them: the revision's time, its number as the
    /// counter, a node of the title's own.
    tids: Vec<[u8; 16]>,
}

fn tid(secs: i64, rev: u64, doc: &[u8]) -> [u8; 16] {
    let mut node = [0u8; 6];
    for (i, b) in doc.iter().enumerate() {
        node[i % 6] = node[i % 6].rotate_left(3) ^ b;
    }
    *wink::store::key::tid_at(secs, (rev & 0x3fff) as u16, node).as_bytes()
}

fn load(corpus: &Path) -> Vec<Title> {
    let entries: Vec<CorpusEntry> = read_manifest(corpus).expect("manifest");
    let mut titles: Vec<Title> = Vec::new();
    for e in entries {
        let bytes = std::fs::read(&e.path).expect("corpus file");
        let tid = tid(e.timestamp, e.rev, e.doc.as_bytes());
        match titles.iter_mut().find(|t| t.key == e.doc.as_bytes()) {
            Some(t) => {
                t.revs.push((e.rev, bytes));
                t.tids.push(tid);
            }
            None => titles.push(Title {
                key: e.doc.into_bytes(),
                revs: vec![(e.rev, bytes)],
                tids: vec![tid],
            }),
        }
    }
    titles
}

/// A wiki-like history of `n` revisions of one page of about 32 KB: each revision a few small
/// edits of the one before (words replaced, a paragraph added or removed), as most revisions of
/// a long-lived article are.
fn generated(n: usize) -> Title {
    let mut page: Vec<u8> = Vec::new();
    for r in wink_harness::synth::histories(7, 3, 1, 30) {
        page.extend_from_slice(&r.html);
    }
    page.truncate(32 << 10);
    let base = page.len();
    let mut rng = Rng::new(11);
    let words: Vec<&[u8]> = [
        "the",
        "article",
        "edit",
        "revision",
        "wiki",
        "history",
        "source",
        "citation",
        "needed",
        "page",
        "archive",
        "render",
        "section",
        "infobox",
        "reference",
        "talk",
    ]
    .iter()
    .map(|w| w.as_bytes())
    .collect();
    let text = |rng: &mut Rng, len: usize| {
        let mut t = Vec::with_capacity(len + 12);
        while t.len() < len {
            t.extend_from_slice(words[rng.below(words.len() as u64) as usize]);
            t.push(b' ');
        }
        t
    };
    let mut revs = Vec::with_capacity(n);
    for i in 0..n {
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(page.len() as u64) as usize;
            match rng.below(10) {
                0 if page.len() < 2 * base => {
                    let len = 100 + rng.below(300) as usize;
                    let p = [b"<p>".as_slice(), &text(&mut rng, len), b"</p>\n"].concat();
                    page.splice(at..at, p);
                }
                1 if page.len() > base / 2 => {
                    let end = (at + 50 + rng.below(250) as usize).min(page.len());
                    page.drain(at..end);
                }
                _ => {
                    let end = (at + 1 + rng.below(40) as usize).min(page.len());
                    let len = 1 + rng.below(40) as usize;
                    page.splice(at..end, text(&mut rng, len));
                }
            }
        }
        let footer = format!("<footer>revision {i}</footer>");
        revs.push((i as u64, [page.as_slice(), footer.as_bytes()].concat()));
    }
    let key = b"generated/Long history".to_vec();
    // A revision an hour.
    let tids = (0..n)
        .map(|i| tid(1_600_000_000 + 3600 * i as i64, i as u64, &key))
        .collect();
    Title { key, revs, tids }
}

/// A fresh archive under `dir`, or (`keep`) the one an earlier run left there.
fn open_archive(dir: &Path, opts: ArchiveOptions, keep: bool) -> Archive {
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000));
    let base = dir.join("archive");
    if !keep {
        Archive::create_in(vfs.clone(), &base, clock.clone()).unwrap();
    }
    let open = OpenOptions {
        clock,
        ..OpenOptions::writer()
    };
    Archive::open_in(vfs, &base, &open, opts).unwrap()
}

fn items(t: &Title, range: std::ops::Range<usize>) -> Vec<Item<'_>> {
    t.revs[range.clone()]
        .iter()
        .zip(&t.tids[range])
        .map(|((rev, v), tid)| Item {
            rev: *rev,
            tid: *tid,
            content_type: "text/html",
            labels: &wink::store::Labels::NONE,
            value: v,
        })
        .collect()
}

/// Archives every title (in runs of `run` revisions per title when given); returns seconds.
fn archive_all(a: &mut Archive, titles: &[Title], run: Option<usize>) -> f64 {
    let start = Instant::now();
    match run {
        None => {
            for t in titles {
                a.add(&t.key, &items(t, 0..t.revs.len())).unwrap();
            }
            a.commit().unwrap();
        }
        Some(n) => {
            let rounds = titles
                .iter()
                .map(|t| t.revs.len().div_ceil(n))
                .max()
                .unwrap_or(0);
            for r in 0..rounds {
                for t in titles {
                    let lo = (r * n).min(t.revs.len());
                    let hi = ((r + 1) * n).min(t.revs.len());
                    if lo < hi {
                        a.add(&t.key, &items(t, lo..hi)).unwrap();
                    }
                }
                a.commit().unwrap();
            }
        }
    }
    start.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

#[derive(Clone, Copy, PartialEq)]
enum Cache {
    /// The archive's caches emptied before each read; the page cache as it is.
    Empty,
    /// Nothing emptied (after a pass of the same reads to warm up).
    Warm,
    /// The archive's caches emptied and its datafile's pages dropped before each read.
    Cold,
}

/// One-revision reads of random revisions as the store reads them (the title's entry found in
/// its map, then the revision): (p50, p99) in ms, of the raw bytes each decoded in MB, and of
/// the MB each had read from the disk (neither noisy), and of the CPU time each took in ms.
type P = (f64, f64);
fn reads(a: &Archive, titles: &[Title], reads: usize, cache: Cache) -> (P, P, P, P) {
    let all: Vec<(&Title, usize)> = titles
        .iter()
        .flat_map(|t| (0..t.revs.len()).map(move |i| (t, i)))
        .collect();
    let data = a.filesys().data().storage();
    let len = data.len().unwrap();
    let mut ms = Vec::with_capacity(reads);
    let mut decoded = Vec::with_capacity(reads);
    let mut disk = Vec::with_capacity(reads);
    let mut cpu = Vec::with_capacity(reads);
    let passes = if cache == Cache::Warm { 2 } else { 1 };
    for pass in 0..passes {
        let mut rng = Rng::new(42);
        ms.clear();
        decoded.clear();
        disk.clear();
        cpu.clear();
        for _ in 0..reads {
            let (t, i) = all[rng.below(all.len() as u64) as usize];
            if cache != Cache::Warm {
                a.clear_cache();
            }
            if cache == Cache::Cold {
                data.drop_cache(0, len).unwrap();
            }
            let bytes = a.decompressed_bytes();
            let io = read_bytes();
            let cpu0 = thread_cpu_ms();
            let start = Instant::now();
            let e = a
                .with_entries(&t.key, |es| {
                    es.iter().find(|e| e.rev == t.revs[i].0).cloned()
                })
                .unwrap()
                .flatten()
                .unwrap();
            let v = a.read(&t.key, &e).unwrap();
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            cpu.push(thread_cpu_ms() - cpu0);
            decoded.push((a.decompressed_bytes() - bytes) as f64 / 1e6);
            disk.push(read_bytes().saturating_sub(io) as f64 / 1e6);
            if pass + 1 == passes {
                assert_eq!(v, t.revs[i].1);
            }
        }
    }
    ms.sort_by(f64::total_cmp);
    decoded.sort_by(f64::total_cmp);
    disk.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    let p = |v: &[f64]| (percentile(v, 0.5), percentile(v, 0.99));
    (p(&ms), p(&decoded), p(&disk), p(&cpu))
}

/// CPU time this thread has used, in ms: a read's own work, without the time it waited for the
/// disk or for the cores (the machine is shared).
fn thread_cpu_ms() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `t` is, and keeps no pointer to it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Bytes this process has had read from storage (`/proc/self/io`'s `read_bytes`: page cache
/// misses), 0 where the kernel does not count them.
fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn read_line(a: &Archive, titles: &[Title], n: usize) -> String {
    let mut out = String::new();
    for (label, cache) in [
        ("empty", Cache::Empty),
        ("warm", Cache::Warm),
        ("cold", Cache::Cold),
    ] {
        let ((p50, p99), (d50, d99), (r50, r99), (c50, c99)) = reads(a, titles, n, cache);
        out.push_str(&format!("  {label} p50 {p50:.2} p99 {p99:.2} ms"));
        if cache == Cache::Cold {
            out.push_str(&format!(
                " (CPU p50 {c50:.2} p99 {c99:.2} ms; decoded p50 {d50:.2} p99 {d99:.2} MB; \
                 read from disk p50 {r50:.3} p99 {r99:.3} MB)"
            ));
        }
    }
    out
}

/// Archives `titles` into a fresh archive under `work/name`: one result line.
fn measure(
    work: &Path,
    name: &str,
    opts: ArchiveOptions,
    titles: &[Title],
    run: Option<usize>,
    n_reads: usize,
) {
    let dir = work.join(name);
    // WINK_KEEP=1: archives kept between runs, and one found reused (reads only).
    let keep = env("WINK_KEEP", 0) == 1;
    let reuse = keep && dir.join("archive.data").exists();
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = open_archive(&dir, opts, reuse);
    let secs = if reuse {
        f64::NAN
    } else {
        archive_all(&mut a, titles, run)
    };
    let st = a.stats().unwrap();
    let raw: u64 = titles
        .iter()
        .flat_map(|t| &t.revs)
        .map(|(_, v)| v.len() as u64)
        .sum();
    let line = read_line(&a, titles, n_reads);
    println!(
        "{name:<34} {:>7.3}% of raw ({} of {} bytes)  archiving {:>6.1} MB/s  reads:{line}",
        100.0 * st.stored_bytes as f64 / st.raw_bytes as f64,
        st.stored_bytes,
        st.raw_bytes,
        raw as f64 / 1e6 / secs,
    );
    if opts.format >= 2 {
        println!(
            "{:<34} {}",
            "",
            breakdown(&a, titles, st.stored_bytes, st.raw_bytes)
        );
    }
    drop(a);
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Where a format 2 or 3 archive's bytes are, as % of raw (format 3: a unit counted by its first
/// frame's base, members not counted): keys (plain, and compressed against another
/// title's key), deltas (from the frame before, and from an earlier one), and the rest (maps,
/// inodes, entry headers, index, time index and journal).
fn breakdown(a: &Archive, titles: &[Title], stored: u64, raw: u64) -> String {
    let mut sums = [(0u64, 0usize); 4];
    for t in titles {
        let Some(map) = a.map_v2(&t.key).unwrap() else {
            continue;
        };
        for f in &map.frames {
            let kind = match f.base {
                Base::Key => 0,
                Base::Title { .. } => 1,
                Base::Previous | Base::After => 2,
                Base::Earlier(_) => 3,
                // Format 3: a member's bytes are its unit's, counted with the unit's first.
                Base::Unit => continue,
            };
            sums[kind].0 += u64::from(f.stored);
            sums[kind].1 += 1;
        }
    }
    let frames: u64 = sums.iter().map(|s| s.0).sum();
    let pct = |n: u64| 100.0 * n as f64 / raw as f64;
    let part = |(bytes, n): (u64, usize)| format!("{:.3}% ({n})", pct(bytes));
    format!(
        "bytes: keys {} + referencing {}; deltas from the previous {} + from an earlier {}; \
         the rest {:.3}%",
        part(sums[0]),
        part(sums[1]),
        part(sums[2]),
        part(sums[3]),
        pct(stored - frames)
    )
}

/// `zstd -19 --long`: the titles as one stream, title after title, a 128 MiB window.
fn whole_stream(titles: &[Title]) -> u64 {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
    enc.long_distance_matching(true).unwrap();
    enc.window_log(27).unwrap();
    for t in titles {
        for (_, v) in &t.revs {
            enc.write_all(v).unwrap();
        }
    }
    enc.finish().unwrap().len() as u64
}

/// A page that reverts: `t`'s first half, where after every 4th revision a vandal's edit (a
/// line of junk and a paragraph blanked) is followed by its revert, the revision before again.
fn reverting(t: &Title) -> Title {
    let mut rng = Rng::new(29);
    let mut revs: Vec<(u64, Vec<u8>)> = Vec::new();
    for (_, page) in &t.revs[..t.revs.len() / 2] {
        revs.push((revs.len() as u64, page.clone()));
        if revs.len() % 5 == 4 {
            let mut bad = page.clone();
            let at = rng.below(bad.len() as u64) as usize;
            let end = (at + 200 + rng.below(400) as usize).min(bad.len());
            let junk = format!("<b>VANDAL {} WAS HERE</b>", rng.below(1 << 30));
            bad.splice(at..end, junk.into_bytes());
            revs.push((revs.len() as u64, bad));
            revs.push((revs.len() as u64, page.clone()));
        }
    }
    let key = b"generated/Reverting".to_vec();
    let tids = (0..revs.len())
        .map(|i| tid(1_600_000_000 + 3600 * i as i64, i as u64, &key))
        .collect();
    Title { key, revs, tids }
}

fn baselines(titles: &[Title], raw: u64) {
    let pct = |n: u64| 100.0 * n as f64 / raw as f64;
    let per_zstd: u64 = titles
        .iter()
        .flat_map(|t| &t.revs)
        .map(|(_, v)| zstd::bulk::compress(v, 19).unwrap().len() as u64)
        .sum();
    let per_gzip: u64 = titles
        .iter()
        .flat_map(|t| &t.revs)
        .map(|(_, v)| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(v).unwrap();
            e.finish().unwrap().len() as u64
        })
        .sum();
    println!(
        "baseline  per-revision zstd -19      {:>7.3}%",
        pct(per_zstd)
    );
    println!(
        "baseline  per-revision gzip -6       {:>7.3}%",
        pct(per_gzip)
    );
    for mib in [4u64, 16] {
        let mut total = 0u64;
        for t in titles {
            let mut block = Vec::new();
            for (_, v) in &t.revs {
                if !block.is_empty() && (block.len() + v.len()) as u64 > mib << 20 {
                    total += wink::archive::compress(&block, &[], 19).unwrap().len() as u64;
                    block.clear();
                }
                block.extend_from_slice(v);
            }
            if !block.is_empty() {
                total += wink::archive::compress(&block, &[], 19).unwrap().len() as u64;
            }
        }
        println!(
            "baseline  zstd -19 blocks of {mib:>2} MiB    {:>7.3}%",
            pct(total)
        );
    }
    let whole = whole_stream(titles);
    println!("baseline  zstd -19 --long, one stream {:>7.3}%", pct(whole));
    // The same, one stream per title: what a title's frames could reach without being seekable.
    let mut per_title = 0u64;
    for t in titles {
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
        enc.long_distance_matching(true).unwrap();
        enc.window_log(27).unwrap();
        for (_, v) in &t.revs {
            enc.write_all(v).unwrap();
        }
        per_title += enc.finish().unwrap().len() as u64;
    }
    println!(
        "baseline  zstd -19 --long, per title  {:>7.3}%",
        pct(per_title)
    );
    // `xz -9e`, one stream per title.
    let mut xz = 0u64;
    for t in titles {
        let preset = 9 | 0x8000_0000; // LZMA_PRESET_EXTREME
        let stream = xz2::stream::Stream::new_easy_encoder(preset, xz2::stream::Check::Crc64);
        let mut enc = xz2::write::XzEncoder::new_stream(Vec::new(), stream.unwrap());
        for (_, v) in &t.revs {
            enc.write_all(v).unwrap();
        }
        xz += enc.finish().unwrap().len() as u64;
    }
    println!("baseline  xz -9e, per title           {:>7.3}%", pct(xz));
    // `brotli -q 11` (window 2^24), each title in blocks of 16 MiB as the zstd blocks above.
    let mut brotli_total = 0u64;
    let brotli = |block: &[u8]| {
        let mut out = Vec::new();
        let mut w = brotli::CompressorWriter::new(&mut out, 1 << 16, 11, 24);
        w.write_all(block).unwrap();
        drop(w);
        out.len() as u64
    };
    for t in titles {
        let mut block = Vec::new();
        for (_, v) in &t.revs {
            if !block.is_empty() && block.len() + v.len() > 16 << 20 {
                brotli_total += brotli(&block);
                block.clear();
            }
            block.extend_from_slice(v);
        }
        if !block.is_empty() {
            brotli_total += brotli(&block);
        }
    }
    println!(
        "baseline  brotli -q 11, 16 MiB blocks {:>7.3}%",
        pct(brotli_total)
    );
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if !corpus.join("manifest.tsv").exists() {
        println!("../shared/corpus is absent: nothing to measure");
        return;
    }
    println!("load average before: {}", loadavg());
    let titles = load(&corpus);
    let raw: u64 = titles
        .iter()
        .flat_map(|t| &t.revs)
        .map(|(_, v)| v.len() as u64)
        .sum();
    let v2 = ArchiveOptions {
        level: env("WINK_ARCHIVE_LEVEL", ArchiveOptions::default().level),
        chain_bytes: env(
            "WINK_ARCHIVE_CHAIN_MIB",
            ArchiveOptions::default().chain_bytes >> 20,
        ) << 20,
        format: 2,
        ..ArchiveOptions::default()
    };
    let v3 = ArchiveOptions { format: 3, ..v2 };
    let formats: String = env("WINK_FORMATS", "v1,v2,v3".to_string());
    let chosen = |list: &[(&'static str, ArchiveOptions)]| -> Vec<(&'static str, ArchiveOptions)> {
        list.iter()
            .filter(|(f, _)| formats.split(',').any(|x| x == *f))
            .copied()
            .collect()
    };
    // Format 1 as stores wrote it before format 2: level 12, 4 MiB blocks, a key block every 2.
    let v1 = ArchiveOptions {
        level: 12,
        format: 1,
        ..ArchiveOptions::default()
    };
    let n_reads = env("WINK_READS", 500usize);
    println!(
        "corpus: {} titles, {} revisions, {} bytes raw; v2: level {}, chain budget {} MiB; \
         v1: level {}, blocks {} MiB, key every {}",
        titles.len(),
        titles.iter().map(|t| t.revs.len()).sum::<usize>(),
        raw,
        v2.level,
        v2.chain_bytes >> 20,
        v1.level,
        v1.block_bytes >> 20,
        v1.key_every
    );
    let work: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-archive");
    let keep = env("WINK_KEEP", 0) == 1;
    if !keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    // WINK_MODES=bulk or runs: one of the two archive modes only.
    let modes: String = env("WINK_MODES", "bulk,runs".to_string());
    let mode_on = |run: Option<usize>| {
        let m = if run.is_some() { "runs" } else { "bulk" };
        modes.split(',').any(|x| x == m)
    };
    for (format, opts) in chosen(&[("v1", v1), ("v2", v2), ("v3", v3)]) {
        for (mode, run) in [("bulk", None), ("incremental (runs of 10)", Some(10))] {
            if !mode_on(run) {
                continue;
            }
            let name = format!("{format} {mode}");
            measure(&work, &name, opts, &titles, run, n_reads);
        }
    }
    let n = env("WINK_GENERATED", 10_000usize);
    if n > 0 {
        let long = [generated(n)];
        let reverting = [reverting(&long[0])];
        for (what, t) in [("generated", &long), ("reverting", &reverting)] {
            let bytes: u64 = t[0].revs.iter().map(|(_, v)| v.len() as u64).sum();
            println!(
                "{what} title: {} revisions, {bytes} bytes raw ({} bytes per revision); \
                 baseline zstd -19 --long, one stream {:.3}%",
                t[0].revs.len(),
                bytes / t[0].revs.len() as u64,
                100.0 * whole_stream(t) as f64 / bytes as f64
            );
            for (format, opts) in chosen(&[("v1", v1), ("v2", v2), ("v3", v3)]) {
                for (mode, run) in [("bulk", None), ("runs of 10", Some(10))] {
                    if format == "v1" && run.is_some() || !mode_on(run) {
                        continue;
                    }
                    let name = format!("{format} {what}, {mode}");
                    measure(&work, &name, opts, t, run, n_reads);
                }
            }
        }
    }
    if env("WINK_BASELINES", 1) == 1 {
        baselines(&titles, raw);
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    println!("load average after: {}", loadavg());
}
