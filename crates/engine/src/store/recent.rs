//! The title records read lately, kept as their stored bytes, so that a warm read of a title is
//! one pread: the value's.
//!
//! A read of a title record otherwise costs three preads of the meta filesys (the index cells
//! on the probe path, the inode, the record's data entry) before the value's. The cache holds
//! the record's bytes as the filesys returned them (decoded again on every use, which also
//! checks their CRC-32 again) and the inode they were read from, and is bounded by bytes. A full
//! cache evicts an entry chosen at random: unlike CLOCK or LRU, that keeps part of a working set
//! larger than the cache when it is read over and over in the same order (a scan of every
//! title: CLOCK then misses every time), and costs nothing on a hit. Writes add or update their
//! title's entry: the writer drops the meta datafile's written pages from the page cache once
//! they are committed, so this cache is where a title just written is read from (a load grows
//! the process by the budget at most).
//!
//! Only the writer's handle keeps a cache: every record write goes through it, and it updates
//! the cache (or forgets the title, or everything, when a write fails), so the cache is the
//! truth. A read-only handle sees another process's commits only by reading the meta files
//! through its view (an index cell it holds from its open can name an inode a commit has since
//! deleted, which only reading the inode shows). Read-only handles opened beside the writer in
//! the same process share another cache, of committed records only ([`super::shared`]).
//! Newer inodes are further on in the datafile; the cache never replaces an entry with one
//! read from an earlier inode.
//!
//! A slot may also hold its record's answer to a get of the latest render ([`Latest`]: a
//! hundred bytes or so against the record's kilobyte), attached by the reader that worked it
//! out from the slot's own bytes. When the cache is full, a slot holding both gives up its
//! bytes first and keeps the answer, so that every title of a store can answer a warm
//! `get_latest` from memory within the same budget. Whatever replaces or forgets a slot's
//! bytes drops the answer with them: it is never older than the record it came from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::format::kvseq::KvPointer;

use super::latest::Latest;

/// What one entry costs besides its name and bytes (map slot, slot vector, allocations).
const ENTRY_OVERHEAD: usize = 96;

/// A bounded cache of title records' bytes by record name.
#[derive(Debug)]
pub(super) struct RecentRecords {
    budget: usize,
    inner: Mutex<Slots>,
}

/// One cached record. The name and the bytes are shared, not copied: the map's key is the
/// slot's name, and the writer's records written since its last commit, and the records it
/// shares with read-only handles, hold the same bytes ([`RecentRecords::written`]).
#[derive(Debug)]
struct Slot {
    name: Arc<[u8]>,
    /// The inode the bytes were read from (or written at, on the writer's handle).
    inode: KvPointer,
    /// `None`: given up to make room, the answer kept.
    bytes: Option<Arc<[u8]>>,
    /// The answer to a get of the latest render, worked out from these bytes.
    latest: Option<Box<Latest>>,
}

/// What a slot of `name_len` and `bytes_len` bytes counts against the budget.
fn cost(name_len: usize, bytes_len: usize) -> usize {
    name_len + bytes_len + ENTRY_OVERHEAD
}

impl Slot {
    fn cost(&self) -> usize {
        let bytes = self.bytes.as_ref().map_or(0, |b| b.len());
        cost(self.name.len(), bytes) + self.latest.as_ref().map_or(0, |l| l.cost())
    }
}

/// How many slots a full cache looks at for one holding a record's bytes to give up, before it
/// evicts an answer alone.
const PICKS: usize = 16;

/// Random replacement over a vector of slots, each in use.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    by_name: HashMap<Arc<[u8]>, usize>,
    used: usize,
    /// xorshift64 state for choosing victims (any nonzero start).
    seed: u64,
}

impl RecentRecords {
    /// A cache of at most `budget` bytes (0: nothing is kept).
    pub(super) fn new(budget: usize) -> Self {
        RecentRecords {
            budget,
            inner: Mutex::new(Slots::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A panic while holding the lock leaves at worst a stale accounting of bytes: the map
        // itself is updated by single calls that keep it consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached bytes of `name` and the inode they came from.
    pub(super) fn get(&self, name: &[u8]) -> Option<(KvPointer, Arc<[u8]>)> {
        if self.budget == 0 {
            return None;
        }
        let slots = self.lock();
        let slot = &slots.slots[*slots.by_name.get(name)?];
        Some((slot.inode, slot.bytes.clone()?))
    }

    /// The answer of `name` to a get of its latest render at `now` under the settings tagged
    /// `tag`, if kept.
    pub(super) fn latest(&self, name: &[u8], now: i64, tag: u64) -> Option<Latest> {
        if self.budget == 0 {
            return None;
        }
        let slots = self.lock();
        let slot = &slots.slots[*slots.by_name.get(name)?];
        slot.latest
            .as_deref()
            .filter(|l| l.holds(now, tag))
            .cloned()
    }

    /// Keeps `latest` as the answer of `name`, worked out from `bytes`: only while the slot still
    /// holds those very bytes (not a copy: the same allocation), so never beside a newer record.
    pub(super) fn attach(&self, name: &[u8], bytes: &Arc<[u8]>, latest: Latest) {
        if self.budget == 0 {
            return;
        }
        let mut slots = self.lock();
        let Some(&at) = slots.by_name.get(name) else {
            return;
        };
        let slot = &mut slots.slots[at];
        if !slot.bytes.as_ref().is_some_and(|b| Arc::ptr_eq(b, bytes)) {
            return;
        }
        let before = slot.cost();
        slot.latest = Some(Box::new(latest));
        let after = slot.cost();
        slots.used = slots.used - before + after;
        let mut at = Some(at);
        while slots.used > self.budget && at.is_some() {
            at = slots.evict_other(at.unwrap_or_default());
        }
    }

    /// Keeps `bytes`, read from `inode`, as `name`'s record. Bytes read from an inode older
    /// than the cached one are not kept (see the module's notes).
    /// Returns the bytes as kept (for [`RecentRecords::attach`]), or `None` when not kept.
    pub(super) fn insert(&self, name: &[u8], inode: KvPointer, bytes: &[u8]) -> Option<Arc<[u8]>> {
        if !self.fits(name, bytes) {
            return None;
        }
        let bytes: Arc<[u8]> = bytes.into();
        self.keep(name, || name.into(), inode, bytes.clone())
            .map(|_| bytes)
    }

    /// Keeps `bytes`, written at `inode`, as `name`'s record, sharing them. Returns the name as
    /// the cache holds it (to be shared too), or `None` when the cache keeps nothing of it.
    pub(super) fn written(
        &self,
        name: &[u8],
        inode: KvPointer,
        bytes: &Arc<[u8]>,
    ) -> Option<Arc<[u8]>> {
        self.fits(name, bytes)
            .then(|| self.keep(name, || name.into(), inode, bytes.clone()))
            .flatten()
    }

    /// [`RecentRecords::written`] of a name and bytes already shared.
    pub(super) fn keep_shared(&self, name: &Arc<[u8]>, inode: KvPointer, bytes: &Arc<[u8]>) {
        if self.fits(name, bytes) {
            self.keep(name, || name.clone(), inode, bytes.clone());
        }
    }

    /// Whether a record this size is kept at all; when not, `name`'s older record is forgotten.
    fn fits(&self, name: &[u8], bytes: &[u8]) -> bool {
        // One record never crowds out the rest (and a zero budget keeps nothing).
        let fits = cost(name.len(), bytes.len()) <= self.budget / 8;
        if !fits {
            self.forget(name);
        }
        fits
    }

    /// Keeps `bytes` at `inode` as `name`'s record (see [`RecentRecords::insert`]); `new_name`
    /// makes the map's key when the title has no slot. Returns the slot's name.
    fn keep(
        &self,
        name: &[u8],
        new_name: impl FnOnce() -> Arc<[u8]>,
        inode: KvPointer,
        bytes: Arc<[u8]>,
    ) -> Option<Arc<[u8]>> {
        let mut slots = self.lock();
        if let Some(&at) = slots.by_name.get(name) {
            // The title's slot takes the new bytes where it is: a rewrite moves no entry of the
            // map and makes no name (a load rewrites every title several times).
            let slot = &mut slots.slots[at];
            if slot.inode.0 > inode.0 {
                return None;
            }
            let before = slot.cost();
            if slot.inode != inode {
                // Another record: the answer worked out from the one before goes with it.
                slot.latest = None;
            }
            slot.inode = inode;
            slot.bytes = Some(bytes);
            let (after, name) = (slot.cost(), slot.name.clone());
            slots.used = slots.used - before + after;
            let mut at = Some(at);
            while slots.used > self.budget && at.is_some() {
                at = slots.evict_other(at.unwrap_or_default());
            }
            return Some(name);
        }
        let cost = cost(name.len(), bytes.len());
        while slots.used + cost > self.budget && slots.evict_one() {}
        let name = new_name();
        slots.add(Slot {
            name: name.clone(),
            inode,
            bytes: Some(bytes),
            latest: None,
        });
        Some(name)
    }

    /// Forgets `name` (its record was deleted, or a write of it failed).
    pub(super) fn forget(&self, name: &[u8]) {
        let mut slots = self.lock();
        if let Some(&at) = slots.by_name.get(name) {
            slots.remove(at);
        }
    }

    /// Forgets everything (records were written around the cache, or a commit failed).
    pub(super) fn clear(&self) {
        *self.lock() = Slots::default();
    }

    /// Bytes held (as counted against the budget).
    #[cfg(test)]
    fn used(&self) -> usize {
        self.lock().used
    }
}

impl Slots {
    fn add(&mut self, slot: Slot) {
        self.used += slot.cost();
        self.by_name.insert(slot.name.clone(), self.slots.len());
        self.slots.push(slot);
    }

    /// Removes the slot at `at`, moving the last one into its place.
    fn remove(&mut self, at: usize) {
        let slot = self.slots.swap_remove(at);
        self.used -= slot.cost();
        self.by_name.remove(&slot.name);
        if let Some(moved) = self.slots.get(at) {
            self.by_name.insert(moved.name.clone(), at);
        }
    }

    /// The next number of the xorshift64 sequence.
    fn random(&mut self) -> u64 {
        let mut x = self.seed.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        x
    }

    /// A slot chosen at random among `n` (other than the one at `skip`, when given): the first of
    /// up to [`PICKS`] picks that holds a record's bytes, else the last pick.
    fn victim(&mut self, n: usize, skip: Option<usize>) -> usize {
        let mut victim = 0;
        for _ in 0..PICKS {
            victim = (self.random() % n as u64) as usize;
            if skip.is_some_and(|s| victim >= s) {
                victim += 1;
            }
            if self.slots[victim].bytes.is_some() {
                break;
            }
        }
        victim
    }

    /// Makes room at the slot at `at`: a slot holding both a record's bytes and its answer gives
    /// up the bytes; any other is removed. Returns whether it was removed.
    fn shrink(&mut self, at: usize) -> bool {
        let slot = &mut self.slots[at];
        if slot.latest.is_some() {
            if let Some(bytes) = slot.bytes.take() {
                self.used -= bytes.len();
                return false;
            }
        }
        self.remove(at);
        true
    }

    /// Makes room at a slot chosen at random; false when there is none.
    fn evict_one(&mut self) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let at = self.victim(self.slots.len(), None);
        self.shrink(at);
        true
    }

    /// Makes room at a slot chosen at random other than the one at `keep`, and returns where
    /// that one is now; `None` when it is the only one.
    fn evict_other(&mut self, keep: usize) -> Option<usize> {
        let last = self.slots.len().checked_sub(1).filter(|&n| n > 0)?;
        let victim = self.victim(last, Some(keep));
        if !self.shrink(victim) || keep != last {
            return Some(keep);
        }
        // The last slot moved into the victim's place.
        Some(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: usize) -> Vec<u8> {
        format!("d/title-{i}").into_bytes()
    }

    #[test]
    fn keeps_the_newest_inode_and_stays_within_budget() {
        let cache = RecentRecords::new(64 * 1024);
        cache.insert(b"d/t", KvPointer(100), b"new");
        cache.insert(b"d/t", KvPointer(50), b"old");
        let got = |name: &[u8]| cache.get(name).map(|(at, bytes)| (at.0, bytes.to_vec()));
        assert_eq!(got(b"d/t"), Some((100, b"new".to_vec())));
        cache.insert(b"d/t", KvPointer(200), b"newer");
        assert_eq!(got(b"d/t"), Some((200, b"newer".to_vec())));
        for i in 0..10_000 {
            cache.insert(&name(i), KvPointer(i as u64), &[7u8; 500]);
            assert!(cache.used() <= 64 * 1024);
        }
        let kept = (0..10_000)
            .filter(|&i| cache.get(&name(i)).is_some())
            .count();
        assert!(kept > 50 && kept < 200, "{kept} kept");
        cache.forget(&name(9_999));
        assert!(cache.get(&name(9_999)).is_none());
        cache.clear();
        assert_eq!((cache.used(), got(&name(9_998))), (0, None));
    }

    #[test]
    fn a_scan_larger_than_the_cache_still_hits_and_writes_add_nothing() {
        let cache = RecentRecords::new(16 * 1024);
        // Entries of 1,024 bytes each, as counted: 16 fit.
        let fill = |i: usize| vec![1u8; 1024 - ENTRY_OVERHEAD - name(i).len()];
        let mut hits = 0;
        for _ in 0..50 {
            for i in 0..20 {
                match cache.get(&name(i)) {
                    Some(_) => hits += 1,
                    None => {
                        cache.insert(&name(i), KvPointer(1), &fill(i));
                    }
                }
                assert!(cache.used() <= 16 * 1024);
            }
        }
        assert!(hits > 300, "{hits} hits of 1,000 reads");
        cache.clear();
        cache.insert(&name(1), KvPointer(2), &fill(1));
        cache.insert(&name(1), KvPointer(3), b"new");
        // Bytes from an older inode than the kept one are not kept.
        cache.insert(&name(1), KvPointer(2), &fill(1));
        assert_eq!(
            cache.get(&name(1)).map(|(at, b)| (at.0, b.to_vec())),
            Some((3, b"new".to_vec()))
        );
    }

    /// Every name maps to its slot, and the bytes used are the slots' costs.
    fn consistent(cache: &RecentRecords) {
        let slots = cache.lock();
        assert_eq!(slots.by_name.len(), slots.slots.len());
        for (name, &at) in &slots.by_name {
            assert!(Arc::ptr_eq(name, &slots.slots[at].name));
        }
        assert_eq!(
            slots.used,
            slots.slots.iter().map(Slot::cost).sum::<usize>()
        );
        assert!(slots.used <= cache.budget);
    }

    #[test]
    fn a_written_record_is_shared_and_a_rewrite_keeps_its_slot() {
        let cache = RecentRecords::new(16 * 1024);
        let fill = |n: usize| -> Arc<[u8]> { vec![1u8; n].into() };
        for i in 0..16 {
            let bytes = fill(600);
            let kept = cache.written(&name(i), KvPointer(i as u64), &bytes);
            // The cache holds these bytes, not a copy, and hands back the name it holds.
            assert_eq!(kept.as_deref(), Some(&name(i)[..]));
            assert!(Arc::ptr_eq(&cache.get(&name(i)).unwrap().1, &bytes));
            consistent(&cache);
        }
        // Rewrites that grow each record evict others, never the record just written, wherever
        // its slot lies (the last slot included).
        for round in 0..20u64 {
            for i in 0..16 {
                let bytes = fill(600 + 40 * round as usize);
                let at = KvPointer(100 + round * 16 + i as u64);
                let kept = cache.written(&name(i), at, &bytes);
                assert_eq!(kept.as_deref(), Some(&name(i)[..]));
                let (inode, got) = cache.get(&name(i)).unwrap();
                assert!(inode == at && Arc::ptr_eq(&got, &bytes));
                consistent(&cache);
            }
        }
        // Bytes older than the kept ones are neither kept nor named.
        let newest = cache.get(&name(15)).unwrap();
        assert_eq!(cache.written(&name(15), KvPointer(1), &fill(10)), None);
        assert!(Arc::ptr_eq(&cache.get(&name(15)).unwrap().1, &newest.1));
        // A record shared from elsewhere is kept under the same name and bytes.
        let (n, b): (Arc<[u8]>, Arc<[u8]>) = (name(99).into(), fill(100));
        cache.keep_shared(&n, KvPointer(9_999), &b);
        assert!(Arc::ptr_eq(&cache.get(&name(99)).unwrap().1, &b));
        assert!(Arc::ptr_eq(&cache.lock().slots.last().unwrap().name, &n));
        // One record over an eighth of the budget is not kept, and forgets the older one.
        assert_eq!(
            cache.written(&name(99), KvPointer(10_000), &fill(4096)),
            None
        );
        assert!(cache.get(&name(99)).is_none());
        consistent(&cache);
    }

    #[test]
    fn an_answer_is_kept_beside_its_own_bytes_only_and_goes_with_them() {
        let cache = RecentRecords::new(1 << 20);
        let (n, tag) = (name(1), 7);
        let a: Arc<[u8]> = vec![1u8; 100].into();
        cache.written(&n, KvPointer(10), &a);
        // Bytes equal to the slot's but not the slot's own are not what the answer came from.
        let copy: Arc<[u8]> = a.to_vec().into();
        cache.attach(&n, &copy, Latest::at(1, 100, 200, tag));
        assert_eq!(cache.latest(&n, 150, tag), None);
        cache.attach(&n, &a, Latest::at(1, 100, 200, tag));
        assert_eq!(cache.latest(&n, 150, tag).map(|l| l.rev), Some(1));
        // Only within its span of time, and under its settings.
        let at = |now, tag| cache.latest(&n, now, tag).is_some();
        assert!(at(100, tag) && at(199, tag) && !at(99, tag) && !at(200, tag) && !at(150, 8));
        // The same record read again keeps the answer; a newer one drops it.
        cache.insert(&n, KvPointer(10), &a);
        assert!(at(150, tag));
        let b: Arc<[u8]> = vec![2u8; 100].into();
        cache.written(&n, KvPointer(20), &b);
        assert!(!at(150, tag));
        cache.attach(&n, &a, Latest::at(1, 100, 200, tag));
        assert!(!at(150, tag));
        cache.attach(&n, &b, Latest::at(2, 100, 200, tag));
        assert_eq!(cache.latest(&n, 150, tag).map(|l| l.rev), Some(2));
        cache.forget(&n);
        assert!(!at(150, tag));
        cache.written(&n, KvPointer(30), &b);
        cache.attach(&n, &b, Latest::at(3, 100, 200, tag));
        cache.clear();
        assert!(!at(150, tag));
        consistent(&cache);
    }

    #[test]
    fn a_full_cache_gives_up_records_before_answers() {
        // 400 records of 1,000 bytes, twice what fits, each with its answer.
        let cache = RecentRecords::new(256 * 1024);
        for i in 0..400 {
            let bytes = cache.insert(&name(i), KvPointer(i as u64), &[3u8; 1000]);
            cache.attach(&name(i), &bytes.unwrap(), Latest::at(i as u64, 0, 10, 0));
            consistent(&cache);
        }
        let answers = (0..400)
            .filter(|&i| cache.latest(&name(i), 5, 0).map(|l| l.rev) == Some(i as u64))
            .count();
        let records = (0..400).filter(|&i| cache.get(&name(i)).is_some()).count();
        assert!(answers >= 390, "{answers} answers kept");
        assert!(records > 50 && records < 250, "{records} records kept");
        // Answers alone past the budget are evicted like anything else.
        let small = RecentRecords::new(16 * 1024);
        for i in 0..400 {
            let bytes = small.insert(&name(i), KvPointer(1), &[3u8; 100]).unwrap();
            small.attach(&name(i), &bytes, Latest::at(1, 0, 10, 0));
            consistent(&small);
        }
    }

    #[test]
    fn zero_budget_keeps_nothing() {
        let cache = RecentRecords::new(0);
        cache.insert(b"d/t", KvPointer(1), b"x");
        assert_eq!(cache.written(b"d/t", KvPointer(2), &b"y"[..].into()), None);
        assert!(cache.get(b"d/t").is_none());
        assert_eq!(cache.used(), 0);
    }
}
