//! filesys: a flat filesystem on a kvseq datafile and a hindex indexfile; the ao variant adds a
//! time index.
//!
//! | file        | format | PURPOSE    | holds                                                  |
//! |-------------|--------|------------|--------------------------------------------------------|
//! | `BASE.data` | kvseq  | `FSYSDATA` | inodes `NAME/I0` and data entries `<fileid hex>/D<n>`   |
//! | `BASE.idx`  | hindex | `FSYSIDX`  | CELLSZ 2, HTALGO 1; one cell per live `NAME/I0`          |
//! | `BASE.time` | kvseq  | `FSYSTIME` | ao only: time marks (see [`timeindex`])                 |
//! | `BASE.jnl`  | kvseq  | `FSYSJRNL` | the redo journal of in-place writes (see [`journal`])   |
//! | `BASE.jnl2` | kvseq  | `FSYSJRNL` | its second slot: the journals of odd commit numbers     |
//!
//! Datafile superblock variables: ISZ (new inode size), ITOTSZ (bytes of live inodes), DTOTSZ
//! (LSIZE total of live files), HAVEDUPS, HAVEAO, and NEXTFID (this project's: the FILEID the next
//! file gets). The inode layout is in [`inode`].
//!
//! Durability: appends go straight to the files; in-place writes (delete flags, inode bookkeeping,
//! index cells, superblocks) wait in an overlay and are committed all at once through the journal
//! at [`Filesys::sync`]. After a crash the filesys is exactly its last committed state.

mod behind;
pub mod check;
pub mod inode;
pub mod journal;
pub mod overlay;
pub mod timeindex;

mod files;
mod iter;
mod mirror;
mod ops;
mod prefetch;
mod recover;
mod reindex;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::format::hash::KeyHash;
use crate::format::hindex::{HIndex, HIndexOptions};
use crate::format::kvseq::{DropBehind, Entry, KvPointer, KvSeq, KvSeqOptions};
use crate::format::repr::Repr;
use crate::format::superblock::{var, Purpose, Superblock, VarName};
use crate::storage::{self, Storage};
use crate::vfs::{RealFs, Vfs, WriterLock};

pub use files::{file_path, files_size, remove_files, scratch_files, staged_datafile, FILES};
pub use iter::FileIter;
pub use ops::{Extent, Version};
pub use overlay::OverlayStorage;
use timeindex::TimeIndex;

/// Datafile variable: the size of new inodes, bytes.
pub const ISZ: VarName = VarName::new(b"ISZ");
/// Datafile variable: the total size of the live inodes, bytes.
pub const ITOTSZ: VarName = VarName::new(b"ITOTSZ");
/// Datafile variable: the total LSIZE of the live files, bytes.
pub const DTOTSZ: VarName = VarName::new(b"DTOTSZ");
/// Datafile variable: 1 when a name may have several versions (the last live one counts).
pub const HAVEDUPS: VarName = VarName::new(b"HAVEDUPS");
/// Datafile variable: 1 in the append-only (ao) variant.
pub const HAVEAO: VarName = VarName::new(b"HAVEAO");
/// This project's variable: the FILEID the next new file gets.
pub const NEXTFID: VarName = VarName::new(b"NEXTFID");
/// PURPOSE of a filesys datafile `BASE.data`.
pub const DATA_PURPOSE: Purpose = Purpose(*b"FSYSDATA");
/// PURPOSE of a filesys indexfile `BASE.idx`.
pub const INDEX_PURPOSE: Purpose = Purpose(*b"FSYSIDX ");
/// Longest file name (bytes).
pub const MAX_NAME: usize = 4096;
/// Largest data entry written; a larger append is split.
pub const MAX_DATA_ENTRY: u64 = 256 << 20;
/// In-place writes held in memory before the filesys commits on its own.
pub const CHECKPOINT_BYTES: u64 = 32 << 20;

const TAG_DATA: u8 = 0;
const TAG_INDEX: u8 = 1;
const TAG_TIME: u8 = 2;

/// Settings for a new filesys.
#[derive(Clone, Debug)]
pub struct FsOptions {
    /// The append-only variant (HAVEAO): no rename, a full inode is an error, a time index.
    pub ao: bool,
    /// A name may have several versions, the last live one counting (HAVEDUPS).
    pub dups: bool,
    /// Size of new inodes (bytes; holds (ISZ − 56) / 16 data pointers).
    pub isz: u64,
    /// Seconds per time-mark period (ao).
    pub timemp: i64,
    /// Initial index size (cells).
    pub htsize: u64,
    /// Preallocation step of the datafile.
    pub fileincr: u64,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            ao: false,
            dups: false,
            isz: 120,
            timemp: 3600,
            htsize: 1024,
            fileincr: 16 << 20,
        }
    }
}

/// How to open a filesys.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Open as the writer (taking the lock; in-place writes commit through the journal), else
    /// read-only.
    pub writable: bool,
    /// Wait for another writer's lock instead of failing with "in use".
    pub wait: bool,
    /// Where new files' mtimes come from.
    pub clock: Arc<dyn Clock>,
    /// Page-cache policy for written data: drop it in chunks of this many bytes (None: keep).
    pub drop_behind: Option<u64>,
    /// A writer's appends to its datafile are written by a thread of their own, so that a load
    /// copies bytes into the page cache on one core while it encodes and indexes on the other;
    /// a commit writes what is still queued itself (see [`OverlayStorage::write_behind`]).
    pub background_appends: bool,
}

impl OpenOptions {
    /// A read-only handle's options: takes no lock, writes nothing.
    pub fn read_only() -> Self {
        OpenOptions {
            writable: false,
            ..OpenOptions::writer()
        }
    }

    /// A writer's options: fails "in use" when another writer holds the lock; the system clock;
    /// written data dropped from the page cache every 8 MiB.
    pub fn writer() -> Self {
        OpenOptions {
            writable: true,
            wait: false,
            clock: clock::system(),
            drop_behind: Some(8 << 20),
            background_appends: true,
        }
    }
}

/// How a read treats signs that a writer committed a change to what it reads after this handle's
/// view was taken: a deleted data entry of the inode it found (the file rewritten or removed), or
/// an index cell naming an inode the view does not hold live. A writer's view is always current,
/// so it reads [`Staleness::Strict`]. A read-only handle reports a deleted data entry by default
/// (it is never damage there), and a lookup's miss only when asked
/// ([`Filesys::read_located_as`]): "no such file" stays the answer of a plain lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staleness {
    /// [`Error::Stale`]: refresh and read again.
    Report,
    /// As a writer reads: such a cell is no file; such a data entry is corruption.
    Strict,
}

/// What a file looks like from outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// The file's name.
    pub name: Vec<u8>,
    /// Its logical size (LSIZE), bytes.
    pub size: u64,
    /// Its type (FTYPE).
    pub ftype: u8,
    /// Its mtime (FMTIME), seconds since the epoch.
    pub mtime: i64,
    /// Its FILEID.
    pub fileid: u64,
    /// Where its inode entry lies in the datafile.
    pub inode: crate::format::kvseq::KvPointer,
    /// Bytes the inode occupies (its capacity).
    pub inode_size: u64,
    /// Data entries the file has.
    pub data_entries: u64,
}

impl FileStat {
    /// The stat of the live file `name` whose inode entry at `ptr` holds `inode`.
    pub(crate) fn of(name: &[u8], ptr: KvPointer, inode: &inode::Inode) -> FileStat {
        FileStat {
            name: name.to_vec(),
            size: inode.lsize,
            ftype: inode.ftype,
            mtime: inode.mtime,
            fileid: inode.fileid,
            inode: ptr,
            inode_size: inode.size,
            data_entries: inode.data.len() as u64,
        }
    }
}

/// What a writer's open repaired or noticed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// One line per repair or notice, for the log.
    pub actions: Vec<String>,
}

/// An open filesys.
#[derive(Debug)]
pub struct Filesys {
    vfs: Arc<dyn Vfs>,
    base: PathBuf,
    data: KvSeq,
    idx: HIndex,
    time: Option<TimeIndex>,
    /// The two journal slots ([`journal::SLOTS`]), a writer's only; the second is created by
    /// the first commit that needs it.
    journals: [Option<Box<dyn Storage>>; 2],
    overlays: Vec<(u8, OverlayStorage)>,
    writable: bool,
    _lock: Option<WriterLock>,
    clock: Arc<dyn Clock>,
    seq: u64,
    /// The commit whose journal is written and whose barrier has not completed yet.
    staged: Option<u64>,
    /// What the next commit's journal says it depends on ([`Filesys::require`]).
    requires: Option<journal::Requires>,
    recovery: Recovery,
    commits: u64,
    /// Calls of [`Filesys::check_writable`], which every write makes first: a lookup made at one
    /// count is still good at the same count ([`Filesys::put_over`]).
    writes: std::sync::atomic::AtomicU64,
    /// Whether a lookup's miss is verified ([`Filesys::set_verify_misses`]).
    verify_misses: bool,
    /// The file whose sync (or the apply after a barrier) failed: this writer is failed
    /// ([`Error::WriterFailed`]) until reopened. Set through `&self`, since a barrier borrows the
    /// files it syncs.
    failed: std::sync::OnceLock<PathBuf>,
    /// Where the last commit wrote the datafile in place (dropped from the page cache once the
    /// next barrier has made them durable).
    applied_in_place: Vec<(u64, u64)>,
    /// The keys of inode entries this writer appended or verified, by pointer, and the live
    /// entries it appended: what a lookup's reads of the datafile fetch otherwise
    /// ([`KnownKeys`]).
    known_keys: KnownKeys,
    /// The hashes of the index's keys, being read for its next growth.
    ahead: Option<prefetch::HashesAhead>,
    /// Used cells from which a growth is read ahead ([`prefetch::AHEAD_MIN_ENTRIES`]; tests
    /// lower it).
    ahead_min_entries: u64,
    /// Keys the last index growth read from the datafile (the others it had in memory).
    growth_key_reads: u64,
    /// The table size a read-ahead was last started for: one per size, even when it could not
    /// start (the scan of the table is not repeated on every put).
    ahead_for: u64,
}

/// Keys of the datafile's inode entries by pointer, kept by a writer that drops its written
/// pages from the page cache or verifies its misses: an index growth rehashes every key, and a
/// put of a new name verifies every used cell on its probe path (title records), a key read
/// each; with the written pages dropped, each was a disk read. An entry's key never changes
/// while its datafile does not go (the writer appends; it never rewrites an entry's key).
///
/// Of an inode entry this writer appended, the value is kept too, until the entry is deleted or
/// its value rewritten in place: a rewrite of the file (a title's record, on nine puts in ten)
/// then finds its current inode without reading the entry back, which with the pages dropped
/// was a disk read, and with the appends queued ([`behind`]) a wait for the queue.
///
/// Bounded by [`KNOWN_KEYS_BYTES`]: past it, nothing more is kept. A damaged cell is still found
/// (its stored hash or pointer no longer agrees with the key); a key or inode damaged on disk
/// after this writer wrote it is found when its file is read by another handle (its CRC), or
/// by `wink check`, not by this writer's lookups.
#[derive(Debug, Default)]
pub(crate) struct KnownKeys {
    on: bool,
    keys: std::sync::Mutex<Keys>,
}

/// What is kept of one entry: its key and, while it is live and as appended, its value.
#[derive(Debug)]
struct Known {
    key: Box<[u8]>,
    /// The value and the offset of its first byte in the datafile.
    value: Option<(Box<[u8]>, u64)>,
}

impl Known {
    /// Bytes counted against [`KNOWN_KEYS_BYTES`].
    fn cost(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, |(v, _)| v.len() + 16) + 48
    }
}

/// An inode entry's value as appended, and the offset of its first byte.
pub(crate) type KnownValue<'a> = (&'a [u8], u64);

/// Entries by pointer, and the bytes they count against [`KNOWN_KEYS_BYTES`].
#[derive(Debug, Default)]
struct Keys {
    by_ptr: HashMap<u64, Known>,
    used: usize,
}

impl Keys {
    /// Keeps `known` at `ptr` (in place of anything kept there) if the budget allows: whole,
    /// or else its key alone, or nothing.
    fn insert(&mut self, ptr: KvPointer, mut known: Known) {
        self.remove(ptr);
        if self.used + known.cost() > KNOWN_KEYS_BYTES {
            known.value = None;
        }
        if self.used + known.cost() <= KNOWN_KEYS_BYTES {
            self.used += known.cost();
            self.by_ptr.insert(ptr.0, known);
        }
    }

    fn remove(&mut self, ptr: KvPointer) -> Option<Known> {
        let known = self.by_ptr.remove(&ptr.0)?;
        self.used -= known.cost();
        Some(known)
    }
}

/// The bytes a writer keeps ([`KnownKeys`]): ~100,000 title records' names and inodes.
const KNOWN_KEYS_BYTES: usize = 16 << 20;

impl KnownKeys {
    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note(&self, ptr: KvPointer, key: &[u8], value: Option<KnownValue<'_>>) {
        if !self.on {
            return;
        }
        // An append at a pointer seen before (after a failed write gave its bytes back): the
        // new entry is the one there.
        let value = value.map(|(v, at)| (v.into(), at));
        self.lock().insert(
            ptr,
            Known {
                key: key.into(),
                value,
            },
        );
    }

    /// The entry at `old` was replaced by one with the same key appended at `new` (a rewrite of
    /// its file): the key moves to `new`, without a copy, with the new entry's value. The old
    /// entry is deleted and no cell names it any more, so only live entries count against the
    /// budget.
    fn moved(&self, old: KvPointer, new: KvPointer, key: &[u8], value: Option<KnownValue<'_>>) {
        if !self.on {
            return;
        }
        let mut keys = self.lock();
        // The key kept is reused when it is the one expected; anything kept at `new` is from an
        // append whose bytes were given back.
        let key = match keys.remove(old) {
            Some(kept) if *kept.key == *key => kept.key,
            _ => key.into(),
        };
        let value = value.map(|(v, at)| (v.into(), at));
        keys.insert(new, Known { key, value });
    }

    /// The entry at `ptr` is deleted or its value rewritten in place: its value is no longer
    /// the one kept (its key stays).
    fn forget_value(&self, ptr: KvPointer) {
        if !self.on {
            return;
        }
        let mut keys = self.lock();
        if let Some(mut known) = keys.remove(ptr) {
            known.value = None;
            keys.insert(ptr, known);
        }
    }

    fn holds(&self, ptr: KvPointer) -> bool {
        self.on && self.lock().by_ptr.contains_key(&ptr.0)
    }

    fn get(&self, ptr: KvPointer) -> Option<Vec<u8>> {
        self.with(ptr, |k| k.to_vec())
    }

    /// The live entry this writer appended at `ptr`, as a read of it would return it, if kept.
    fn entry(&self, ptr: KvPointer) -> Option<Entry> {
        if !self.on {
            return None;
        }
        let keys = self.lock();
        let known = keys.by_ptr.get(&ptr.0)?;
        let (value, value_offset) = known.value.as_ref()?;
        Some(Entry {
            ptr,
            deleted: false,
            key: known.key.to_vec(),
            value: value.to_vec(),
            value_offset: *value_offset,
        })
    }

    /// `f` of the key kept for `ptr`, if any, without copying it.
    fn with<T>(&self, ptr: KvPointer, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        if !self.on {
            return None;
        }
        let keys = self.lock();
        keys.by_ptr.get(&ptr.0).map(|k| f(&k.key))
    }
}

/// The datafile's keys, through the writer's [`KnownKeys`].
pub(crate) struct KeysOf<'a> {
    data: &'a KvSeq,
    known: &'a KnownKeys,
}

impl crate::format::hindex::KeySource for KeysOf<'_> {
    fn key_at(&self, ptr: KvPointer) -> Result<Vec<u8>> {
        if let Some(key) = self.known.get(ptr) {
            return Ok(key);
        }
        let key = self.data.key_at(ptr)?;
        self.known.note(ptr, &key, None);
        Ok(key)
    }

    fn key_hash_at(&self, ptr: KvPointer) -> Result<KeyHash> {
        match self.known.with(ptr, KeyHash::of) {
            Some(hash) => Ok(hash),
            None => Ok(KeyHash::of(&self.key_at(ptr)?)),
        }
    }
}

/// `BASE.ext`.
impl Filesys {
    /// Creates a filesys on the real file system and opens it for writing.
    pub fn create(base: &Path, fs: &FsOptions, open: &OpenOptions) -> Result<Filesys> {
        Filesys::create_in(Arc::new(RealFs), base, fs, open)
    }

    /// Creates a filesys in `vfs` and opens it for writing.
    pub fn create_in(
        vfs: Arc<dyn Vfs>,
        base: &Path,
        fs: &FsOptions,
        open: &OpenOptions,
    ) -> Result<Filesys> {
        validate_options(fs)?;
        let data_path = file_path(base, "data");
        if vfs.exists(&data_path) {
            return Err(Error::invalid(format!(
                "{} exists already",
                data_path.display()
            )));
        }
        // The datafile appears last, by rename: without it nothing was ever committed, so the
        // other files are leftovers of an interrupted create.
        let staged = staged_datafile(base);
        remove_files(vfs.as_ref(), base, std::slice::from_ref(&staged))?;
        let now = open.clock.now();
        let kv_base = KvSeqOptions {
            clock: open.clock.clone(),
            ..KvSeqOptions::default()
        };
        let idx_opts = HIndexOptions {
            purpose: INDEX_PURPOSE,
            htsize: fs.htsize,
            cellsz: 2,
            time: now,
            ..HIndexOptions::default()
        };
        // The files are written first and made durable together by one barrier, then the
        // datafile is named: one round trip to the disk instead of one (or two) per file.
        let idx = HIndex::create_unsynced(vfs.create_new(&file_path(base, "idx"))?, &idx_opts)?;
        let time = if fs.ao {
            Some(KvSeq::create_unsynced(
                vfs.create_new(&file_path(base, "time"))?,
                &timeindex::options(&kv_base, fs.timemp),
            )?)
        } else {
            None
        };
        // The odd commits' slot, `BASE.jnl2`, is created by the first commit that needs it.
        let jnl = vfs.create_new(&file_path(base, journal::SLOTS[0]))?;
        journal::place(jnl.as_ref(), &journal::encode(0, &[])?)?;
        let mut extra = vec![
            (ISZ, fs.isz as i64),
            (ITOTSZ, 0),
            (DTOTSZ, 0),
            (HAVEDUPS, i64::from(fs.dups)),
        ];
        if fs.ao {
            extra.push((HAVEAO, 1));
        }
        extra.push((NEXTFID, 1));
        let data_opts = KvSeqOptions {
            purpose: DATA_PURPOSE,
            keyrepr: Repr::Prefixed { width: 2 },
            valrepr: Repr::Prefixed { width: 4 },
            delflag: true,
            fileincr: fs.fileincr,
            extra,
            ..kv_base.clone()
        };
        let data = KvSeq::create_unsynced(vfs.create_new(&staged)?, &data_opts)?;
        let mut files = vec![idx.storage(), jnl.as_ref(), data.storage()];
        files.extend(time.as_ref().map(|t| t.storage()));
        storage::sync_all(&files)?;
        drop((idx, time, jnl, data));
        vfs.rename(&staged, &data_path)?;
        Filesys::open_in(vfs, base, open)
    }

    /// Opens a filesys on the real file system.
    pub fn open(base: &Path, open: &OpenOptions) -> Result<Filesys> {
        Filesys::open_in(Arc::new(RealFs), base, open)
    }

    /// Opens a filesys in `vfs`. A writer's open replays a committed journal and reports what it
    /// repaired ([`Filesys::recovery`]); a read-only open never writes.
    pub fn open_in(vfs: Arc<dyn Vfs>, base: &Path, open: &OpenOptions) -> Result<Filesys> {
        if open.writable {
            return Filesys::open_inner(vfs, base, open, true);
        }
        // A read-only open reads the journal, the superblocks and a spot check of the index at
        // different moments: a writer's commit in between can show it index cells of a commit
        // its superblock does not cover (an entry "past FILESIZE"). A commit writes the
        // datafile's superblock before any index cell (the overlays apply in that order), so
        // such an open sees the superblock change under it, and is made again.
        let data_path = file_path(base, "data");
        let mut attempts = 0;
        loop {
            let before = superblock_bytes(vfs.as_ref(), &data_path)?;
            match Filesys::open_inner(vfs.clone(), base, open, true) {
                Err(_)
                    if attempts < OPEN_ATTEMPTS
                        && superblock_bytes(vfs.as_ref(), &data_path)? != before =>
                {
                    // The commit is still being applied: give it a moment.
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_micros(50 << attempts));
                }
                done => return done,
            }
        }
    }

    fn open_inner(
        vfs: Arc<dyn Vfs>,
        base: &Path,
        open: &OpenOptions,
        check_index: bool,
    ) -> Result<Filesys> {
        let data_path = file_path(base, "data");
        let lock = if open.writable {
            vfs.lock(&data_path, open.wait)?
        } else {
            None
        };
        let mut recovery = Recovery::default();
        let time_path = file_path(base, "time");
        let has_time = vfs.exists(&time_path);
        let raw_data = vfs.open(&data_path, open.writable)?;
        let raw_idx = vfs.open(&file_path(base, "idx"), open.writable)?;
        let raw_time = if has_time {
            Some(vfs.open(&time_path, open.writable)?)
        } else {
            None
        };
        let jnl_path = file_path(base, journal::SLOTS[0]);
        let jnl_existed = vfs.exists(&jnl_path);
        let legacy;
        let decision = {
            let mut files: Vec<(u8, &dyn Storage)> =
                vec![(TAG_DATA, raw_data.as_ref()), (TAG_INDEX, raw_idx.as_ref())];
            if let Some(t) = &raw_time {
                files.push((TAG_TIME, t.as_ref()));
            }
            let slots = journal::read_slots(vfs.as_ref(), base)?;
            legacy = slots
                .iter()
                .any(|s| matches!(s, journal::Slot::Valid(r) if r.legacy));
            journal::decide(slots, &mut |r| commit_arrived(r, &files, &vfs, base))?
        };
        let mut seq = decision.last_seq;
        if open.writable {
            let mut files: Vec<(u8, &dyn Storage)> =
                vec![(TAG_DATA, raw_data.as_ref()), (TAG_INDEX, raw_idx.as_ref())];
            if let Some(t) = &raw_time {
                files.push((TAG_TIME, t.as_ref()));
            }
            let mut changed = 0;
            for r in &decision.replays {
                changed += journal::apply(r, &files, &jnl_path)?;
            }
            let at = decision.replays.last();
            if changed > 0 {
                let r = at.expect("a replayed journal");
                recovery.actions.push(format!(
                    "{}: replayed commit {} ({changed} of the in-place writes were missing)",
                    jnl_path.display(),
                    r.seq,
                ));
            }
            if let Some(why) = &decision.discarded {
                recovery
                    .actions
                    .push(format!("{}: discarded {why}", jnl_path.display()));
            }
            let settled =
                decision.discarded.is_none() && at.is_none_or(|r| r.writes.is_empty()) && !legacy;
            if !settled && jnl_existed {
                // What the replays wrote, and what the last commit's barrier may not have
                // made durable, is made durable now; then an empty journal past every commit
                // says that nothing before it needs applying again.
                for (_, f) in &files {
                    storage::sync(*f)?;
                }
                seq = journal::write_empty(vfs.as_ref(), base, decision.last_seq)?;
                if legacy {
                    // Both slots sealed: no commit is written over a journal whose CRC leaves
                    // out its number.
                    seq = journal::write_empty(vfs.as_ref(), base, seq)?;
                }
            }
        }
        let replay_writes: Vec<journal::Write> = if open.writable {
            Vec::new()
        } else {
            decision
                .replays
                .iter()
                .flat_map(|r| r.writes.iter().cloned())
                .collect()
        };
        let wrap = |raw: Box<dyn Storage>, tag: u8| -> Result<OverlayStorage> {
            let stable = stable_end(raw.as_ref())?;
            let o = OverlayStorage::new(raw, stable);
            for (t, offset, bytes) in &replay_writes {
                if *t == tag {
                    o.hold(*offset, bytes);
                }
            }
            Ok(o)
        };
        let mut overlays = vec![
            (TAG_DATA, wrap(raw_data, TAG_DATA)?),
            (
                TAG_INDEX,
                wrap(mirror_for_writer(raw_idx, open.writable)?, TAG_INDEX)?,
            ),
        ];
        if let Some(t) = raw_time {
            overlays.push((TAG_TIME, wrap(t, TAG_TIME)?));
        }
        let mut data = KvSeq::open(Box::new(overlays[0].1.clone()), open.writable)?;
        data.set_clock(open.clock.clone());
        check_data_superblock(&data)?;
        let idx = HIndex::open(Box::new(overlays[1].1.clone()), open.writable)?;
        let ao = data.var(HAVEAO) == Some(1);
        let time = match overlays.get(2) {
            Some((_, o)) => Some(TimeIndex::new(KvSeq::open(
                Box::new(o.clone()),
                open.writable,
            )?)?),
            None if ao => {
                return Err(Error::io(
                    &time_path,
                    None,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ))
            }
            None => None,
        };
        let journals = if open.writable {
            if !jnl_existed {
                journal::write(vfs.create_new(&jnl_path)?.as_ref(), seq, &[])?;
                vfs.sync_dir(&jnl_path)?;
                recovery.actions.push(format!(
                    "{}: created (a filesys written elsewhere)",
                    jnl_path.display()
                ));
            }
            let second = file_path(base, journal::SLOTS[1]);
            let second = if vfs.exists(&second) {
                Some(vfs.open(&second, true)?)
            } else {
                None
            };
            [Some(vfs.open(&jnl_path, true)?), second]
        } else {
            [None, None]
        };
        seq = seq.max(1);
        let mut fs = Filesys {
            vfs,
            base: base.to_path_buf(),
            data,
            idx,
            time,
            journals,
            overlays,
            writable: open.writable,
            _lock: lock,
            clock: open.clock.clone(),
            seq,
            staged: None,
            requires: None,
            recovery,
            commits: 0,
            writes: std::sync::atomic::AtomicU64::new(0),
            verify_misses: false,
            failed: std::sync::OnceLock::new(),
            applied_in_place: Vec::new(),
            known_keys: KnownKeys::default(),
            ahead: None,
            ahead_min_entries: prefetch::AHEAD_MIN_ENTRIES,
            growth_key_reads: 0,
            ahead_for: 0,
        };
        if check_index {
            fs.idx.spot_check(&fs.data)?;
        }
        if fs.writable {
            fs.recover_tail()?;
            fs.ensure_next_fileid()?;
            fs.data
                .set_drop_behind(open.drop_behind.map(|chunk| DropBehind { chunk }));
            // The pages it writes are dropped: an index growth reads the keys it knows from
            // memory instead of from the disk.
            fs.known_keys.on = open.drop_behind.is_some();
            if open.background_appends {
                fs.overlays[0].1.write_behind();
            }
        }
        let _ = fs.data.storage().advise_random();
        Ok(fs)
    }

    /// Writes the datafile's queued appends ([`OpenOptions::background_appends`]) to the file, so
    /// that another handle on it (a store's value readers) reads this writer's uncommitted
    /// appends. Cheap when nothing is queued.
    pub fn settle(&self) -> Result<()> {
        let data = &self.overlays[0].1;
        data.settle().map_err(|e| Error::io(data.path(), None, e))
    }

    /// Commits, then gives back the datafile's preallocated space: for a filesys that is sealed
    /// (a full store container). Appending later simply allocates again.
    pub fn seal(&mut self) -> Result<()> {
        self.sync()?;
        self.data.trim()
    }

    /// Moves a read-only handle to the latest commit.
    ///
    /// A reader's view is the commit that was current when it opened. A writer's later commits
    /// may rewrite an inode in place to point at data past that view; reading such a file then
    /// fails with [`Error::NotFound`] (a pointer past the reader's FILESIZE) — never with wrong
    /// bytes. A long-lived reader refreshes on such an error, or periodically, and retries.
    pub fn refresh(&mut self) -> Result<()> {
        if self.writable {
            return Ok(());
        }
        let open = OpenOptions {
            clock: self.clock.clone(),
            ..OpenOptions::read_only()
        };
        *self = Filesys::open_in(self.vfs.clone(), &self.base, &open)?;
        Ok(())
    }

    /// The datafile's keys, through the keys this writer knows.
    pub(crate) fn keys(&self) -> KeysOf<'_> {
        KeysOf {
            data: &self.data,
            known: &self.known_keys,
        }
    }

    /// Makes every lookup that finds no file verify the cells it passed: each used cell on the
    /// probe path must name an entry whose key hashes to the hash the cell stores, so a
    /// damaged cell or key is reported as damage (naming the cell) instead of "no such file".
    /// It costs a key read per cell passed, on misses only: for a filesys whose misses are
    /// rare and whose answer "absent" others rely on (the render store's title records).
    pub fn set_verify_misses(&mut self, on: bool) {
        self.verify_misses = on;
        self.known_keys.on |= on && self.writable;
    }

    /// The base path.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Commits made through this handle (by [`Filesys::sync`], or on its own: before an index
    /// rebuild, or when too many in-place writes are held).
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// What the writer's open repaired or noticed.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// True for the append-only variant.
    pub fn is_ao(&self) -> bool {
        self.data.var(HAVEAO) == Some(1)
    }

    /// True when a name may have several versions.
    pub fn has_dups(&self) -> bool {
        self.data.var(HAVEDUPS) == Some(1)
    }

    /// The datafile.
    pub fn data(&self) -> &KvSeq {
        &self.data
    }

    /// The indexfile.
    pub fn index(&self) -> &HIndex {
        &self.idx
    }

    /// The time index (ao).
    pub fn time_index(&self) -> Option<&TimeIndex> {
        self.time.as_ref()
    }

    /// A datafile superblock variable (ISZ, ITOTSZ, DTOTSZ, NEXTFID, …).
    pub fn var(&self, name: VarName) -> Option<i64> {
        self.data.var(name)
    }

    /// Sets a datafile superblock variable of a layer above (committed with the next sync). The
    /// filesys's own variables cannot be set this way.
    pub fn set_var(&mut self, name: VarName, value: i64) -> Result<()> {
        self.check_writable()?;
        if [
            ISZ,
            ITOTSZ,
            DTOTSZ,
            HAVEDUPS,
            HAVEAO,
            NEXTFID,
            var::FILESIZE,
            var::SYNCSIZE,
            var::ENTRIES,
            var::AENTRIES,
        ]
        .contains(&name)
        {
            return Err(Error::invalid(format!("{name} belongs to the filesys")));
        }
        self.data.set_var(name, value)
    }

    fn check_writable(&self) -> Result<()> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.check_failed()?;
        Error::check_writable(self.writable, &self.base)
    }

    /// The file whose sync failed, when this writer is failed ([`Error::WriterFailed`]).
    pub fn failed(&self) -> Option<&Path> {
        self.failed.get().map(PathBuf::as_path)
    }

    /// `Ok` unless this writer is failed: every write and lookup begins with it.
    pub(crate) fn check_failed(&self) -> Result<()> {
        Error::check_not_failed(self.failed())
    }

    /// Makes this writer failed by `e`, the error of a sync of its files (or of the apply after
    /// a barrier). Making the commit again is not safe: after a failed fdatasync Linux marks the
    /// pages it could not write clean and reports the error once, so the next sync succeeds
    /// without them, and a later commit whose journal covers those bytes would be acknowledged
    /// and then lost at a power cut. Only a reopen, whose recovery reads the files as they are on
    /// disk, knows what they hold.
    pub(crate) fn fail(&self, e: &Error) {
        let path = match e {
            Error::Io { path, .. } => path.clone(),
            _ => self.data.path().to_path_buf(),
        };
        let _ = self.failed.set(path);
    }

    /// How many writes have begun (see the field).
    fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Commits: everything written so far becomes durable, all at once.
    ///
    /// The journal is written (the held in-place writes, and the CRC of every byte appended since
    /// the last commit), then one barrier syncs it and every file written since the last barrier
    /// at once, then the held writes are applied ([`journal`] has the crash argument).
    pub fn sync(&mut self) -> Result<()> {
        self.commit_begin()?;
        storage::sync_all(&self.barrier_files()).inspect_err(|e| self.fail(e))?;
        self.commit_end()
    }

    /// Says what the next commit depends on: the filesys `sibling` (beside this one) having
    /// committed a datafile of at least `filesize` bytes. Recovery counts this filesys's commit
    /// only if that one's did: a layer above that commits two filesys with one barrier
    /// ([`storage::sync_all`] over both's [`Filesys::barrier_files`]) orders them so.
    pub fn require(&mut self, sibling: &Filesys) {
        self.requires = sibling
            .base
            .file_name()
            .and_then(|n| n.to_str())
            .map(|name| journal::Requires {
                name: name.to_string(),
                filesize: sibling.data.filesize(),
            });
    }

    /// The first step of a commit: the superblocks are staged and the journal is written, not
    /// synced. Then [`Filesys::barrier_files`] are synced, then [`Filesys::commit_end`]. A
    /// failed write leaves the commit to be made again (it reuses the same slot); a failed sync
    /// of the barrier must make the writer failed ([`Filesys::fail`]).
    pub fn commit_begin(&mut self) -> Result<()> {
        self.check_writable()?;
        let now = self.clock.now();
        self.data.stage_sync(now)?;
        self.idx.stage_sync(now)?;
        if let Some(t) = &mut self.time {
            t.kv_mut().stage_sync(now)?;
        }
        let seq = self.seq + 1;
        let mut journal = journal::Encoder::new(seq)?;
        if let Some(r) = self.requires.take() {
            journal.requires(r);
        }
        for (tag, o) in &self.overlays {
            o.each_pending(|offset, bytes| journal.write(*tag, offset, bytes))?;
            let (start, written) = o.appended();
            let end = match *tag {
                TAG_DATA => self.data.filesize(),
                TAG_TIME => self.time.as_ref().map_or(0, |t| t.kv().filesize()),
                _ => written,
            }
            .min(written);
            if end > start {
                let crc = o
                    .appended_crc(end)
                    .map_err(|e| Error::io(o.path(), Some(start), e))?;
                journal.appended(journal::Appended {
                    tag: *tag,
                    start,
                    end,
                    crc,
                });
            }
        }
        let bytes = journal.finish()?;
        let slot = journal::slot_of(seq);
        if self.journals[slot].is_none() {
            let path = file_path(&self.base, journal::SLOTS[slot]);
            let file = if self.vfs.exists(&path) {
                self.vfs.open(&path, true)?
            } else {
                let file = self.vfs.create_new(&path)?;
                self.vfs.sync_dir(&path)?;
                file
            };
            self.journals[slot] = Some(file);
        }
        let jnl = self.journals[slot].as_ref().expect("opened above");
        journal::place(jnl.as_ref(), &bytes)?;
        for (_, o) in &self.overlays {
            // A hint, as every page-cache hint here: failing, it costs the reads it would have
            // saved, not the commit.
            let _ = o.prefetch();
        }
        self.staged = Some(seq);
        Ok(())
    }

    /// The files a staged commit's barrier syncs: its journal slot first, then every file
    /// written since the last barrier (appends, and the last commit's applied writes).
    pub fn barrier_files(&self) -> Vec<&dyn Storage> {
        let mut files: Vec<&dyn Storage> = Vec::new();
        if let Some(seq) = self.staged {
            if let Some(j) = &self.journals[journal::slot_of(seq)] {
                files.push(j.as_ref());
            }
        }
        for (_, o) in &self.overlays {
            if o.unsynced() {
                files.push(o);
            }
        }
        files
    }

    /// The last step of a commit, after its barrier: the held writes are applied.
    pub fn commit_end(&mut self) -> Result<()> {
        let Some(seq) = self.staged.take() else {
            return Err(Error::internal("a commit ended that had not begun"));
        };
        for (_, o) in &self.overlays {
            o.mark_synced();
        }
        self.seq = seq;
        // The last commit's in-place writes to the datafile are durable now (this barrier synced
        // them): a writer that keeps written data out of the page cache drops their pages too.
        // They were the inodes a rewrite or delete flagged, pages of records long written.
        let previous = std::mem::take(&mut self.applied_in_place);
        if self.data.drop_behind().is_some() {
            let keep_below = self.data.first().0.div_ceil(storage::PAGE) * storage::PAGE;
            let keep_from = self.data.filesize() / storage::PAGE * storage::PAGE;
            // The writes come in file order, and a rewrite's two flags (its old inode and data
            // entry) often share a page: one hint per run of touching pages.
            let spans = previous.into_iter().map(|(offset, len)| {
                let (start, len) = storage::pages_touching(offset, offset + len);
                (start.max(keep_below), (start + len).min(keep_from))
            });
            for (start, end) in storage::merge_touching(spans.filter(|(s, e)| s < e)) {
                let _ = self.data.storage().drop_cache(start, end - start);
            }
        }
        for (i, (_, o)) in self.overlays.iter().enumerate() {
            let applied = o
                .apply()
                .map_err(|e| Error::io(o.path(), None, e))
                .inspect_err(|e| self.fail(e))?;
            if i == 0 {
                self.applied_in_place = applied;
            }
        }
        self.commits += 1;
        self.data.drop_synced()
    }

    /// Commits, then empties the journal, so that no old journal can be replayed over a file that
    /// is about to be replaced by a rename.
    fn quiesce(&mut self) -> Result<()> {
        self.sync()?;
        self.sync_applied()?;
        self.seq = journal::write_empty(self.vfs.as_ref(), &self.base, self.seq)?;
        self.journals[journal::slot_of(self.seq)] = None;
        Ok(())
    }

    /// Syncs the files the last commit applied writes to.
    fn sync_applied(&self) -> Result<()> {
        for (_, o) in &self.overlays {
            if o.unsynced() {
                storage::sync(o).inspect_err(|e| self.fail(e))?;
                o.mark_synced();
            }
        }
        Ok(())
    }

    /// Keys the last growth of the index read from the datafile; the others it had in memory
    /// (kept by this writer, or read ahead while the writer went on).
    pub fn last_growth_key_reads(&self) -> u64 {
        self.growth_key_reads
    }

    /// In-place writes held for the next commit, in bytes.
    pub fn pending_bytes(&self) -> u64 {
        self.overlays.iter().map(|(_, o)| o.pending_bytes()).sum()
    }

    /// True when the next write could make the filesys commit on its own (an index rebuild, or
    /// `extra` more held bytes past [`CHECKPOINT_BYTES`]): a layer above that orders its commits
    /// across files must make what it depends on durable first.
    pub fn may_commit_on_its_own(&self, extra: u64) -> bool {
        self.idx.needs_growth() || self.pending_bytes() + extra > CHECKPOINT_BYTES
    }

    /// Commits on its own when too many in-place writes are held in memory.
    fn maybe_checkpoint(&mut self) -> Result<()> {
        if self.pending_bytes() > CHECKPOINT_BYTES {
            self.sync()?;
        }
        Ok(())
    }

    /// Grows the index before an insert would pass its load limit.
    fn ensure_index_room(&mut self) -> Result<()> {
        if self.idx.needs_growth() {
            self.quiesce()?;
            // The growth rehashes every key: the hashes read ahead first, then read the others
            // ahead, several at a time, from a read-only view of the same table (nothing is
            // held back after the commit).
            let ahead = self.ahead.take().map(prefetch::HashesAhead::finish);
            let view = HIndex::open(Box::new(self.overlays[1].1.clone()), false)?;
            let known = self.known_keys.on.then_some(&self.known_keys);
            let keys = prefetch::BatchKeys::with_known(&self.data, &view, known);
            let keys = keys.with_hashes(ahead.as_ref());
            self.idx.grow(&keys)?;
            self.growth_key_reads = keys.reads();
        } else if self.ahead_for != self.idx.htsize() && self.growth_near() {
            self.ahead_for = self.idx.htsize();
            self.ahead = self.read_growth_ahead();
        }
        Ok(())
    }

    /// Whether the index is large and near enough its load limit that its growth's keys are
    /// to be read ahead ([`prefetch::HashesAhead`]).
    fn growth_near(&self) -> bool {
        let entries = self.idx.entries();
        entries >= self.ahead_min_entries
            && entries as f64 >= prefetch::AHEAD_AT * self.idx.max_load() * self.idx.htsize() as f64
    }

    /// Starts reading the hashes of the keys the index holds, but for those this writer knows
    /// or has not committed yet (which the growth finds in memory, or reads itself). `None`
    /// when the datafile cannot be opened again: the growth reads them all itself.
    fn read_growth_ahead(&self) -> Option<prefetch::HashesAhead> {
        let durable = self.overlays[0].1.appended().0;
        let mut ptrs = Vec::new();
        for cell in self.idx.used_cells() {
            let (_, ptr) = cell.ok()?;
            if ptr.0 < durable && !self.known_keys.holds(ptr) {
                ptrs.push(ptr.0);
            }
            if ptrs.len() == prefetch::AHEAD_MAX {
                break;
            }
        }
        let raw = self.vfs.open(&file_path(&self.base, "data"), false).ok()?;
        let data = KvSeq::open(raw, false).ok()?;
        let drop_pages = self.data.drop_behind().is_some();
        Some(prefetch::HashesAhead::start(data, ptrs, drop_pages))
    }
}

impl Drop for Filesys {
    fn drop(&mut self) {
        // A failed writer leaves the files as they are: the next open's recovery decides. What
        // the failed sync could not write is still in the page cache, marked clean (Linux), where
        // that recovery, in this boot, would read it as if it were on the disk: it is dropped
        // from the cache, so that the recovery reads the disk. (Dirty pages are written back
        // first; the lost ones are clean.)
        let failed = self.failed().is_some();
        if failed {
            let journals = self.journals.iter().flatten().map(|j| j.as_ref());
            for f in journals.chain(self.overlays.iter().map(|(_, o)| o as &dyn Storage)) {
                let _ = f.drop_cache(0, 0);
            }
        }
        if self.writable
            && !failed
            && self.staged.is_none()
            && self.overlays.iter().any(|(_, o)| o.unsynced())
        {
            // Not needed for correctness (the journals replay), but a clean close leaves the
            // files complete on their own. Then an empty journal says so: the next open has
            // nothing to read back and replay (the last commit's journal holds up to
            // CHECKPOINT_BYTES of in-place writes, read one entry per pread and compared one
            // write per pread: 80 ms of every open of a 50,000-render store).
            if self.sync_applied().is_ok() {
                let _ = journal::write_empty(self.vfs.as_ref(), &self.base, self.seq);
            }
        }
        let synced = self.staged.is_none() && self.overlays.iter().all(|(_, o)| !o.unsynced());
        if self.writable && synced && self.data.drop_behind().is_some() {
            // A writer that keeps its written data out of the page cache drops its index too
            // when it closes: each put probed (and wrote) a random page of it, and a writer
            // opened for a few puts (`wink put`, an import) left one page a put behind. The next
            // handle reads the pages it probes again. Every page is clean: just synced.
            let _ = self.idx.storage().drop_cache(0, 0);
        }
    }
}

/// Whether a complete journal's commit arrived whole: the bytes it appended are there with their
/// CRC, and the commit it requires of a sibling filesys was made. A journal that appended to the
/// datafile and whose write to the datafile's superblock is already in place was applied, so
/// its barrier had completed: that alone proves it (and spares a reader the read-back while a
/// writer is between commits). Only such a journal: its superblock names a FILESIZE past every
/// one applied before it, while a commit that appended nothing to the datafile may write the
/// very superblock the commit before it left (the clock had not moved).
fn commit_arrived(
    r: &journal::Replay,
    files: &[(u8, &dyn Storage)],
    vfs: &Arc<dyn Vfs>,
    base: &Path,
) -> Result<bool> {
    if r.appended.is_empty() && r.requires.is_none() {
        return Ok(true);
    }
    let file = |tag: u8| files.iter().find(|(t, _)| *t == tag).map(|(_, f)| *f);
    let grew = r
        .appended
        .iter()
        .any(|a| a.tag == TAG_DATA && a.end > a.start);
    if let (true, Some((_, _, sb)), Some(data)) = (
        grew,
        r.writes.iter().find(|(t, o, _)| *t == TAG_DATA && *o == 0),
        file(TAG_DATA),
    ) {
        let mut now = vec![0u8; sb.len()];
        let n = data
            .read_at(&mut now, 0)
            .map_err(|e| Error::io(data.path(), Some(0), e))?;
        if n == now.len() && now == *sb {
            return Ok(true);
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    for a in &r.appended {
        let Some(f) = file(a.tag) else {
            return Ok(false);
        };
        let mut crc = crc32fast::Hasher::new();
        let mut at = a.start;
        while at < a.end {
            let n = (a.end - at).min(buf.len() as u64) as usize;
            let got = f
                .read_at(&mut buf[..n], at)
                .map_err(|e| Error::io(f.path(), Some(at), e))?;
            if got < n {
                return Ok(false);
            }
            crc.update(&buf[..n]);
            at += n as u64;
        }
        if crc.finalize() != a.crc {
            return Ok(false);
        }
    }
    if let Some(req) = &r.requires {
        let plain =
            !req.name.is_empty() && req.name != "." && req.name != ".." && !req.name.contains('/');
        let Some(dir) = base.parent().filter(|_| plain) else {
            return Ok(false);
        };
        let sibling = dir.join(&req.name);
        if !vfs.exists(&file_path(&sibling, "data")) {
            return Ok(false);
        }
        let open = OpenOptions::read_only();
        // The sibling's own open decides its last commit the same way.
        return match Filesys::open_inner(vfs.clone(), &sibling, &open, false) {
            Ok(fs) => Ok(fs.data.filesize() >= req.filesize),
            Err(e) if e.is_corruption() => Ok(false),
            Err(e) => Err(e),
        };
    }
    Ok(true)
}

/// Read-only opens made again when a commit changed the datafile's superblock during one.
const OPEN_ATTEMPTS: u32 = 8;

/// The datafile's superblock variables region as it is on disk now (every commit rewrites it).
fn superblock_bytes(vfs: &dyn Vfs, data_path: &Path) -> Result<Vec<u8>> {
    let file = vfs.open(data_path, false)?;
    let mut buf = vec![0u8; 512];
    let n = file
        .read_at(&mut buf, 0)
        .map_err(|e| Error::io(data_path, Some(0), e))?;
    buf.truncate(n);
    Ok(buf)
}

/// The file an error names, when it names one.
fn error_path(e: &Error) -> Option<&Path> {
    match e {
        Error::Corrupt { path, .. } | Error::Unsupported { path, .. } | Error::Io { path, .. } => {
            Some(path)
        }
        _ => None,
    }
}

fn validate_options(fs: &FsOptions) -> Result<()> {
    if !(inode::MIN_SIZE..=inode::MAX_SIZE).contains(&fs.isz) {
        return Err(Error::invalid(format!(
            "ISZ {}: {}..={} bytes",
            fs.isz,
            inode::MIN_SIZE,
            inode::MAX_SIZE
        )));
    }
    if fs.ao && fs.timemp <= 0 {
        return Err(Error::invalid(format!(
            "TIMEMP {}: at least 1 second",
            fs.timemp
        )));
    }
    if fs.htsize == 0 {
        return Err(Error::invalid("HTSIZE must be at least 1"));
    }
    Ok(())
}

/// A writer's index, copied into memory when small enough (see [`mirror`]); a reader's is read
/// from the file.
fn mirror_for_writer(raw: Box<dyn Storage>, writable: bool) -> Result<Box<dyn Storage>> {
    if !writable {
        return Ok(raw);
    }
    let path = raw.path().to_path_buf();
    mirror::Mirrored::wrap(raw, mirror::MIRROR_LIMIT).map_err(|e| Error::io(&path, None, e))
}

/// Bytes of a file below which writes are in place: FILESIZE for a kvseq, the whole file for a
/// hindex.
fn stable_end(raw: &dyn Storage) -> Result<u64> {
    let sb = Superblock::read(raw)?;
    match sb.get_u64(raw.path(), var::FILESIZE)? {
        Some(size) => Ok(size),
        None => storage::length(raw),
    }
}

fn check_data_superblock(data: &KvSeq) -> Result<()> {
    let sb = data.superblock();
    let path = data.path();
    let isz = sb.require_u64(path, ISZ)?;
    if !(inode::MIN_SIZE..=inode::MAX_SIZE).contains(&isz) {
        return Err(Error::corrupt(
            path,
            sb.value_offset(ISZ).unwrap_or(0),
            "ISZ",
            format!("{}..={}", inode::MIN_SIZE, inode::MAX_SIZE),
            isz,
        ));
    }
    if !data.has_delflag() {
        return Err(Error::unsupported(
            path,
            sb.terminator_offset(),
            "a filesys datafile without KVDELFL 1",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod known_keys_tests {
    use super::*;

    #[test]
    fn a_rewrite_moves_its_key_and_counts_it_once() {
        let known = KnownKeys {
            on: true,
            ..KnownKeys::default()
        };
        let used = |k: &KnownKeys| k.lock().used;
        known.note(KvPointer(10), b"d/a/I0", None);
        let one = used(&known);
        known.moved(KvPointer(10), KvPointer(20), b"d/a/I0", None);
        known.moved(KvPointer(20), KvPointer(30), b"d/a/I0", None);
        assert_eq!(known.get(KvPointer(10)), None);
        assert_eq!(known.get(KvPointer(20)), None);
        assert_eq!(known.get(KvPointer(30)).as_deref(), Some(&b"d/a/I0"[..]));
        assert_eq!(used(&known), one);
        // A move from an entry not kept notes the key; one whose kept key differs takes the
        // key given; a key kept at the new pointer (bytes given back) is replaced.
        known.moved(KvPointer(40), KvPointer(50), b"d/b/I0", None);
        assert_eq!(known.get(KvPointer(50)).as_deref(), Some(&b"d/b/I0"[..]));
        known.moved(KvPointer(50), KvPointer(30), b"d/c/I0", None);
        assert_eq!(known.get(KvPointer(30)).as_deref(), Some(&b"d/c/I0"[..]));
        assert_eq!(known.lock().by_ptr.len(), 1);
        // Off, nothing is kept.
        let off = KnownKeys::default();
        off.note(KvPointer(1), b"x", None);
        off.moved(KvPointer(1), KvPointer(2), b"x", None);
        assert!(!off.holds(KvPointer(2)) && off.get(KvPointer(2)).is_none());
    }

    /// What a writer keeps of an inode entry it appended is the entry a read returns, until
    /// the entry is deleted, replaced or its value rewritten in place; a lookup answered from
    /// it finds what a read would.
    #[test]
    fn a_kept_inode_entry_is_the_entry_in_the_file_while_it_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let fs_opts = FsOptions {
            isz: 120,
            ..FsOptions::default()
        };
        let mut fs =
            Filesys::create(&dir.path().join("fs"), &fs_opts, &OpenOptions::writer()).unwrap();
        fs.set_verify_misses(true);
        let kept = |fs: &Filesys, ptr| fs.known_keys.entry(ptr);
        let a = fs.put(b"d/a", 0, b"one").unwrap().inode;
        assert_eq!(kept(&fs, a), Some(fs.data.read(a).unwrap()));
        // A rewrite: the new entry is kept, the old one no longer.
        let b = fs.put(b"d/a", 0, b"two").unwrap().inode;
        assert_eq!(kept(&fs, a), None);
        assert_eq!(kept(&fs, b), Some(fs.data.read(b).unwrap()));
        // An append within the inode's capacity rewrites its value in place.
        assert_eq!(fs.append(b"d/a", b"+").unwrap().inode, b);
        assert_eq!(kept(&fs, b), None);
        assert_eq!(fs.read(b"d/a").unwrap(), b"two+");
        let c = fs.put(b"d/a", 0, b"three").unwrap().inode;
        assert_eq!(kept(&fs, c), Some(fs.data.read(c).unwrap()));
        // A rename keeps the new entry and forgets the old one's value (its key stays).
        let d = fs.rename(b"d/a", b"d/b").unwrap().inode;
        assert_eq!((kept(&fs, c), fs.known_keys.holds(c)), (None, true));
        assert_eq!(kept(&fs, d), Some(fs.data.read(d).unwrap()));
        assert!(fs.delete(b"d/b").unwrap());
        assert_eq!(kept(&fs, d), None);
        assert_eq!(fs.stat(b"d/b").unwrap(), None);
        // Answered from what is kept, a rewrite after all this finds the file it replaces.
        let e = fs.put(b"d/c", 0, b"four").unwrap().inode;
        fs.put(b"d/c", 0, b"five").unwrap();
        assert_eq!(kept(&fs, e), None);
        fs.sync().unwrap();
        drop(fs);
        let fs = Filesys::open(&dir.path().join("fs"), &OpenOptions::read_only()).unwrap();
        assert_eq!(fs.read(b"d/c").unwrap(), b"five");
        assert_eq!(fs.stat(b"d/b").unwrap(), None);
    }

    /// Past the budget, a key is kept without its value, then nothing is.
    #[test]
    fn the_budget_keeps_keys_before_values() {
        let mut keys = Keys::default();
        let big = vec![7u8; KNOWN_KEYS_BYTES / 2];
        let known = |value: Option<&[u8]>| Known {
            key: b"k".as_slice().into(),
            value: value.map(|v| (v.into(), 9)),
        };
        keys.insert(KvPointer(1), known(Some(&big)));
        keys.insert(KvPointer(2), known(Some(&big)));
        assert!(keys.by_ptr[&1].value.is_some() && keys.by_ptr[&2].value.is_none());
        keys.used = KNOWN_KEYS_BYTES - 10;
        keys.insert(KvPointer(3), known(None));
        assert!(!keys.by_ptr.contains_key(&3));
        // Replacing an entry frees what it counted.
        keys.remove(KvPointer(1));
        assert_eq!(keys.used, KNOWN_KEYS_BYTES - 10 - known(Some(&big)).cost());
    }

    /// The hash of a key is the hash of the key the datafile holds, kept or not.
    #[test]
    fn a_kept_key_hashes_as_the_key_read() {
        use crate::format::hindex::KeySource;
        let opts = KvSeqOptions::default();
        let mut data = KvSeq::create(Box::new(crate::storage::MemStorage::new("d")), &opts);
        let data = data.as_mut().unwrap();
        let (a, b) = (
            data.append(b"d/a/I0", b"1").unwrap(),
            data.append(b"d/b/I0", b"2").unwrap(),
        );
        let known = KnownKeys {
            on: true,
            ..KnownKeys::default()
        };
        known.note(a, b"d/a/I0", None);
        let keys = KeysOf {
            data,
            known: &known,
        };
        for (ptr, key) in [(a, &b"d/a/I0"[..]), (b, &b"d/b/I0"[..])] {
            assert_eq!(keys.key_hash_at(ptr).unwrap(), KeyHash::of(key));
        }
        assert!(keys.key_hash_at(KvPointer(1 << 40)).is_err());
    }
}
