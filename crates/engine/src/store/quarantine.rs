//! Quarantine: damaged values copied aside and named, never truncated away. This is the read
//! side (the entries, and a read of a quarantined value naming its entry); the scrub writes the
//! entries ([`crate::maintenance::quarantine`]).
//!
//! A value whose bytes no longer match their CRC-32 (or cannot be read whole) in the middle of a
//! container cannot be repaired from the store itself. `wink scrub --quarantine` copies what it
//! finds there into `DIR/quarantine/`, one entry per damaged value, named by the value's place
//! (container numbers are never reused, so the place names one value for good):
//!
//! | file                     | holds                                                        |
//! |--------------------------|--------------------------------------------------------------|
//! | `cNNNNNN-OFFSET.bin`     | the value's bytes exactly as found (fewer when the file ends) |
//! | `cNNNNNN-OFFSET.json`    | its [`Entry`]: where, expected and found CRC-32, which render |
//!
//! Both are written to a temporary name, synced and renamed, the description last: an entry
//! exists when its description does. Nothing of the store changes: the container keeps the
//! damaged bytes and the title record still names them, so nothing is lost that a later repair
//! (a snapshot's copy, a new put of the render) could need. What changes is how the damage is
//! reported: a read of a quarantined value fails with [`Error::Damaged`] naming the entry (exit
//! 3), `wink ls` marks the render, `wink stat` counts the entries, and `wink check` warns for
//! each render a title record still names in quarantine (so `--strict` fails). Compaction keeps
//! a container whose values it cannot read whole.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::storage::sibling;

use super::record::Location;
use super::Store;

/// The directory under the store's.
pub const DIR_NAME: &str = "quarantine";
/// The `format` field of every description this version writes.
pub const FORMAT: &str = "wink-quarantine-1";
/// A description larger than this is not one this version wrote.
const MAX_DESCRIPTION: u64 = 64 << 10;

/// One quarantined value, as its description (`cNNNNNN-OFFSET.json`) holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// [`FORMAT`].
    pub format: String,
    /// The render's domain.
    pub domain: String,
    /// The render's title.
    pub title: String,
    /// The render's revision.
    pub rev: u64,
    /// The render's tid, as text (see [`Entry::tid`]).
    pub tid: String,
    /// The container and its datafile (as the scrub found it).
    pub container: u32,
    /// The datafile's path when the scrub found the damage.
    pub file: PathBuf,
    /// The value's byte offset in the datafile, and its length by the title record.
    pub offset: u64,
    /// The value's length, bytes, by the title record.
    pub length: u64,
    /// CRC-32 by the title record, and of the bytes found (`None` when fewer than `length`
    /// bytes could be read), as `0x%08x`.
    pub expected_crc32: String,
    /// CRC-32 of the bytes found (`None`: fewer than `length` could be read), as `0x%08x`.
    pub found_crc32: Option<String>,
    /// Bytes copied to `cNNNNNN-OFFSET.bin`.
    pub saved_bytes: u64,
    /// What the scrub found wrong.
    pub what: String,
    /// When (seconds since the epoch, by the store's clock).
    pub quarantined_at: i64,
}

impl Entry {
    /// The render's tid, when the description holds a valid one.
    pub fn tid(&self) -> Option<Uuid> {
        Uuid::parse_str(&self.tid).ok()
    }
}

/// `DIR/quarantine`.
pub fn dir_of(store_dir: &Path) -> PathBuf {
    store_dir.join(DIR_NAME)
}

/// The entry of the value at `offset` in container `container`, without extension.
fn entry_base(store_dir: &Path, container: u32, offset: u64) -> PathBuf {
    dir_of(store_dir).join(format!("c{container:06}-{offset}"))
}

/// The description of the value at `offset` in container `container`.
pub fn description_path(store_dir: &Path, container: u32, offset: u64) -> PathBuf {
    sibling(&entry_base(store_dir, container, offset), "json")
}

/// The copied bytes of the value at `offset` in container `container`.
pub fn bytes_path(store_dir: &Path, container: u32, offset: u64) -> PathBuf {
    sibling(&entry_base(store_dir, container, offset), "bin")
}

impl Store {
    /// The error a read of the value at `loc` gives when it failed with `e`: [`Error::Damaged`]
    /// when the value is in quarantine (looked up only after a failure: reads of intact values
    /// pay nothing for it).
    pub(super) fn damaged_or(&self, loc: &Location, e: Error) -> Error {
        let description = description_path(&self.dir, loc.container, loc.offset);
        if !self.vfs.exists(&description) {
            return e;
        }
        let path = match &e {
            Error::Corrupt { path, .. } | Error::Io { path, .. } => path.clone(),
            _ => {
                crate::filesys::file_path(&super::container_base(&self.dir, loc.container), "data")
            }
        };
        Error::Damaged {
            path,
            offset: loc.offset,
            quarantine: description,
        }
    }

    /// Every quarantine entry, in name order (read from the real file system's directory).
    pub fn quarantined(&self) -> Result<Vec<Entry>> {
        read_entries(&dir_of(&self.dir))
    }

    /// The quarantine entries of one title.
    pub fn quarantined_title(&self, domain: &str, title: &str) -> Result<Vec<Entry>> {
        let mut all = self.quarantined()?;
        all.retain(|e| e.domain == domain && e.title == title);
        Ok(all)
    }
}

/// The descriptions in `dir` (none when it does not exist).
pub fn read_entries(dir: &Path) -> Result<Vec<Entry>> {
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, None, e)),
    };
    let mut paths = Vec::new();
    for item in listing {
        let path = item.map_err(|e| Error::io(dir, None, e))?.path();
        if path.extension().is_some_and(|x| x == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    paths.iter().map(|p| read_entry(p)).collect()
}

/// One description, checked to be of this format.
pub fn read_entry(path: &Path) -> Result<Entry> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, None, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, None, e))?;
    // Not a regular file (a FIFO, a device) is read no further than its limit either.
    let len = if meta.is_file() { meta.len() } else { 0 };
    if len > MAX_DESCRIPTION {
        return Err(Error::corrupt(
            path,
            0,
            "quarantine description size",
            format!("at most {MAX_DESCRIPTION} bytes"),
            len,
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DESCRIPTION + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, None, e))?;
    if bytes.len() as u64 > MAX_DESCRIPTION {
        return Err(Error::corrupt(
            path,
            0,
            "quarantine description size",
            format!("at most {MAX_DESCRIPTION} bytes"),
            format!("more than {MAX_DESCRIPTION}"),
        ));
    }
    let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| {
        Error::corrupt(
            path,
            0,
            "quarantine description",
            format!("a {FORMAT} JSON object"),
            e,
        )
    })?;
    if entry.format != FORMAT {
        return Err(Error::unsupported(
            path,
            0,
            format!("quarantine description format {:?}", entry.format),
        ));
    }
    Ok(entry)
}
