//! Iteration over live files in file order, and over an mtime range of an ao filesys.

use crate::error::{Error, Result};
use crate::format::kvseq::{self, KvPointer};

use super::inode::{classify, Inode, KeyKind};
use super::{FileStat, Filesys};

/// Live files in file order (inodes only; data entries and deleted versions are skipped).
pub struct FileIter<'a> {
    entries: kvseq::Iter<'a>,
    path: &'a std::path::Path,
    /// Skip files with an mtime below this.
    from_mtime: Option<i64>,
    /// Stop at the first file with an mtime at or past this (ao order makes that the end).
    until_mtime: Option<i64>,
    done: bool,
}

impl Iterator for FileIter<'_> {
    type Item = Result<FileStat>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let entry = match self.entries.next()? {
                Ok(e) => e,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let KeyKind::Inode { name, n } = classify(&entry.key) else {
                continue;
            };
            if n != 0 {
                self.done = true;
                return Some(Err(Error::unsupported(
                    self.path,
                    entry.layout.ptr.0,
                    format!("inode entry {n} (only one inode per file is defined)"),
                )));
            }
            let value = entry.value.as_deref().unwrap_or_default();
            let inode = match Inode::decode(value, self.path, entry.layout.value_offset) {
                Ok(i) => i,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if self.until_mtime.is_some_and(|t1| inode.mtime >= t1) {
                self.done = true;
                return None;
            }
            if self.from_mtime.is_some_and(|t0| inode.mtime < t0) {
                continue;
            }
            let stat = FileStat {
                name: name.to_vec(),
                size: inode.lsize,
                ftype: inode.ftype,
                mtime: inode.mtime,
                fileid: inode.fileid,
                inode: entry.layout.ptr,
                inode_size: inode.size,
                data_entries: inode.data.len() as u64,
            };
            return Some(Ok(stat));
        }
        None
    }
}

impl Filesys {
    /// Live files in file order, starting at `from`, stopping before the first with an mtime at
    /// or past `until` (meaningful in ao order only).
    pub(super) fn files(&self, from: KvPointer, until: Option<i64>) -> FileIter<'_> {
        FileIter {
            entries: self.data.iter_entries(from, true),
            path: self.data.path(),
            from_mtime: None,
            until_mtime: until,
            done: false,
        }
    }

    /// Every live file, in file order.
    pub fn iter(&self) -> FileIter<'_> {
        self.files(self.data.first(), None)
    }

    /// Live files with `t0 ≤ mtime < t1`, found by seeking through the time index (never a scan
    /// from the start). Needs an ao filesys.
    pub fn iter_time(&self, t0: i64, t1: i64) -> Result<FileIter<'_>> {
        let Some(time) = &self.time else {
            return Err(Error::invalid(format!(
                "{}: time ranges need an ao filesys",
                self.base.display()
            )));
        };
        let start = time.seek(t0)?;
        let mut it = self.files(start.unwrap_or(KvPointer(self.data.filesize())), Some(t1));
        it.from_mtime = Some(t0);
        Ok(it)
    }

    /// Reads a whole file given its stat (as yielded by iteration).
    pub fn read_stat(&self, stat: &FileStat) -> Result<Vec<u8>> {
        let entry = self.data.read(stat.inode)?;
        let inode = Inode::decode(&entry.value, self.data.path(), entry.value_offset)?;
        self.read_inode(&inode, 0, u64::MAX)
    }
}
