//! The title records: one small file per title in the meta filesys (`DIR/meta.*`), each a
//! [`TitleRecord`] rewritten whole. This piece holds the meta filesys and everything that reads
//! or writes records through it: the one reader ([`TitleRecords::read`], with the writer's
//! records read lately, [`super::recent`]), reads through a view kept current on a read-only
//! handle ([`super::view`]), writes, the commit of the records, and the walk of all of them.
//! The store decides what a record says; this piece keeps it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::Clock;
use crate::error::Result;
use crate::filesys::{self, Filesys, Staleness};
use crate::format::kvseq::KvPointer;
use crate::vfs::Vfs;

use super::latest::Latest;
use super::recent::RecentRecords;
use super::record::TitleRecord;
use super::shared::{ReadStart, SharedRecords};
use super::view::{read_located, Views};

/// The title records of a store (see the module doc).
#[derive(Debug)]
pub(crate) struct TitleRecords {
    /// The meta filesys: one file per title, named `DOMAIN/TITLE`.
    pub(super) fs: Filesys,
    /// The writer's records read lately (none on a read-only handle).
    recent: RecentRecords,
    /// The committed records the writer of this process shares with its read-only handles
    /// (the writer publishes to it; a read-only handle reads and fills it).
    shared: Option<Arc<SharedRecords>>,
    /// The writer's records written since its last publication, to share once committed.
    fresh: Fresh,
    /// The shared records' epoch noted just before this read-only handle's view of the meta
    /// files was last refreshed (`None` before the first refresh: the epoch at the open is not
    /// known). A record read through the view is shared only while the epoch is still this one:
    /// a view older than a publication reads records that commit replaced.
    view_start: Option<ReadStart>,
    /// A read-only handle's newer views of the records.
    pub(super) views: Views,
    /// The writer's handle: its view is always current.
    pub(super) writable: bool,
    /// What a fresh view is opened with.
    pub(super) vfs: Arc<dyn Vfs>,
    pub(super) dir: PathBuf,
    pub(super) clock: Arc<dyn Clock>,
}

/// Which cache holds the bytes a record was read from (the very allocation).
pub(super) enum Kept {
    /// The writer's records read lately.
    Recent(Arc<[u8]>),
    /// The committed records shared with read-only handles.
    Shared(Arc<[u8]>),
}

/// What a read-only handle shares with the writer open in this process: found, and its epoch
/// noted, before the handle's meta filesys is opened ([`ReaderShare::before_open`]).
pub(super) struct ReaderShare {
    shared: Arc<SharedRecords>,
    start: ReadStart,
}

impl ReaderShare {
    /// The writer's shared records for a read-only handle of `dir` about to open its view.
    pub(super) fn before_open(dir: &std::path::Path) -> Option<ReaderShare> {
        let shared = SharedRecords::find(dir)?;
        let start = shared.read_start();
        Some(ReaderShare { shared, start })
    }
}

impl TitleRecords {
    /// The records of the store in `dir`, whose meta filesys `fs` is open; a writer's handle
    /// keeps up to `cache_bytes` of records read lately.
    pub(super) fn new(
        fs: Filesys,
        writable: bool,
        cache_bytes: usize,
        vfs: Arc<dyn Vfs>,
        dir: PathBuf,
        clock: Arc<dyn Clock>,
        share: Option<ReaderShare>,
    ) -> Self {
        let (shared, view_start) = match (writable, share) {
            (true, _) => (SharedRecords::register(&dir, cache_bytes), None),
            (false, Some(ReaderShare { shared, start })) => (Some(shared), Some(start)),
            (false, None) => (None, None),
        };
        TitleRecords {
            fs,
            recent: RecentRecords::new(if writable { cache_bytes } else { 0 }),
            fresh: Fresh::new(if shared.is_some() && writable {
                cache_bytes
            } else {
                0
            }),
            shared,
            view_start,
            views: Views::default(),
            writable,
            vfs,
            dir,
            clock,
        }
    }

    /// The meta filesys, to read (walks, stats, checks).
    pub(crate) fn fs(&self) -> &Filesys {
        &self.fs
    }

    /// The meta filesys, to write to around [`TitleRecords::write`]: the records read lately
    /// are forgotten, since what is written here does not pass through them.
    pub(crate) fn fs_mut(&mut self) -> &mut Filesys {
        self.recent.clear();
        self.fresh.spoil();
        if let Some(shared) = &self.shared {
            shared.all_pending();
        }
        &mut self.fs
    }

    /// The one reader of title records by name: from the records read lately (the writer's
    /// handle only), else through `meta` (this handle's filesys or a fresh view of it), keeping
    /// what it read.
    pub(crate) fn read(
        &self,
        meta: &Filesys,
        staleness: Staleness,
        name: &[u8],
    ) -> Result<Option<TitleRecord>> {
        Ok(self.read_kept(meta, staleness, name)?.map(|(rec, _)| rec))
    }

    /// [`TitleRecords::read`], also telling which cache holds the bytes the record was decoded
    /// from, if one does (to keep what is worked out from them beside them).
    pub(super) fn read_kept(
        &self,
        meta: &Filesys,
        staleness: Staleness,
        name: &[u8],
    ) -> Result<Option<(TitleRecord, Option<Kept>)>> {
        if let Some((inode, bytes)) = self.recent.get(name) {
            let rec = TitleRecord::decode(&bytes, name, meta.data().path(), inode.0)?;
            return Ok(Some((rec, Some(Kept::Recent(bytes)))));
        }
        let shared = match &self.shared {
            Some(s) if !self.writable && super::view::retrying() => {
                // A read again after a stale one goes to the files: what was kept of the title
                // may be what led to the stale read.
                s.forget(name);
                None
            }
            Some(s) if !self.writable => Some(s),
            _ => None,
        };
        if let Some((inode, bytes)) = shared.and_then(|s| s.get(name)) {
            let rec = TitleRecord::decode(&bytes, name, meta.data().path(), inode.0)?;
            return Ok(Some((rec, Some(Kept::Shared(bytes)))));
        }
        // Only a read through this handle's own view, noted at its refresh (a fresh view is
        // read only when retrying, which shares nothing).
        let start = shared.and(self.view_start);
        let Some((rec, inode, bytes)) = read_located(meta, name, staleness)? else {
            return Ok(None);
        };
        let mut kept = self.recent.insert(name, inode, &bytes).map(Kept::Recent);
        if let (Some(s), Some(start)) = (shared, start) {
            kept = kept.or_else(|| s.insert(start, name, inode, &bytes).map(Kept::Shared));
        }
        Ok(Some((rec, kept)))
    }

    /// The writer's record of `name` as kept, if it is the one at `inode` (what the meta filesys
    /// names now): its bytes, to change it without reading it.
    pub(super) fn held(&self, name: &[u8], inode: KvPointer) -> Option<Arc<[u8]>> {
        let (at, bytes) = self.recent.get(name)?;
        (self.writable && at == inode).then_some(bytes)
    }

    /// The kept answer of `name` to a get of its latest render at `now` under the settings
    /// tagged `tag` ([`super::latest`]), from the same cache [`TitleRecords::read`] would take
    /// its record from.
    pub(super) fn latest(&self, name: &[u8], now: i64, tag: u64) -> Option<Latest> {
        if self.writable {
            return self.recent.latest(name, now, tag);
        }
        match &self.shared {
            // A read again after a stale one goes to the files (see `read_kept`).
            Some(s) if !super::view::retrying() => s.latest(name, now, tag),
            _ => None,
        }
    }

    /// Keeps `latest`, worked out from the record [`TitleRecords::read_kept`] found `kept`,
    /// beside it while the cache still holds those bytes.
    pub(super) fn attach(&self, name: &[u8], kept: &Kept, latest: Latest) {
        match (kept, &self.shared) {
            (Kept::Recent(bytes), _) => self.recent.attach(name, bytes, latest),
            (Kept::Shared(bytes), Some(s)) => s.attach(name, bytes, latest),
            (Kept::Shared(_), None) => {}
        }
    }

    /// The title record named `name` as this handle sees it (the writer's, to change it).
    pub(crate) fn load(&self, name: &[u8]) -> Result<Option<TitleRecord>> {
        self.read(&self.fs, Staleness::Strict, name)
    }

    /// Writes a title's record, or deletes it when it holds nothing (`version`: where
    /// [`Filesys::locate_for_update`] found it). The meta filesys may commit on its own before
    /// it grows its index or holds too many in-place writes: `sync_values` is called first,
    /// since the values the records point to must be durable by then. Not committed.
    pub(super) fn write(
        &mut self,
        name: &[u8],
        rec: &TitleRecord,
        version: Option<filesys::Version>,
        sync_values: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if let Some(shared) = &self.shared {
            shared.pending(name);
        }
        let written = self.write_unkept(name, rec, version, sync_values);
        if written.is_err() {
            // What the filesys holds of the title now is not known here.
            self.recent.forget(name);
            self.fresh.spoil();
            self.disable_shared();
        }
        written
    }

    fn write_unkept(
        &mut self,
        name: &[u8],
        rec: &TitleRecord,
        version: Option<filesys::Version>,
        sync_values: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if rec.is_empty() {
            self.recent.forget(name);
            self.fresh.forget(name);
            self.fs.delete(name)?;
            return Ok(());
        }
        // A record rewrite holds its inode, delete flags and index cell besides the record: a
        // few KiB at most. One allocation of the record, shared by the record caches.
        let record: Arc<[u8]> = rec.encode(name).into();
        if self.fs.may_commit_on_its_own(record.len() as u64 + 8192) {
            sync_values()?;
        }
        let stat = match version {
            Some(v) => self.fs.put_over(name, 0, &record, v)?,
            None => self.fs.put(name, 0, &record)?,
        };
        // Kept even when the title was not cached: the meta datafile's pages are dropped from
        // the page cache once committed, so a read of a title just written finds its record
        // here (the writer's handle) or in the shared records (read-only handles).
        let kept = self.recent.written(name, stat.inode, &record);
        self.fresh
            .push(|| kept.unwrap_or_else(|| name.into()), stat.inode, record);
        Ok(())
    }

    /// Ends a commit of the records that [`Store::commit`] began and synced with the container's
    /// (the records' held writes are applied). A failure forgets the records read lately.
    pub(super) fn commit_end(&mut self) -> Result<()> {
        let committed = self.fs.commit_end();
        match (&committed, &self.shared) {
            (Err(_), _) => self.forget_all(),
            (Ok(()), Some(shared)) => {
                shared.published();
                // Each is its title's committed record now (the writer holds the store's lock;
                // a title written twice is listed in the order written, the later kept).
                for (name, inode, bytes) in self.fresh.take() {
                    shared.committed(&name, inode, &bytes);
                }
            }
            (Ok(()), None) => {}
        }
        self.fresh.clear();
        committed
    }

    /// Forgets the records read lately (a commit of the values failed).
    pub(super) fn forget_all(&mut self) {
        self.recent.clear();
        self.fresh.spoil();
        self.disable_shared();
    }

    /// What the files hold is no longer known to the writer: read-only handles stop using the
    /// records it shared.
    fn disable_shared(&self) {
        if let (true, Some(shared)) = (self.writable, &self.shared) {
            shared.disable();
        }
    }

    /// Moves a read-only handle's view to the latest commit.
    pub(super) fn refresh(&mut self) -> Result<()> {
        self.view_start = None;
        let start = self.shared.as_ref().map(|s| s.read_start());
        self.fs.refresh()?;
        self.views.clear();
        self.view_start = start;
        Ok(())
    }
}

impl Drop for TitleRecords {
    fn drop(&mut self) {
        // Before the meta filesys (and the store's lock) goes: another writer may follow.
        self.disable_shared();
    }
}

/// The records a writer wrote since its last publication, up to a budget of bytes: past it, or
/// after records were written around [`TitleRecords::write`] (or a write failed), none is shared
/// until the next publication. Names and bytes are those the writer's record cache holds, not
/// copies.
#[derive(Debug)]
struct Fresh {
    budget: usize,
    used: usize,
    spoiled: bool,
    records: Vec<FreshRecord>,
}

/// A record written: its name, inode and bytes.
type FreshRecord = (Arc<[u8]>, KvPointer, Arc<[u8]>);

impl Fresh {
    fn new(budget: usize) -> Self {
        Fresh {
            budget,
            used: 0,
            spoiled: budget == 0,
            records: Vec::new(),
        }
    }

    /// Lists a record written at `inode`, named by what `name` gives (called only when listed).
    fn push(&mut self, name: impl FnOnce() -> Arc<[u8]>, inode: KvPointer, record: Arc<[u8]>) {
        if self.spoiled {
            return;
        }
        let name = name();
        self.used += name.len() + record.len();
        if self.used > self.budget {
            // A load's commit: its records are not all wanted in memory.
            self.spoil();
            return;
        }
        self.records.push((name, inode, record));
    }

    fn forget(&mut self, name: &[u8]) {
        self.records.retain(|(n, _, _)| **n != *name);
    }

    /// Nothing more is shared until the next publication.
    fn spoil(&mut self) {
        self.spoiled = true;
        self.records = Vec::new();
    }

    /// The records to share (none when spoiled).
    fn take(&mut self) -> Vec<FreshRecord> {
        std::mem::take(&mut self.records)
    }

    /// A publication happened: a fresh list begins.
    fn clear(&mut self) {
        self.records.clear();
        self.used = 0;
        self.spoiled = self.budget == 0;
    }
}

/// The title record a walk of the meta filesys found as `file`, checked under its own key.
pub(crate) fn record_of(meta: &Filesys, file: &filesys::FileStat) -> Result<TitleRecord> {
    let bytes = meta.read_stat(file)?;
    TitleRecord::decode(&bytes, &file.name, meta.data().path(), file.inode.0)
}
