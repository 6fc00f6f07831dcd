//! Where a multi-file structure (a filesys, a store) gets its files: the real file system, or a
//! simulated disk for crash tests (`SimDisk` of the crate `wink_harness`).

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::{sync_parent_dir, FileStorage, Storage};

/// Opens, creates and renames files.
pub trait Vfs: Send + Sync + std::fmt::Debug {
    /// Opens an existing file.
    fn open(&self, path: &Path, writable: bool) -> Result<Box<dyn Storage>>;
    /// Creates a file that must not exist yet.
    fn create_new(&self, path: &Path) -> Result<Box<dyn Storage>>;
    /// True when `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Removes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Creates a directory and its parents, durably (a medium without directories does nothing).
    fn create_dir_all(&self, _path: &Path) -> Result<()> {
        Ok(())
    }
    /// Atomically renames `from` over `to` and makes the rename durable.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Makes the creation of files in `path`'s directory durable.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Takes the writer lock for `path` (advisory; released when the guard drops). `None` on a
    /// medium without locks.
    fn lock(&self, path: &Path, wait: bool) -> Result<Option<WriterLock>>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl Vfs for RealFs {
    fn open(&self, path: &Path, writable: bool) -> Result<Box<dyn Storage>> {
        Ok(Box::new(FileStorage::open(path, writable)?))
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn Storage>> {
        Ok(Box::new(FileStorage::create_new(path)?))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io(path, None, e))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        // A new directory's name is durable only once its parent is fsynced (a power cut may
        // otherwise lose it, and all that was synced inside it): fsync the parent of each
        // directory this call creates.
        let mut created = Vec::new();
        let mut at = path;
        while !at.exists() {
            created.push(at);
            match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => break,
            }
        }
        std::fs::create_dir_all(path).map_err(|e| Error::io(path, None, e))?;
        for dir in created {
            sync_parent_dir(dir).map_err(|e| Error::io(dir, None, e))?;
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io(to, None, e))?;
        sync_parent_dir(to).map_err(|e| Error::io(to, None, e))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        sync_parent_dir(path).map_err(|e| Error::io(path, None, e))
    }

    fn lock(&self, path: &Path, wait: bool) -> Result<Option<WriterLock>> {
        WriterLock::acquire(path, wait).map(Some)
    }
}

/// Retries of a lock found held, and the pause between them: 100 ms in all.
const LOCK_RETRIES: u32 = 20;
const LOCK_RETRY_MS: u64 = 5;

/// An exclusive advisory lock (flock) on a file, held until dropped.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
}

impl WriterLock {
    /// Locks `path` exclusively. Without `wait`, a lock held elsewhere is [`Error::InUse`].
    pub fn acquire(path: &Path, wait: bool) -> Result<WriterLock> {
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|e| Error::io(path, None, e))?;
        let mut op = libc::LOCK_EX;
        if !wait {
            op |= libc::LOCK_NB;
        }
        // A lock this process gave up a moment ago may still be held by a child forked in
        // between (the descriptor lives on in the child until its exec): a few short retries
        // tell that apart from another writer, which holds its lock for as long as it runs.
        let mut retries = LOCK_RETRIES;
        loop {
            // SAFETY: flock takes a valid open descriptor and an operation code; no memory is
            // shared with the kernel.
            let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
            if rc == 0 {
                return Ok(WriterLock { _file: file });
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) if retries > 0 => {
                    retries -= 1;
                    std::thread::sleep(std::time::Duration::from_millis(LOCK_RETRY_MS));
                }
                Some(libc::EWOULDBLOCK) => {
                    return Err(Error::InUse {
                        path: path.to_path_buf(),
                    })
                }
                _ => return Err(Error::io(path, None, err)),
            }
        }
    }
}
