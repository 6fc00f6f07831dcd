//! The kvseq writer: append, replace, delete, and the superblock's counters written on flush
//! and sync; with the drop-behind policy on, appended chunks go to writeback and leave the page
//! cache as the file grows.

use std::path::Path;

use super::{align_up, Entry, EntryLayout, KvPointer, KvSeq};
use crate::error::{Error, Result};
use crate::format::superblock::{var, VarName};
use crate::storage::{self, write_all_at};

/// Page-cache policy for a writer: every [`WRITEBACK_KICK`] bytes appended go to writeback, and
/// after each `chunk` bytes the previous chunk is waited for and dropped from the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropBehind {
    /// Bytes per chunk dropped from the page cache.
    pub chunk: u64,
}

/// Bytes appended between two starts of writeback. A commit after many appends (a batch of 1,000
/// puts, ~9 MB) would otherwise find most of them still to be written by its fdatasync and wait
/// for all of it: started early, the disk writes them while the next appends are made.
pub const WRITEBACK_KICK: u64 = 1 << 20;

#[derive(Debug, Default)]
pub(super) struct WritebackState {
    /// Start of the bytes not yet handed to writeback.
    pub(super) submitted_to: u64,
    /// Start of the chunk being handed to writeback, piece by piece.
    pub(super) chunk_from: u64,
    /// The chunk handed to writeback last, to be waited for and dropped after the next one.
    pub(super) in_flight: Option<(u64, u64)>,
}

impl KvSeq {
    /// Turns the writer's page-cache policy on (or off with `None`).
    pub fn set_drop_behind(&mut self, policy: Option<DropBehind>) {
        self.drop_behind = policy.filter(|p| p.chunk > 0);
        self.writeback.submitted_to = self.filesize;
        self.writeback.chunk_from = self.filesize;
    }

    /// The writer's page-cache policy.
    pub fn drop_behind(&self) -> Option<DropBehind> {
        self.drop_behind
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        Error::check_writable(self.writable, self.path())
    }

    /// Makes the real file at least `end` bytes, in FILEINCR steps.
    fn reserve(&mut self, end: u64) -> Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let target = if self.fileincr > 0 {
            end.div_ceil(self.fileincr).saturating_mul(self.fileincr)
        } else {
            end
        };
        self.storage
            .allocate(target)
            .map_err(|e| Error::io(self.storage.path(), Some(self.allocated), e))?;
        self.allocated = target;
        Ok(())
    }

    /// Appends an entry and returns its pointer. Nothing is written when it does not fit.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<KvPointer> {
        Ok(self.append_entry(key, value)?.ptr)
    }

    /// Appends an entry and returns where its parts lie (no read needed).
    pub fn append_entry(&mut self, key: &[u8], value: &[u8]) -> Result<EntryLayout> {
        self.check_writable()?;
        let size = self.encoded_size(key, value)?;
        let start = self.filesize;
        let ptr = align_up(start, self.align).max(self.data_start);
        let end = ptr
            .checked_add(size)
            .ok_or_else(|| Error::invalid("file would pass 2^64 bytes"))?;
        // The gap before an aligned entry is written as zeros: bytes past FILESIZE may hold a
        // torn entry from before a crash.
        let mut buf = Vec::with_capacity((end - start) as usize);
        buf.resize((ptr - start) as usize, 0);
        self.encode_into(&mut buf, key, value);
        self.reserve(end)?;
        write_all_at(self.storage.as_ref(), &buf, start)?;
        self.filesize = end;
        self.bump(var::ENTRIES, 1);
        self.bump(var::AENTRIES, 1);
        self.dirty = true;
        self.after_append()?;
        let key_offset = ptr + u64::from(self.delflag) + self.keyrepr.header_len();
        let key_len = key.len() as u64;
        let value_offset =
            key_offset + key_len + self.keyrepr.padding(key_len) + self.valrepr.header_len();
        Ok(EntryLayout {
            ptr: KvPointer(ptr),
            deleted: false,
            key_offset,
            key_len,
            value_offset,
            value_len: value.len() as u64,
            end,
        })
    }

    /// Replaces the entry at `ptr` with a live entry. Unless it is the last entry, the new entry
    /// must have the same encoded size.
    pub fn replace(&mut self, ptr: KvPointer, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        let old = self.layout(ptr)?;
        let size = self.encoded_size(key, value)?;
        let is_last = old.end == self.filesize;
        let old_size = old.end - ptr.0;
        if !is_last && size != old_size {
            return Err(Error::invalid(format!(
                "replacing the entry at {ptr} needs the same encoded size ({old_size} bytes, new \
                 {size}) unless it is the last entry"
            )));
        }
        let mut buf = Vec::with_capacity(size as usize);
        self.encode_into(&mut buf, key, value);
        let end = ptr.0 + size;
        self.reserve(end)?;
        write_all_at(self.storage.as_ref(), &buf, ptr.0)?;
        if is_last {
            self.filesize = end;
        }
        if old.deleted {
            self.bump(var::AENTRIES, 1);
        }
        self.dirty = true;
        Ok(())
    }

    /// Overwrites bytes inside an entry's value in place (the value's length does not change).
    pub fn overwrite_value(
        &mut self,
        layout: &EntryLayout,
        offset: u64,
        bytes: &[u8],
    ) -> Result<()> {
        self.check_writable()?;
        let end = offset.checked_add(bytes.len() as u64);
        if end.is_none_or(|e| e > layout.value_len) {
            return Err(Error::invalid(format!(
                "overwrite past the {}-byte value at {}",
                layout.value_len, layout.ptr
            )));
        }
        write_all_at(self.storage.as_ref(), bytes, layout.value_offset + offset)
    }

    /// Marks the entry at `ptr` deleted. Returns false when it already was.
    pub fn delete(&mut self, ptr: KvPointer) -> Result<bool> {
        self.check_deletable()?;
        if self.layout(ptr)?.deleted {
            return Ok(false);
        }
        self.delete_live(ptr)?;
        Ok(true)
    }

    /// [`KvSeq::delete`] of an entry the caller knows to be live (one it appended and has not
    /// deleted since): its flag is set without reading the entry first.
    pub fn delete_live(&mut self, ptr: KvPointer) -> Result<()> {
        self.check_deletable()?;
        write_all_at(self.storage.as_ref(), &[1], ptr.0)?;
        self.bump(var::AENTRIES, -1);
        self.dirty = true;
        Ok(())
    }

    fn check_deletable(&self) -> Result<()> {
        self.check_writable()?;
        if !self.delflag {
            return Err(Error::invalid(format!(
                "{}: entries cannot be deleted (KVDELFL is not 1)",
                self.path().display()
            )));
        }
        Ok(())
    }

    /// [`KvSeq::delete`] of an entry just read whole, with nothing written over it since: its
    /// flag is set without reading the entry again (a file rewrite deletes its old inode per put).
    pub fn delete_read(&mut self, entry: &Entry) -> Result<bool> {
        if entry.deleted {
            self.check_deletable()?;
            return Ok(false);
        }
        self.delete_live(entry.ptr)?;
        Ok(true)
    }

    fn bump(&mut self, name: VarName, delta: i64) {
        if let Some(v) = self.sb.get(name) {
            // Present variables are set in place; no room is needed.
            let _ = self.sb.set(Path::new(""), name, v.saturating_add(delta));
        }
    }

    fn after_append(&mut self) -> Result<()> {
        let Some(policy) = self.drop_behind else {
            return Ok(());
        };
        let start = self.writeback.submitted_to;
        if self.filesize < start + WRITEBACK_KICK.min(policy.chunk) {
            return Ok(());
        }
        let s = self.storage.as_ref();
        s.start_writeback(start, self.filesize - start)
            .map_err(|e| Error::io(s.path(), Some(start), e))?;
        self.writeback.submitted_to = self.filesize;
        let chunk_from = self.writeback.chunk_from;
        if self.filesize < chunk_from + policy.chunk {
            return Ok(());
        }
        let chunk = (chunk_from, self.filesize - chunk_from);
        if let Some((prev, prev_len)) = self.writeback.in_flight.replace(chunk) {
            // From the start of its first page, which the chunk before left (see drop_synced).
            let start = page_start(prev, self.data_start);
            s.flush_and_drop(start, prev + prev_len - start)
                .map_err(|e| Error::io(s.path(), Some(prev), e))?;
        }
        self.writeback.chunk_from = self.filesize;
        Ok(())
    }

    /// Writes FILESIZE, ENTRIES, AENTRIES and changed variables to the superblock (no fsync): a
    /// reader opening the file now sees every entry appended so far.
    pub fn flush(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let path = self.storage.path().to_path_buf();
        self.sb.set(&path, var::FILESIZE, self.filesize as i64)?;
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// Makes everything written so far durable and records SYNCSIZE and SYNCTIME.
    ///
    /// Order: data to disk, then the superblock naming it, then the superblock to disk, so that a
    /// durable SYNCSIZE never covers bytes that are not durable.
    pub fn sync(&mut self) -> Result<()> {
        self.check_writable()?;
        storage::sync(self.storage.as_ref())?;
        self.stage_sync(self.clock.now())?;
        storage::sync(self.storage.as_ref())?;
        self.drop_synced()
    }

    /// Writes FILESIZE, SYNCSIZE = FILESIZE and SYNCTIME = `time` to the superblock without any
    /// fsync: for a caller that orders the syncs itself (the filesys journal).
    pub fn stage_sync(&mut self, time: i64) -> Result<()> {
        self.check_writable()?;
        let path = self.storage.path().to_path_buf();
        self.sb.set(&path, var::FILESIZE, self.filesize as i64)?;
        self.sb.set(&path, var::SYNCSIZE, self.filesize as i64)?;
        self.sb.set(&path, var::SYNCTIME, time)?;
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// After a sync: drops the written entries from the page cache (when the page-cache policy
    /// is on). They are durable, so dropping cannot stall on writeback.
    pub fn drop_synced(&mut self) -> Result<()> {
        if self.drop_behind.is_none() {
            return Ok(());
        }
        let s = self.storage.as_ref();
        // Everything before the chunk still in flight (or, with none, before the chunk being
        // handed to writeback) was dropped already, by drop-behind or by the last sync: dropping
        // the whole file again cost a walk of its page-cache range per commit (~1.7 ms at a few
        // hundred MiB, a commit per 1,000 puts of the render store).
        let from = match self.writeback.in_flight {
            Some((start, _)) => start,
            None => self.writeback.chunk_from,
        }
        .max(self.data_start)
        .min(self.filesize);
        // From the start of `from`'s page: the kernel drops only whole pages, so a range that
        // starts inside one keeps it. That page held the end of the last commit and is whole
        // and durable now; left out, one page a commit stayed cached. The page the file ends in
        // stays: the next append fills it.
        let from = page_start(from, self.data_start);
        s.drop_cache(from, self.filesize.saturating_sub(from))
            .map_err(|e| Error::io(s.path(), Some(from), e))?;
        self.writeback = WritebackState {
            submitted_to: self.filesize,
            chunk_from: self.filesize,
            in_flight: None,
        };
        Ok(())
    }

    /// Gives back the space preallocated past FILESIZE (for a file that is done growing).
    pub fn trim(&mut self) -> Result<()> {
        self.check_writable()?;
        self.storage
            .set_len(self.filesize)
            .map_err(|e| Error::io(self.storage.path(), Some(self.filesize), e))?;
        self.allocated = self.filesize;
        Ok(())
    }

    /// Sets FILESIZE back to `filesize` (dropping a torn tail). The bytes stay but mean nothing.
    pub fn truncate_logical(&mut self, filesize: u64, entries: u64, live: u64) -> Result<()> {
        self.check_writable()?;
        if filesize < self.sb.sbsize() || filesize > self.filesize {
            return Err(Error::invalid(format!("cannot set FILESIZE to {filesize}")));
        }
        self.filesize = filesize;
        let path = self.storage.path().to_path_buf();
        if self.sb.get(var::ENTRIES).is_some() {
            self.sb.set(&path, var::ENTRIES, entries as i64)?;
        }
        if self.sb.get(var::AENTRIES).is_some() {
            self.sb.set(&path, var::AENTRIES, live as i64)?;
        }
        self.dirty = true;
        self.writeback.submitted_to = self.writeback.submitted_to.min(filesize);
        self.writeback.chunk_from = self.writeback.chunk_from.min(filesize);
        Ok(())
    }
}

impl Drop for KvSeq {
    fn drop(&mut self) {
        if self.writable && self.dirty {
            // Best effort: a reader should see what was appended. Durability needs sync().
            let _ = self.flush();
        }
    }
}

/// The start of `offset`'s page, unless that lies before `data_start` (the superblock's page,
/// rewritten at every sync, stays cached).
fn page_start(offset: u64, data_start: u64) -> u64 {
    let page = storage::page_floor(offset);
    if page >= data_start {
        page
    } else {
        offset
    }
}
