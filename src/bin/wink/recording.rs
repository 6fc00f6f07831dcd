//! Creating several files as one step: a [`Recording`] file system remembers what it created, so
//! that a creation failing midway (`wink fs create`, `wink init`) removes exactly that — never a
//! file someone else made meanwhile.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use wink::storage::Storage;
use wink::vfs::{RealFs, Vfs, WriterLock};
use wink::Result;

/// The real file system, remembering the files and directories it created, so that an init that
/// fails midway removes exactly those.
#[derive(Debug, Default)]
pub struct Recording {
    files: Mutex<Vec<PathBuf>>,
    dirs: Mutex<Vec<PathBuf>>,
}

impl Recording {
    pub fn remove_created(&self) {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        for path in files.iter() {
            if let Err(e) = std::fs::remove_file(path) {
                eprintln!("wink: could not remove {}: {e}", path.display());
            }
        }
        let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        // Innermost first; remove_dir refuses a directory someone else put files in meanwhile.
        for path in dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(path) {
                eprintln!("wink: could not remove {}: {e}", path.display());
            }
        }
    }
}

impl Vfs for Recording {
    fn open(&self, path: &Path, writable: bool) -> Result<Box<dyn Storage>> {
        RealFs.open(path, writable)
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn Storage>> {
        let storage = RealFs.create_new(path)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.push(path.to_path_buf());
        Ok(storage)
    }

    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        RealFs.remove(path)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|p| p != path);
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        // Outermost first, so that removal can go innermost first.
        let missing: Vec<PathBuf> = path
            .ancestors()
            .filter(|p| !p.as_os_str().is_empty() && p.symlink_metadata().is_err())
            .map(Path::to_path_buf)
            .collect();
        RealFs.create_dir_all(path)?;
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.extend(missing.into_iter().rev());
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        RealFs.rename(from, to)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        for path in files.iter_mut() {
            if path == from {
                *path = to.to_path_buf();
            }
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        RealFs.sync_dir(path)
    }

    fn lock(&self, path: &Path, wait: bool) -> Result<Option<WriterLock>> {
        RealFs.lock(path, wait)
    }
}
