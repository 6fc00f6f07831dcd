//! Iteration over live files in file order, and over an mtime range of an ao filesys.

use crate::error::{Error, Result};
use crate::format::kvseq::{self, KvPointer, KvSeq};

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
            return Some(Ok(FileStat::of(name, entry.layout.ptr, &inode)));
        }
        None
    }
}

/// The live files whose inode entries lie at `ptrs`, in that order.
fn read_inode_run(data: &KvSeq, ptrs: &[u64]) -> Result<Vec<FileStat>> {
    let mut files = Vec::with_capacity(ptrs.len());
    for &ptr in ptrs {
        let entry = data.read_sized(KvPointer(ptr), INODE_READ)?;
        if entry.deleted {
            continue;
        }
        let KeyKind::Inode { name, n: 0 } = classify(&entry.key) else {
            return Err(Error::corrupt(
                data.path(),
                ptr,
                "entry an index cell points at",
                "an inode entry",
                String::from_utf8_lossy(&entry.key),
            ));
        };
        let inode = Inode::decode(&entry.value, data.path(), entry.value_offset)?;
        files.push(FileStat::of(name, entry.ptr, &inode));
    }
    Ok(files)
}

/// Inodes read at once by [`Filesys::files_by_index`] (bounds the pointers held per round).
const INDEX_BATCH: usize = 4096;
/// Reads in flight in [`Filesys::files_by_index`]: a disk serves many small random reads at
/// once far faster than one after another.
const INDEX_THREADS: usize = 16;
/// First read of an inode entry: header, name and an inode of a few data pointers.
const INODE_READ: usize = 1024;

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

    /// Every live file, in file order, reading inode entries only and stepping over the data
    /// entries between them: for a survey of a filesys of large files, it reads a page or two
    /// per file instead of every byte.
    pub fn iter_sparse(&self) -> FileIter<'_> {
        FileIter {
            entries: self.data.iter_sparse(self.data.first(), true, |key| {
                matches!(classify(key), KeyKind::Inode { .. })
            }),
            ..self.files(self.data.first(), None)
        }
    }

    /// Every live file, found through the index instead of a walk of the datafile: the used
    /// cells give the inode pointers, and the inodes are read `INDEX_THREADS` at a time, in
    /// pointer (file) order. A survey of a filesys of large files reads one small entry per file
    /// this way, with many reads in flight. `None` when the files found do not account for every
    /// live entry of the datafile (AENTRIES: an inode and its data entries each): then the index
    /// misses something and only a walk ([`Filesys::iter_sparse`]) is sure to find every file.
    pub fn files_by_index(&self) -> Result<Option<Vec<FileStat>>> {
        let Some(live_entries) = self.data.live_entries() else {
            return Ok(None);
        };
        let mut ptrs = Vec::new();
        for cell in self.idx.used_cells() {
            let (_, ptr) = cell?;
            ptrs.push(ptr.0);
            if ptrs.len() as u64 > live_entries {
                return Ok(None);
            }
        }
        ptrs.sort_unstable();
        let mut files = Vec::with_capacity(ptrs.len());
        for batch in ptrs.chunks(INDEX_BATCH) {
            files.extend(self.read_inodes(batch)?);
        }
        let accounted: u64 = files.iter().map(|f| 1 + f.data_entries).sum();
        Ok((accounted == live_entries).then_some(files))
    }

    /// The live files whose inode entries lie at `ptrs` (in that order), read in parallel.
    fn read_inodes(&self, ptrs: &[u64]) -> Result<Vec<FileStat>> {
        let per = ptrs.len().div_ceil(INDEX_THREADS).max(1);
        let data = &self.data;
        let parts: Vec<Result<Vec<FileStat>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = ptrs
                .chunks(per)
                .map(|part| scope.spawn(move || read_inode_run(data, part)))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|p| Err(Error::panicked("an inode reader", &*p)))
                })
                .collect()
        });
        let mut files = Vec::with_capacity(ptrs.len());
        for part in parts {
            files.extend(part?);
        }
        Ok(files)
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
