//! Scrub: every value the store can return, read back and verified against its CRC-32 — the hot
//! renders of every title record and every archived revision.
//!
//! Hot values are read container by container in offset order (sequential I/O on a file opened
//! with sequential advice, not through the store's random-advised readers), and a container's
//! pages are dropped from the page cache once its values are read, so a scrub does not evict the
//! node's hot data. The locations to read are gathered by a scan of the title records for a group
//! of containers at a time, whose datafiles add up to at most `PASS_BYTES`: memory stays bounded
//! by that, not by the size of the store.
//!
//! With [`ScrubOptions::quarantine`], each damaged hot value is also copied to the store's
//! quarantine ([`crate::store::quarantine`]) as it is found.
//!
//! Before the values, the title records themselves: each decoded under its checksum and its
//! own key, each reachable through the title index at its own inode, and every index cell
//! naming an inode whose key hashes to the hash the cell stores. A damaged record or cell is
//! reported by title (tier `meta`, revision 0) and its titles' values are skipped, never read
//! through it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::filesys;
use crate::storage::{read_exact_at, Storage};
use crate::store::containers::container_base;
use crate::store::record::Location;
use crate::store::{ScanPages, Store, TitleCursor, TitleSummary};

use super::quarantine::{quarantine_value, Damaged};

/// Container bytes one scan of the title records gathers locations for.
const PASS_BYTES: u64 = 4 << 30;

/// Which tier a damaged value is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// A value in a container (the hot tier).
    Hot,
    /// A revision in the archive.
    Archive,
    /// The title records and their index: the damage is to a title, not a value.
    Meta,
}

impl Tier {
    /// Its lower-case name, as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Hot => "hot",
            Tier::Archive => "archive",
            Tier::Meta => "meta",
        }
    }
}

/// A value that could not be read back intact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The tier the damage is in.
    pub tier: Tier,
    /// The render's domain (empty when the damage names no title).
    pub domain: String,
    /// The render's title (empty when the damage names no title).
    pub title: String,
    /// The render's revision (0 for damage to a whole title).
    pub rev: u64,
    /// The render's tid (the nil UUID for damage to a whole title).
    pub tid: Uuid,
    /// The file holding the damaged bytes, and where.
    pub file: PathBuf,
    /// Byte offset of the damage in `file`.
    pub offset: u64,
    /// What was wrong (the error's message).
    pub what: String,
    /// The quarantine entry's description, when the value was quarantined.
    pub quarantined: Option<PathBuf>,
}

impl Damage {
    /// Damage to a whole title (`name`, or none), not one value: revision 0, the nil tid; the
    /// file and offset the error names, else `file` and `offset`.
    fn of_title(tier: Tier, name: &[u8], e: &Error, file: &Path, offset: u64) -> Damage {
        let (domain, title) = split_name(name);
        let (file, offset) = located(e, file, offset);
        Damage {
            tier,
            domain,
            title,
            rev: 0,
            tid: Uuid::nil(),
            file,
            offset,
            what: e.to_string(),
            quarantined: None,
        }
    }
}

/// How to scrub.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubOptions {
    /// Copy each damaged hot value to the store's quarantine (`DIR/quarantine/`).
    pub quarantine: bool,
}

/// What a scrub read and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Hot values read, and their bytes.
    pub values: u64,
    /// Bytes of the hot values read.
    pub bytes: u64,
    /// Archived revisions read.
    pub archived: u64,
    /// What could not be read back intact: empty when the store is clean.
    pub damaged: Vec<Damage>,
}

impl ScrubReport {
    /// True when nothing was found damaged.
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
    }
}

/// Where a scrub is: `done` of `total` units, `what` they are ("bytes" of hot values, then
/// "revisions" of the archive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubProgress {
    /// The unit: `"bytes"` of hot values, then `"revisions"` of the archive.
    pub what: &'static str,
    /// Units done.
    pub done: u64,
    /// Units in all, in this phase.
    pub total: u64,
}

/// One hot value to verify; `title` indexes the pass's title names.
struct Job {
    loc: Location,
    title: usize,
    rev: u64,
    tid: Uuid,
}

/// The locations in a group of containers, and the names of the titles they belong to.
#[derive(Default)]
struct Pass {
    jobs: Vec<Job>,
    titles: Vec<Vec<u8>>,
}

/// "domain/title" split at its first `/` (a domain has none).
fn split_name(name: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(name);
    match text.split_once('/') {
        Some((d, t)) => (d.to_string(), t.to_string()),
        None => (String::new(), text.into_owned()),
    }
}

/// The file and offset an error names, or the fallbacks.
fn located(e: &Error, file: &Path, offset: u64) -> (PathBuf, u64) {
    match e {
        Error::Corrupt { path, offset, .. }
        | Error::Damaged { path, offset, .. }
        | Error::Unsupported { path, offset, .. } => (path.clone(), *offset),
        Error::Io {
            path, offset: o, ..
        } => (path.clone(), o.unwrap_or(offset)),
        _ => (file.to_path_buf(), offset),
    }
}

/// Reads every readable hot value and every archived revision and verifies their checksums.
/// Damaged values are reported, not errors; an error means the store itself (its title
/// records, the archive's maps) could not be read. `progress` is called as work is done.
pub fn scrub(store: &Store, progress: impl FnMut(ScrubProgress)) -> Result<ScrubReport> {
    scrub_with(store, ScrubOptions::default(), progress)
}

/// [`scrub`](fn@crate::maintenance::scrub), quarantining damaged hot values when `opts` says so. A value that cannot
/// be quarantined (its container cannot be opened, or the quarantine cannot be written) is
/// reported as damaged all the same, the failure added to its `what`.
pub fn scrub_with(
    store: &Store,
    opts: ScrubOptions,
    mut progress: impl FnMut(ScrubProgress),
) -> Result<ScrubReport> {
    let mut report = ScrubReport::default();
    let mut pages = ScanPages::start(store.meta())?;
    scrub_titles(store, &mut report, &mut pages)?;
    let sizes = container_sizes(store)?;
    let total: u64 = sizes.iter().map(|(_, s)| s).sum();
    let mut done = 0u64;
    for group in groups(&sizes) {
        let pass = gather(store, &group, &mut pages)?;
        for id in group {
            let jobs: Vec<&Job> = pass.jobs.iter().filter(|j| j.loc.container == id).collect();
            scrub_container(store, id, &jobs, &pass.titles, opts, &mut report);
            done += sizes.iter().find(|(i, _)| *i == id).map_or(0, |(_, s)| *s);
            progress(ScrubProgress {
                what: "bytes",
                done,
                total,
            });
        }
    }
    pages.finish()?;
    scrub_archive(store, &mut report, &mut progress)?;
    Ok(report)
}

/// Containers in groups whose datafiles add up to at most [`PASS_BYTES`] (one container at least).
fn groups(sizes: &[(u32, u64)]) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    let mut bytes = 0u64;
    for &(id, size) in sizes {
        match out.last_mut() {
            Some(g) if bytes.saturating_add(size) <= PASS_BYTES => {
                g.push(id);
                bytes += size;
            }
            _ => {
                out.push(vec![id]);
                bytes = size;
            }
        }
    }
    out
}

/// The containers that exist, with their datafile sizes.
fn container_sizes(store: &Store) -> Result<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    for id in store.container_ids()? {
        let path = filesys::file_path(&container_base(store.dir(), id), "data");
        {
            out.push((
                id,
                crate::storage::length(store.vfs().open(&path, false)?.as_ref())?,
            ));
        }
    }
    Ok(out)
}

/// The visible hot renders stored in `group`'s containers, sorted by container and offset.
fn gather(store: &Store, group: &[u32], pages: &mut ScanPages) -> Result<Pass> {
    let now = store.now();
    let mut pass = Pass::default();
    for item in store.meta().iter() {
        // Damaged records (and what follows a damaged entry) were reported by the walk of
        // the title records; their values are not read through them.
        let Ok(file) = item else { break };
        let Ok(rec) = crate::store::record_of(store.meta(), &file) else {
            continue;
        };
        pages.passed(file.inode.0)?;
        let title = pass.titles.len();
        let before = pass.jobs.len();
        pass.jobs.extend(
            store
                .visible(&rec, now)
                .into_iter()
                .filter(|r| group.contains(&r.location.container))
                .map(|r| Job {
                    loc: r.location,
                    title,
                    rev: r.rev,
                    tid: r.tid,
                }),
        );
        if pass.jobs.len() > before {
            pass.titles.push(file.name);
        }
    }
    pass.jobs
        .sort_by_key(|j| (j.loc.container, j.loc.offset, j.loc.len));
    Ok(pass)
}

/// Verifies the title records and their index: each record under its checksum and key,
/// reachable through the index at its own inode; each used index cell against its key.
fn scrub_titles(store: &Store, report: &mut ScrubReport, pages: &mut ScanPages) -> Result<()> {
    let meta = store.meta();
    let data_path = meta.data().path().to_path_buf();
    let mut damage = |name: &[u8], e: &Error, file: &Path, offset: u64| {
        report
            .damaged
            .push(Damage::of_title(Tier::Meta, name, e, file, offset));
    };
    for item in meta.iter() {
        let file = match item {
            Ok(file) => file,
            Err(e) => {
                damage(b"", &e, &data_path, 0);
                break;
            }
        };
        pages.passed(file.inode.0)?;
        if let Err(e) = crate::store::record_of(meta, &file) {
            damage(&file.name, &e, &data_path, file.inode.0);
            continue;
        }
        match meta.stat(&file.name) {
            Ok(Some(found)) if found.inode == file.inode => {}
            Ok(found) => {
                let idx = meta.index();
                let home = idx.home(&filesys::inode::inode_key(&file.name));
                let e = Error::corrupt(
                    idx.path(),
                    idx.cell_offset(home),
                    format!(
                        "title index entry of {:?} (run `wink recover --rebuild-index`)",
                        String::from_utf8_lossy(&file.name)
                    ),
                    format!("its record's inode at {}", file.inode),
                    found.map_or("no entry".to_string(), |f| format!("{}", f.inode)),
                );
                damage(&file.name, &e, idx.path(), 0);
            }
            Err(e) => damage(&file.name, &e, meta.index().path(), 0),
        }
    }
    let idx = meta.index();
    for cell in idx.used_cells() {
        let checked = cell.and_then(|(cell, ptr)| {
            idx.verify_cell(cell, ptr, meta.data())?;
            Ok(ptr)
        });
        if let Err(e) = checked {
            damage(b"", &e, idx.path(), 0);
        }
    }
    Ok(())
}

/// Verifies one container's values in offset order, then drops its pages from the cache.
fn scrub_container(
    store: &Store,
    id: u32,
    jobs: &[&Job],
    titles: &[Vec<u8>],
    opts: ScrubOptions,
    report: &mut ScrubReport,
) {
    let path = filesys::file_path(&container_base(store.dir(), id), "data");
    let storage = store.vfs().open(&path, false);
    if let Ok(s) = &storage {
        let _ = s.advise_sequential();
    }
    let mut buf = Vec::new();
    for job in jobs {
        let checked = match &storage {
            Ok(s) => verify_value(store, s.as_ref(), &job.loc, &mut buf)
                .map_err(|e| (located(&e, &path, job.loc.offset), e.to_string())),
            // A container that cannot be opened damages every value in it.
            Err(e) => Err(((path.clone(), job.loc.offset), e.to_string())),
        };
        report.values += 1;
        report.bytes += job.loc.len;
        if let Err(((file, offset), mut what)) = checked {
            let (domain, title) = split_name(&titles[job.title]);
            let quarantined = match (&storage, opts.quarantine) {
                (Ok(s), true) => {
                    let d = Damaged {
                        name: (&domain, &title),
                        rev: job.rev,
                        tid: job.tid,
                        loc: &job.loc,
                        what: &what,
                    };
                    match quarantine_value(store, s.as_ref(), &d) {
                        Ok(path) => Some(path),
                        Err(e) => {
                            what = format!("{what} (not quarantined: {e})");
                            None
                        }
                    }
                }
                _ => None,
            };
            report.damaged.push(Damage {
                tier: Tier::Hot,
                domain,
                title,
                rev: job.rev,
                tid: job.tid,
                file,
                offset,
                what,
                quarantined,
            });
        }
    }
    if let Ok(s) = &storage {
        // Politeness only: a failed drop leaves pages the kernel will evict anyway.
        let _ = s.drop_cache(0, s.len().unwrap_or(0));
    }
}

/// One step of [`Store::summary_step`] with every value read back and checked against its
/// CRC-32 first: a render whose value fails the check is left out of its title's summary (so a
/// comparison with another store shows it missing here) and reported; a damaged hot value is
/// also quarantined, so that reads name the entry and later summaries leave it out too. A
/// damaged archived revision is reported and left out; the archive has no quarantine.
pub fn checked_summary_step(
    store: &Store,
    cursor: &mut TitleCursor,
    max_titles: usize,
    keep: impl Fn(&str, &str) -> bool,
) -> Result<(Vec<TitleSummary>, Vec<Damage>)> {
    let mut damaged = Vec::new();
    let mut reader = store.dump_reader()?;
    let mut opened: HashMap<u32, Result<Box<dyn Storage>>> = HashMap::new();
    let mut buf = Vec::new();
    let summaries = store.summary_step_with(cursor, max_titles, keep, |t, r| {
        let checked = match r.hot() {
            Some(loc) => {
                let s = opened.entry(loc.container).or_insert_with(|| {
                    let base = container_base(store.dir(), loc.container);
                    store.vfs().open(&filesys::file_path(&base, "data"), false)
                });
                match s {
                    Ok(s) => verify_value(store, s.as_ref(), loc, &mut buf),
                    // A container that cannot be opened damages every value in it.
                    Err(e) => Err(e.again()),
                }
            }
            None => reader.read(t, r).map(drop),
        };
        let e = match checked {
            Ok(()) => return Ok(true),
            Err(e @ (Error::Corrupt { .. } | Error::Io { .. } | Error::Damaged { .. })) => e,
            Err(e) => return Err(e),
        };
        let mut what = e.to_string();
        let (file, offset) = located(&e, Path::new(""), 0);
        let (tier, quarantined) = match (r.hot(), r.hot().and_then(|l| opened.get(&l.container))) {
            (Some(loc), Some(Ok(s))) => {
                let d = Damaged {
                    name: (&t.domain, &t.title),
                    rev: r.rev,
                    tid: r.tid,
                    loc,
                    what: &what,
                };
                match quarantine_value(store, s.as_ref(), &d) {
                    Ok(path) => (Tier::Hot, Some(path)),
                    Err(q) => {
                        what = format!("{what} (not quarantined: {q})");
                        (Tier::Hot, None)
                    }
                }
            }
            (Some(_), _) => (Tier::Hot, None),
            (None, _) => (Tier::Archive, None),
        };
        damaged.push(Damage {
            tier,
            domain: t.domain.clone(),
            title: t.title.clone(),
            rev: r.rev,
            tid: r.tid,
            file,
            offset,
            what,
            quarantined,
        });
        Ok(false)
    })?;
    reader.finish()?;
    Ok((summaries, damaged))
}

/// Reads one value into `buf` and checks its length bound and CRC-32.
fn verify_value(store: &Store, s: &dyn Storage, loc: &Location, buf: &mut Vec<u8>) -> Result<()> {
    // The length comes from a checksummed record, but a record is still untrusted input:
    // nothing the store accepted is over max_value, so nothing over it is allocated.
    if loc.len > store.config().max_value {
        return Err(Error::corrupt(
            s.path(),
            loc.offset,
            "value length",
            format!("at most max_value {}", store.config().max_value),
            loc.len,
        ));
    }
    buf.resize(loc.len as usize, 0);
    read_exact_at(s, buf, loc.offset, "a value")?;
    loc.verify(s.path(), buf)
}

/// Reads every archived revision that is not taken down, verified against its CRC-32.
fn scrub_archive(
    store: &Store,
    report: &mut ScrubReport,
    progress: &mut impl FnMut(ScrubProgress),
) -> Result<()> {
    let archive = match store.archive_tier() {
        Ok(Some(archive)) => archive,
        Ok(None) => return Ok(()),
        // An archive that cannot be opened damages every revision in it.
        Err(e) => {
            let damage = Damage::of_title(Tier::Archive, b"", &e, store.archive_base(), 0);
            report.damaged.push(damage);
            return Ok(());
        }
    };
    let path = archive.filesys().data().path().to_path_buf();
    let keys = archive.titles()?;
    let total = keys.len() as u64;
    for (i, key) in keys.iter().enumerate() {
        for entry in archive.entries(key)? {
            report.archived += 1;
            if let Err(e) = archive.read(key, &entry) {
                let (domain, title) = split_name(key);
                let (file, offset) = located(&e, &path, 0);
                report.damaged.push(Damage {
                    tier: Tier::Archive,
                    domain,
                    title,
                    rev: entry.rev,
                    tid: Uuid::from_bytes(entry.tid),
                    file,
                    offset,
                    what: e.to_string(),
                    quarantined: None,
                });
            }
        }
        progress(ScrubProgress {
            what: "revisions",
            done: i as u64 + 1,
            total,
        });
    }
    // Blocks decompressed for the scrub are no use to later reads.
    archive.clear_cache();
    if let Ok(s) = store.vfs().open(&path, false) {
        let _ = s.drop_cache(0, s.len().unwrap_or(0));
    }
    Ok(())
}
