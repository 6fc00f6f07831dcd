//! Quarantine, the writing side: a damaged value's bytes copied aside into `DIR/quarantine/` and
//! described, for `wink scrub --quarantine`. The entries' layout, and how reads and checks report
//! them, are [`crate::store::quarantine`].

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::storage::{self, sibling, write_all_at, Storage};
use crate::store::quarantine::{bytes_path, description_path, dir_of, Entry, FORMAT};
use crate::store::record::Location;
use crate::store::Store;

/// A damaged value to quarantine.
pub(super) struct Damaged<'a> {
    pub name: (&'a str, &'a str),
    pub rev: u64,
    pub tid: Uuid,
    pub loc: &'a Location,
    pub what: &'a str,
}

/// Up to `len` bytes at `offset`, fewer where the file ends.
fn read_available(s: &dyn Storage, offset: u64, len: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut got = 0usize;
    while got < buf.len() {
        let n = s
            .read_at(&mut buf[got..], offset + got as u64)
            .map_err(|e| Error::io(s.path(), Some(offset + got as u64), e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// Copies a damaged value's bytes from `container` (its datafile, opened) and writes its
/// description; returns the description's path. An entry that exists already is kept as it
/// is (the first copy is the one closest to the damage as it happened).
pub(super) fn quarantine_value(
    store: &Store,
    container: &dyn Storage,
    d: &Damaged<'_>,
) -> Result<PathBuf> {
    let description = description_path(store.dir(), d.loc.container, d.loc.offset);
    if store.vfs().exists(&description) {
        return Ok(description);
    }
    // The length comes from a record; nothing larger than the store accepts is copied.
    let bytes = if d.loc.len <= store.config().max_value {
        read_available(container, d.loc.offset, d.loc.len)?
    } else {
        Vec::new()
    };
    let whole = bytes.len() as u64 == d.loc.len;
    let entry = Entry {
        format: FORMAT.to_string(),
        domain: d.name.0.to_string(),
        title: d.name.1.to_string(),
        rev: d.rev,
        tid: d.tid.to_string(),
        container: d.loc.container,
        file: container.path().to_path_buf(),
        offset: d.loc.offset,
        length: d.loc.len,
        expected_crc32: format!("0x{:08x}", d.loc.crc),
        found_crc32: whole.then(|| format!("0x{:08x}", crc32fast::hash(&bytes))),
        saved_bytes: bytes.len() as u64,
        what: d.what.to_string(),
        quarantined_at: store.now(),
    };
    let json = serde_json::to_vec_pretty(&entry)
        .map_err(|e| Error::invalid(format!("a quarantine description: {e}")))?;
    store.vfs().create_dir_all(&dir_of(store.dir()))?;
    write_whole(
        store,
        &bytes_path(store.dir(), d.loc.container, d.loc.offset),
        &bytes,
    )?;
    write_whole(store, &description, &json)?;
    Ok(description)
}

/// Writes `bytes` as the file `path`: a temporary file, synced, renamed over it.
fn write_whole(store: &Store, path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = sibling(path, "tmp");
    if store.vfs().exists(&temp) {
        store.vfs().remove(&temp)?;
    }
    let file = store.vfs().create_new(&temp)?;
    write_all_at(file.as_ref(), bytes, 0)?;
    storage::sync(file.as_ref())?;
    drop(file);
    store.vfs().rename(&temp, path)
}
