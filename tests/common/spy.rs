//! The real file system, with the reads and read-ahead hints of chosen files reported to the
//! test as they happen (to check them, or to act at an exact moment of a read).

use std::io;
use std::path::Path;
use std::sync::Arc;

use wink::storage::Storage;
use wink::vfs::{RealFs, Vfs, WriterLock};

/// What a watched file is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `read_at`, before it runs.
    Read,
    /// `will_need`: a read-ahead hint.
    WillNeed,
}

/// Told of every access to a watched file: what, offset, length.
pub type Watch = Arc<dyn Fn(Access, u64, u64) + Send + Sync>;

/// The real file system; the files `watched` accepts report their accesses to `watch`.
pub struct SpyVfs {
    pub watched: Box<dyn Fn(&Path) -> bool + Send + Sync>,
    pub watch: Watch,
}

impl std::fmt::Debug for SpyVfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpyVfs")
    }
}

struct SpyStorage {
    inner: Box<dyn Storage>,
    watch: Watch,
}

impl std::fmt::Debug for SpyStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpyStorage({:?})", self.inner)
    }
}

impl Storage for SpyStorage {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (self.watch)(Access::Read, offset, buf.len() as u64);
        self.inner.read_at(buf, offset)
    }
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        (self.watch)(Access::WillNeed, offset, len);
        self.inner.will_need(offset, len)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
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

impl Vfs for SpyVfs {
    fn open(&self, path: &Path, writable: bool) -> wink::Result<Box<dyn Storage>> {
        let inner = RealFs.open(path, writable)?;
        if !(self.watched)(path) {
            return Ok(inner);
        }
        let watch = self.watch.clone();
        Ok(Box::new(SpyStorage { inner, watch }))
    }
    fn create_new(&self, path: &Path) -> wink::Result<Box<dyn Storage>> {
        RealFs.create_new(path)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn remove(&self, path: &Path) -> wink::Result<()> {
        RealFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> wink::Result<()> {
        RealFs.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> wink::Result<()> {
        RealFs.sync_dir(path)
    }
    fn lock(&self, path: &Path, wait: bool) -> wink::Result<Option<WriterLock>> {
        RealFs.lock(path, wait)
    }
}
