//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use uuid::Uuid;
use wink::archive::{decompress, Archive};
use wink::store::policy::Renders;
use wink::store::Which;
use wink::store::{Page, Policy, Revisions, Store};

pub mod cli;
pub mod cluster;
pub mod powercut;
pub mod require;
pub mod server;
pub mod show_map;
pub mod spy;

/// A read-only handle on the store at `dir` whose clock stands at `now`.
pub fn open_read_only_at(dir: &Path, now: i64) -> Store {
    Store::open(
        dir,
        &wink::store::StoreOptions {
            clock: std::sync::Arc::new(wink::clock::ManualClock::new(now)),
            ..wink::store::StoreOptions::read_only()
        },
    )
    .unwrap()
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every block of every title, decompressed frame by frame as docs/FORMAT.md defines it: a
/// block's first frame against the last revision of the block before (nothing for a key block),
/// each later frame against the block's content so far. A v2 title gives its frames (one
/// revision each) as its blocks.
pub fn decompressed_blocks(a: &Archive) -> Vec<(Vec<u8>, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for key in a.titles().unwrap() {
        if let Some(map) = a.map_v2(&key).unwrap() {
            a.each_frame(&key, &map, |n, raw| {
                out.push((key.clone(), n as u32, raw.to_vec()));
                Ok(())
            })
            .unwrap();
            continue;
        }
        let map = a.map(&key).unwrap().unwrap();
        let mut prev: Vec<u8> = Vec::new();
        for (n, block) in map.blocks.iter().enumerate() {
            let name = [b"b/".as_slice(), &key, format!("#{n}").as_bytes()].concat();
            let stored = a.filesys().read(&name).unwrap();
            let first: Vec<u8> = if block.key || n == 0 {
                Vec::new()
            } else {
                let last = map.blocks[n - 1].last_len as usize;
                prev[prev.len() - last..].to_vec()
            };
            let mut content = Vec::new();
            let mut at = 0usize;
            for frame in &block.frames {
                let data = &stored[at..at + frame.stored as usize];
                at += frame.stored as usize;
                let prefix = if content.is_empty() { &first } else { &content };
                let raw = decompress(data, prefix, frame.raw).unwrap();
                content.extend_from_slice(&raw);
            }
            assert_eq!(at, stored.len(), "block {n} of {key:?} is its frames");
            prev = content.clone();
            out.push((key.clone(), n as u32, content));
        }
    }
    out
}

/// Every render the store lists for the titles `name(0)`, `name(1)`… `name(titles - 1)` of
/// `domain`, read back: (title number, rev, tid) → value.
pub fn readable(
    store: &Store,
    domain: &str,
    titles: usize,
    name: impl Fn(usize) -> String,
) -> BTreeMap<(usize, u64, Uuid), Vec<u8>> {
    let mut out = BTreeMap::new();
    for t in 0..titles {
        for l in store.list(domain, &name(t), Page::default()).unwrap() {
            let got = store
                .get(domain, &name(t), Which::Render(l.rev, l.tid))
                .unwrap()
                .unwrap();
            out.insert((t, l.rev, l.tid), got.value);
        }
    }
    out
}

/// `head`, then letters from an xorshift sequence seeded with `seed`, to `len` bytes: a
/// deterministic value that names what it is and compresses little.
pub fn lettered(head: String, seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = head.into_bytes();
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(b'a' + (x % 26) as u8);
    }
    out
}

/// Revisions recent for `ttl` seconds, the newest render of each with 10 s of grace, historical
/// renders for `ttl` seconds.
pub fn recent_policy(ttl: i64) -> Policy {
    Policy {
        revisions: Revisions::Recent { ttl },
        renders: Renders::Latest {
            count: 1,
            grace: 10,
        },
        historical_ttl: ttl,
    }
}

/// `wink check DIR` through the library: the store checks clean.
pub fn assert_checks_clean(dir: &Path) {
    let check = wink::store::check::check_store(dir);
    assert!(check.problems.is_empty(), "{:?}", check.problems);
}

/// xorshift64: a seeded, dependency-free sequence, the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
