//! The storage seam under the formats: positioned reads and writes, length, sync, and page-cache
//! hooks.
//!
//! The formats never touch a `File` directly. [`FileStorage`] is the real thing (pread/pwrite,
//! fallocate, fdatasync, sync_file_range, posix_fadvise); [`MemStorage`] keeps the bytes in memory
//! for tests and fuzzing. Crash simulators (`wink_harness::sim`) plug in here too.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Byte-addressed storage for one file.
#[allow(clippy::len_without_is_empty)] // a file's length, not a collection's
pub trait Storage: Send + Sync + fmt::Debug {
    /// The path used in error messages.
    fn path(&self) -> &Path;
    /// Current real length in bytes (which may exceed a format's logical FILESIZE).
    fn len(&self) -> io::Result<u64>;
    /// Reads into `buf` from `offset`; returns fewer bytes than asked only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`, extending the file when needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends (with zeros) to exactly `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the real length at least `len`, allocating blocks where the medium supports it.
    fn allocate(&self, len: u64) -> io::Result<()> {
        if self.len()? < len {
            self.set_len(len)?;
        }
        Ok(())
    }
    /// Makes every completed write durable.
    fn sync_data(&self) -> io::Result<()>;
    /// The descriptor a sync of this storage is an `fdatasync` of, so that [`sync_all`] can
    /// issue several at once from other threads. `None` (the default): synced in turn, on the
    /// caller's thread (memory and simulated disks, whose syncs must stay in a fixed order).
    fn sync_fd(&self) -> Option<std::os::unix::io::RawFd> {
        None
    }
    /// Starts writeback of a range without waiting (page-cache policy; no durability promise).
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Waits for writeback of a range, then drops its pages from the page cache.
    fn flush_and_drop(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Drops a range's pages from the page cache (they were read once and are not needed soon).
    fn drop_cache(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Creates an empty scratch storage beside this one (`PATH.suffix`), for building a
    /// replacement that [`Storage::commit_temp`] swaps in atomically. A leftover from a crash is
    /// overwritten.
    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>>;
    /// Makes `temp` (from [`Storage::create_temp`]) durable and atomically puts it in this
    /// storage's place; returns the handle to use from now on. Other handles on the old file keep
    /// seeing the old bytes.
    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>>;
    /// Removes a scratch storage that will not be committed.
    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()>;
    /// Hints that reads will be random (no readahead).
    fn advise_random(&self) -> io::Result<()> {
        Ok(())
    }
    /// Asks for a range to be read into the page cache in the background (reads soon to come).
    fn will_need(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Hints that reads will be sequential (aggressive readahead).
    fn advise_sequential(&self) -> io::Result<()> {
        Ok(())
    }
    /// [`Storage::read_at`] that leaves the page cache as it found it, for a reader passing over
    /// much data once (a dump): the pages it had to bring in from the disk are dropped after the
    /// read, and pages that were cached before stay cached, so a node's working set is neither
    /// evicted by the dump's pages nor dropped by it. Default: a plain read.
    fn read_at_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }
    /// Which pages of `[offset, offset + len)` are in the page cache now: one flag per 4 KiB
    /// page, from the page holding `offset`. Default: none (a storage without a page cache).
    fn cached_pages(&self, offset: u64, len: u64) -> io::Result<Vec<bool>> {
        let first = offset / PAGE;
        let end = (offset + len).div_ceil(PAGE);
        Ok(vec![false; end.saturating_sub(first) as usize])
    }
}

/// Reads exactly `buf.len()` bytes at `offset`. A short read means the file is shorter than its
/// own header promises: that is corruption, reported with the offset where the bytes ran out.
pub fn read_exact_at(s: &dyn Storage, buf: &mut [u8], offset: u64, what: &str) -> Result<()> {
    let n = s
        .read_at(buf, offset)
        .map_err(|e| Error::io(s.path(), Some(offset), e))?;
    if n < buf.len() {
        return Err(Error::corrupt(
            s.path(),
            offset + n as u64,
            format!("file ends inside {what}"),
            format!("{} bytes at {offset}", buf.len()),
            format!("{n} bytes"),
        ));
    }
    Ok(())
}

/// Writes all of `buf` at `offset`, naming the file and offset on failure.
pub fn write_all_at(s: &dyn Storage, buf: &[u8], offset: u64) -> Result<()> {
    s.write_at(buf, offset)
        .map_err(|e| Error::io(s.path(), Some(offset), e))
}

/// Syncs, naming the file on failure.
pub fn sync(s: &dyn Storage) -> Result<()> {
    s.sync_data().map_err(|e| Error::io(s.path(), None, e))
}

/// Syncs every storage of `files`, the ones with a descriptor ([`Storage::sync_fd`]) all at
/// once: one round trip to the disk instead of one per file. A commit's barrier: when it
/// returns `Ok`, every write to them completed before the call is durable. The others are
/// synced in turn, in the order given, on this thread; so is everything when only one file
/// has a descriptor.
pub fn sync_all(files: &[&dyn Storage]) -> Result<()> {
    let parallel: Vec<(usize, std::os::unix::io::RawFd)> = files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.sync_fd().map(|fd| (i, fd)))
        .collect();
    if parallel.len() < 2 {
        return files.iter().try_for_each(|f| sync(*f));
    }
    // All but the first go to the sync threads; the first is synced here meanwhile. The
    // descriptors stay open: `files` is borrowed until every reply has come back.
    let (tx, rx) = std::sync::mpsc::channel();
    for &(i, fd) in &parallel[1..] {
        sync_pool().submit(SyncJob {
            fd,
            index: i,
            reply: tx.clone(),
        });
    }
    drop(tx);
    let mut first = sync(files[parallel[0].0]);
    for f in files.iter().filter(|f| f.sync_fd().is_none()) {
        first = first.and(sync(*f));
    }
    let mut result = first;
    for _ in 1..parallel.len() {
        match rx.recv() {
            Ok((i, r)) => {
                result = result.and(r.map_err(|e| Error::io(files[i].path(), None, e)));
            }
            Err(_) => {
                result = result.and(Err(Error::internal("a sync thread went away")));
                // Every job holds a sender: a closed channel means none is left running.
                break;
            }
        }
    }
    result
}

/// One fdatasync for the sync threads, and where its result goes.
struct SyncJob {
    fd: std::os::unix::io::RawFd,
    index: usize,
    reply: std::sync::mpsc::Sender<(usize, io::Result<()>)>,
}

/// Threads that only fdatasync: started once, on the first commit that syncs several files, so
/// that a commit does not pay for starting threads.
struct SyncPool {
    jobs: Mutex<std::sync::mpsc::Sender<SyncJob>>,
}

impl SyncPool {
    fn submit(&self, job: SyncJob) {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(std::sync::mpsc::SendError(job)) = jobs.send(job) {
            let _ = job
                .reply
                .send((job.index, Err(io::Error::other("no sync thread"))));
        }
    }
}

/// Sync threads: enough for the files of two filesys committed together.
const SYNC_THREADS: usize = 8;

fn sync_pool() -> &'static SyncPool {
    static POOL: std::sync::OnceLock<SyncPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<SyncJob>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..SYNC_THREADS {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("wink-sync-{n}"))
                .spawn(move || loop {
                    let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    // SAFETY: fdatasync takes a descriptor and touches no user memory; the
                    // submitter keeps the descriptor open until this job's reply arrives.
                    let rc = unsafe { libc::fdatasync(job.fd) };
                    let r = if rc == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    };
                    let _ = job.reply.send((job.index, r));
                });
        }
        SyncPool {
            jobs: Mutex::new(tx),
        }
    })
}

/// The real length, naming the file on failure.
pub fn length(s: &dyn Storage) -> Result<u64> {
    s.len().map_err(|e| Error::io(s.path(), None, e))
}

/// `PATH.suffix`.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// fsyncs the directory holding `path`, so a rename or create in it is durable.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Page-cache residency of a file: (resident bytes, file bytes), measured with mincore(2).
///
/// The file is mapped read-only just long enough to ask the kernel which of its pages are in the
/// page cache; no page is touched, so asking does not change the answer.
pub fn residency(path: &Path) -> Result<(u64, u64)> {
    let map = PageMap::of(path)?;
    let resident = map.pages.iter().filter(|b| *b & 1 == 1).count() as u64;
    Ok(((resident * PAGE).min(map.len), map.len))
}

/// Which pages of a file were in the page cache at one moment (mincore(2), one byte per 4 KiB
/// page), so that a reader passing over the file once can later drop the pages it brought in and
/// keep the ones that were cached before it.
#[derive(Clone, Debug, Default)]
pub struct PageMap {
    pages: Vec<u8>,
    len: u64,
}

impl PageMap {
    /// The residency of `path` now (an empty map for a missing or empty file).
    pub fn of(path: &Path) -> Result<PageMap> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(PageMap::default()),
            Err(e) => return Err(Error::io(path, None, e)),
        };
        let len = file.metadata().map_err(|e| Error::io(path, None, e))?.len();
        if len == 0 {
            return Ok(PageMap::default());
        }
        // SAFETY: a read-only shared mapping of a file we opened. Its bytes are never read
        // through the mapping (mincore only inspects page-table state), so a concurrent truncate
        // by another process cannot fault us, and the mapping is dropped before returning.
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }
            .map_err(|e| Error::io(path, None, e))?;
        let mut pages = vec![0u8; len.div_ceil(PAGE) as usize];
        // SAFETY: `map` is a live mapping of `len` bytes starting at its (page-aligned) address,
        // and `pages` has one byte per page of it, as mincore requires.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr() as *mut libc::c_void,
                len as usize,
                pages.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(Error::io(path, None, io::Error::last_os_error()));
        }
        Ok(PageMap { pages, len })
    }

    /// Drops from the page cache every page of `path` that this map does not show resident
    /// (pages past the map's end included).
    pub fn drop_others(&self, path: &Path) -> Result<()> {
        let Some(s) = open_to_drop(path)? else {
            return Ok(());
        };
        let end = self.pages.len();
        self.drop_run(&s, 0, end)?;
        // Whatever lies past the map: a length of 0 asks for everything to the end.
        s.drop_cache(end as u64 * PAGE, 0)
            .map_err(|e| Error::io(path, Some(end as u64 * PAGE), e))
    }

    /// [`PageMap::drop_others`] within the bytes `from..to` of `path` (widened to whole pages,
    /// cut at the map's end), for a reader that passes over the file in order and drops behind
    /// itself as it goes.
    pub fn drop_others_in(&self, path: &Path, from: u64, to: u64) -> Result<()> {
        match open_to_drop(path)? {
            Some(s) => self.drop_others_on(&s, from, to),
            None => Ok(()),
        }
    }

    /// [`PageMap::drop_others_in`] through `s`, a storage already open on the mapped file.
    pub fn drop_others_on(&self, s: &dyn Storage, from: u64, to: u64) -> Result<()> {
        let first = usize::try_from(from / PAGE).unwrap_or(usize::MAX);
        let last = usize::try_from(to.div_ceil(PAGE)).unwrap_or(usize::MAX);
        let (first, last) = (first.min(self.pages.len()), last.min(self.pages.len()));
        if first >= last {
            return Ok(());
        }
        self.drop_run(s, first, last)
    }

    /// Drops the pages in `first..last` that were not resident, one call per run of them.
    fn drop_run(&self, s: &dyn Storage, first: usize, last: usize) -> Result<()> {
        let drop = |from: usize, to: usize| {
            let (start, len) = (from as u64 * PAGE, (to - from) as u64 * PAGE);
            s.drop_cache(start, len)
                .map_err(|e| Error::io(s.path(), Some(start), e))
        };
        let mut run: Option<usize> = None;
        for (i, page) in self.pages[first..last].iter().enumerate() {
            match (page & 1 == 1, run) {
                (true, Some(from)) => {
                    drop(from, first + i)?;
                    run = None;
                }
                (false, None) => run = Some(first + i),
                _ => {}
            }
        }
        match run {
            Some(from) => drop(from, last),
            None => Ok(()),
        }
    }
}

/// `path` opened to drop pages of it from the page cache; `None` when it is gone.
fn open_to_drop(path: &Path) -> Result<Option<FileStorage>> {
    match FileStorage::open(path, false) {
        Ok(s) => Ok(Some(s)),
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The page size the page-cache hooks round to.
pub const PAGE: u64 = 4096;

/// The start of the page `offset` lies in.
pub(crate) fn page_floor(offset: u64) -> u64 {
    offset & !(PAGE - 1)
}

/// The whole pages that bytes `[offset, end)` touch, as (start, length): what a page-cache hint
/// must be given to reach them, since the kernel drops only pages wholly inside a hint's range.
pub(crate) fn pages_touching(offset: u64, end: u64) -> (u64, u64) {
    let start = page_floor(offset);
    (start, end.div_ceil(PAGE) * PAGE - start)
}

/// Joins `[start, end)` spans, given in order of their starts, that overlap or touch.
pub(crate) fn merge_touching(spans: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// A real file, read and written with pread/pwrite.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    path: PathBuf,
}

impl FileStorage {
    /// Opens an existing file, read-only or read-write.
    pub fn open(path: &Path, writable: bool) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, None, e))?;
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Creates a new file; fails if it exists, so nothing is ever overwritten by accident.
    pub fn create_new(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, None, e))?;
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The underlying file (for locking and mmap).
    pub fn file(&self) -> &File {
        &self.file
    }

    fn fadvise(
        &self,
        offset: u64,
        len: u64,
        advice: nix::fcntl::PosixFadviseAdvice,
    ) -> io::Result<()> {
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Ok(()); // a hint outside i64 range cannot be expressed; hints are optional
        };
        nix::fcntl::posix_fadvise(self.file.as_raw_fd(), offset, len, advice)
            .map_err(io::Error::from)
    }

    /// One `preadv2(RWF_NOWAIT)`: the bytes at `offset` that are in the page cache, up to the
    /// first page that is not (0 or `WouldBlock` when that is the first one).
    fn read_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let offset = i64::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one iovec describing `buf`, which is valid for writes of its length for the
        // duration of the call; the descriptor is open.
        let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    fn sync_range(&self, offset: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: sync_file_range takes a valid open descriptor and plain integers; it does not
        // touch user memory.
        let rc = unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset, len, flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Storage for FileStorage {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn cached_pages(&self, offset: u64, len: u64) -> io::Result<Vec<bool>> {
        let first = offset / PAGE;
        let end = (offset + len).div_ceil(PAGE);
        let pages = end.saturating_sub(first) as usize;
        if pages == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: a read-only shared mapping of a range of a file we hold open. Its bytes are
        // never read through the mapping (mincore only inspects page-table state), so a
        // concurrent truncate cannot fault us; the mapping is dropped before returning.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(first * PAGE)
                .len(pages * PAGE as usize)
                .map(&self.file)
        }?;
        let mut flags = vec![0u8; pages];
        // SAFETY: `map` is a live, page-aligned mapping of `pages` pages, and `flags` has one
        // byte per page of it, as mincore requires.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr() as *mut libc::c_void,
                pages * PAGE as usize,
                flags.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(flags.iter().map(|f| f & 1 == 1).collect())
    }

    fn read_at_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // What the cache holds already, read without waiting for the disk: preadv2(RWF_NOWAIT)
        // stops at the first page that is not cached.
        let mut cached = 0;
        while cached < buf.len() {
            match self.read_cached(&mut buf[cached..], offset + cached as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => cached += n,
            }
        }
        if cached == buf.len() {
            return Ok(cached);
        }
        let cold = offset + cached as u64;
        let done = cached + self.read_at(&mut buf[cached..], cold)?;
        // From the page the disk read started in to the end of the last page read.
        let (start, len) = pages_touching(cold, offset + done as u64);
        if len > 0 {
            self.drop_cache(start, len)?;
        }
        Ok(done)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let current = self.len()?;
        if current >= len {
            return Ok(());
        }
        let (Ok(start), Ok(extra)) = (i64::try_from(current), i64::try_from(len - current)) else {
            return Err(io::Error::other("allocation past the largest file offset"));
        };
        match nix::fcntl::fallocate(
            self.file.as_raw_fd(),
            nix::fcntl::FallocateFlags::empty(),
            start,
            extra,
        ) {
            Ok(()) => Ok(()),
            // Filesystems without fallocate still get the length; only contiguity is lost.
            Err(nix::errno::Errno::EOPNOTSUPP) => self.file.set_len(len),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_fd(&self) -> Option<std::os::unix::io::RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        let path = sibling(&self.path, suffix);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(Box::new(FileStorage { file, path }))
    }

    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        temp.sync_data()?;
        std::fs::rename(temp.path(), &self.path)?;
        sync_parent_dir(&self.path)?;
        let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        Ok(Box::new(FileStorage {
            file,
            path: self.path.clone(),
        }))
    }

    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        let path = temp.path().to_path_buf();
        drop(temp);
        std::fs::remove_file(path)
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.sync_range(offset, len, libc::SYNC_FILE_RANGE_WRITE)
    }

    fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        self.sync_range(
            offset,
            len,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )?;
        self.drop_cache(offset, len)
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.fadvise(
            offset,
            len,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
    }

    fn advise_random(&self) -> io::Result<()> {
        self.fadvise(0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM)
    }

    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.fadvise(
            offset,
            len,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED,
        )
    }

    fn advise_sequential(&self) -> io::Result<()> {
        self.fadvise(0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_SEQUENTIAL)
    }
}

/// Bytes in memory, shared between clones (a clone is another handle on the same "file").
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    bytes: Arc<Mutex<Vec<u8>>>,
    path: PathBuf,
}

impl MemStorage {
    /// An empty in-memory file that calls itself `name` in errors.
    pub fn new(name: &str) -> Self {
        MemStorage {
            bytes: Arc::default(),
            path: PathBuf::from(name),
        }
    }

    /// An in-memory file holding `bytes`.
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Self {
        MemStorage {
            bytes: Arc::new(Mutex::new(bytes)),
            path: PathBuf::from(name),
        }
    }

    /// A copy of the current bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        // A panic while holding this lock can only come from a bug in a test; the bytes are
        // still the best information there is, so poisoning is ignored.
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Storage for MemStorage {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.lock().len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let bytes = self.lock();
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= bytes.len() {
            return Ok(0);
        }
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut bytes = self.lock();
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset too large"))?;
        let end = start + buf.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[start..end].copy_from_slice(buf);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("length too large"))?;
        self.lock().resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        Ok(Box::new(MemStorage::new(&format!(
            "{}.{suffix}",
            self.path.display()
        ))))
    }

    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        let len = temp.len()?;
        let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        temp.read_at(&mut bytes, 0)?;
        *self.lock() = bytes;
        Ok(Box::new(self.clone()))
    }

    fn discard_temp(&self, _temp: Box<dyn Storage>) -> io::Result<()> {
        Ok(())
    }
}

/// The page-cache hints a [`Watched`] file was given: (what, offset, length), what being
/// `start` (start_writeback), `drop` (flush_and_drop), `synced` (drop_cache) or `need`
/// (will_need).
#[cfg(test)]
pub(crate) type HintLog = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, u64, u64)>>>;

/// A memory file for tests that logs the page-cache hints it is given, and fails every write
/// that reaches `fail_from` or past it.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub inner: MemStorage,
    pub hints: HintLog,
    pub fail_from: Option<u64>,
}

#[cfg(test)]
impl Watched {
    fn hint(&self, what: &'static str, offset: u64, len: u64) -> io::Result<()> {
        self.hints.lock().unwrap().push((what, offset, len));
        Ok(())
    }
}

#[cfg(test)]
impl Storage for Watched {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.fail_from {
            Some(from) if offset + buf.len() as u64 > from => {
                Err(io::Error::other("the disk said no"))
            }
            _ => self.inner.write_at(buf, offset),
        }
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint("start", offset, len)
    }
    fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint("drop", offset, len)
    }
    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint("synced", offset, len)
    }
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint("need", offset, len)
    }
    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        self.inner.create_temp(suffix)
    }
    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        self.inner.commit_temp(temp)
    }
    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.inner.discard_temp(temp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_spans_merge_and_apart_ones_do_not() {
        let spans = [
            (0, 4096),
            (0, 4096),
            (4096, 8192),
            (12288, 16384),
            (12288, 20480),
        ];
        assert_eq!(
            merge_touching(spans.into_iter()),
            vec![(0, 8192), (12288, 20480)]
        );
        assert_eq!(merge_touching(std::iter::empty()), vec![]);
    }

    #[test]
    fn short_read_is_corruption_not_io() {
        let s = MemStorage::from_bytes("t", vec![1, 2, 3]);
        let mut buf = [0u8; 8];
        let err = read_exact_at(&s, &mut buf, 1, "a test").unwrap_err();
        assert!(err.is_corruption(), "{err}");
        assert!(err.to_string().contains("byte 3"), "{err}");
    }

    #[test]
    fn file_storage_roundtrip_and_allocate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let s = FileStorage::create_new(&path).unwrap();
        s.write_at(b"hello", 10).unwrap();
        assert_eq!(s.len().unwrap(), 15);
        s.allocate(4096).unwrap();
        assert_eq!(s.len().unwrap(), 4096);
        let mut buf = [0u8; 5];
        read_exact_at(&s, &mut buf, 10, "x").unwrap();
        assert_eq!(&buf, b"hello");
        s.flush_and_drop(0, 4096).unwrap();
        assert!(FileStorage::create_new(&path).is_err());
    }

    #[test]
    fn an_uncached_read_keeps_what_was_cached_and_drops_what_it_brought_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let s = FileStorage::create_new(&path).unwrap();
        let bytes: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        s.write_at(&bytes, 0).unwrap();
        s.flush_and_drop(0, bytes.len() as u64).unwrap();
        s.advise_random().unwrap(); // no readahead past what is read
                                    // The first MiB is read the usual way: a working set.
        let mut hot = vec![0u8; 1 << 20];
        assert_eq!(s.read_at(&mut hot, 0).unwrap(), hot.len());
        let (before, _) = residency(&path).unwrap();
        let mut all = vec![0u8; bytes.len() + 100];
        assert_eq!(s.read_at_uncached(&mut all, 0).unwrap(), bytes.len());
        assert_eq!(&all[..bytes.len()], &bytes[..]);
        let (after, _) = residency(&path).unwrap();
        // Where the page cache does not hold written pages (tmpfs keeps everything), skip.
        if (1 << 20..2 << 20).contains(&before) {
            assert!(
                after >= 1 << 20,
                "the working set stayed: {after} bytes resident"
            );
            assert!(
                after < 2 << 20,
                "the rest was dropped: {after} bytes resident"
            );
        }
    }
}
