//! Snapshot: a consistent copy of a live store in a new directory, which opens as a store on its
//! own — the way to back a node up, or to move its data to another one as whole files.
//!
//! The snapshot is taken through a writer's handle, so the store's writer lock is held throughout
//! and nothing changes underneath it. It commits first; then every file of the store is a committed
//! state. Sealed containers (all but the current one, CURCONT in the meta datafile) never change
//! again, so they are hard-linked when the destination is on the same file system (copied
//! otherwise); everything else — the meta filesys, the current container, the archive — is copied
//! whole, byte for byte. Every file is fsynced, then the directory. The configuration file is
//! written last: until it is there, the destination holds no store (as with `init`).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::filesys;
use crate::storage::{FileStorage, Storage};
use crate::store::containers::container_base;
use crate::store::{generation, meta_base, Store};

/// What a snapshot wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Files hard-linked, and their bytes.
    pub linked: u64,
    /// Bytes of the files hard-linked.
    pub linked_bytes: u64,
    /// Files copied, and their bytes.
    pub copied: u64,
    /// Bytes of the files copied.
    pub copied_bytes: u64,
}

/// Copies the store to `dest`, a directory that must not exist yet (its parent must). Needs
/// the writer's handle; commits first. On failure `dest` may hold a partial copy without a
/// configuration file, which opens as no store.
pub fn snapshot(store: &mut Store, dest: &Path) -> Result<SnapshotReport> {
    store.writer()?;
    store.commit()?;
    fs::create_dir(dest).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => {
            Error::invalid(format!("{}: already exists", dest.display()))
        }
        _ => Error::io(dest, None, e),
    })?;
    let mut report = SnapshotReport::default();
    let current = store.current_container()?;
    for id in store.container_ids()? {
        let sealed = id != current;
        for src in existing(&container_base(store.dir(), id)) {
            place(&src, dest, sealed, &mut report)?;
        }
    }
    let mut bases = vec![meta_base(store.dir())];
    if store.archive().is_some() {
        bases.push(store.archive_base().to_path_buf());
    }
    for base in bases {
        for src in existing(&base) {
            place(&src, dest, false, &mut report)?;
        }
    }
    let generation = generation::path(store.dir());
    if generation.exists() {
        place(&generation, dest, false, &mut report)?;
    }
    place(&store.dir().join("store"), dest, false, &mut report)?;
    sync_dir(dest)?;
    // The new directory's entry in its parent.
    crate::storage::sync_parent_dir(dest).map_err(|e| Error::io(dest, None, e))?;
    Ok(report)
}

/// The files of the filesys at `base` that exist.
fn existing(base: &Path) -> Vec<PathBuf> {
    filesys::FILES
        .iter()
        .map(|ext| filesys::file_path(base, ext))
        .filter(|p| p.exists())
        .collect()
}

/// Puts `src` into `dest` under its own name: a hard link when `link` and the file system allows
/// it, else a durable byte copy.
fn place(src: &Path, dest: &Path, link: bool, report: &mut SnapshotReport) -> Result<()> {
    let name = src
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: no file name", src.display())))?;
    let to = dest.join(name);
    if link && fs::hard_link(src, &to).is_ok() {
        report.linked += 1;
        report.linked_bytes += fs::metadata(&to)
            .map_err(|e| Error::io(&to, None, e))?
            .len();
        return Ok(());
    }
    report.copied += 1;
    report.copied_bytes += copy_durably(src, &to)?;
    Ok(())
}

/// Copies `src` to the new file `to` whole, fsyncs it, and drops both from the page cache (a
/// snapshot's bytes are not going to be read soon, and must not evict the node's hot data).
fn copy_durably(src: &Path, to: &Path) -> Result<u64> {
    let mut input = File::open(src).map_err(|e| Error::io(src, None, e))?;
    let mut output = File::options()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|e| Error::io(to, None, e))?;
    let bytes = io::copy(&mut input, &mut output).map_err(|e| Error::io(to, None, e))?;
    output.sync_all().map_err(|e| Error::io(to, None, e))?;
    drop((input, output));
    for path in [src, to] {
        if let Ok(s) = FileStorage::open(path, false) {
            let _ = s.drop_cache(0, bytes);
        }
    }
    Ok(bytes)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, None, e))
}
