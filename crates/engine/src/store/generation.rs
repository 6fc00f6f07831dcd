//! The generation file `DIR/generation`: which compaction results the store has adopted. It is
//! the switch of a compaction (docs/INTERNALS.md § Compaction): written whole to
//! `DIR/generation.tmp`, fsynced, renamed over `DIR/generation`, and the directory fsynced. A kvseq
//! (PURPOSE `WINKGENR`, KEYREPR 0 with 1-byte prefixes, VALREPR 0 with 2-byte prefixes), one entry
//! per setting, values in ASCII:
//!
//! - `generation`: decimal; bumped by every adopted compaction step.
//! - `archive`: a file name; the base name of the archive filesys (`archive`, or `archive.gN`
//!   after a rewrite).
//! - `pending`: a decimal container id; a container a compaction is building (0: none).
//! - `pending_archive`: a file name or empty; an archive a compaction is building.
//! - `move`: `N M` (decimals); container N was compacted into M (M = 0: dropped) and records may
//!   still point into N; repeated.
//! - `retired_archive`: a file name or empty; an archive replaced by a rewrite, to be removed.
//! - `last_time`: decimal seconds; when the last compaction finished (0: never).
//! - `last_reclaimed`: decimal bytes; what it reclaimed.
//! - `compactions`: decimal; compaction runs finished.
//!
//! A store without the file is at generation 0 with the archive at `archive`. A writer's open
//! finishes what the file says was under way: a `pending` container or archive no move adopted is
//! a compaction's unfinished output and is removed; a `move` is rolled forward (records pointing
//! into N are pointed into M, found by name) and N removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::archive::Archive;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys};
use crate::format::kvseq::{KvSeq, KvSeqOptions};
use crate::format::superblock::Purpose;
use crate::vfs::Vfs;

use super::containers::remove_filesys;
use super::record::{Location, Render};
use super::{container_base, Store};

/// PURPOSE of the generation file.
pub const PURPOSE: Purpose = Purpose(*b"WINKGENR");
/// The file's name in the store's directory.
pub const FILE: &str = "generation";
/// Base name of the archive in a store that never rewrote it.
pub const FIRST_ARCHIVE: &str = "archive";

/// The contents of the generation file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Bumped by every adopted compaction step.
    pub generation: u64,
    /// Base name of the archive filesys (`archive`, or `archive.gN` after a rewrite).
    pub archive: String,
    /// A container a compaction is building (0: none); removed at open unless a move adopted it.
    pub pending: u32,
    /// An archive a compaction is building (empty: none); removed at open unless adopted.
    pub pending_archive: String,
    /// (from, into): records may still point into `from`; `into` 0 means dropped.
    pub moves: Vec<(u32, u32)>,
    /// An archive replaced by a rewrite, to be removed (empty: none).
    pub retired_archive: String,
    /// When the last compaction finished, seconds since the epoch (0: never).
    pub last_time: i64,
    /// Bytes the last compaction reclaimed.
    pub last_reclaimed: u64,
    /// Compaction runs finished.
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

    /// Replaces the store's generation file atomically: a temporary file written and fsynced
    /// (one sync for all of it), renamed over the old one, the directory fsynced.
    pub fn write(&self, vfs: &dyn Vfs, dir: &Path, opts: &KvSeqOptions) -> Result<()> {
        let tmp = dir.join(format!("{FILE}.tmp"));
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)?;
        }
        super::config::write_settings_to_rename(vfs, &tmp, PURPOSE, &self.entries(), opts)?;
        vfs.rename(&tmp, &path(dir))?;
        vfs.sync_dir(&path(dir))
    }

    /// The archive base path in `dir`.
    pub fn archive_base(&self, dir: &Path) -> PathBuf {
        dir.join(&self.archive)
    }
}

impl Store {
    /// The generation file's contents.
    /// Moves whose source is gone are finished and left out (see `Store::finish_move`).
    pub fn generation(&self) -> Result<Generation> {
        let mut g = Generation::read(self.vfs.as_ref(), &self.dir)?;
        g.moves
            .retain(|(source, _)| !self.container_files_gone(*source));
        Ok(g)
    }
    /// Writes the generation file, leaving out finished moves (see `Store::finish_move`).
    pub(crate) fn write_generation(&self, g: &Generation) -> Result<()> {
        let kv = KvSeqOptions {
            clock: self.clock.clone(),
            ..KvSeqOptions::default()
        };
        let mut g = g.clone();
        g.moves
            .retain(|(source, _)| !self.container_files_gone(*source));
        g.write(self.vfs.as_ref(), &self.dir, &kv)
    }
    /// No file of container `id` is left.
    fn container_files_gone(&self, id: u32) -> bool {
        let base = container_base(&self.dir, id);
        !filesys::FILES
            .iter()
            .any(|ext| self.vfs.exists(&filesys::file_path(&base, ext)))
    }
    /// Points the renders of `titles` that lie in a container of `sources` to where `remap`
    /// says, dropping the rest (no read can return them: the validation or the survey said so),
    /// and commits.
    pub(crate) fn forward<V>(
        &mut self,
        titles: &BTreeSet<Vec<u8>>,
        sources: &BTreeMap<u32, V>,
        remap: impl Fn(&(Vec<u8>, u64, Uuid), &Render) -> Option<Location>,
    ) -> Result<u64> {
        let mut changed = 0;
        for title in titles {
            let Some(mut rec) = self.load(title)? else {
                continue;
            };
            let moved = |r: &Render| sources.contains_key(&r.location.container);
            if !rec.renders.iter().any(moved) {
                continue;
            }
            let renders = std::mem::take(&mut rec.renders);
            for mut r in renders {
                if moved(&r) {
                    match remap(&(title.clone(), r.rev, r.tid), &r) {
                        Some(loc) => r.location = loc,
                        None => continue,
                    }
                }
                rec.renders.push(r);
            }
            self.save(title, &rec)?;
            changed += 1;
        }
        self.commit()?;
        Ok(changed)
    }
    /// Removes a compacted container and clears its move from the generation file.
    ///
    /// The move stays named in the generation file until its next write, which leaves out every
    /// move whose source is gone: clearing it at once would cost a write (two fsyncs) per
    /// container, and a move whose source is gone is finished (its records were committed
    /// before the removal began), so recovery only sweeps what is left of its files.
    fn finish_move(&mut self, source: u32) -> Result<()> {
        self.containers.remove(source)
    }
    /// Finishes what the generation file says a crashed compaction left under way (a writer's
    /// open calls this); returns what it did, for the log.
    pub(super) fn recover_generation(&mut self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        // A switch killed before its rename leaves its scratch file; the old file stands.
        let tmp = self.dir.join(format!("{}.tmp", FILE));
        if self.vfs.exists(&tmp) {
            self.vfs.remove(&tmp)?;
            done.push(format!("removed {}: an unfinished switch", tmp.display()));
        }
        let mut g = self.generation()?;
        for name in [g.pending_archive.clone(), g.retired_archive.clone()] {
            if !name.is_empty() && name != g.archive {
                let base = self.dir.join(&name);
                Archive::remove_in(self.vfs.as_ref(), &base)?;
                done.push(format!(
                    "removed {}: an archive a compaction replaced or did not finish",
                    base.display()
                ));
            }
        }
        if !g.pending_archive.is_empty() || !g.retired_archive.is_empty() {
            g.pending_archive.clear();
            g.retired_archive.clear();
            self.write_generation(&g)?;
        }
        let targets: Vec<u32> = g.moves.iter().map(|m| m.1).collect();
        if g.pending != 0 && !targets.contains(&g.pending) {
            let base = container_base(&self.dir, g.pending);
            remove_filesys(self.vfs.as_ref(), &base)?;
            done.push(format!(
                "removed {}: an unfinished compaction's container",
                base.display()
            ));
            g.pending = 0;
            self.write_generation(&g)?;
        }
        // A move's target is in use from the switch on: its number must be allocated (the
        // roll-forward's commit makes this durable) before the sweep below.
        if let Some(top) = g.moves.iter().map(|m| m.1).max() {
            if top >= self.next_container()? {
                self.records
                    .fs
                    .set_var(super::NEXTCONT, i64::from(top) + 1)?;
            }
        }
        for (source, into) in g.moves.clone() {
            // Its datafile is removed first, after the records' commit: once it is gone, only
            // the rest of its files are left to remove.
            let source_data = filesys::file_path(&container_base(&self.dir, source), "data");
            if !self.vfs.exists(&source_data) {
                self.finish_move(source)?;
                continue;
            }
            let n = self.roll_forward(source, into)?;
            self.finish_move(source)?;
            done.push(format!(
                "finished compacting container {source} into {into}: \
                 {n} title records pointed into it"
            ));
        }
        if !g.moves.is_empty() {
            self.write_generation(&self.generation()?)?;
        }
        self.remove_unallocated(&mut done)?;
        Ok(done)
    }
    /// Removes containers at numbers no commit handed out (from NEXTCONT on, past CURCONT): a
    /// rotation killed between its new container's create and its commit leaves one. No
    /// committed record points into them: a commit of records makes NEXTCONT durable with them.
    fn remove_unallocated(&mut self, done: &mut Vec<String>) -> Result<()> {
        let mut id = self.next_container()?;
        loop {
            let base = container_base(&self.dir, id);
            let any = filesys::FILES
                .iter()
                .chain(&["data.creating"])
                .any(|ext| self.vfs.exists(&filesys::file_path(&base, ext)));
            if !any {
                return Ok(());
            }
            remove_filesys(self.vfs.as_ref(), &base)?;
            done.push(format!(
                "removed {}: a container whose number was never committed",
                base.display()
            ));
            id = id.saturating_add(1);
        }
    }
    /// Points every record's renders in `source` into `into` by name (after a crash the remap
    /// of the build is gone; the new container's index has it).
    fn roll_forward(&mut self, source: u32, into: u32) -> Result<u64> {
        let mut titles = BTreeSet::new();
        for item in self.records.fs.iter() {
            let file = item?;
            let rec = super::record_of(&self.records.fs, &file)?;
            if rec.renders.iter().any(|r| r.location.container == source) {
                titles.insert(file.name);
            }
        }
        let target = match into {
            0 => None,
            id => Some(Filesys::open_in(
                self.vfs.clone(),
                &container_base(&self.dir, id),
                &filesys::OpenOptions::read_only(),
            )?),
        };
        let lookup = |key: &(Vec<u8>, u64, Uuid), r: &Render| -> Option<Location> {
            let fs = target.as_ref()?;
            let name = format!("{}/{}/{}", String::from_utf8_lossy(&key.0), key.1, key.2);
            let extents = fs.extents(name.as_bytes()).ok()??;
            match extents.as_slice() {
                [e] if e.len == r.location.len => Some(Location {
                    container: into,
                    offset: e.offset,
                    ..r.location
                }),
                _ => None,
            }
        };
        self.forward(&titles, &BTreeMap::from([(source, into)]), lookup)
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
