//! Archive figures on the shared corpus, in one run: size as % of raw (bulk, and incremental with
//! an archive run after every 10 revisions per title), one-revision read p50/p99 with the block
//! cache empty, archiving MB/s, and baselines to compare with (per-revision zstd -19 and gzip -6,
//! zstd blocks of 4 and 16 MiB). Targets and figures: docs/PERFORMANCE.md § Archive.
//!
//! `cargo bench --bench archive` (env: WINK_ARCHIVE_LEVEL, WINK_ARCHIVE_BLOCK_MIB,
//! WINK_ARCHIVE_KEY_EVERY, WINK_BASELINES=0 to skip the baselines, WINK_READS).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wink::archive::{Archive, ArchiveOptions, Item};
use wink::clock::{Clock, ManualClock};
use wink::filesys::OpenOptions;
use wink::store::import::{read_manifest, CorpusEntry};
use wink::vfs::{RealFs, Vfs};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Title {
    key: Vec<u8>,
    revs: Vec<(u64, Vec<u8>)>,
}

fn load(corpus: &Path) -> Vec<Title> {
    let entries: Vec<CorpusEntry> = read_manifest(corpus).expect("manifest");
    let mut titles: Vec<Title> = Vec::new();
    for e in entries {
        let bytes = std::fs::read(&e.path).expect("corpus file");
        match titles.iter_mut().find(|t| t.key == e.doc.as_bytes()) {
            Some(t) => t.revs.push((e.rev, bytes)),
            None => titles.push(Title {
                key: e.doc.into_bytes(),
                revs: vec![(e.rev, bytes)],
            }),
        }
    }
    titles
}

fn open_archive(dir: &Path, opts: ArchiveOptions) -> Archive {
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000));
    let base = dir.join("archive");
    Archive::create_in(vfs.clone(), &base, clock.clone()).unwrap();
    let open = OpenOptions {
        clock,
        ..OpenOptions::writer()
    };
    Archive::open_in(vfs, &base, &open, opts).unwrap()
}

fn items(t: &Title, range: std::ops::Range<usize>) -> Vec<Item<'_>> {
    t.revs[range]
        .iter()
        .map(|(rev, v)| Item {
            rev: *rev,
            tid: [0; 16],
            content_type: "text/html",
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

/// One-revision reads with the block cache emptied before each: (p50, p99) in ms.
fn cold_reads(a: &Archive, titles: &[Title], reads: usize) -> (f64, f64) {
    let all: Vec<(&Title, usize)> = titles
        .iter()
        .flat_map(|t| (0..t.revs.len()).map(move |i| (t, i)))
        .collect();
    let mut rng = wink::synth::Rng::new(42);
    let mut ms = Vec::with_capacity(reads);
    for _ in 0..reads {
        let (t, i) = all[rng.below(all.len() as u64) as usize];
        let entries = a.entries(&t.key).unwrap();
        let e = entries.iter().find(|e| e.rev == t.revs[i].0).unwrap();
        a.clear_cache();
        let start = Instant::now();
        let v = a.read(&t.key, e).unwrap();
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(v, t.revs[i].1);
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
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
}

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if !corpus.join("manifest.tsv").exists() {
        println!("../shared/corpus is absent: nothing to measure");
        return;
    }
    let titles = load(&corpus);
    let raw: u64 = titles
        .iter()
        .flat_map(|t| &t.revs)
        .map(|(_, v)| v.len() as u64)
        .sum();
    let opts = ArchiveOptions {
        level: env("WINK_ARCHIVE_LEVEL", ArchiveOptions::default().level),
        block_bytes: env(
            "WINK_ARCHIVE_BLOCK_MIB",
            ArchiveOptions::default().block_bytes >> 20,
        ) << 20,
        key_every: env(
            "WINK_ARCHIVE_KEY_EVERY",
            ArchiveOptions::default().key_every,
        ),
        ..ArchiveOptions::default()
    };
    let reads = env("WINK_READS", 500usize);
    println!("corpus: {} titles, {} revisions, {} bytes raw; archive: level {}, blocks {} MiB, key every {}", titles.len(), titles.iter().map(|t| t.revs.len()).sum::<usize>(), raw, opts.level, opts.block_bytes >> 20, opts.key_every);
    let work: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-archive");
    let _ = std::fs::remove_dir_all(&work);
    for (label, run) in [("bulk", None), ("incremental (runs of 10)", Some(10))] {
        let dir = work.join(label.split(' ').next().unwrap());
        std::fs::create_dir_all(&dir).unwrap();
        let mut a = open_archive(&dir, opts);
        let secs = archive_all(&mut a, &titles, run);
        let st = a.stats().unwrap();
        let (p50, p99) = cold_reads(&a, &titles, reads);
        println!(
            "wink {label:<26} {:>7.3}% of raw ({} of {} bytes)  archiving {:>6.1} MB/s  cold read p50 {:.2} ms p99 {:.2} ms",
            100.0 * st.stored_bytes as f64 / st.raw_bytes as f64,
            st.stored_bytes,
            st.raw_bytes,
            raw as f64 / 1e6 / secs,
            p50,
            p99
        );
    }
    if env("WINK_BASELINES", 1) == 1 {
        baselines(&titles, raw);
    }
    let _ = std::fs::remove_dir_all(&work);
}
