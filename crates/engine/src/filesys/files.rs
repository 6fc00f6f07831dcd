//! The files of a filesys, `BASE.data`, `BASE.idx`, `BASE.time` and the journal slots `BASE.jnl`
//! and `BASE.jnl2` (the table in [`super`]): where they lie, the scratch files an interrupted operation leaves beside them,
//! and the filesys as a unit of files, removed or measured whole.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::format::hindex;
use crate::storage::{self, sibling};
use crate::vfs::Vfs;

/// The suffixes of a filesys's files, the datafile first: a filesys whose datafile is gone is
/// gone, and the other files are leftovers (which a create removes).
pub const FILES: [&str; 5] = ["data", "idx", "time", "jnl", "jnl2"];

/// `BASE.ext`: the file of the filesys at `base` with suffix `ext` (one of [`FILES`]).
pub fn file_path(base: &Path, ext: &str) -> PathBuf {
    sibling(base, ext)
}

/// Where a create builds the datafile before renaming it into place (`BASE.data.creating`).
pub fn staged_datafile(base: &Path) -> PathBuf {
    sibling(&file_path(base, "data"), "creating")
}

/// The scratch files beside a filesys's files that an interrupted operation leaves: the index's
/// rebuild at a larger size (`BASE.idx.grow`), `BASE.data.tmp`, `BASE.idx.tmp` and the staged
/// datafile of a create.
pub fn scratch_files(base: &Path) -> [PathBuf; 4] {
    let (data, idx) = (file_path(base, "data"), file_path(base, "idx"));
    [
        sibling(&idx, hindex::GROW_SUFFIX),
        sibling(&data, "tmp"),
        sibling(&idx, "tmp"),
        staged_datafile(base),
    ]
}

/// Removes those of the filesys's files ([`FILES`], the datafile first) and then of `leftovers`
/// that exist. Returns the last file removed, if any, for a caller that makes the removals
/// durable ([`Vfs::sync_dir`]).
pub fn remove_files(vfs: &dyn Vfs, base: &Path, leftovers: &[PathBuf]) -> Result<Option<PathBuf>> {
    let mut removed = None;
    let files = FILES.iter().map(|ext| file_path(base, ext));
    for path in files.chain(leftovers.iter().cloned()) {
        if vfs.exists(&path) {
            vfs.remove(&path)?;
            removed = Some(path);
        }
    }
    Ok(removed)
}

/// The bytes of the filesys at `base`: `data_bytes` for the datafile when given (its FILESIZE,
/// the bytes in use, where its length counts preallocated space too), else the datafile's
/// length; and the length of each other file that exists.
pub fn files_size(vfs: &dyn Vfs, base: &Path, data_bytes: Option<u64>) -> Result<u64> {
    let (mut total, others) = match data_bytes {
        Some(bytes) => (bytes, &FILES[1..]),
        None => (0, &FILES[..]),
    };
    for ext in others {
        let path = file_path(base, ext);
        if vfs.exists(&path) {
            total += storage::length(vfs.open(&path, false)?.as_ref())?;
        }
    }
    Ok(total)
}
