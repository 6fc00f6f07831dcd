//! A storage wrapper that holds in-place writes in memory until the journal commits them.
//!
//! Writes past `stable_end` (appends into space no durable reader relies on) go straight to the
//! file. Writes below it (delete flags, inode bookkeeping, index cells, superblock variables)
//! overwrite bytes that the last commit made durable, so they wait here and are applied by
//! [`crate::filesys::journal`] all at once, after the journal holding them is durable. Reads see
//! the file with the pending writes laid over it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

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
}

#[derive(Debug)]
struct Shared {
    inner: RwLock<Box<dyn Storage>>,
    pending: Mutex<Pending>,
    path: PathBuf,
}

/// A handle on an overlaid file; clones share the overlay.
#[derive(Clone, Debug)]
pub struct OverlayStorage(Arc<Shared>);

impl OverlayStorage {
    /// Wraps `inner`; bytes below `stable_end` are held back when overwritten.
    pub fn new(inner: Box<dyn Storage>, stable_end: u64) -> Self {
        let path = inner.path().to_path_buf();
        OverlayStorage(Arc::new(Shared {
            inner: RwLock::new(inner),
            pending: Mutex::new(Pending {
                stable_end,
                written_end: stable_end,
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

    /// The pending writes, in offset order.
    pub fn pending_writes(&self) -> Vec<(u64, Vec<u8>)> {
        self.pending()
            .ranges
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// Bytes held back.
    pub fn pending_bytes(&self) -> u64 {
        self.pending().bytes
    }

    /// Writes the pending ranges to the file (the journal holding them is durable); everything
    /// written so far becomes the new stable region. No fsync: the next commit syncs the file
    /// before it overwrites the journal.
    pub fn apply(&self) -> io::Result<()> {
        let ranges = std::mem::take(&mut self.pending().ranges);
        let inner = self.inner();
        for (offset, bytes) in &ranges {
            inner.write_at(bytes, *offset)?;
        }
        let mut p = self.pending();
        p.bytes = 0;
        p.stable_end = p.written_end;
        Ok(())
    }

    /// Adds a write to the overlay without touching the file (journal replay for a reader).
    pub fn hold(&self, offset: u64, bytes: &[u8]) {
        let mut p = self.pending();
        insert(&mut p, offset, bytes);
    }

    /// The wrapped storage (page-cache hints, residency).
    pub fn with_inner<T>(&self, f: impl FnOnce(&dyn Storage) -> T) -> T {
        f(self.inner().as_ref())
    }
}

fn insert(p: &mut Pending, offset: u64, bytes: &[u8]) {
    let end = offset + bytes.len() as u64;
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
        self.inner().len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
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
        drop(p);
        if end > split {
            self.inner()
                .write_at(&buf[(split - offset) as usize..], split)?;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner().set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner().allocate(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        // Only the appended region becomes durable here; held writes wait for the journal.
        self.inner().sync_data()
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner().start_writeback(offset, len)
    }

    fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner().flush_and_drop(offset, len)
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner().drop_cache(offset, len)
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
        self.inner().cached_pages(offset, len)
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        self.inner().create_temp(suffix)
    }

    /// Swaps the file for `temp`. Only valid with nothing held back (the filesys commits first).
    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        if !self.pending().ranges.is_empty() {
            return Err(io::Error::other(
                "replacing a file with uncommitted in-place writes",
            ));
        }
        let mut inner = self.0.inner.write().unwrap_or_else(|p| p.into_inner());
        let replaced = inner.commit_temp(temp)?;
        let len = replaced.len()?;
        *inner = replaced;
        drop(inner);
        let mut p = self.pending();
        p.stable_end = len;
        p.written_end = len;
        drop(p);
        Ok(Box::new(self.clone()))
    }

    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.inner().discard_temp(temp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

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
        assert_eq!(o.pending_writes(), vec![(10, vec![9, 9, 8]), (99, vec![7])]);
        o.apply().unwrap();
        o.sync_data().unwrap();
        assert_eq!(&disk.to_vec()[9..14], &[1, 9, 9, 8, 1]);
        assert_eq!(disk.to_vec()[99], 7);
        o.write_at(&[5], 101).unwrap(); // now below the new stable end
        assert_eq!(disk.to_vec()[101], 7);
    }
}
