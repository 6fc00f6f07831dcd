//! Title records that a writer's handle has committed, kept for the read-only handles of the same
//! process (the handles `wink serve` reads with), so that their warm read is one pread too.
//!
//! A read-only handle cannot tell by itself that a record it read is still the title's: another
//! process's commit shows only in the meta files. But when the writer's handle lives in the same
//! process, it knows which records it rewrites and when their commit becomes visible, and tells a
//! cache shared by every read-only handle of that store in the process:
//!
//! 1. Before a record is written (or deleted), its name is marked *pending* and its entry
//!    dropped: until step 2, nothing read of that title enters the cache.
//! 2. After a commit has applied its held writes (the old inode flagged deleted, the index cell
//!    moved: what a read-only handle reads from then on is the new record), the pending names
//!    are cleared and the *epoch* advances.
//!
//! A reader notes the epoch before it reads a record from the meta files, and keeps what it read
//! only if the epoch is unchanged and the name not pending: a read that overlapped a commit's
//! publication may have read the record it replaced, and is not kept. So an entry in the cache
//! is the title's committed record until the writer marks the title pending, which drops it
//! first. While the writer is open no other process writes (it holds the store's lock); when it
//! is dropped, or a write or commit of it fails (what the files hold is then not known here),
//! the cache is disabled for good and read-only handles read the meta files again.
//!
//! Only handles opened while the writer is open share it; a handle in a process without the
//! writer keeps no cache (its reads see another process's commits through the files).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::format::kvseq::KvPointer;

use super::latest::Latest;
use super::recent::RecentRecords;

/// The cache of committed title records of one store, shared by its writer and read-only
/// handles in this process (see the module doc).
#[derive(Debug)]
pub(super) struct SharedRecords {
    cache: RecentRecords,
    alive: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    pending: HashSet<Box<[u8]>>,
    /// Records were written around the writer's [`SharedRecords::pending`] calls.
    all_pending: bool,
}

/// Where a read of the meta files began, to be given back to [`SharedRecords::insert`].
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadStart(u64);

/// The stores whose writer is open in this process, by canonical directory.
static OPEN_WRITERS: Mutex<Vec<(PathBuf, Weak<SharedRecords>)>> = Mutex::new(Vec::new());

fn writers() -> MutexGuard<'static, Vec<(PathBuf, Weak<SharedRecords>)>> {
    OPEN_WRITERS.lock().unwrap_or_else(|p| p.into_inner())
}

impl SharedRecords {
    /// The cache of the writer just opened on `dir` (`budget` bytes; none when 0 or when the
    /// directory has no canonical name), made known to read-only handles opened later.
    pub(super) fn register(dir: &Path, budget: usize) -> Option<Arc<SharedRecords>> {
        let key = std::fs::canonicalize(dir).ok().filter(|_| budget > 0)?;
        let shared = Arc::new(SharedRecords {
            cache: RecentRecords::new(budget),
            alive: AtomicBool::new(true),
            state: Mutex::new(State::default()),
        });
        let mut open = writers();
        open.retain(|(k, w)| *k != key && w.strong_count() > 0);
        open.push((key, Arc::downgrade(&shared)));
        Some(shared)
    }

    /// The cache of the writer open on `dir` in this process, if any.
    pub(super) fn find(dir: &Path) -> Option<Arc<SharedRecords>> {
        let key = std::fs::canonicalize(dir).ok()?;
        let open = writers();
        let (_, weak) = open.iter().find(|(k, _)| *k == key)?;
        weak.upgrade().filter(|s| s.alive.load(Ordering::Acquire))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state whole; a panic elsewhere does not make it wrong.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed record of `name`, if kept.
    pub(super) fn get(&self, name: &[u8]) -> Option<(KvPointer, Arc<[u8]>)> {
        if !self.alive.load(Ordering::Acquire) {
            return None;
        }
        self.cache.get(name)
    }

    /// The kept answer of `name` to a get of its latest render (see [`RecentRecords::latest`]).
    pub(super) fn latest(&self, name: &[u8], now: i64, tag: u64) -> Option<Latest> {
        if !self.alive.load(Ordering::Acquire) {
            return None;
        }
        self.cache.latest(name, now, tag)
    }

    /// Keeps `latest`, worked out from `bytes` as this cache handed them out: only while the
    /// cache still holds those very bytes, so the answer is of the title's committed record
    /// (what drops or replaces the record drops the answer).
    pub(super) fn attach(&self, name: &[u8], bytes: &Arc<[u8]>, latest: Latest) {
        if self.alive.load(Ordering::Acquire) {
            self.cache.attach(name, bytes, latest);
        }
    }

    /// Notes the epoch before a read of the meta files.
    pub(super) fn read_start(&self) -> ReadStart {
        ReadStart(self.state().epoch)
    }

    /// Keeps `bytes`, read from `inode` by a read that began at `start`, unless a commit was
    /// published since or `name` is being rewritten. Returns the bytes as kept.
    pub(super) fn insert(
        &self,
        start: ReadStart,
        name: &[u8],
        inode: KvPointer,
        bytes: &[u8],
    ) -> Option<Arc<[u8]>> {
        let state = self.state();
        let current = state.epoch == start.0 && !state.all_pending;
        if current && !state.pending.contains(name) && self.alive.load(Ordering::Acquire) {
            // Under the state's lock, so that no name turns pending between check and insert.
            return self.cache.insert(name, inode, bytes);
        }
        None
    }

    /// Keeps `bytes` at `inode` as `name`'s record: the writer wrote it, and the commit it was
    /// written in has been published.
    pub(super) fn committed(&self, name: &Arc<[u8]>, inode: KvPointer, bytes: &Arc<[u8]>) {
        let state = self.state();
        if !state.all_pending
            && !state.pending.contains(&**name)
            && self.alive.load(Ordering::Acquire)
        {
            // The writer's own bytes, shared: not a copy.
            self.cache.keep_shared(name, inode, bytes);
        }
    }

    /// The writer is about to write or delete `name`'s record.
    pub(super) fn pending(&self, name: &[u8]) {
        let mut state = self.state();
        if state.pending.contains(name) {
            // Forgotten when it turned pending, and nothing keeps a pending name: a title
            // rewritten within one commit (a load) costs one lookup.
            return;
        }
        state.pending.insert(name.into());
        self.cache.forget(name);
    }

    /// The writer is about to write records around [`SharedRecords::pending`].
    pub(super) fn all_pending(&self) {
        let mut state = self.state();
        state.all_pending = true;
        self.cache.clear();
    }

    /// A commit of the writer applied its held writes: every record written before it is what
    /// a read of the meta files finds now.
    pub(super) fn published(&self) {
        let mut state = self.state();
        state.epoch += 1;
        state.pending.clear();
        state.all_pending = false;
    }

    /// Forgets everything, for good (the writer is gone, or failed a write or a commit).
    pub(super) fn disable(&self) {
        let _state = self.state();
        self.alive.store(false, Ordering::Release);
        self.cache.clear();
    }

    /// Forgets `name`'s record (a read-only handle found its view stale reading it).
    pub(super) fn forget(&self, name: &[u8]) {
        self.cache.forget(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> SharedRecords {
        SharedRecords {
            cache: RecentRecords::new(1 << 20),
            alive: AtomicBool::new(true),
            state: Mutex::new(State::default()),
        }
    }

    #[test]
    fn a_read_overlapping_a_publication_or_a_pending_write_is_not_kept() {
        let s = shared();
        let start = s.read_start();
        s.insert(start, b"d/a", KvPointer(1), b"a1");
        assert!(s.get(b"d/a").is_some());
        // A rewrite drops the entry, and a read while it is pending is not kept.
        s.pending(b"d/a");
        assert!(s.get(b"d/a").is_none());
        s.insert(s.read_start(), b"d/a", KvPointer(1), b"a1");
        assert!(s.get(b"d/a").is_none());
        // A read begun before the commit's publication is not kept after it.
        let before = s.read_start();
        s.published();
        s.insert(before, b"d/a", KvPointer(1), b"a1");
        assert!(s.get(b"d/a").is_none());
        s.insert(s.read_start(), b"d/a", KvPointer(9), b"a2");
        assert_eq!(
            s.get(b"d/a").map(|(p, b)| (p.0, b.to_vec())),
            Some((9, b"a2".to_vec()))
        );
        // Writes around the pending calls keep nothing until the next publication.
        s.all_pending();
        assert!(s.get(b"d/a").is_none());
        s.insert(s.read_start(), b"d/b", KvPointer(3), b"b");
        assert!(s.get(b"d/b").is_none());
        s.published();
        s.insert(s.read_start(), b"d/b", KvPointer(3), b"b");
        assert!(s.get(b"d/b").is_some());
        s.disable();
        s.insert(s.read_start(), b"d/b", KvPointer(3), b"b");
        assert!(s.get(b"d/b").is_none());
    }

    #[test]
    fn read_only_handles_find_the_writer_of_their_directory_while_it_is_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(SharedRecords::find(dir.path()).is_none());
        let w = SharedRecords::register(dir.path(), 1 << 20).unwrap();
        let alias = dir.path().join(".");
        assert!(Arc::ptr_eq(&SharedRecords::find(&alias).unwrap(), &w));
        w.disable();
        assert!(SharedRecords::find(dir.path()).is_none());
        drop(w);
        assert!(SharedRecords::find(dir.path()).is_none());
        assert!(SharedRecords::register(dir.path(), 0).is_none());
    }
}
