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

use crate::error::Result;
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
    cells: RefCell<UsedCells<'a>>,
    keys: RefCell<HashMap<u64, Vec<u8>>>,
    /// Drop the pages read (the writer keeps its written data out of the page cache).
    drop_pages: bool,
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
            cells: RefCell::new(view.used_cells()),
            keys: RefCell::new(HashMap::new()),
            drop_pages: data.drop_behind().is_some(),
        }
    }

    /// Replaces the held keys with the next batch. A cell or key that cannot be read is left
    /// out: the growth reads it itself and reports the error.
    fn next_batch(&self) {
        let mut ptrs: Vec<u64> = Vec::with_capacity(BATCH);
        for cell in self.cells.borrow_mut().by_ref() {
            let Ok((_, ptr)) = cell else { break };
            if self.known.is_some_and(|k| k.holds(ptr)) {
                continue;
            }
            ptrs.push(ptr.0);
            if ptrs.len() == BATCH {
                break;
            }
        }
        let data = self.data;
        let per = ptrs.len().div_ceil(THREADS).max(1);
        let keys: HashMap<u64, Vec<u8>> = std::thread::scope(|scope| {
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
        if self.drop_pages {
            for &p in &ptrs {
                // The whole pages the key's window touched: the kernel drops only pages that lie
                // wholly in the range it is given, and a window inside one page is none. A hint:
                // pages that stay cached cost memory, not correctness.
                let (start, len) = pages_touching(p, p + KEY_WINDOW);
                let _ = data.storage().drop_cache(start, len);
            }
        }
        *self.keys.borrow_mut() = keys;
    }
}

impl KeySource for BatchKeys<'_> {
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
}
