//! Reads of a read-only handle that stay current while a writer rewrites title records.
//!
//! A read-only handle sees the title records as of its open: its meta filesys's FILESIZE and the
//! journal it replayed then. The writer rewrites a record by appending a new version and, at its
//! commit, flagging the old version's entries deleted in place and pointing the index cell at the
//! new one. A read that found the old inode before that commit and reads its data entry after it
//! finds the entry deleted; the filesys reports that on a read-only view as [`Error::Stale`] (on
//! the writer's view nothing changes under a read, so there it is damage). A lookup that passes
//! a cell naming an entry past the view, or the title's inode deleted under a cell that still
//! names it, is stale too, and so is a record naming a container a compaction has removed since.
//!
//! Each time, the read opens the meta filesys anew (its latest commit) and reads again through
//! it; the handle keeps that view for later reads. The attempts are bounded, and the last one
//! reads as the writer does: what is still wrong across fresh views is reported as the damage or
//! the miss it is, never as staleness that would not go away.

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::filesys::{self, Filesys, Staleness};

use crate::format::kvseq::KvPointer;

use super::record::TitleRecord;
use super::records::TitleRecords;
use super::Store;

/// Reads through fresh views before the last, strict, attempt ([`retry_stale`]).
const ATTEMPTS: u32 = 6;

/// A read-only handle's newer views of the title records.
#[derive(Debug, Default)]
pub(super) struct Views {
    /// The meta filesys as last opened anew; the handle's own until the first stale read.
    fresh: RwLock<Option<Arc<Filesys>>>,
    renewals: AtomicU64,
}

impl Views {
    /// Forgets the newer view (the handle's own was just refreshed).
    pub(super) fn clear(&mut self) {
        *self.fresh.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The title records a read goes through.
enum MetaView<'a> {
    Own(&'a Filesys),
    Fresh(Arc<Filesys>),
}

impl std::ops::Deref for MetaView<'_> {
    type Target = Filesys;

    fn deref(&self) -> &Filesys {
        match self {
            MetaView::Own(fs) => fs,
            MetaView::Fresh(fs) => fs,
        }
    }
}

/// A sign that the view is older than what it read about: reading again through a fresh one
/// answers it. (A container that cannot be found was removed by a compaction after the record
/// naming it was read; the store opens every container it lists.)
fn is_stale(e: &Error) -> bool {
    match e {
        Error::Stale { .. } => true,
        Error::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
        _ => false,
    }
}

/// The title record named `name` (a record name, as the store's files name it), read through
/// `meta` treating signs of a later commit as `staleness` says and decoded under its own key;
/// with the inode it was read from and its bytes, for the cache of records read lately.
pub(super) fn read_located(
    meta: &Filesys,
    name: &[u8],
    staleness: Staleness,
) -> Result<Option<(TitleRecord, KvPointer, Vec<u8>)>> {
    match meta.read_located_as(name, staleness)? {
        Some((stat, bytes)) => {
            let rec = TitleRecord::decode(&bytes, name, meta.data().path(), stat.inode.0)?;
            Ok(Some((rec, stat.inode, bytes)))
        }
        None => Ok(None),
    }
}

/// [`read_located`] without the cache's part: for a reader with a meta filesys of its own.
pub(crate) fn read_record(
    meta: &Filesys,
    name: &[u8],
    staleness: Staleness,
) -> Result<Option<TitleRecord>> {
    Ok(read_located(meta, name, staleness)?.map(|(rec, _, _)| rec))
}

/// [`Store::read_fresh`] for a reader that holds a meta filesys of its own (a compaction job's
/// survey, on its own thread): `reopen()` gives it a fresh view ([`retry_stale`]).
pub(crate) fn read_renewing<T>(
    meta: &RefCell<Filesys>,
    reopen: impl Fn() -> Result<Filesys>,
    read: impl Fn(&Filesys, Staleness) -> Result<T>,
) -> Result<T> {
    retry_stale(
        // The borrow ends with the read: a renewal replaces the view.
        |staleness| read(&meta.borrow(), staleness),
        || {
            *meta.borrow_mut() = reopen()?;
            Ok(())
        },
    )
}

thread_local! {
    /// This thread reads again after a stale read ([`retry_stale`]).
    static RETRYING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is reading again after a stale read: such a read bypasses the records
/// kept in memory.
pub(super) fn retrying() -> bool {
    RETRYING.with(|r| r.get())
}

/// Ends [`retrying`] with the read that began it, however it ends (retries do not nest: a read
/// runs no other).
struct Retrying(bool);

impl Retrying {
    fn begin() -> Self {
        Retrying(RETRYING.with(|r| r.replace(false)))
    }
}

impl Drop for Retrying {
    fn drop(&mut self) {
        RETRYING.with(|r| r.set(self.0));
    }
}

/// Runs `read` reporting staleness; while it finds its view stale, `renew`s the view and runs
/// it again, up to [`ATTEMPTS`] times (a second stale read in a row means another commit landed
/// during the read: each further one waits a little longer), then once more reading as the
/// writer does, so that what stays wrong across fresh views is reported as what it is.
fn retry_stale<T>(
    read: impl Fn(Staleness) -> Result<T>,
    renew: impl Fn() -> Result<()>,
) -> Result<T> {
    let _retrying = Retrying::begin();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            RETRYING.with(|r| r.set(true));
        }
        match read(Staleness::Report) {
            Err(e) if is_stale(&e) => {
                if attempt > 0 {
                    std::thread::sleep(Duration::from_micros(100 << attempt));
                }
                renew()?;
            }
            done => return done,
        }
    }
    read(Staleness::Strict)
}

impl TitleRecords {
    /// Runs `read` (which reads title records through the filesys it is given, and values)
    /// against the current view, renewed while a read-only handle finds it stale
    /// ([`retry_stale`]); the writer's view is always current.
    pub(crate) fn read_fresh<T>(
        &self,
        read: impl Fn(&Filesys, Staleness) -> Result<T>,
    ) -> Result<T> {
        if self.writable {
            return read(&self.fs, Staleness::Strict);
        }
        retry_stale(
            |staleness| read(&self.meta_view(), staleness),
            || self.renew_view(),
        )
    }

    fn meta_view(&self) -> MetaView<'_> {
        let fresh = self.views.fresh.read().unwrap_or_else(|p| p.into_inner());
        match fresh.as_ref() {
            Some(fs) => MetaView::Fresh(fs.clone()),
            None => MetaView::Own(&self.fs),
        }
    }

    /// Opens the title records anew: the latest commit becomes this handle's view.
    fn renew_view(&self) -> Result<()> {
        let open = filesys::OpenOptions {
            clock: self.clock.clone(),
            ..filesys::OpenOptions::read_only()
        };
        let fresh = super::open_meta(self.vfs.clone(), &self.dir, &open)?;
        let mut slot = self.views.fresh.write().unwrap_or_else(|p| p.into_inner());
        // Threads sharing the handle renew at once: a view opened earlier must not replace one
        // opened later, or a read after another on the same thread would see the store go back
        // (a render just listed, not found). The records only grow by appending.
        let current = slot
            .as_ref()
            .map_or(self.fs.data().filesize(), |v| v.data().filesize());
        if fresh.data().filesize() >= current {
            *slot = Some(Arc::new(fresh));
        }
        self.views.renewals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Store {
    /// [`TitleRecords::read_fresh`] of this store's records.
    pub(super) fn read_fresh<T>(
        &self,
        read: impl Fn(&Filesys, Staleness) -> Result<T>,
    ) -> Result<T> {
        self.records.read_fresh(read)
    }

    /// The title record named `name`, through a view kept current (see [`Store::read_fresh`]).
    pub(crate) fn load_fresh(&self, name: &[u8]) -> Result<Option<TitleRecord>> {
        self.read_fresh(|meta, staleness| self.records.read(meta, staleness, name))
    }

    /// The title record named `name` as this handle sees it (the writer's, to change it).
    pub(crate) fn load(&self, name: &[u8]) -> Result<Option<TitleRecord>> {
        self.records.load(name)
    }

    /// How many times reads of this read-only handle found its view of the title records stale
    /// (a writer's commit changed what they read) and read again through a fresh one.
    pub fn renewals(&self) -> u64 {
        self.records.views.renewals.load(Ordering::Relaxed)
    }
}
