//! A dump's walk over a store: every title's readable renders in both tiers, title by title, and
//! reads of their values that leave the page cache as they found it.
//!
//! The walk goes over the title records in steps, from a [`TitleCursor`] as culling does, so a
//! dump holds one step's titles in memory whatever the store's size. A title's renders are what
//! [`Store::list`] returns (the hot tier's readable renders, then the archived ones the hot tier
//! does not hold), oldest first.
//!
//! Reading a whole store once must not evict a serving node's working set. Hot values a caller
//! announces ([`DumpReader::plan`]) are read ahead: up to [`READ_AHEAD`] bytes of them are asked
//! for in the background (`POSIX_FADV_WILLNEED`, so the disk sees large requests). A container's
//! residency is taken (mincore) before the reader asks for any page of it; after each value is
//! read, its pages that were not cached then are dropped, but the page it ends in (the next
//! value's first), and when the reader finishes, every such page left. A value not announced is
//! read with
//! [`Storage::read_at_uncached`](crate::storage::Storage::read_at_uncached): what was cached
//! stays, what the read brought in is dropped. Archived values are decompressed from blocks that
//! the archive reads itself; for them a [`DumpReader`] takes the archive datafile's residency when
//! it starts (one byte per 4 KiB page, mincore) and, every time it has decompressed as much as the
//! archive file holds (64 MiB at least) and when it finishes, drops the pages of that file that
//! were not resident at the start. The title records' files, which the walk and the loads read,
//! are swept the same way, counting every value read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use uuid::Uuid;

use crate::archive::map::Entry as ArchiveEntry;
use crate::error::{Error, Result};
use crate::filesys;
use crate::storage::{PageMap, PAGE};

use super::key::cmp_tid;
use super::record::Location;
use super::walk::TitleCursor;
use super::{record_name, State, Store};

/// One title's renders, as a dump sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpTitle {
    /// The title's domain.
    pub domain: String,
    /// The title within its domain.
    pub title: String,
    /// Oldest first: revision, then tid precedence.
    pub renders: Vec<DumpRender>,
}

/// One render of a [`DumpTitle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpRender {
    /// Revision number.
    pub rev: u64,
    /// Render id (a version-1 UUID: its time orders renders of one revision).
    pub tid: Uuid,
    /// Content type, as put.
    pub content_type: String,
    /// Content encoding and language, as put.
    pub labels: super::Labels,
    /// Where it stands: current, recent, historical or archived.
    pub state: State,
    /// The value's length in bytes.
    pub size: u64,
    /// When it arrived, seconds since the epoch (an archived render: its tid's time).
    pub arrival: i64,
    source: Source,
}

impl DumpRender {
    /// The CRC-32 of the value, as its record (or the archive's map) keeps it.
    pub fn crc(&self) -> u32 {
        match &self.source {
            Source::Hot(l) => l.crc,
            Source::Archived(e) => e.crc,
            Source::Carried { crc } => *crc,
        }
    }

    /// A render described by another store (a cluster node's dump): its value travels with
    /// it, so no [`DumpReader`] of this store reads it.
    #[allow(clippy::too_many_arguments)]
    pub fn carried(
        rev: u64,
        tid: Uuid,
        content_type: String,
        labels: super::Labels,
        state: State,
        size: u64,
        arrival: i64,
        crc: u32,
    ) -> DumpRender {
        DumpRender {
            rev,
            tid,
            content_type,
            labels,
            state,
            size,
            arrival,
            source: Source::Carried { crc },
        }
    }

    /// Where the value is in the hot tier (`None`: in the archive, or carried with the render).
    pub(crate) fn hot(&self) -> Option<&Location> {
        match &self.source {
            Source::Hot(l) => Some(l),
            Source::Archived(_) | Source::Carried { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    Hot(Location),
    Archived(ArchiveEntry),
    Carried { crc: u32 },
}

/// Bytes of announced hot values asked for ahead of the one being read.
pub const READ_AHEAD: u64 = 32 << 20;

/// Bytes of values read between two drops of a swept file's pages (the archive's, the title
/// records'), at least.
const SWEEP_MIN: u64 = 64 << 20;

impl Store {
    /// The next titles of a dump from `cursor`, at most `max_titles` records walked (titles with
    /// no readable render are left out). The cursor moves past them; it is done when the pass
    /// has walked every record that existed when it started.
    pub fn dump_step(&self, cursor: &mut TitleCursor, max_titles: usize) -> Result<Vec<DumpTitle>> {
        let walk = self.walk_titles(cursor, max_titles)?;
        let mut out = Vec::with_capacity(walk.titles.len());
        for (name, _) in &walk.titles {
            let Some((domain, title)) = split_name(name) else {
                return Err(bad_name(self, name));
            };
            if let Some(t) = self.dump_title(domain, title)? {
                out.push(t);
            }
        }
        walk.finish(cursor);
        Ok(out)
    }

    /// One title's renders for a dump; `None` when it has no readable render.
    pub fn dump_title(&self, domain: &str, title: &str) -> Result<Option<DumpTitle>> {
        let name = record_name(domain, title);
        let rec = self.load_fresh(&name)?;
        let now = self.clock.now();
        let mut renders: Vec<DumpRender> = match &rec {
            Some(rec) => self
                .visible(rec, now)
                .into_iter()
                .map(|r| DumpRender {
                    rev: r.rev,
                    tid: r.tid,
                    content_type: r.content_type.to_string(),
                    labels: r.labels.clone(),
                    state: super::state_of(rec, r, &self.cfg.policy, now),
                    size: r.location.len,
                    arrival: r.stamps.arrival,
                    source: Source::Hot(r.location),
                })
                .collect(),
            None => Vec::new(),
        };
        for e in self.archived(&name, rec.as_ref())? {
            let tid = Uuid::from_bytes(e.tid);
            if !renders.iter().any(|r| r.rev == e.rev && r.tid == tid) {
                renders.push(DumpRender {
                    rev: e.rev,
                    tid,
                    content_type: e.content_type.clone(),
                    labels: e.labels.clone(),
                    state: State::Archived,
                    size: e.len,
                    arrival: super::key::tid_unix_secs(tid),
                    source: Source::Archived(e),
                });
            }
        }
        if renders.is_empty() {
            return Ok(None);
        }
        renders.sort_by(|a, b| a.rev.cmp(&b.rev).then_with(|| cmp_tid(a.tid, b.tid)));
        Ok(Some(DumpTitle {
            domain: domain.to_string(),
            title: title.to_string(),
            renders,
        }))
    }

    /// The titles after `after` in key order (domain, then title, bytewise) that `keep`
    /// accepts, at most `limit`: the next part of a dump in key order. Each call walks every
    /// title record once, holding no more than `limit` names, so memory is bounded whatever the
    /// store's size; the titles are those [`Store::dump_step`] walks (some may have no readable
    /// render: [`Store::dump_title`] tells).
    pub fn titles_in_key_order(
        &self,
        after: Option<(&str, &str)>,
        keep: impl Fn(&str, &str) -> bool,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        let limit = limit.max(1);
        let mut best: std::collections::BTreeSet<(String, String)> = Default::default();
        let mut cursor = TitleCursor::new();
        while !cursor.is_done() {
            let walk = self.walk_titles(&mut cursor, super::walk::STEP_TITLES)?;
            for (name, _) in &walk.titles {
                let Some((domain, title)) = split_name(name) else {
                    return Err(bad_name(self, name));
                };
                if after.is_some_and(|a| (domain, title) <= a) || !keep(domain, title) {
                    continue;
                }
                if best.len() == limit {
                    match best.last() {
                        Some((d, t)) if (domain, title) < (d.as_str(), t.as_str()) => {
                            best.pop_last();
                        }
                        _ => continue,
                    }
                }
                best.insert((domain.to_string(), title.to_string()));
            }
            walk.finish(&mut cursor);
        }
        Ok(best.into_iter().collect())
    }

    /// A reader of dumped values that leaves the page cache as it found it (module doc).
    pub fn dump_reader(&self) -> Result<DumpReader<'_>> {
        let meta = [
            SweptPages::of(self.records.fs.data().path())?,
            SweptPages::of(self.records.fs.index().path())?,
        ]
        .into();
        let archive = match self.archive() {
            Some(_) => Some(SweptPages::of(&filesys::file_path(
                self.archive_base(),
                "data",
            ))?),
            None => None,
        };
        Ok(DumpReader {
            store: self,
            archive,
            meta,
            hot_bytes: 0,
            archived_bytes: 0,
            planned: VecDeque::new(),
            ahead: HashSet::new(),
            before: HashMap::new(),
            ahead_bytes: 0,
        })
    }
}

fn bad_name(store: &Store, name: &[u8]) -> Error {
    Error::corrupt(
        store.records.fs.data().path(),
        0,
        "title record name",
        "DOMAIN/TITLE in UTF-8",
        String::from_utf8_lossy(name),
    )
}

/// "DOMAIN/TITLE" as (domain, title): a domain never holds `/`.
pub(super) fn split_name(name: &[u8]) -> Option<(&str, &str)> {
    std::str::from_utf8(name).ok()?.split_once('/')
}

/// A file's pages as the dump found them (the archive datafile, the title records' files).
#[derive(Debug)]
struct SweptPages {
    path: PathBuf,
    before: PageMap,
    sweep_every: u64,
    since_sweep: u64,
}

impl SweptPages {
    /// `path` as it is now, swept every time as many bytes as it holds (64 MiB at least) have
    /// been read.
    fn of(path: &std::path::Path) -> Result<SweptPages> {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        Ok(SweptPages {
            before: PageMap::of(path)?,
            path: path.to_path_buf(),
            sweep_every: len.max(SWEEP_MIN),
            since_sweep: 0,
        })
    }

    /// Counts `bytes` more read; sweeps when they add up to `sweep_every`.
    fn read(&mut self, bytes: u64) -> Result<()> {
        self.since_sweep += bytes;
        if self.since_sweep >= self.sweep_every {
            self.sweep()?;
        }
        Ok(())
    }

    fn sweep(&mut self) -> Result<()> {
        self.since_sweep = 0;
        self.before.drop_others(&self.path)
    }
}

/// Reads the values of a dump (see [`Store::dump_reader`]); drops the archive's pages it brought
/// in when it finishes (or is dropped).
#[derive(Debug)]
pub struct DumpReader<'s> {
    store: &'s Store,
    archive: Option<SweptPages>,
    /// The title records' files, which the walk and the loads of a dump read: swept as the
    /// archive's, counting every value read.
    meta: Vec<SweptPages>,
    hot_bytes: u64,
    archived_bytes: u64,
    /// Hot values announced and not asked for yet, in the order they will be read.
    planned: VecDeque<Location>,
    /// Values asked for, by (container, offset).
    ahead: HashSet<(u32, u64)>,
    ahead_bytes: u64,
    /// Each container's pages as they were before this reader asked for any of them. Taken
    /// per value when it was asked for, a page the value before it shares (values lie end to
    /// end) showed cached, by that value's request: it then stayed.
    before: HashMap<u32, PageMap>,
}

impl DumpReader<'_> {
    /// Announces that `render` will be read, after the ones announced before it: its value is
    /// then read ahead.
    pub fn plan(&mut self, render: &DumpRender) {
        if let Source::Hot(loc) = &render.source {
            if loc.len > 0 {
                self.planned.push_back(*loc);
            }
        }
    }

    /// Asks for announced values until [`READ_AHEAD`] bytes are ahead.
    fn read_ahead(&mut self) -> Result<()> {
        while self.ahead_bytes < READ_AHEAD {
            let Some(loc) = self.planned.pop_front() else {
                return Ok(());
            };
            let s = self.store.container(loc.container)?;
            if let std::collections::hash_map::Entry::Vacant(e) = self.before.entry(loc.container) {
                e.insert(PageMap::of(s.path())?);
            }
            // A hint: a read that finds the pages missing reads them itself.
            let _ = s.will_need(loc.offset, loc.len);
            self.ahead_bytes += loc.len;
            self.ahead.insert((loc.container, loc.offset));
        }
        Ok(())
    }

    /// Counts `bytes` more of values read against the title records' sweeps.
    fn sweep_meta(&mut self, bytes: u64) -> Result<()> {
        for pages in &mut self.meta {
            pages.read(bytes)?;
        }
        Ok(())
    }

    /// Drops the pages of `offset..end` in `container` that were not cached before this reader
    /// asked for them.
    fn drop_uncached(&self, container: u32, offset: u64, end: u64) -> Result<()> {
        match self.before.get(&container) {
            Some(map) => {
                let s = self.store.container(container)?;
                map.drop_others_on(s.as_ref(), offset, end)
            }
            None => Ok(()),
        }
    }

    /// A render's value, verified against its checksum (a damaged one is an error naming the
    /// file and offset, or its quarantine entry).
    pub fn read(&mut self, title: &DumpTitle, render: &DumpRender) -> Result<Vec<u8>> {
        match &render.source {
            Source::Hot(loc) => {
                let value = self.read_hot(loc).map_err(|e| match e {
                    Error::Corrupt { .. } | Error::Io { .. } => self.store.damaged_or(loc, e),
                    e => e,
                })?;
                self.hot_bytes += value.len() as u64;
                self.sweep_meta(value.len() as u64)?;
                Ok(value)
            }
            Source::Archived(entry) => {
                let archive = self
                    .store
                    .archive()
                    .ok_or_else(|| Error::invalid("no archive"))?;
                let name = record_name(&title.domain, &title.title);
                let value = archive.read(&name, entry)?;
                self.archived_bytes += value.len() as u64;
                self.sweep_meta(value.len() as u64)?;
                if let Some(pages) = self.archive.as_mut() {
                    pages.read(value.len() as u64)?;
                }
                Ok(value)
            }
            Source::Carried { .. } => Err(Error::invalid(
                "a render carried from another store is not read from this one",
            )),
        }
    }

    fn read_hot(&mut self, loc: &Location) -> Result<Vec<u8>> {
        let len = usize::try_from(loc.len).map_err(|_| Error::invalid("value too large"))?;
        let mut value = vec![0u8; len];
        if len == 0 {
            return Ok(value);
        }
        self.read_ahead()?;
        let s = self.store.container(loc.container)?;
        let n = if self.ahead.remove(&(loc.container, loc.offset)) {
            self.ahead_bytes -= loc.len;
            let n = s.read_at(&mut value, loc.offset);
            // The page the value ends in is the next one's first: it goes with that one (or with
            // the sweep when the reader finishes).
            let end = (loc.offset + loc.len) / PAGE * PAGE;
            self.drop_uncached(loc.container, loc.offset, end)?;
            n
        } else {
            s.read_at_uncached(&mut value, loc.offset)
        }
        .map_err(|e| Error::io(s.path(), Some(loc.offset), e))?;
        if n < len {
            return Err(Error::corrupt(
                s.path(),
                loc.offset + n as u64,
                "file ends inside a value",
                format!("{len} bytes at {}", loc.offset),
                format!("{n} bytes"),
            ));
        }
        loc.verify(s.path(), &value)?;
        Ok(value)
    }

    /// (value bytes read from the hot tier, from the archive).
    pub fn bytes(&self) -> (u64, u64) {
        (self.hot_bytes, self.archived_bytes)
    }

    /// Drops the pages this reader brought into the page cache and has not dropped yet: values
    /// read ahead but not read, the archive's.
    pub fn finish(mut self) -> Result<()> {
        self.drop_leftovers()
    }

    fn drop_leftovers(&mut self) -> Result<()> {
        self.ahead.clear();
        self.ahead_bytes = 0;
        self.planned.clear();
        for (container, map) in std::mem::take(&mut self.before) {
            let s = self.store.container(container)?;
            map.drop_others_on(s.as_ref(), 0, u64::MAX)?;
        }
        for pages in &mut self.meta {
            pages.sweep()?;
        }
        match self.archive.as_mut() {
            Some(pages) => pages.sweep(),
            None => Ok(()),
        }
    }
}

impl Drop for DumpReader<'_> {
    fn drop(&mut self) {
        // A page-cache hint; a dump that failed reports its own error.
        let _ = self.drop_leftovers();
    }
}
