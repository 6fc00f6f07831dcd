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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::format::kvseq::KvPointer;

/// What one entry costs besides its name and bytes (map slot, slot vector, allocations).
const ENTRY_OVERHEAD: usize = 96;

/// A bounded cache of title records' bytes by record name.
#[derive(Debug)]
pub(super) struct RecentRecords {
    budget: usize,
    inner: Mutex<Slots>,
}

/// One cached record.
#[derive(Debug)]
struct Slot {
    name: Box<[u8]>,
    /// The inode the bytes were read from (or written at, on the writer's handle).
    inode: KvPointer,
    bytes: Arc<[u8]>,
}

impl Slot {
    fn cost(&self) -> usize {
        self.name.len() + self.bytes.len() + ENTRY_OVERHEAD
    }
}

/// Random replacement over a vector of slots, each in use.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    by_name: HashMap<Box<[u8]>, usize>,
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
        Some((slot.inode, slot.bytes.clone()))
    }

    /// Keeps `bytes`, read from `inode`, as `name`'s record. Bytes read from an inode older
    /// than the cached one are not kept (see the module's notes).
    pub(super) fn insert(&self, name: &[u8], inode: KvPointer, bytes: &[u8]) {
        let slot = Slot {
            name: name.into(),
            inode,
            bytes: bytes.into(),
        };
        if slot.cost() > self.budget / 8 {
            // One record never crowds out the rest (and a zero budget keeps nothing).
            self.forget(name);
            return;
        }
        let mut slots = self.lock();
        match slots.by_name.get(name) {
            Some(&at) if slots.slots[at].inode.0 > inode.0 => return,
            Some(&at) => slots.remove(at),
            None => {}
        }
        while slots.used + slot.cost() > self.budget && slots.evict_one() {}
        slots.add(slot);
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

    /// Evicts a slot chosen at random; false when there is none.
    fn evict_one(&mut self) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let mut x = self.seed.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        self.remove((x % self.slots.len() as u64) as usize);
        true
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
                    None => cache.insert(&name(i), KvPointer(1), &fill(i)),
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

    #[test]
    fn zero_budget_keeps_nothing() {
        let cache = RecentRecords::new(0);
        cache.insert(b"d/t", KvPointer(1), b"x");
        assert!(cache.get(b"d/t").is_none());
        assert_eq!(cache.used(), 0);
    }
}
