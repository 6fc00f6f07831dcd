//! The generation file `DIR/generation`: which compaction results the store has adopted. It is
//! the switch of a compaction (docs/INTERNALS.md § Compaction): written whole to
//! `DIR/generation.tmp`, fsynced, renamed over `DIR/generation`, and the directory fsynced. A kvseq
//! (PURPOSE `WINKGENR`, KEYREPR 0 with 1-byte prefixes, VALREPR 0 with 2-byte prefixes), one entry
//! per setting, values in ASCII:
//!
//! | key               | value                  | meaning                                          |
//! |-------------------|------------------------|--------------------------------------------------|
//! | `generation`      | decimal                | bumped by every adopted compaction step           |
//! | `archive`         | file name              | base name of the archive filesys (`archive`, or `archive.gN` after a rewrite) |
//! | `pending`         | decimal container id   | a container a compaction is building (0: none)    |
//! | `pending_archive` | file name or empty     | an archive a compaction is building               |
//! | `move`            | `N M` (decimals)       | container N was compacted into M (M = 0: dropped) and records may still point into N; repeated |
//! | `retired_archive` | file name or empty     | an archive replaced by a rewrite, to be removed   |
//! | `last_time`       | decimal seconds        | when the last compaction finished (0: never)      |
//! | `last_reclaimed`  | decimal bytes          | what it reclaimed                                 |
//! | `compactions`     | decimal                | compaction runs finished                          |
//!
//! A store without the file is at generation 0 with the archive at `archive`. A writer's open
//! finishes what the file says was under way: a `pending` container or archive no move adopted is
//! a compaction's unfinished output and is removed; a `move` is rolled forward (records pointing
//! into N are pointed into M, found by name) and N removed.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::kvseq::{KvSeq, KvSeqOptions};
use crate::format::superblock::Purpose;
use crate::vfs::Vfs;

/// PURPOSE of the generation file.
pub const PURPOSE: Purpose = Purpose(*b"WINKGENR");
/// The file's name in the store's directory.
pub const FILE: &str = "generation";
/// Base name of the archive in a store that never rewrote it.
pub const FIRST_ARCHIVE: &str = "archive";

/// The contents of the generation file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub generation: u64,
    pub archive: String,
    pub pending: u32,
    pub pending_archive: String,
    /// (from, into): records may still point into `from`; `into` 0 means dropped.
    pub moves: Vec<(u32, u32)>,
    pub retired_archive: String,
    pub last_time: i64,
    pub last_reclaimed: u64,
    pub compactions: u64,
}

impl Default for Generation {
    fn default() -> Self {
        Generation {
            generation: 0,
            archive: FIRST_ARCHIVE.to_string(),
            pending: 0,
            pending_archive: String::new(),
            moves: Vec::new(),
            retired_archive: String::new(),
            last_time: 0,
            last_reclaimed: 0,
            compactions: 0,
        }
    }
}

/// The path of the generation file of the store in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

fn valid_archive_name(name: &str) -> bool {
    name == FIRST_ARCHIVE
        || name
            .strip_prefix("archive.g")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl Generation {
    /// Reads the store's generation file; the default when there is none.
    pub fn read(vfs: &dyn Vfs, dir: &Path) -> Result<Generation> {
        let path = path(dir);
        if !vfs.exists(&path) {
            return Ok(Generation::default());
        }
        let kv = KvSeq::open(vfs.open(&path, false)?, false)?;
        if kv.superblock().purpose() != PURPOSE {
            return Err(Error::corrupt(
                &path,
                crate::format::superblock::PURPOSE_VALUE_OFFSET,
                "generation file PURPOSE",
                PURPOSE,
                kv.superblock().purpose(),
            ));
        }
        super::config::verify_settings(&kv, &path)?;
        let mut g = Generation::default();
        for entry in kv.iter_entries(kv.first(), true) {
            let e = entry?;
            let at = e.layout.ptr.0;
            let value = String::from_utf8(e.value.unwrap_or_default()).map_err(|_| {
                Error::corrupt(&path, at, "generation value", "ASCII", "other bytes")
            })?;
            let bad = |what: &str| {
                Error::corrupt(
                    &path,
                    at,
                    format!("generation {what}"),
                    "a valid value",
                    &value,
                )
            };
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad("number"));
            let id = |v: &str| v.parse::<u32>().map_err(|_| bad("container id"));
            let archive = |v: &str| {
                if v.is_empty() || valid_archive_name(v) {
                    Ok(v.to_string())
                } else {
                    Err(bad("archive name"))
                }
            };
            match e.key.as_slice() {
                b"generation" => g.generation = num(&value)?,
                b"archive" if !value.is_empty() => g.archive = archive(&value)?,
                b"pending" => g.pending = id(&value)?,
                b"pending_archive" => g.pending_archive = archive(&value)?,
                b"retired_archive" => g.retired_archive = archive(&value)?,
                b"move" => {
                    let (from, into) = value.split_once(' ').ok_or_else(|| bad("move"))?;
                    let (from, into) = (id(from)?, id(into)?);
                    if from == 0 || from == into {
                        return Err(bad("move"));
                    }
                    g.moves.push((from, into));
                }
                b"last_time" => {
                    g.last_time = value.parse::<i64>().map_err(|_| bad("time"))?;
                }
                b"last_reclaimed" => g.last_reclaimed = num(&value)?,
                b"compactions" => g.compactions = num(&value)?,
                // A later version's settings are kept out of our way, not refused.
                _ => {}
            }
        }
        Ok(g)
    }

    fn entries(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("generation", self.generation.to_string()),
            ("archive", self.archive.clone()),
            ("pending", self.pending.to_string()),
            ("pending_archive", self.pending_archive.clone()),
            ("retired_archive", self.retired_archive.clone()),
        ];
        out.extend(self.moves.iter().map(|(f, i)| ("move", format!("{f} {i}"))));
        out.extend([
            ("last_time", self.last_time.to_string()),
            ("last_reclaimed", self.last_reclaimed.to_string()),
            ("compactions", self.compactions.to_string()),
        ]);
        out
    }

    /// Replaces the store's generation file atomically: a temporary file written and fsynced,
    /// renamed over the old one, the directory fsynced.
    pub fn write(&self, vfs: &dyn Vfs, dir: &Path, opts: &KvSeqOptions) -> Result<()> {
        let tmp = dir.join(format!("{FILE}.tmp"));
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)?;
        }
        super::config::write_settings(vfs, &tmp, PURPOSE, &self.entries(), opts)?;
        vfs.rename(&tmp, &path(dir))?;
        vfs.sync_dir(&path(dir))
    }

    /// The archive base path in `dir`.
    pub fn archive_base(&self, dir: &Path) -> PathBuf {
        dir.join(&self.archive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::repr::Repr;
    use crate::vfs::RealFs;

    #[test]
    fn round_trips_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = RealFs;
        assert_eq!(
            Generation::read(&vfs, dir.path()).unwrap(),
            Generation::default()
        );
        let g = Generation {
            generation: 7,
            archive: "archive.g6".into(),
            pending: 12,
            pending_archive: "archive.g7".into(),
            moves: vec![(3, 11), (4, 0)],
            retired_archive: "archive".into(),
            last_time: 1_700_000_000,
            last_reclaimed: 123_456,
            compactions: 2,
        };
        g.write(&vfs, dir.path(), &KvSeqOptions::default()).unwrap();
        assert_eq!(Generation::read(&vfs, dir.path()).unwrap(), g);
        let next = Generation { moves: vec![], ..g };
        next.write(&vfs, dir.path(), &KvSeqOptions::default())
            .unwrap();
        assert_eq!(Generation::read(&vfs, dir.path()).unwrap(), next);
        assert!(!dir.path().join("generation.tmp").exists());
    }

    #[test]
    fn refuses_a_bad_move_and_a_bad_archive_name() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = RealFs;
        for (key, value) in [("move", "5 5"), ("move", "x"), ("archive", "../etc")] {
            let _ = std::fs::remove_file(path(dir.path()));
            let mut kv = KvSeq::create(
                vfs.create_new(&path(dir.path())).unwrap(),
                &KvSeqOptions {
                    purpose: PURPOSE,
                    keyrepr: Repr::Prefixed { width: 1 },
                    valrepr: Repr::Prefixed { width: 2 },
                    delflag: false,
                    fileincr: 0,
                    ..KvSeqOptions::default()
                },
            )
            .unwrap();
            kv.append(key.as_bytes(), value.as_bytes()).unwrap();
            kv.sync().unwrap();
            let err = Generation::read(&vfs, dir.path()).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{key} {value}: {err}");
        }
    }
}
