//! The workload every contender gets: the same keys, the same values, in the same order.
//!
//! Renders: `titles` titles × `per_title` renders each. Put number `i` is pass `k = i / titles`
//! of title `t = (x·A + k·B) mod titles` (`x = i mod titles`, A coprime to `titles`), so each pass
//! touches every title once, in a different order each pass. Render `k` of a title has revision
//! `100 + 7·(k / 2) + t mod 5` (pairs of renders share a revision: the second is a re-render) and
//! a version-1 tid at `1.6e9 + 3600·k + t mod 3000` seconds, so render `k + 1` always takes
//! precedence over render `k`, and the latest render of a title is its last.
//!
//! Values are 1–16 KiB: a header naming the render, then a slice of a pool of generated HTML
//! (wink_harness::synth) chosen by a hash of the render. Nothing per render is kept: every key and value
//! is recomputed from `(t, k)`.

use std::path::Path;

use md5::{Digest, Md5};
use uuid::Uuid;
use wink::store::key::tid_at;
use wink_harness::synth::Rng;

pub const RENDER_DOMAIN: &str = "en.wikipedia.org";
pub const CORPUS_DOMAIN: &str = "corpus.example.org";
pub const CONTENT_TYPE: &str = "text/html; charset=utf-8";
const MIN_VALUE: u64 = 1 << 10;
const MAX_VALUE: u64 = 16 << 10;
const POOL_BYTES: usize = 8 << 20;

/// One put, filled in place by the workload (buffers are reused: nothing is allocated per put
/// once they have grown).
#[derive(Debug, Default)]
pub struct PutBuf {
    pub domain: &'static str,
    pub title: String,
    pub rev: u64,
    pub tid: Uuid,
    pub value: Vec<u8>,
}

/// The generated render workload.
#[derive(Debug)]
pub struct Renders {
    pub titles: u64,
    pub per_title: u64,
    mul: u64,
    pool: Vec<u8>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Renders {
    /// `renders` rounded up to a whole number of passes over `titles`.
    pub fn new(renders: u64, titles: u64) -> Renders {
        let titles = titles.max(1);
        let per_title = renders.div_ceil(titles).max(1);
        let mut mul = (titles as f64 * 0.618) as u64 | 1;
        while gcd(mul, titles) != 1 {
            mul += 2;
        }
        let mut pool = Vec::with_capacity(POOL_BYTES + (1 << 20));
        for rev in wink_harness::synth::histories(11, 4096, 1, 24) {
            pool.extend_from_slice(&rev.html);
            if pool.len() >= POOL_BYTES {
                break;
            }
        }
        Renders {
            titles,
            per_title,
            mul: mul % titles.max(2),
            pool,
        }
    }

    pub fn total(&self) -> u64 {
        self.titles * self.per_title
    }

    /// (title number, render number within the title) of put `i`.
    pub fn put_key(&self, i: u64) -> (u64, u64) {
        let (k, x) = (i / self.titles, i % self.titles);
        let t = (x as u128 * self.mul as u128 + k as u128 * 7919) % self.titles as u128;
        (t as u64, k)
    }

    pub fn title(t: u64) -> String {
        format!(
            "Bench_title_{t:07}_{}",
            ["a", "bc", "def", "ghij"][(t % 4) as usize]
        )
    }

    pub fn rev(t: u64, k: u64) -> u64 {
        100 + 7 * (k / 2) + t % 5
    }

    pub fn tid(t: u64, k: u64) -> Uuid {
        let node = [
            0x01,
            (t >> 32) as u8,
            (t >> 24) as u8,
            (t >> 16) as u8,
            (t >> 8) as u8,
            t as u8,
        ];
        tid_at(
            1_600_000_000 + 3600 * k as i64 + (t % 3000) as i64,
            (t & 0x3fff) as u16,
            node,
        )
    }

    pub fn value_len(t: u64, k: u64) -> usize {
        (MIN_VALUE + mix(t << 20 ^ k) % (MAX_VALUE - MIN_VALUE + 1)) as usize
    }

    /// The first bytes of the value of render (t, k): what a read checks.
    pub fn header(t: u64, k: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        out.clear();
        // Writing into a Vec cannot fail.
        let _ = writeln!(out, "<!-- wink-bench render {t}/{k} -->");
    }

    /// Fills `buf` with render (t, k).
    pub fn fill(&self, t: u64, k: u64, buf: &mut PutBuf) {
        buf.domain = RENDER_DOMAIN;
        buf.title.clear();
        buf.title.push_str(&Renders::title(t));
        buf.rev = Renders::rev(t, k);
        buf.tid = Renders::tid(t, k);
        let len = Renders::value_len(t, k);
        Renders::header(t, k, &mut buf.value);
        let body = len - buf.value.len();
        let start = (mix(k << 40 ^ t ^ 0x5555) % (self.pool.len() - body) as u64) as usize;
        buf.value.extend_from_slice(&self.pool[start..start + body]);
    }
}

/// The shared corpus, loaded whole before the timed import.
#[derive(Debug)]
pub struct Corpus {
    pub bytes: Vec<u8>,
    /// (title, rev, tid, start, end) per revision, in manifest order.
    pub entries: Vec<(String, u64, Uuid, usize, usize)>,
}

impl Corpus {
    pub fn load(dir: &Path) -> Result<Corpus, Box<dyn std::error::Error>> {
        let manifest = wink::store::import::read_manifest(dir)?;
        let total: u64 = manifest.iter().map(|e| e.bytes).sum();
        let mut bytes = Vec::with_capacity(usize::try_from(total)?);
        let mut entries = Vec::with_capacity(manifest.len());
        for e in &manifest {
            let start = bytes.len();
            bytes.extend_from_slice(&std::fs::read(&e.path)?);
            let digest = Md5::digest(format!("{CORPUS_DOMAIN}/{}", e.doc).as_bytes());
            let mut node = [0u8; 6];
            node.copy_from_slice(&digest[..6]);
            node[0] |= 0x01;
            let tid = tid_at(e.timestamp, (e.rev & 0x3fff) as u16, node);
            entries.push((e.doc.clone(), e.rev, tid, start, bytes.len()));
        }
        Ok(Corpus { bytes, entries })
    }

    pub fn fill(&self, i: usize, buf: &mut PutBuf) {
        let (title, rev, tid, start, end) = &self.entries[i];
        buf.domain = CORPUS_DOMAIN;
        buf.title.clear();
        buf.title.push_str(title);
        buf.rev = *rev;
        buf.tid = *tid;
        buf.value.clear();
        buf.value.extend_from_slice(&self.bytes[*start..*end]);
    }
}

/// Random read keys, the same for every contender: `n` distinct titles (`latest`, with the
/// title's last render) or distinct renders, in random order — fewer when there are fewer (a
/// repeated key would be read warm in a cold phase).
pub fn read_keys(w: &Renders, n: usize, seed: u64, latest: bool) -> Vec<(u64, u64)> {
    let count = if latest { w.titles } else { w.total() };
    let mut rng = Rng::new(seed);
    let mut ids: Vec<u64> = (0..count).collect();
    let take = n.min(ids.len());
    // A partial Fisher–Yates shuffle: the first `take` are a uniform sample without repeats.
    for i in 0..take {
        let j = i + rng.below((ids.len() - i) as u64) as usize;
        ids.swap(i, j);
    }
    (0..take)
        .map(|i| {
            let id = ids[i];
            if latest {
                (id, w.per_title - 1)
            } else {
                (id % w.titles, id / w.titles)
            }
        })
        .collect()
}
