//! A simulated disk for power-loss tests: every file has a live image (what reads see) and a
//! durable image (what survives a power cut), and the writes since the last sync in between.
//!
//! [`SimDisk::crash`] cuts the power: with [`CrashMode::DropUnsynced`] the unsynced writes are
//! lost; with [`CrashMode::Reorder`] a random subset of them reaches the disk, in random order,
//! each possibly torn at a 512-byte sector boundary — what a real disk with a volatile cache may
//! do. [`SimDisk::fail_after_syncs`] makes the N-th sync and everything after it fail, to cut the
//! power in the middle of a multi-step commit; [`SimDisk::fail_after_writes`] cuts it before
//! the N-th write instead, and [`SimDisk::fork`] copies a disk, so that a test can cut one
//! operation at each of its writes and syncs in turn. [`SimDisk::set_capacity`] makes it a small disk:
//! writes that would grow it past its capacity fail with ENOSPC.
//! [`SimDisk::lose_writeback_at_sync`] fails one sync the way Linux does after a writeback error:
//! once, forgetting what it was to make durable, the next sync succeeding without it;
//! [`SimDisk::fail_write_once`] fails one write with EIO, the disk going on.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use wink_engine::storage::Storage;
use wink_engine::vfs::{Vfs, WriterLock};
use wink_engine::{Error, Result};

const SECTOR: usize = 512;

#[derive(Clone, Debug)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct SimFile {
    live: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<Op>,
    /// A failed sync dropped writes the live image keeps: the images may differ in length.
    lost: bool,
}

#[derive(Clone, Debug, Default)]
struct State {
    files: HashMap<PathBuf, SimFile>,
    syncs: u64,
    fail_at: Option<u64>,
    /// The sync that fails once, losing its file's unsynced writes
    /// ([`SimDisk::lose_writeback_at_sync`]).
    lose_at: Option<u64>,
    writes: u64,
    fail_writes_at: Option<u64>,
    /// The write that fails once, writing nothing ([`SimDisk::fail_write_once`]).
    fail_write_once_at: Option<u64>,
    failed: bool,
    /// Bytes the files' live images may hold together (`None`: no limit).
    capacity: Option<u64>,
}

impl State {
    /// Bytes the files may still grow by.
    fn room(&self) -> u64 {
        let used: u64 = self.files.values().map(|f| f.live.len() as u64).sum();
        self.capacity.map_or(u64::MAX, |c| c.saturating_sub(used))
    }
}

/// How a power cut treats unsynced writes.
#[derive(Clone, Copy, Debug)]
pub enum CrashMode {
    /// All unsynced writes are lost.
    DropUnsynced,
    /// A random subset survives, in random order, possibly torn at sector boundaries.
    Reorder {
        /// Picks which writes survive, their order and where they tear.
        seed: u64,
    },
}

/// Where a power cut falls in an operation: just before its `n`-th write, or at its `n`-th sync
/// (1-based, counted from when it is armed), of the `of` the whole operation makes.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// The `n`-th write and everything after it fail.
    Write {
        /// Which write.
        n: u64,
        /// The writes of the whole operation.
        of: u64,
    },
    /// The `n`-th sync and everything after it fail.
    Sync {
        /// Which sync.
        n: u64,
        /// The syncs of the whole operation.
        of: u64,
    },
}

impl Cut {
    /// Every cut of an operation that made `writes` writes and `syncs` syncs: before each write,
    /// at each sync, and once past the last of each (the operation whole).
    pub fn every(writes: u64, syncs: u64) -> impl Iterator<Item = Cut> {
        let at_writes = (1..=writes + 1).map(move |n| Cut::Write { n, of: writes });
        at_writes.chain((1..=syncs + 1).map(move |n| Cut::Sync { n, of: syncs }))
    }

    /// Makes `disk` fail there (counting from now).
    pub fn arm(self, disk: &SimDisk) {
        match self {
            Cut::Write { n, .. } => disk.fail_after_writes(n),
            Cut::Sync { n, .. } => disk.fail_after_syncs(n),
        }
    }

    /// The `n` of the cut: a seed that differs from one cut to the next of the same kind.
    pub fn n(self) -> u64 {
        match self {
            Cut::Write { n, .. } | Cut::Sync { n, .. } => n,
        }
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Write { n, of } => write!(f, "write {n} of {of}"),
            Cut::Sync { n, of } => write!(f, "sync {n} of {of}"),
        }
    }
}

/// A simulated disk holding files by path.
#[derive(Clone, Debug, Default)]
pub struct SimDisk(Arc<Mutex<State>>);

impl SimDisk {
    /// An empty disk.
    pub fn new() -> Self {
        SimDisk::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From the `n`-th sync on (counting from now, 1-based), syncs and writes fail: the power is
    /// going out.
    pub fn fail_after_syncs(&self, n: u64) {
        let mut s = self.state();
        s.fail_at = Some(s.syncs + n);
    }

    /// The `n`-th sync (counting from now, 1-based) fails once with EIO, as Linux's fdatasync
    /// after a writeback error: the file's unsynced writes are dropped from what a later sync or
    /// a power cut makes durable (reads still see them: the kernel keeps the pages, marked
    /// clean, until they are dropped from the cache: `drop_cache`), and later syncs succeed.
    pub fn lose_writeback_at_sync(&self, n: u64) {
        let mut s = self.state();
        s.lose_at = Some(s.syncs + n);
    }

    /// From the `n`-th write on (counting from now, 1-based; `set_len` counts as a write), writes
    /// and syncs fail, and that write does not happen: the power went out just before it.
    pub fn fail_after_writes(&self, n: u64) {
        let mut s = self.state();
        s.fail_writes_at = Some(s.writes + n);
    }

    /// The `n`-th write from now (1-based; `set_len` counts as a write) fails once with EIO and
    /// writes nothing; the disk goes on working.
    pub fn fail_write_once(&self, n: u64) {
        let mut s = self.state();
        s.fail_write_once_at = Some(s.writes + n);
    }

    /// Writes (and `set_len`s) made so far.
    pub fn writes(&self) -> u64 {
        self.state().writes
    }

    /// An independent copy of the disk as it is now: live and durable images, unsynced writes.
    pub fn fork(&self) -> SimDisk {
        SimDisk(Arc::new(Mutex::new(self.state().clone())))
    }

    /// Makes the disk hold at most `bytes` (the files' lengths together; `u64::MAX`: no limit).
    /// A write that would grow it past that writes the bytes that fit and fails with ENOSPC, like
    /// a short write on a full file system; a `set_len` that would (it stands for fallocate here)
    /// fails whole. Lowering the capacity below what is used removes nothing.
    pub fn set_capacity(&self, bytes: u64) {
        self.state().capacity = (bytes != u64::MAX).then_some(bytes);
    }

    /// Bytes in use: the files' lengths together.
    pub fn used(&self) -> u64 {
        let s = self.state();
        s.files.values().map(|f| f.live.len() as u64).sum()
    }

    /// Syncs completed so far.
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// Cuts the power; afterwards every file holds what survived, and I/O works again.
    pub fn crash(&self, mode: CrashMode) {
        let mut s = self.state();
        let mut rng = match mode {
            CrashMode::DropUnsynced => None,
            CrashMode::Reorder { seed } => Some(Rng(seed | 1)),
        };
        let mut names: Vec<PathBuf> = s.files.keys().cloned().collect();
        names.sort();
        for name in names {
            let f = s.files.get_mut(&name).expect("listed name");
            let mut ops = std::mem::take(&mut f.unsynced);
            if let Some(rng) = rng.as_mut() {
                shuffle(&mut ops, rng);
                for op in ops {
                    if rng.next() % 2 == 0 {
                        continue;
                    }
                    match op {
                        Op::SetLen(len) => f.durable.resize(len as usize, 0),
                        Op::Write(offset, bytes) => write_torn(&mut f.durable, offset, &bytes, rng),
                    }
                }
            }
            f.live = f.durable.clone();
            f.lost = false;
        }
        s.fail_at = None;
        s.lose_at = None;
        s.fail_write_once_at = None;
        s.fail_writes_at = None;
        s.failed = false;
    }

    /// The live bytes of a file.
    pub fn bytes(&self, path: &Path) -> Option<Vec<u8>> {
        self.state().files.get(path).map(|f| f.live.clone())
    }

    /// Every file's path.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.state().files.keys().cloned().collect()
    }

    fn storage(&self, path: &Path) -> Box<dyn Storage> {
        Box::new(SimStorage {
            disk: self.clone(),
            path: path.to_path_buf(),
        })
    }
}

/// Writes `bytes` at `offset`, extending with zeros like a file.
fn write_at_vec(file: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[offset as usize..end].copy_from_slice(bytes);
}

fn write_torn(durable: &mut Vec<u8>, offset: u64, bytes: &[u8], rng: &mut Rng) {
    let start = offset as usize;
    // Sectors of the write reach the disk independently.
    let mut at = 0;
    while at < bytes.len() {
        let sector_end = ((start + at) / SECTOR + 1) * SECTOR - start;
        let end = sector_end.min(bytes.len());
        if rng.next() % 4 != 0 {
            if durable.len() < start + end {
                durable.resize(start + end, 0);
            }
            durable[start + at..start + end].copy_from_slice(&bytes[at..end]);
        }
        at = end;
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// xorshift64: enough randomness for crash shapes, reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One file on a [`SimDisk`].
#[derive(Debug)]
pub struct SimStorage {
    disk: SimDisk,
    path: PathBuf,
}

fn power_out() -> io::Error {
    io::Error::other("simulated power loss")
}

fn no_space() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl SimStorage {
    /// Counts a write; the one at which the power goes fails, and every later one.
    fn count_write(&self) -> io::Result<()> {
        let mut s = self.disk.state();
        if s.failed {
            return Err(power_out());
        }
        s.writes += 1;
        if s.fail_writes_at.is_some_and(|n| s.writes >= n) {
            s.failed = true;
            return Err(power_out());
        }
        if s.fail_write_once_at == Some(s.writes) {
            s.fail_write_once_at = None;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    fn with_file<T>(&self, f: impl FnOnce(&mut SimFile) -> T) -> io::Result<T> {
        let mut s = self.disk.state();
        if s.failed {
            return Err(power_out());
        }
        let file = s
            .files
            .get_mut(&self.path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(f(file))
    }
}

impl Storage for SimStorage {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.disk.state();
        Ok(s.files.get(&self.path).map_or(0, |f| f.live.len() as u64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let s = self.disk.state();
        let f = s
            .files
            .get(&self.path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let start = (offset as usize).min(f.live.len());
        let n = buf.len().min(f.live.len() - start);
        buf[..n].copy_from_slice(&f.live[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.count_write()?;
        let room = self.disk.state().room();
        let fits = self.with_file(|f| {
            let limit = (f.live.len() as u64).saturating_add(room);
            let fits = if offset.saturating_add(buf.len() as u64) <= limit {
                buf.len()
            } else {
                // `limit` is below offset + buf.len() here, so this is less than buf.len().
                limit.saturating_sub(offset) as usize
            };
            if fits > 0 {
                write_at_vec(&mut f.live, offset, &buf[..fits]);
                f.unsynced.push(Op::Write(offset, buf[..fits].to_vec()));
            }
            fits
        })?;
        if fits < buf.len() {
            return Err(no_space());
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.count_write()?;
        let room = self.disk.state().room();
        self.with_file(|f| {
            if len.saturating_sub(f.live.len() as u64) > room {
                return Err(no_space());
            }
            f.live.resize(len as usize, 0);
            f.unsynced.push(Op::SetLen(len));
            Ok(())
        })?
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.disk.state();
        if s.failed {
            return Err(power_out());
        }
        s.syncs += 1;
        if s.fail_at.is_some_and(|n| s.syncs >= n) {
            s.failed = true;
            return Err(power_out());
        }
        let lose = s.lose_at == Some(s.syncs);
        if lose {
            s.lose_at = None;
        }
        let f = s
            .files
            .get_mut(&self.path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if lose {
            f.unsynced.clear();
            f.lost = true;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        // The live image is the durable one with the unsynced writes applied in order: replaying
        // them costs what they wrote, where copying the live image costs the whole (preallocated)
        // file at every sync.
        for op in std::mem::take(&mut f.unsynced) {
            match op {
                Op::SetLen(len) => f.durable.resize(len as usize, 0),
                Op::Write(offset, bytes) => write_at_vec(&mut f.durable, offset, &bytes),
            }
        }
        debug_assert!(f.lost || f.durable.len() == f.live.len());
        Ok(())
    }

    /// The pages a lost writeback left in the page cache are clean there, and dropped: reads
    /// then see the durable image with the writes not synced yet (the whole file's, whatever
    /// the range: the engine drops a failed writer's files whole).
    fn drop_cache(&self, _offset: u64, _len: u64) -> io::Result<()> {
        let mut s = self.disk.state();
        if let Some(f) = s.files.get_mut(&self.path).filter(|f| f.lost) {
            let mut live = f.durable.clone();
            for op in &f.unsynced {
                match op {
                    Op::SetLen(len) => live.resize(*len as usize, 0),
                    Op::Write(offset, bytes) => write_at_vec(&mut live, *offset, bytes),
                }
            }
            f.live = live;
            f.lost = false;
        }
        Ok(())
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        let path = wink_engine::storage::sibling(&self.path, suffix);
        let mut s = self.disk.state();
        if s.failed {
            return Err(power_out());
        }
        s.files.insert(path.clone(), SimFile::default());
        drop(s);
        Ok(self.disk.storage(&path))
    }

    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        temp.sync_data()?;
        let mut s = self.disk.state();
        let file = s
            .files
            .remove(temp.path())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.files.insert(self.path.clone(), file);
        drop(s);
        Ok(self.disk.storage(&self.path))
    }

    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.disk.state().files.remove(temp.path());
        Ok(())
    }
}

impl Vfs for SimDisk {
    fn open(&self, path: &Path, _writable: bool) -> Result<Box<dyn Storage>> {
        if !self.exists(path) {
            return Err(Error::io(
                path,
                None,
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        Ok(self.storage(path))
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn Storage>> {
        let mut s = self.state();
        if s.failed {
            return Err(Error::io(path, None, power_out()));
        }
        if s.files.contains_key(path) {
            return Err(Error::io(
                path,
                None,
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        // Creation is durable at once here: directory entries are not what these tests probe.
        s.files.insert(path.to_path_buf(), SimFile::default());
        drop(s);
        Ok(self.storage(path))
    }

    fn exists(&self, path: &Path) -> bool {
        self.state().files.contains_key(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.state().files.remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.state();
        let mut file = s
            .files
            .remove(from)
            .ok_or_else(|| Error::io(from, None, io::Error::from(io::ErrorKind::NotFound)))?;
        // A rename after fsync of the source is durable with its synced content.
        file.live = file.durable.clone();
        file.unsynced.clear();
        s.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn sync_dir(&self, _path: &Path) -> Result<()> {
        Ok(())
    }

    fn lock(&self, _path: &Path, _wait: bool) -> Result<Option<WriterLock>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_and_reorder() {
        let disk = SimDisk::new();
        let f = disk.create_new(Path::new("a")).unwrap();
        f.write_at(b"synced", 0).unwrap();
        f.sync_data().unwrap();
        f.write_at(b"XXXXXX", 0).unwrap();
        disk.crash(CrashMode::DropUnsynced);
        assert_eq!(disk.bytes(Path::new("a")).unwrap(), b"synced");
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            f.write_at(b"XXXXXX", 0).unwrap();
            disk.crash(CrashMode::Reorder { seed });
            seen.insert(disk.bytes(Path::new("a")).unwrap());
            f.write_at(b"synced", 0).unwrap();
            f.sync_data().unwrap();
        }
        assert!(seen.contains(&b"synced"[..]) && seen.contains(&b"XXXXXX"[..]));
    }

    #[test]
    fn capacity_limits_growth_not_rewrites() {
        let disk = SimDisk::new();
        let a = disk.create_new(Path::new("a")).unwrap();
        let b = disk.create_new(Path::new("b")).unwrap();
        a.write_at(&[1; 60], 0).unwrap();
        disk.set_capacity(100);
        let err = b.write_at(&[2; 50], 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(
            disk.bytes(Path::new("b")).unwrap(),
            [2; 40],
            "what fits is written"
        );
        assert_eq!(disk.used(), 100);
        a.write_at(&[3; 60], 0).unwrap(); // in place: no growth
        assert_eq!(
            a.set_len(61).unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(
            disk.bytes(Path::new("a")).unwrap().len(),
            60,
            "a failed set_len changes nothing"
        );
        b.set_len(10).unwrap();
        a.set_len(90).unwrap();
        disk.set_capacity(u64::MAX);
        b.write_at(&[4; 1000], 0).unwrap();
        assert_eq!(disk.used(), 1090);
    }

    #[test]
    fn a_write_that_fails_once_writes_nothing() {
        let disk = SimDisk::new();
        let f = disk.create_new(Path::new("a")).unwrap();
        disk.fail_write_once(2);
        f.write_at(b"one", 0).unwrap();
        let err = f.write_at(b"two", 3).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        f.write_at(b"three", 3).unwrap();
        f.sync_data().unwrap();
        assert_eq!(disk.bytes(Path::new("a")).unwrap(), b"onethree");
    }

    #[test]
    fn failing_syncs() {
        let disk = SimDisk::new();
        let f = disk.create_new(Path::new("a")).unwrap();
        disk.fail_after_syncs(2);
        f.sync_data().unwrap();
        assert!(f.sync_data().is_err());
        assert!(f.write_at(b"x", 0).is_err());
        disk.crash(CrashMode::DropUnsynced);
        f.write_at(b"x", 0).unwrap();
    }

    #[test]
    fn a_lost_writeback_fails_one_sync_and_the_next_succeeds_without_it() {
        let disk = SimDisk::new();
        let (a, b) = (Path::new("a"), Path::new("b"));
        let fa = disk.create_new(a).unwrap();
        let fb = disk.create_new(b).unwrap();
        fa.write_at(b"synced", 0).unwrap();
        fa.sync_data().unwrap();
        fa.write_at(b"LOST", 0).unwrap();
        fa.write_at(b"-grown", 6).unwrap();
        fb.write_at(b"other", 0).unwrap();
        disk.lose_writeback_at_sync(2);
        fb.sync_data().unwrap();
        let err = fa.sync_data().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        // Reads still see the lost writes; writes and syncs go on working.
        assert_eq!(disk.bytes(a).unwrap(), b"LOSTed-grown");
        fa.write_at(b"kept", 12).unwrap();
        fa.sync_data().unwrap();
        fa.sync_data().unwrap();
        disk.crash(CrashMode::DropUnsynced);
        // What the failed sync was to make durable never was: the later sync wrote only its own.
        assert_eq!(disk.bytes(a).unwrap(), b"synced\0\0\0\0\0\0kept");
        assert_eq!(disk.bytes(b).unwrap(), b"other");
        // Once only: a power cut does not re-arm it.
        fa.write_at(b"again", 0).unwrap();
        fa.sync_data().unwrap();
        // Dropped from the cache, the lost pages read as the disk holds them; unsynced writes
        // made since stay.
        fa.write_at(b"lost", 0).unwrap();
        disk.lose_writeback_at_sync(1);
        fa.sync_data().unwrap_err();
        fa.write_at(b"dirty", 20).unwrap();
        assert_eq!(&disk.bytes(a).unwrap()[..4], b"lost");
        fa.drop_cache(0, 0).unwrap();
        assert_eq!(&disk.bytes(a).unwrap()[..5], b"again");
        assert_eq!(&disk.bytes(a).unwrap()[20..], b"dirty");
    }
}
