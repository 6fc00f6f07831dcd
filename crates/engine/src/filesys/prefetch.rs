//! Keys for an index growth, read ahead in batches with several reads in flight.
//!
//! A growth rehashes every indexed key, and the keys live in the inode entries scattered through
//! the datafile. Read one at a time, each is a synchronous disk read once the datafile's pages are
//! gone from the page cache (the writer's drop-behind drops them as it writes): writing 2 GiB of
//! ~100 KB files, the three growths stalled 1.7–2.6 s of a 4.5–6.7 s run (benches/fs_compare.rs,
//! shared machine); with read-ahead, 0.4–0.8 s. [`BatchKeys`]
//! follows the old table's cell order — the order the growth asks in — from a read-only view of
//! it, reads the next [`BATCH`] keys with [`THREADS`] reads in flight, and hands them out from
//! memory. A key asked out of that order is read directly, so the order is a matter of speed only.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::Result;
use crate::format::hash::KeyHash;
use crate::format::hindex::{HIndex, KeySource, UsedCells};
use crate::format::kvseq::{KvPointer, KvSeq};
use crate::storage::pages_touching;

/// Keys held at once (bounds the memory: a few hundred KiB).
const BATCH: usize = 4096;
/// Reads in flight.
const THREADS: usize = 16;
/// Bytes a key read brings into the page cache (the window of [`KvSeq::read_key`]).
const KEY_WINDOW: u64 = 512;

/// A [`KeySource`] for [`HIndex::grow`] over `data`, reading ahead in the cell order of `view`
/// (a read-only handle on the table being grown).
pub(super) struct BatchKeys<'a> {
    data: &'a KvSeq,
    /// Keys the writer knows without a read.
    known: Option<&'a super::KnownKeys>,
    /// Key hashes read ahead of the growth ([`HashesAhead`]).
    ahead: Option<&'a Hashes>,
    cells: RefCell<UsedCells<'a>>,
    keys: RefCell<HashMap<u64, Vec<u8>>>,
    /// Drop the pages read (the writer keeps its written data out of the page cache).
    drop_pages: bool,
    /// Keys read from the datafile so far.
    reads: std::cell::Cell<u64>,
}

impl<'a> BatchKeys<'a> {
    /// Keys read ahead from `data`, answering from `known` the keys it holds (no read, and no
    /// page brought into the cache: the writer dropped them).
    pub(super) fn with_known(
        data: &'a KvSeq,
        view: &'a HIndex,
        known: Option<&'a super::KnownKeys>,
    ) -> Self {
        BatchKeys {
            data,
            known,
            ahead: None,
            cells: RefCell::new(view.used_cells()),
            keys: RefCell::new(HashMap::new()),
            drop_pages: data.drop_behind().is_some(),
            reads: std::cell::Cell::new(0),
        }
    }

    /// Keys read from the datafile so far (not answered from memory).
    pub(super) fn reads(&self) -> u64 {
        self.reads.get()
    }

    /// The same, answering first from the hashes `ahead` holds.
    pub(super) fn with_hashes(mut self, ahead: Option<&'a Hashes>) -> Self {
        self.ahead = ahead;
        self
    }

    /// Replaces the held keys with the next batch. A cell or key that cannot be read is left
    /// out: the growth reads it itself and reports the error.
    fn next_batch(&self) {
        let mut ptrs: Vec<u64> = Vec::with_capacity(BATCH);
        for cell in self.cells.borrow_mut().by_ref() {
            let Ok((_, ptr)) = cell else { break };
            if self.known.is_some_and(|k| k.holds(ptr))
                || self.ahead.is_some_and(|a| a.get(ptr).is_some())
            {
                continue;
            }
            ptrs.push(ptr.0);
            if ptrs.len() == BATCH {
                break;
            }
        }
        let keys = read_keys(self.data, &ptrs, THREADS, self.drop_pages);
        self.reads.set(self.reads.get() + ptrs.len() as u64);
        *self.keys.borrow_mut() = keys.into_iter().collect();
    }
}

/// The keys at `ptrs` in `data`, read with `threads` reads in flight; a key that cannot be read
/// is left out. With `drop_pages`, the pages read are dropped from the page cache after.
fn read_keys(data: &KvSeq, ptrs: &[u64], threads: usize, drop_pages: bool) -> Vec<(u64, Vec<u8>)> {
    let per = ptrs.len().div_ceil(threads).max(1);
    let keys = std::thread::scope(|scope| {
        let workers: Vec<_> = ptrs
            .chunks(per)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .filter_map(|&p| Some((p, data.read_key(KvPointer(p)).ok()?.1)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    if drop_pages {
        for &p in ptrs {
            // The whole pages the key's window touched: the kernel drops only pages that lie
            // wholly in the range it is given, and a window inside one page is none. A hint:
            // pages that stay cached cost memory, not correctness.
            let (start, len) = pages_touching(p, p + KEY_WINDOW);
            let _ = data.storage().drop_cache(start, len);
        }
    }
    keys
}

/// A table whose used cells reach this share of the load limit starts reading its keys' hashes
/// ahead of its growth ([`HashesAhead`]).
pub(super) const AHEAD_AT: f64 = 0.7;
/// Tables with fewer used cells than this grow without reading ahead: their growth reads few
/// keys, and a thread is not worth it.
pub(super) const AHEAD_MIN_ENTRIES: u64 = 1 << 14;
/// Hashes read ahead at most (24 bytes each, 48 MiB); the growth reads the others itself.
pub(super) const AHEAD_MAX: usize = 2 << 20;
/// Reads in flight while reading ahead: fewer than a growth's own, since the writer's commits
/// share the disk meanwhile.
const AHEAD_THREADS: usize = 8;

/// Key hashes by pointer. A map, not a sorted list: a growth asks for every one in its table's
/// cell order, which is no order of the pointers, and a binary search was most of its time.
#[derive(Debug, Default)]
pub(super) struct Hashes(HashMap<u64, KeyHash>);

impl Hashes {
    /// The hash of the key at `ptr`, if it was read.
    pub(super) fn get(&self, ptr: KvPointer) -> Option<KeyHash> {
        self.0.get(&ptr.0).copied()
    }

    /// How many are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The hashes of a table's keys, read by a thread of its own while the writer goes on, so that
/// the table's growth, which rehashes every key and holds the writer meanwhile, does not read
/// them then. A growth of a title index of 196,608 keys read ~89,000 of them from the disk (the
/// writer had dropped their pages; [`super::KnownKeys`] held the others): 1.25 s, every put of
/// the store waiting (`wink serve`, 64 connections).
///
/// Only the bytes of the datafile are read, through a handle of their own, and only entries a
/// commit made durable: an entry's key never changes while its datafile does not go, so a hash
/// read before the growth is the hash the growth would read. The growth still checks each
/// against the hash bits its cell stores.
#[derive(Debug)]
pub(super) struct HashesAhead {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Hashes>>,
    /// The hashes of the keys appended since the reads began, noted by the writer as it
    /// appends them: once the writer's [`super::KnownKeys`] are full, nothing else holds them,
    /// and their pages were dropped.
    since: Vec<(u64, KeyHash)>,
}

impl HashesAhead {
    /// Starts reading the keys at `ptrs` (at most [`AHEAD_MAX`]) from `data`.
    pub(super) fn start(data: KvSeq, mut ptrs: Vec<u64>, drop_pages: bool) -> HashesAhead {
        ptrs.truncate(AHEAD_MAX);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wink-keys-ahead".into())
            .spawn(move || {
                let mut hashes = HashMap::with_capacity(ptrs.len());
                for part in ptrs.chunks(BATCH) {
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    let keys = read_keys(&data, part, AHEAD_THREADS, drop_pages);
                    hashes.extend(keys.into_iter().map(|(p, k)| (p, KeyHash::of(&k))));
                }
                Hashes(hashes)
            })
            .ok();
        HashesAhead {
            stop,
            thread,
            since: Vec::new(),
        }
    }

    /// Notes the hash of a key appended at `ptr` since the reads began.
    pub(super) fn note(&mut self, ptr: KvPointer, key: &[u8]) {
        if self.since.len() < AHEAD_MAX {
            self.since.push((ptr.0, KeyHash::of(key)));
        }
    }

    /// Waits for the reads to end; what they read, and the hashes noted since.
    pub(super) fn finish(mut self) -> Hashes {
        let mut hashes = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        hashes.0.extend(self.since.drain(..));
        hashes
    }
}

impl Drop for HashesAhead {
    fn drop(&mut self) {
        // Not needed any more (the filesys closes, or its table was rebuilt otherwise): the
        // thread stops after its current batch.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl KeySource for BatchKeys<'_> {
    fn key_hash_at(&self, ptr: KvPointer) -> Result<KeyHash> {
        if let Some(hash) = self.ahead.and_then(|a| a.get(ptr)) {
            return Ok(hash);
        }
        if let Some(hash) = self.known.and_then(|k| k.with(ptr, KeyHash::of)) {
            return Ok(hash);
        }
        Ok(KeyHash::of(&self.key_at(ptr)?))
    }

    fn key_at(&self, ptr: KvPointer) -> Result<Vec<u8>> {
        if let Some(key) = self.known.and_then(|k| k.get(ptr)) {
            return Ok(key);
        }
        if let Some(key) = self.keys.borrow_mut().remove(&ptr.0) {
            return Ok(key);
        }
        // The next batch only once this one is used up: asked out of order, every key is read
        // directly, as without read-ahead.
        if self.keys.borrow().is_empty() {
            self.next_batch();
            if let Some(key) = self.keys.borrow_mut().remove(&ptr.0) {
                return Ok(key);
            }
        }
        self.reads.set(self.reads.get() + 1);
        self.data.key_at(ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::hindex::HIndexOptions;
    use crate::format::kvseq::KvSeqOptions;
    use crate::storage::MemStorage;

    /// A datafile of `n` keys and a table indexing them, with another handle on the table.
    fn setup(n: u64) -> (KvSeq, HIndex, HIndex) {
        let mut kv =
            KvSeq::create(Box::new(MemStorage::new("d")), &KvSeqOptions::default()).unwrap();
        let table = MemStorage::new("i");
        let opts = HIndexOptions {
            htsize: 2 * n,
            ..HIndexOptions::default()
        };
        let mut idx = HIndex::create(Box::new(table.clone()), &opts).unwrap();
        for i in 0..n {
            let key = format!("name/{i}/I0");
            let ptr = kv.append(key.as_bytes(), &[7u8; 100]).unwrap();
            idx.insert(key.as_bytes(), ptr, &kv).unwrap();
        }
        idx.flush().unwrap();
        let view = HIndex::open(Box::new(table), false).unwrap();
        (kv, idx, view)
    }

    #[test]
    fn a_growth_through_batch_keys_finds_every_key() {
        let n = BATCH as u64 + 300; // two batches, the second one partial
        let (kv, mut idx, view) = setup(n);
        idx.rebuild(8 * n, &BatchKeys::with_known(&kv, &view, None))
            .unwrap();
        for i in 0..n {
            let key = format!("name/{i}/I0");
            let found = idx.lookup(key.as_bytes(), &kv).unwrap();
            assert!(found.is_some(), "{key} lost in the growth");
        }
        assert_eq!(idx.live(), n);
    }

    /// Hashes read ahead by their own thread, from another handle on the datafile, are the
    /// keys' hashes, and a growth answered from them builds the same table, byte for byte, as
    /// one that reads every key.
    #[test]
    fn a_growth_from_hashes_read_ahead_builds_the_same_table() {
        let n = BATCH as u64 * 2 + 100;
        let disk = MemStorage::new("d");
        let mut kv = KvSeq::create(Box::new(disk.clone()), &KvSeqOptions::default()).unwrap();
        let opts = HIndexOptions {
            htsize: 2 * n,
            ..HIndexOptions::default()
        };
        let (read, ahead) = (MemStorage::new("i"), MemStorage::new("j"));
        let mut by_reads = HIndex::create(Box::new(read.clone()), &opts).unwrap();
        let mut by_ahead = HIndex::create(Box::new(ahead.clone()), &opts).unwrap();
        for i in 0..n {
            let key = format!("name/{i}/I0");
            let ptr = kv.append(key.as_bytes(), &[7u8; 100]).unwrap();
            by_reads.insert(key.as_bytes(), ptr, &kv).unwrap();
            by_ahead.insert(key.as_bytes(), ptr, &kv).unwrap();
        }
        kv.flush().unwrap();
        by_reads.flush().unwrap();
        by_ahead.flush().unwrap();
        let ptrs: Vec<u64> = by_ahead.used_cells().map(|c| c.unwrap().1 .0).collect();
        // One pointer at no entry: left out, not an error.
        let mut asked = ptrs.clone();
        asked.push(1);
        let other = KvSeq::open(Box::new(disk.clone()), false).unwrap();
        let hashes = HashesAhead::start(other, asked, false).finish();
        assert_eq!(hashes.len(), n as usize);
        for &p in &ptrs {
            let key = kv.read_key(KvPointer(p)).unwrap().1;
            assert_eq!(hashes.get(KvPointer(p)), Some(KeyHash::of(&key)));
        }
        let view = HIndex::open(Box::new(read.clone()), false).unwrap();
        by_reads
            .rebuild(4 * n, &BatchKeys::with_known(&kv, &view, None))
            .unwrap();
        let view = HIndex::open(Box::new(ahead.clone()), false).unwrap();
        let keys = BatchKeys::with_known(&kv, &view, None).with_hashes(Some(&hashes));
        by_ahead.rebuild(4 * n, &keys).unwrap();
        // The rebuilt tables, as their handles now read them (the rebuild swapped the file).
        let bytes = |idx: &HIndex| {
            let s = idx.storage();
            let mut buf = vec![0u8; s.len().unwrap() as usize];
            crate::storage::read_exact_at(s, &mut buf, 0, "the table").unwrap();
            buf
        };
        assert_eq!(bytes(&by_reads), bytes(&by_ahead));
        assert!(by_ahead.lookup(b"name/7/I0", &kv).unwrap().is_some());
    }

    #[test]
    fn keys_asked_out_of_order_are_still_right() {
        let (kv, _idx, view) = setup(50);
        let keys = BatchKeys::with_known(&kv, &view, None);
        let mut ptrs: Vec<KvPointer> = view.used_cells().map(|c| c.unwrap().1).collect();
        ptrs.reverse();
        for ptr in ptrs {
            assert_eq!(keys.key_at(ptr).unwrap(), kv.read_key(ptr).unwrap().1);
        }
        assert!(
            keys.key_at(KvPointer(1)).is_err(),
            "a pointer to no entry is an error"
        );
    }

    /// A writer whose index growths were read ahead leaves the same files, byte for byte, as
    /// one whose growths read every key themselves, and finds every name.
    #[test]
    fn a_filesys_that_reads_its_growths_ahead_writes_the_same_bytes() {
        use crate::clock::ManualClock;
        use crate::filesys::{file_path, Filesys, FsOptions, OpenOptions};
        let dir = tempfile::tempdir().unwrap();
        let run = |name: &str, ahead_from: u64| {
            let base = dir.path().join(name);
            let open = OpenOptions {
                clock: Arc::new(ManualClock::new(1_700_000_000)),
                ..OpenOptions::writer()
            };
            let mut fs = Filesys::create(&base, &FsOptions::default(), &open).unwrap();
            fs.ahead_min_entries = ahead_from;
            // As past the budget of what a writer keeps: every key is read or read ahead.
            fs.known_keys.on = false;
            let (mut read_ahead, mut reads) = (0, Vec::new());
            for i in 0..5000u32 {
                let was_reading = fs.ahead.is_some();
                let growing = fs.idx.needs_growth();
                fs.put(format!("d/{i}").as_bytes(), 0, &i.to_be_bytes())
                    .unwrap();
                // A growth took the hashes read ahead.
                read_ahead += u32::from(was_reading && fs.ahead.is_none());
                if growing {
                    reads.push(fs.growth_key_reads);
                }
                if i % 200 == 199 {
                    fs.sync().unwrap();
                }
            }
            fs.sync().unwrap();
            for i in (0..5000u32).step_by(97) {
                assert_eq!(
                    fs.read(format!("d/{i}").as_bytes()).unwrap(),
                    i.to_be_bytes()
                );
            }
            drop(fs);
            let files = ["data", "idx"].map(|ext| std::fs::read(file_path(&base, ext)).unwrap());
            (files, read_ahead, reads)
        };
        let (ahead, growths, ahead_reads) = run("ahead", 64);
        let (read, none, reads) = run("read", u64::MAX);
        assert!(growths >= 2, "{growths} growths read ahead");
        assert_eq!(none, 0);
        // Without, a growth reads every key; read ahead, only those appended after the last
        // commit before the reads began (a commit every 200 puts here).
        assert_eq!(ahead_reads.len(), reads.len());
        for (a, r) in ahead_reads.iter().zip(&reads).skip(1) {
            assert!(
                *r >= 768 && *a < 200,
                "keys read by a growth: {a} read ahead, {r} not"
            );
        }
        assert!(ahead == read, "the files differ");
    }
}
