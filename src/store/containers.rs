//! The container set: the containers of a store's values, their files and their numbers.

use std::path::Path;

use crate::error::{Error, Result};
use crate::filesys;
use crate::vfs::Vfs;

/// The files of a filesys, data first (a container whose datafile is gone is gone).
pub(crate) const FILESYS_EXTS: [&str; 4] = ["data", "idx", "time", "jnl"];

/// Bytes of a filesys's files: the datafile up to FILESIZE (room preallocated past it is given
/// back when a container is sealed), the others whole.
pub(crate) fn filesys_bytes(vfs: &dyn Vfs, base: &Path, filesize: u64) -> Result<u64> {
    let mut total = filesize;
    for ext in &FILESYS_EXTS[1..] {
        let path = filesys::file_path(base, ext);
        if vfs.exists(&path) {
            total += vfs
                .open(&path, false)?
                .len()
                .map_err(|e| Error::io(&path, None, e))?;
        }
    }
    Ok(total)
}

/// Removes a filesys's files, the datafile first, then syncs the directory.
pub(crate) fn remove_filesys(vfs: &dyn Vfs, base: &Path) -> Result<()> {
    let mut any = None;
    for ext in FILESYS_EXTS
        .iter()
        .copied()
        // A build's perm and its merge scratch too: a build that failed or was killed leaves them.
        .chain([
            "idx.grow",
            "data.tmp",
            "idx.tmp",
            "data.creating",
            "perm",
            "perm.runs",
            "perm.sorted",
        ])
    {
        let path = filesys::file_path(base, ext);
        if vfs.exists(&path) {
            vfs.remove(&path)?;
            any = Some(path);
        }
    }
    match any {
        Some(path) => vfs.sync_dir(&path),
        None => Ok(()),
    }
}
