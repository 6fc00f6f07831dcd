//! perm (FORMAT 0x30): an array of (kv_pointer, hash) pairs — a kvseq in another order.
//!
//! | offset            | size   | content                                              |
//! |-------------------|--------|------------------------------------------------------|
//! | 0                 | SBSIZE | superblock (FORMAT 0x30, PERMSIZE, HTALGO, HTSIZE?)   |
//! | SBSIZE + 16·i     | 8      | pair i: kv_pointer (≥ 0)                              |
//! | SBSIZE + 16·i + 8 | 8      | pair i: hash of the entry's key (≥ 0, < HTSIZE)       |
//! | SBSIZE + 16·PERMSIZE |     | FILESIZE                                             |
//!
//! The hash is [`KeyHash::hash63`] of the key, taken mod HTSIZE when HTSIZE is present.
//! `group` sorts by hash, ties by a caller's comparison; `sort` by a caller's comparison. Both are
//! stable, and both work on perms larger than memory: runs are sorted in memory, spilled to a
//! scratch file, merged into a second scratch file, and that is renamed over the perm.

use std::cmp::Ordering;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::hash::{KeyHash, HTALGO_MD5};
use crate::format::kvseq::KvPointer;
use crate::format::superblock::{var, Format, Purpose, Superblock, DEFAULT_SBSIZE};
use crate::storage::{self, length, read_exact_at, write_all_at, FileStorage, Storage};

/// Bytes per pair.
pub const PAIR_SIZE: u64 = 16;
/// Pairs sorted in memory at once by default (64 MiB of pairs).
pub const DEFAULT_RUN_PAIRS: u64 = 4 << 20;
/// The suffix of the scratch file a sort spills its sorted runs to (`PATH.runs`).
pub const RUNS_SUFFIX: &str = "runs";
/// The suffix of the scratch file a sort merges the runs into, renamed over the perm
/// (`PATH.sorted`).
pub const SORTED_SUFFIX: &str = "sorted";

/// One (kv_pointer, hash) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pair {
    /// Where the entry lies in the kvseq.
    pub ptr: KvPointer,
    /// The hash of the entry's key (mod HTSIZE when the perm has one).
    pub hash: u64,
}

impl Pair {
    fn encode(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.ptr.0.to_be_bytes());
        out[8..].copy_from_slice(&self.hash.to_be_bytes());
        out
    }
}

/// Settings for a new perm.
#[derive(Clone, Debug)]
pub struct PermOptions {
    /// SBSIZE: the superblock's size, bytes.
    pub sbsize: u64,
    /// PURPOSE: the caller's 8 characters, not interpreted.
    pub purpose: Purpose,
    /// Hashes are taken mod HTSIZE when given.
    pub htsize: Option<u64>,
    /// FILEINCR: the preallocation step of the file's real length, bytes (0: none).
    pub fileincr: u64,
}

impl Default for PermOptions {
    fn default() -> Self {
        PermOptions {
            sbsize: DEFAULT_SBSIZE,
            purpose: Purpose(*b"PERM    "),
            htsize: None,
            fileincr: 1 << 20,
        }
    }
}

/// An open perm.
#[derive(Debug)]
pub struct Perm {
    storage: Box<dyn Storage>,
    sb: Superblock,
    len: u64,
    htsize: Option<u64>,
    fileincr: u64,
    allocated: u64,
    writable: bool,
    dirty: bool,
    run_pairs: u64,
}

impl Perm {
    /// Creates an empty perm in empty storage.
    pub fn create(storage: Box<dyn Storage>, opts: &PermOptions) -> Result<Perm> {
        let path = storage.path().to_path_buf();
        if opts.htsize == Some(0) {
            return Err(Error::invalid("HTSIZE must be at least 1"));
        }
        let mut sb = Superblock::new(opts.sbsize, Format::Perm, opts.purpose)?;
        let sbsize = sb.sbsize() as i64;
        sb.set(&path, var::FILESIZE, sbsize)?;
        sb.set(&path, var::FILEINCR, opts.fileincr as i64)?;
        sb.set(&path, var::PERMSIZE, 0)?;
        sb.set(&path, var::HTALGO, HTALGO_MD5)?;
        if let Some(htsize) = opts.htsize {
            sb.set(&path, var::HTSIZE, htsize as i64)?;
        }
        sb.write(storage.as_ref())?;
        storage::sync(storage.as_ref())?;
        Perm::from_superblock(storage, sb, true)
    }

    /// Creates a new perm file at `path` (which must not exist).
    pub fn create_path(path: &Path, opts: &PermOptions) -> Result<Perm> {
        Perm::create(Box::new(FileStorage::create_new(path)?), opts)
    }

    /// Opens a perm. A read-only open never writes.
    pub fn open(storage: Box<dyn Storage>, writable: bool) -> Result<Perm> {
        let sb = Superblock::read(storage.as_ref())?;
        Perm::from_superblock(storage, sb, writable)
    }

    /// Opens the perm file at `path`.
    pub fn open_path(path: &Path, writable: bool) -> Result<Perm> {
        Perm::open(Box::new(FileStorage::open(path, writable)?), writable)
    }

    fn from_superblock(storage: Box<dyn Storage>, sb: Superblock, writable: bool) -> Result<Perm> {
        let path = storage.path().to_path_buf();
        let at = |name| sb.value_offset(name).unwrap_or(0);
        sb.expect_format(&path, Format::Perm)?;
        let len = sb.require_u64(&path, var::PERMSIZE)?;
        let algo = sb.get(var::HTALGO).unwrap_or(HTALGO_MD5);
        if algo != HTALGO_MD5 {
            return Err(Error::unsupported(
                &path,
                at(var::HTALGO),
                format!("HTALGO {algo} (only 1, MD5, is defined)"),
            ));
        }
        let htsize = sb.get_u64(&path, var::HTSIZE)?;
        if htsize == Some(0) {
            return Err(Error::corrupt(&path, at(var::HTSIZE), "HTSIZE", "≥ 1", 0));
        }
        let file_len = length(storage.as_ref())?;
        // Every pair offset is computed from PERMSIZE; the array must lie within the file.
        let end = len
            .checked_mul(PAIR_SIZE)
            .and_then(|b| b.checked_add(sb.sbsize()))
            .filter(|e| *e <= file_len)
            .ok_or_else(|| {
                Error::corrupt(
                    &path,
                    at(var::PERMSIZE),
                    "PERMSIZE: pairs past the end of the file",
                    format!("pairs within {file_len} bytes"),
                    len,
                )
            })?;
        if let Some(filesize) = sb.get_u64(&path, var::FILESIZE)? {
            if filesize != end {
                return Err(Error::corrupt(
                    &path,
                    at(var::FILESIZE),
                    "FILESIZE",
                    format!("SBSIZE + 16·PERMSIZE = {end}"),
                    filesize,
                ));
            }
        }
        let fileincr = sb.get_u64(&path, var::FILEINCR)?.unwrap_or(0).min(1 << 30);
        Ok(Perm {
            storage,
            sb,
            len,
            htsize,
            fileincr,
            allocated: file_len,
            writable,
            dirty: false,
            run_pairs: DEFAULT_RUN_PAIRS,
        })
    }

    /// The perm file's path.
    pub fn path(&self) -> &Path {
        self.storage.path()
    }

    /// The superblock, its variables as this handle holds them.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// PERMSIZE.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the perm holds no pair.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// HTSIZE, when hashes are taken mod it.
    pub fn htsize(&self) -> Option<u64> {
        self.htsize
    }

    /// How many pairs a sort holds in memory at once (tests make this small).
    pub fn set_run_pairs(&mut self, pairs: u64) {
        self.run_pairs = pairs.max(2);
    }

    /// The hash this perm stores for `key`.
    pub fn hash_key(&self, key: &[u8]) -> u64 {
        let h = KeyHash::of(key).hash63();
        match self.htsize {
            Some(n) => h % n,
            None => h,
        }
    }

    fn offset(&self, i: u64) -> u64 {
        self.sb.sbsize() + i * PAIR_SIZE
    }

    fn decode(&self, i: u64, bytes: &[u8]) -> Result<Pair> {
        let ptr = i64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let hash = i64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let ptr = u64::try_from(ptr).map_err(|_| {
            Error::corrupt(
                self.path(),
                self.offset(i),
                format!("pair {i} kv_pointer"),
                "≥ 0",
                ptr,
            )
        })?;
        let limit = self.htsize.unwrap_or(1 << 63);
        match u64::try_from(hash) {
            Ok(h) if h < limit => Ok(Pair {
                ptr: KvPointer(ptr),
                hash: h,
            }),
            _ => Err(Error::corrupt(
                self.path(),
                self.offset(i) + 8,
                format!("pair {i} hash"),
                format!("0 ≤ hash < {limit}"),
                hash,
            )),
        }
    }

    /// Pair `i`.
    pub fn get(&self, i: u64) -> Result<Pair> {
        if i >= self.len {
            return Err(Error::NotFound(format!("pair {i} (PERMSIZE {})", self.len)));
        }
        let mut buf = [0u8; 16];
        read_exact_at(
            self.storage.as_ref(),
            &mut buf,
            self.offset(i),
            "a perm pair",
        )?;
        self.decode(i, &buf)
    }

    /// Pairs `[start, start + n)`.
    pub fn read_range(&self, start: u64, n: u64) -> Result<Vec<Pair>> {
        match start.checked_add(n) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(Error::NotFound(format!(
                    "pairs {start}..+{n} (PERMSIZE {})",
                    self.len
                )))
            }
        }
        let mut buf = vec![0u8; (n * PAIR_SIZE) as usize];
        read_exact_at(
            self.storage.as_ref(),
            &mut buf,
            self.offset(start),
            "perm pairs",
        )?;
        buf.chunks_exact(16)
            .enumerate()
            .map(|(k, b)| self.decode(start + k as u64, b))
            .collect()
    }

    fn check_writable(&self) -> Result<()> {
        Error::check_writable(self.writable, self.path())
    }

    fn check_pair(&self, pair: Pair) -> Result<()> {
        if pair.ptr.0 > i64::MAX as u64 || pair.hash >= self.htsize.unwrap_or(1 << 63) {
            return Err(Error::invalid(format!(
                "pair {pair:?} does not fit this perm"
            )));
        }
        Ok(())
    }

    /// Appends a pair.
    pub fn append(&mut self, pair: Pair) -> Result<u64> {
        self.check_writable()?;
        self.check_pair(pair)?;
        let end = self.offset(self.len + 1);
        if end > self.allocated {
            let target = if self.fileincr > 0 {
                end.div_ceil(self.fileincr) * self.fileincr
            } else {
                end
            };
            self.storage
                .allocate(target)
                .map_err(|e| Error::io(self.storage.path(), None, e))?;
            self.allocated = target;
        }
        write_all_at(self.storage.as_ref(), &pair.encode(), self.offset(self.len))?;
        self.len += 1;
        self.dirty = true;
        Ok(self.len - 1)
    }

    /// Overwrites pair `i`.
    pub fn set(&mut self, i: u64, pair: Pair) -> Result<()> {
        self.check_writable()?;
        self.check_pair(pair)?;
        if i >= self.len {
            return Err(Error::NotFound(format!("pair {i} (PERMSIZE {})", self.len)));
        }
        write_all_at(self.storage.as_ref(), &pair.encode(), self.offset(i))
    }

    /// Swaps pairs `i` and `k`.
    pub fn swap(&mut self, i: u64, k: u64) -> Result<()> {
        let (a, b) = (self.get(i)?, self.get(k)?);
        self.set(i, b)?;
        self.set(k, a)
    }

    /// Stable sort by hash; equal hashes ordered by `tie` (usually a comparison of the keys).
    pub fn group(&mut self, mut tie: impl FnMut(&Pair, &Pair) -> Result<Ordering>) -> Result<()> {
        self.sort(|a, b| match a.hash.cmp(&b.hash) {
            Ordering::Equal => tie(a, b),
            other => Ok(other),
        })
    }

    /// Stable sort by `cmp`. Holds at most the run size in memory; larger perms are sorted in
    /// runs, merged in a scratch file, and the result is renamed over the perm.
    pub fn sort(&mut self, mut cmp: impl FnMut(&Pair, &Pair) -> Result<Ordering>) -> Result<()> {
        self.check_writable()?;
        self.flush()?;
        if self.len <= self.run_pairs {
            let mut pairs = self.read_range(0, self.len)?;
            sort_run(&mut pairs, &mut cmp)?;
            let bytes: Vec<u8> = pairs.iter().flat_map(|p| p.encode()).collect();
            return write_all_at(self.storage.as_ref(), &bytes, self.offset(0));
        }
        let path = self.path().to_path_buf();
        let runs = self
            .storage
            .create_temp(RUNS_SUFFIX)
            .map_err(|e| Error::io(&path, None, e))?;
        let out = self
            .storage
            .create_temp(SORTED_SUFFIX)
            .map_err(|e| Error::io(&path, None, e))?;
        let result = self.external_sort(runs.as_ref(), out.as_ref(), &mut cmp);
        let _ = self.storage.discard_temp(runs);
        if let Err(e) = result {
            let _ = self.storage.discard_temp(out);
            return Err(e);
        }
        self.storage = self
            .storage
            .commit_temp(out)
            .map_err(|e| Error::io(&path, None, e))?;
        self.allocated = length(self.storage.as_ref())?;
        Ok(())
    }

    fn external_sort(
        &self,
        runs: &dyn Storage,
        out: &dyn Storage,
        cmp: &mut dyn FnMut(&Pair, &Pair) -> Result<Ordering>,
    ) -> Result<()> {
        // 1. Sorted runs, each run_pairs long (the last shorter), laid out in `runs` in order.
        let mut start = 0;
        while start < self.len {
            let n = self.run_pairs.min(self.len - start);
            let mut pairs = self.read_range(start, n)?;
            sort_run(&mut pairs, cmp)?;
            let bytes: Vec<u8> = pairs.iter().flat_map(|p| p.encode()).collect();
            write_all_at(runs, &bytes, start * PAIR_SIZE)?;
            start += n;
        }
        // 2. k-way merge; ties go to the earlier run, which keeps the sort stable.
        out.write_at(&self.sb.encode(), 0)
            .map_err(|e| Error::io(out.path(), Some(0), e))?;
        let run_count = self.len.div_ceil(self.run_pairs);
        let per_run = (self.run_pairs / run_count).max(1);
        let mut cursors: Vec<RunCursor> = (0..run_count)
            .map(|r| {
                let begin = r * self.run_pairs;
                RunCursor {
                    next: begin,
                    end: (begin + self.run_pairs).min(self.len),
                    buf: Vec::new(),
                    pos: 0,
                }
            })
            .collect();
        for c in &mut cursors {
            c.refill(runs, per_run)?;
        }
        let mut written = 0u64;
        let mut pending: Vec<u8> = Vec::with_capacity((per_run * PAIR_SIZE) as usize);
        loop {
            let mut best: Option<usize> = None;
            for (r, c) in cursors.iter().enumerate() {
                let Some(p) = c.peek() else { continue };
                best = match best {
                    Some(b)
                        if cmp(p, cursors[b].peek().expect("best has a head"))?
                            != Ordering::Less =>
                    {
                        Some(b)
                    }
                    _ => Some(r),
                };
            }
            let Some(b) = best else { break };
            let pair = cursors[b].buf[cursors[b].pos];
            cursors[b].pos += 1;
            if cursors[b].pos == cursors[b].buf.len() {
                cursors[b].refill(runs, per_run)?;
            }
            pending.extend_from_slice(&pair.encode());
            if pending.len() as u64 >= per_run * PAIR_SIZE {
                write_all_at(out, &pending, self.offset(written))?;
                written += pending.len() as u64 / PAIR_SIZE;
                pending.clear();
            }
        }
        write_all_at(out, &pending, self.offset(written))?;
        Ok(())
    }

    /// Writes PERMSIZE and FILESIZE (no fsync).
    pub fn flush(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let path = self.path().to_path_buf();
        self.sb.set(&path, var::PERMSIZE, self.len as i64)?;
        let end = self.offset(self.len);
        if self.sb.get(var::FILESIZE).is_some() {
            self.sb.set(&path, var::FILESIZE, end as i64)?;
        }
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// Flushes and makes the perm durable.
    pub fn sync(&mut self) -> Result<()> {
        self.check_writable()?;
        storage::sync(self.storage.as_ref())?;
        self.dirty = true;
        self.flush()?;
        storage::sync(self.storage.as_ref())
    }
}

impl Drop for Perm {
    fn drop(&mut self) {
        if self.writable && self.dirty {
            let _ = self.flush();
        }
    }
}

/// Reads one sorted run in pieces during a merge.
struct RunCursor {
    next: u64,
    end: u64,
    buf: Vec<Pair>,
    pos: usize,
}

impl RunCursor {
    fn peek(&self) -> Option<&Pair> {
        self.buf.get(self.pos)
    }

    fn refill(&mut self, runs: &dyn Storage, per_run: u64) -> Result<()> {
        let n = per_run.min(self.end - self.next);
        let mut bytes = vec![0u8; (n * PAIR_SIZE) as usize];
        read_exact_at(runs, &mut bytes, self.next * PAIR_SIZE, "a sort run")?;
        self.buf = bytes
            .chunks_exact(16)
            .map(|b| Pair {
                ptr: KvPointer(u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))),
                hash: u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
            })
            .collect();
        self.next += n;
        self.pos = 0;
        Ok(())
    }
}

/// Stable in-memory sort with a fallible comparison: the first error wins.
fn sort_run(
    pairs: &mut [Pair],
    cmp: &mut dyn FnMut(&Pair, &Pair) -> Result<Ordering>,
) -> Result<()> {
    let mut failed = None;
    pairs.sort_by(|a, b| {
        if failed.is_some() {
            return Ordering::Equal;
        }
        cmp(a, b).unwrap_or_else(|e| {
            failed = Some(e);
            Ordering::Equal
        })
    });
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    fn perm_with(values: &[(u64, u64)], run: u64) -> Perm {
        let mut p = Perm::create(Box::new(MemStorage::new("p")), &PermOptions::default()).unwrap();
        p.set_run_pairs(run);
        for &(ptr, hash) in values {
            p.append(Pair {
                ptr: KvPointer(ptr),
                hash,
            })
            .unwrap();
        }
        p
    }

    #[test]
    fn group_is_stable_in_memory_and_external() {
        let values: Vec<(u64, u64)> = (0..1000).map(|i| (i, (i * 7919) % 13)).collect();
        let mut expected = values.clone();
        expected.sort_by_key(|&(_, h)| h);
        for run in [2000, 7, 2] {
            let mut p = perm_with(&values, run);
            p.group(|_, _| Ok(Ordering::Equal)).unwrap();
            let got: Vec<(u64, u64)> = p
                .read_range(0, p.len())
                .unwrap()
                .iter()
                .map(|x| (x.ptr.0, x.hash))
                .collect();
            assert_eq!(got, expected, "run size {run}");
        }
    }

    #[test]
    fn swap_get_and_bounds() {
        let mut p = perm_with(&[(100, 1), (200, 2)], 10);
        p.swap(0, 1).unwrap();
        assert_eq!(p.get(0).unwrap().ptr, KvPointer(200));
        assert!(p.get(2).is_err());
        assert!(p.swap(0, 5).is_err());
    }

    #[test]
    fn comparison_errors_propagate_and_change_nothing() {
        let mut p = perm_with(&[(3, 0), (1, 0), (2, 0)], 10);
        let before = p.read_range(0, 3).unwrap();
        let err = p.sort(|_, _| Err(Error::invalid("no keys"))).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)));
        assert_eq!(p.read_range(0, 3).unwrap(), before);
    }
}
