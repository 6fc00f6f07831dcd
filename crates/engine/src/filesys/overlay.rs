//! A storage wrapper that holds in-place writes in memory until the journal commits them.
//!
//! Writes past `stable_end` (appends into space no durable reader relies on) go straight to the
//! file. Writes below it (delete flags, inode bookkeeping, index cells, superblock variables)
//! overwrite bytes that the last commit made durable, so they wait here and are applied by
//! [`crate::filesys::journal`] all at once, after the journal holding them is durable. Reads see
//! the file with the pending writes laid over it.
//!
//! The bytes written straight to the file since the last commit are checksummed as they pass
//! ([`OverlayStorage::appended_crc`]): the commit's journal carries that CRC, so that after a
//! crash the journal and the appended bytes, made durable by the same barrier, are known to have
//! both arrived.
//!
//! A writer's data file may hand its appends to a thread of its own ([`OverlayStorage::
//! write_behind`], module `behind`): whatever must see the file as written (a read, a sync, the
//! held writes a commit applies) first drains that queue.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard};

use super::behind::Behind;
use crate::storage::Storage;

#[derive(Debug, Default)]
struct Pending {
    /// Non-overlapping ranges: start → bytes.
    ranges: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
    /// Bytes below this were durable at the last commit.
    stable_end: u64,
    /// One past the highest byte written so far.
    written_end: u64,
    /// The CRC of the bytes written straight to the file since the last commit.
    digest: Digest,
    /// Whether the file has writes no sync has covered yet.
    unsynced: bool,
}

/// Blocks of the appended region whose CRCs are kept apart, so that a write over bytes appended
/// earlier in the same commit (a delete flag, an inode rewritten) costs a re-read of the blocks
/// it touched, not of the whole region.
const DIGEST_BLOCK: u64 = 1 << 20;

/// The CRC-32 of `[start, end)`, the bytes written straight to the file since the last commit.
/// While they are written in order from `start`, `whole` holds their CRC; a write over bytes
/// already passed (or leaving a gap) clears it and marks the blocks it touched for a re-read.
#[derive(Debug, Clone)]
struct Digest {
    start: u64,
    end: u64,
    whole: Option<crc32fast::Hasher>,
    /// The CRC of each completed block, `None` when it must be read back.
    blocks: Vec<Option<u32>>,
    /// The CRC of the block being filled, `None` when it must be read back.
    partial: Option<crc32fast::Hasher>,
}

impl Default for Digest {
    fn default() -> Self {
        Digest::new(0)
    }
}

impl Digest {
    fn new(start: u64) -> Digest {
        Digest {
            start,
            end: start,
            whole: Some(crc32fast::Hasher::new()),
            blocks: Vec::new(),
            partial: Some(crc32fast::Hasher::new()),
        }
    }

    /// Bytes `buf` written at `offset` (at or past `start`).
    fn wrote(&mut self, offset: u64, buf: &[u8]) {
        let end = offset + buf.len() as u64;
        if offset != self.end {
            self.whole = None;
            // Every block from the first byte touched (or the gap's start) to the old end.
            let from = offset.min(self.end);
            self.dirty(from, self.end.min(end).max(from + 1).min(self.end));
            if offset > self.end {
                self.partial = None;
                self.advance_unknown(offset);
            }
        }
        if end <= self.end {
            return;
        }
        let fresh = &buf[(self.end - offset) as usize..];
        if let Some(w) = &mut self.whole {
            w.update(fresh);
        }
        let mut rest = fresh;
        while !rest.is_empty() {
            let in_block = DIGEST_BLOCK - (self.end - self.start) % DIGEST_BLOCK;
            let n = (in_block as usize).min(rest.len());
            if let Some(p) = &mut self.partial {
                p.update(&rest[..n]);
            }
            self.end += n as u64;
            rest = &rest[n..];
            if n as u64 == in_block {
                self.close_block();
            }
        }
    }

    /// The block being filled is complete.
    fn close_block(&mut self) {
        let crc = self.partial.take().map(|h| h.finalize());
        self.blocks.push(crc);
        self.partial = Some(crc32fast::Hasher::new());
    }

    /// Moves the end to `to` over bytes this digest did not see (they are read back).
    fn advance_unknown(&mut self, to: u64) {
        while self.end < to {
            let in_block = DIGEST_BLOCK - (self.end - self.start) % DIGEST_BLOCK;
            let n = in_block.min(to - self.end);
            self.partial = None;
            self.end += n;
            if n == in_block {
                self.close_block();
                self.partial = None;
            }
        }
        // The block now being filled has unknown bytes before `to` unless `to` starts it.
        if (self.end - self.start) % DIGEST_BLOCK == 0 {
            self.partial = Some(crc32fast::Hasher::new());
        }
    }

    /// Marks the blocks holding `[from, to)` (within `[start, end)`) for a re-read.
    fn dirty(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let first = ((from - self.start) / DIGEST_BLOCK) as usize;
        let last = ((to - 1 - self.start) / DIGEST_BLOCK) as usize;
        for b in first..=last {
            match self.blocks.get_mut(b) {
                Some(slot) => *slot = None,
                None => self.partial = None,
            }
        }
    }

    /// The CRC of `[start, upto)` (`upto` <= `end`), reading back from `file` the blocks whose
    /// bytes it did not see in order.
    fn crc(&self, upto: u64, file: &dyn Storage) -> io::Result<u32> {
        if upto == self.end {
            if let Some(w) = &self.whole {
                return Ok(w.clone().finalize());
            }
        }
        let mut total = crc32fast::Hasher::new();
        let mut at = self.start;
        let mut buf = Vec::new();
        while at < upto {
            let b = ((at - self.start) / DIGEST_BLOCK) as usize;
            let block_end = (at + DIGEST_BLOCK).min(upto);
            let known = match self.blocks.get(b) {
                Some(crc) if block_end == at + DIGEST_BLOCK => *crc,
                None if block_end == self.end => self.partial.clone().map(|h| h.finalize()),
                _ => None,
            };
            let len = block_end - at;
            let crc = match known {
                Some(crc) => crc,
                None => {
                    buf.resize(len as usize, 0);
                    let n = file.read_at(&mut buf, at)?;
                    if n < buf.len() {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "appended bytes are missing",
                        ));
                    }
                    crc32fast::hash(&buf)
                }
            };
            total.combine(&crc32fast::Hasher::new_with_initial_len(crc, len));
            at = block_end;
        }
        Ok(total.finalize())
    }
}

#[derive(Debug)]
struct Shared {
    inner: Arc<RwLock<Box<dyn Storage>>>,
    pending: Mutex<Pending>,
    path: PathBuf,
    /// The queue appends go through, when on.
    behind: OnceLock<Behind>,
}

/// A handle on an overlaid file; clones share the overlay.
#[derive(Clone, Debug)]
pub struct OverlayStorage(Arc<Shared>);

impl OverlayStorage {
    /// Wraps `inner`; bytes below `stable_end` are held back when overwritten.
    pub fn new(inner: Box<dyn Storage>, stable_end: u64) -> Self {
        let path = inner.path().to_path_buf();
        OverlayStorage(Arc::new(Shared {
            inner: Arc::new(RwLock::new(inner)),
            behind: OnceLock::new(),
            pending: Mutex::new(Pending {
                stable_end,
                written_end: stable_end,
                digest: Digest::new(stable_end),
                ..Pending::default()
            }),
            path,
        }))
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        // The overlay holds plain data; a panic elsewhere cannot leave it half-updated in a way
        // that matters more than losing it, so poisoning is ignored.
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn inner(&self) -> RwLockReadGuard<'_, Box<dyn Storage>> {
        self.0.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, appends (writes past the stable end) and page-cache hints are queued for a
    /// thread of their own; see the module `behind`.
    pub fn write_behind(&self) {
        let _ = self.0.behind.set(Behind::new(self.0.inner.clone()));
    }

    /// Writes every queued append to the file, so that another handle on it reads them.
    pub fn settle(&self) -> io::Result<()> {
        self.settled().map(drop)
    }

    /// The file with every queued append written: what reads, syncs and in-place writes need.
    fn settled(&self) -> io::Result<RwLockReadGuard<'_, Box<dyn Storage>>> {
        if let Some(b) = self.0.behind.get() {
            b.drain()?;
        }
        Ok(self.inner())
    }

    /// Hands each pending write to `f`, in offset order, without copying it (a commit encodes
    /// them into its journal); stops at `f`'s first error.
    pub fn each_pending<E>(&self, mut f: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        self.pending()
            .ranges
            .iter()
            .try_for_each(|(offset, bytes)| f(*offset, bytes))
    }

    /// Asks the kernel to read in the pages the pending writes fall in, so that applying them
    /// finds the pages cached: a write to part of a page the kernel does not hold waits for a
    /// read of that page, and [`Self::apply`] writes one range after another. A commit asks
    /// before its barrier, so that the reads run beside the syncs. Pages a range covers whole
    /// need no read and are not asked for.
    pub fn prefetch(&self) -> io::Result<()> {
        use crate::storage::{merge_touching, page_floor, PAGE};
        let runs = {
            let p = self.pending();
            // The ranges are in offset order and apart, so their pages come in order too.
            let partial = p.ranges.iter().flat_map(|(&offset, bytes)| {
                let end = offset + bytes.len() as u64;
                [offset, end - 1]
                    .map(page_floor)
                    .into_iter()
                    .filter(move |&page| !(page >= offset && page + PAGE <= end))
                    .map(|page| (page, page + PAGE))
            });
            merge_touching(partial)
        };
        let inner = self.inner();
        for (start, end) in runs {
            inner.will_need(start, end - start)?;
        }
        Ok(())
    }

    /// Bytes held back.
    pub fn pending_bytes(&self) -> u64 {
        self.pending().bytes
    }

    /// Writes the pending ranges to the file (the journal holding them is durable); everything
    /// written so far becomes the new stable region. No fsync: the next commit's barrier syncs
    /// the file, and the journal slot that holds these writes is not overwritten before that
    /// barrier has completed.
    /// Returns where they were written: (offset, length) each.
    pub fn apply(&self) -> io::Result<Vec<(u64, u64)>> {
        let inner = self.settled()?;
        let ranges = std::mem::take(&mut self.pending().ranges);
        for (offset, bytes) in &ranges {
            inner.write_at(bytes, *offset)?;
        }
        let mut p = self.pending();
        p.bytes = 0;
        p.stable_end = p.written_end;
        p.digest = Digest::new(p.written_end);
        p.unsynced |= !ranges.is_empty();
        Ok(ranges
            .iter()
            .map(|(offset, bytes)| (*offset, bytes.len() as u64))
            .collect())
    }

    /// Where the bytes written straight to the file since the last commit begin (the stable
    /// end), and one past the last of them.
    pub fn appended(&self) -> (u64, u64) {
        let p = self.pending();
        (p.stable_end, p.written_end)
    }

    /// The CRC-32 of the bytes from the stable end to `upto` (at most [`Self::appended`]'s
    /// end), as they are in the file now: what a commit's journal carries.
    pub fn appended_crc(&self, upto: u64) -> io::Result<u32> {
        let digest = self.pending().digest.clone();
        digest.crc(upto.min(digest.end), self.settled()?.as_ref())
    }

    /// Whether the file has writes that no sync has covered (a commit syncs only those).
    pub fn unsynced(&self) -> bool {
        self.pending().unsynced
    }

    /// A sync covered every write made before it.
    pub fn mark_synced(&self) {
        self.pending().unsynced = false;
    }

    /// Adds a write to the overlay without touching the file (journal replay for a reader).
    pub fn hold(&self, offset: u64, bytes: &[u8]) {
        let mut p = self.pending();
        insert(&mut p, offset, bytes);
    }

    /// The wrapped storage (page-cache hints, residency).
    pub fn with_inner<T>(&self, f: impl FnOnce(&dyn Storage) -> T) -> io::Result<T> {
        Ok(f(self.settled()?.as_ref()))
    }
}

fn insert(p: &mut Pending, offset: u64, bytes: &[u8]) {
    let end = offset + bytes.len() as u64;
    // Most writes land apart from every held one (an index cell, a deleted flag), or inside one
    // (a superblock variable written again): neither needs a merge.
    let last_before = p.ranges.range_mut(..=end).next_back();
    match last_before {
        Some((&k, v)) if k <= offset && end <= k + v.len() as u64 => {
            let at = (offset - k) as usize;
            v[at..at + bytes.len()].copy_from_slice(bytes);
            return;
        }
        Some((&k, v)) if k + (v.len() as u64) < offset => {
            p.bytes += bytes.len() as u64;
            p.ranges.insert(offset, bytes.to_vec());
            return;
        }
        None => {
            p.bytes += bytes.len() as u64;
            p.ranges.insert(offset, bytes.to_vec());
            return;
        }
        Some(_) => {}
    }
    // Merge with every range that overlaps or touches [offset, end).
    let mut start = offset;
    let mut merged_end = end;
    let touching: Vec<u64> = p
        .ranges
        .range(..=end)
        .rev()
        .take_while(|(k, v)| *k + v.len() as u64 >= offset)
        .map(|(k, _)| *k)
        .collect();
    let mut parts = Vec::new();
    for k in touching {
        let v = p.ranges.remove(&k).expect("key just listed");
        p.bytes -= v.len() as u64;
        start = start.min(k);
        merged_end = merged_end.max(k + v.len() as u64);
        parts.push((k, v));
    }
    let mut buf = vec![0u8; (merged_end - start) as usize];
    for (k, v) in parts {
        let at = (k - start) as usize;
        buf[at..at + v.len()].copy_from_slice(&v);
    }
    let at = (offset - start) as usize;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    p.bytes += buf.len() as u64;
    p.ranges.insert(start, buf);
}

impl Storage for OverlayStorage {
    fn path(&self) -> &Path {
        &self.0.path
    }

    fn len(&self) -> io::Result<u64> {
        // Held writes lie below the stable end, which lies within the file.
        self.settled()?.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // A read of bytes no queued write covers (a record of an earlier commit) need not wait
        // for the queue.
        if let Some(b) = self.0.behind.get() {
            if b.reaches_unwritten(offset, buf.len() as u64)? {
                b.drain()?;
            }
        }
        let n = self.inner().read_at(buf, offset)?;
        let p = self.pending();
        if p.ranges.is_empty() {
            return Ok(n);
        }
        let end = offset + buf.len() as u64;
        let mut filled = n as u64;
        for (k, v) in p.ranges.range(..end).rev() {
            let v_end = k + v.len() as u64;
            if v_end <= offset {
                break;
            }
            let from = offset.max(*k);
            let to = end.min(v_end);
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&v[(from - k) as usize..(to - k) as usize]);
            filled = filled.max(to - offset);
        }
        Ok(filled as usize)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let mut p = self.pending();
        p.written_end = p.written_end.max(end);
        let split = p.stable_end.clamp(offset, end);
        if split > offset {
            insert(&mut p, offset, &buf[..(split - offset) as usize]);
        }
        if end > split {
            p.unsynced = true;
            p.digest.wrote(split, &buf[(split - offset) as usize..]);
        }
        drop(p);
        if end > split {
            let appended = &buf[(split - offset) as usize..];
            let written = match self.0.behind.get() {
                // A failure reaches the caller later; the file is then failed for good.
                Some(b) => b.write(appended, split),
                None => self.inner().write_at(appended, split),
            };
            if written.is_err() {
                // What reached the file is unknown: read back whatever a commit covers.
                let mut p = self.pending();
                let upto = end.min(p.digest.end);
                p.digest.dirty(split, upto);
            }
            written?;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.settled()?.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        // Allocating blocks past the queued writes leaves their bytes alone: no drain.
        self.inner().allocate(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        // Only the appended region becomes durable here; held writes wait for the journal.
        self.settled()?.sync_data()
    }

    fn sync_fd(&self) -> Option<std::os::unix::io::RawFd> {
        // A queue that cannot be drained gives no descriptor: the caller then syncs through
        // `sync_data`, which returns the failure.
        self.settled().ok()?.sync_fd()
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.0.behind.get() {
            Some(b) => b.start_writeback(offset, len),
            None => self.inner().start_writeback(offset, len),
        }
    }

    fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.0.behind.get() {
            Some(b) => b.flush_and_drop(offset, len),
            None => self.inner().flush_and_drop(offset, len),
        }
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.0.behind.get() {
            Some(b) => b.drop_cache(offset, len),
            None => self.inner().drop_cache(offset, len),
        }
    }

    fn advise_random(&self) -> io::Result<()> {
        self.inner().advise_random()
    }

    fn advise_sequential(&self) -> io::Result<()> {
        self.inner().advise_sequential()
    }

    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner().will_need(offset, len)
    }

    fn cached_pages(&self, offset: u64, len: u64) -> io::Result<Vec<bool>> {
        self.settled()?.cached_pages(offset, len)
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        self.settled()?.create_temp(suffix)
    }

    /// Swaps the file for `temp`. Only valid with nothing held back (the filesys commits first).
    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        if !self.pending().ranges.is_empty() {
            return Err(io::Error::other(
                "replacing a file with uncommitted in-place writes",
            ));
        }
        drop(self.settled()?);
        let mut inner = self.0.inner.write().unwrap_or_else(|p| p.into_inner());
        let replaced = inner.commit_temp(temp)?;
        let len = replaced.len()?;
        *inner = replaced;
        drop(inner);
        let mut p = self.pending();
        p.stable_end = len;
        p.written_end = len;
        p.digest = Digest::new(len);
        drop(p);
        Ok(Box::new(self.clone()))
    }

    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.settled()?.discard_temp(temp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MemStorage, Watched};

    #[test]
    fn holds_in_place_writes_and_passes_appends() {
        let disk = MemStorage::from_bytes("f", vec![1u8; 100]);
        let o = OverlayStorage::new(Box::new(disk.clone()), 100);
        o.write_at(&[9, 9], 10).unwrap();
        o.write_at(&[8], 12).unwrap();
        o.write_at(&[7, 7, 7], 99).unwrap(); // straddles the stable end
        let mut buf = [0u8; 5];
        o.read_at(&mut buf, 9).unwrap();
        assert_eq!(buf, [1, 9, 9, 8, 1]);
        assert_eq!(disk.to_vec()[10], 1, "held back");
        assert_eq!(&disk.to_vec()[99..102], &[1, 7, 7]);
        let mut pending = Vec::new();
        o.each_pending(|offset, bytes| {
            pending.push((offset, bytes.to_vec()));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(pending, vec![(10, vec![9, 9, 8]), (99, vec![7])]);
        o.apply().unwrap();
        o.sync_data().unwrap();
        assert_eq!(&disk.to_vec()[9..14], &[1, 9, 9, 8, 1]);
        assert_eq!(disk.to_vec()[99], 7);
        o.write_at(&[5], 101).unwrap(); // now below the new stable end
        assert_eq!(disk.to_vec()[101], 7);
    }

    /// Held writes of every shape (apart, inside, touching, overlapping several) read back as a
    /// plain byte array written the same way, are held as ranges that neither overlap nor
    /// touch, are counted once, and land whole on apply.
    #[test]
    fn held_writes_match_a_plain_array() {
        const LEN: usize = 600;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..50 {
            let disk = MemStorage::from_bytes("f", vec![0u8; LEN]);
            let o = OverlayStorage::new(Box::new(disk.clone()), LEN as u64);
            let mut model = vec![0u8; LEN];
            for i in 0..40 {
                let len = 1 + next(if i % 5 == 0 { 60 } else { 8 }) as usize;
                let offset = next((LEN - len) as u64) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| 1 + next(250) as u8).collect();
                o.write_at(&bytes, offset as u64).unwrap();
                model[offset..offset + len].copy_from_slice(&bytes);
                let mut back = vec![0u8; LEN];
                o.read_at(&mut back, 0).unwrap();
                assert_eq!(back, model);
                let mut ends = Vec::new();
                o.each_pending(|offset, bytes| {
                    ends.push((offset, offset + bytes.len() as u64));
                    Ok::<(), ()>(())
                })
                .unwrap();
                assert!(ends.windows(2).all(|w| w[0].1 < w[1].0), "{ends:?}");
                let held: u64 = ends.iter().map(|(s, e)| e - s).sum();
                assert_eq!(o.pending_bytes(), held);
            }
            o.apply().unwrap();
            assert_eq!(disk.to_vec(), model);
        }
    }

    /// A commit asks for the pages its held writes fall in part of, neighbours together, and
    /// not for pages a write covers whole.
    #[test]
    fn prefetch_asks_for_the_pages_held_writes_cover_in_part() {
        const P: u64 = 4096;
        let disk = Watched {
            inner: MemStorage::from_bytes("f", vec![1u8; 20 * P as usize]),
            ..Watched::default()
        };
        let asked = disk.hints.clone();
        let o = OverlayStorage::new(Box::new(disk), 20 * P);
        o.write_at(&[9], P + 5).unwrap();
        o.write_at(&[9], P + 900).unwrap();
        o.write_at(&[9], 2 * P + 1).unwrap();
        o.write_at(&vec![9; 3 * P as usize], 5 * P + 100).unwrap();
        o.write_at(&vec![9; 2 * P as usize], 12 * P).unwrap();
        o.write_at(&[9; 8], 16 * P - 4).unwrap();
        o.prefetch().unwrap();
        let need = |start, len| ("need", start, len);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![
                need(P, 2 * P),
                need(5 * P, P),
                need(8 * P, P),
                need(15 * P, 2 * P)
            ]
        );
    }

    /// The CRC of the appended bytes matches the file's, whatever the order of the writes: in
    /// order, over bytes written before (a delete flag), past a gap, across blocks; with the
    /// appends written directly and queued for the append thread.
    #[test]
    fn appended_crc_is_the_crc_of_the_bytes_in_the_file() {
        appended_crc_matches(false);
        appended_crc_matches(true);
    }

    fn appended_crc_matches(behind: bool) {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..40 {
            let stable = 4096 + next() % 5000;
            let disk = MemStorage::from_bytes("f", vec![3u8; stable as usize]);
            let o = OverlayStorage::new(Box::new(disk.clone()), stable);
            if behind {
                o.write_behind();
            }
            let mut end = stable;
            for _ in 0..30 {
                let len = 1 + next() % if round % 2 == 0 { 3000 } else { 700_000 };
                let byte = next() as u8;
                let at = match next() % 6 {
                    // Mostly in order; sometimes over earlier bytes (some below the stable end:
                    // held), sometimes past a gap.
                    0 => stable.saturating_sub(10) + next() % (end - stable + 10).max(1),
                    1 => end + next() % 5000,
                    _ => end,
                };
                o.write_at(&vec![byte; len as usize], at).unwrap();
                end = end.max(at + len);
                let (start, written) = o.appended();
                assert_eq!((start, written), (stable, end));
                let upto = start + next() % (written - start + 1);
                // What a reader through the overlay sees: every write made so far.
                let mut seen = vec![0u8; (upto - start) as usize];
                o.read_at(&mut seen, start).unwrap();
                // (The CRC drains the queue: the file then holds every write.)
                let crc = o.appended_crc(upto).unwrap();
                let want = crc32fast::hash(&disk.to_vec()[start as usize..upto as usize]);
                assert_eq!(crc32fast::hash(&seen), want, "round {round}");
                assert_eq!(crc, want, "round {round}");
            }
            o.apply().unwrap();
            assert_eq!(o.appended(), (end, end));
            assert_eq!(o.appended_crc(end).unwrap(), crc32fast::hash(b""));
        }
    }
}
