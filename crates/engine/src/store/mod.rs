//! The render store: HTML renders of page revisions keyed by (domain, title, revision, tid), with
//! RESTBase precedence and retention (docs/INTERNALS.md § The render store's rules), on filesys.
//!
//! | path              | what                                                               |
//! |-------------------|--------------------------------------------------------------------|
//! | `DIR/store`       | configuration: retention policy and limits ([`config`])            |
//! | `DIR/meta.*`      | a filesys (HAVEDUPS) with one file per title: its [`record`]        |
//! | `DIR/cNNNNNN.*`   | containers: filesys-ao holding the values, sealed past a size limit |
//!
//! A put appends the value to the current container, then rewrites the title's record (which
//! holds every render's container, value offset, length and CRC-32, and its retention stamps) in
//! the meta filesys. A commit syncs the container, then the meta filesys: a crash in between
//! leaves only an unreferenced value. A read is a lookup of the record (index cell, inode, record
//! bytes) and one pread of the value, verified against its CRC-32. Nothing per render is held in
//! memory; opening reads only the configuration and the two filesys headers.

pub mod check;
pub mod config;
pub(crate) mod containers;
mod copy;
pub mod dump;
pub mod generation;
pub mod import;
pub mod key;
pub mod labels;
mod latest;
mod options;
pub mod pages;
pub mod policy;
pub mod quarantine;
mod recent;
pub mod record;
pub(crate) mod records;
mod shared;
mod stat;
pub mod tiers;
pub(crate) mod view;
pub mod walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use uuid::Uuid;

use crate::archive::Archive;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys, FsOptions};
use crate::format::superblock::VarName;
use crate::storage::read_exact_at;
use crate::vfs::Vfs;

pub use config::Config;
use containers::{container_base, container_options, Containers};
pub use copy::{CopyCursor, CopyItem, CopyPage, TitleSummary};
pub use dump::{DumpReader, DumpRender, DumpTitle};
pub use key::{TidMaker, TitleKey};
pub use labels::Labels;
pub use options::{StoreOptions, RECORD_CACHE_BYTES};
pub use pages::{RenderCursor, RenderPage, TitlePage, TitlePosition};
pub use policy::{Policy, Renders, Revisions};
use record::{Location, Refusal, Render, TitleRecord};
pub(crate) use records::record_of;
use records::TitleRecords;
pub(crate) use stat::ScanPages;
pub use stat::StoreStat;
pub use walk::TitleCursor;

/// Meta datafile variable: the number of the container new values go to.
pub const CURCONT: VarName = VarName::new(b"CURCONT");
/// Held bytes (index cells, deleted flags: a few to 16 bytes each) from which a commit applies
/// the container's and the records' on two threads: about a hundred puts' worth. A commit of a
/// few puts applies them in turn, as a thread would cost it more than it saves.
const PARALLEL_APPLY_BYTES: u64 = 4 << 10;
/// Meta datafile variable: the next container number to allocate (absent: CURCONT + 1).
pub const NEXTCONT: VarName = VarName::new(b"NEXTCONT");
/// The state of a listed render.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A render of the current revision: the newest non-historical revision readable now.
    Current,
    /// A readable render of an older, superseded revision.
    Recent,
    /// A historical put: an old revision regenerated on request, kept `historical_ttl`.
    Historical,
    /// Read from the archive tier.
    Archived,
}

impl State {
    /// Its lower-case name, as listings and the CLI print it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Current => "current",
            State::Recent => "recent",
            State::Historical => "historical",
            State::Archived => "archived",
        }
    }
}

/// One put.
#[derive(Clone, Copy, Debug)]
pub struct Put<'a> {
    /// The domain, e.g. `en.wikipedia.org`.
    pub domain: &'a str,
    /// The title within its domain.
    pub title: &'a str,
    /// Revision number: precedence is by revision, then tid.
    pub rev: u64,
    /// Generated from the store's clock when `None`.
    pub tid: Option<Uuid>,
    /// Content type, stored with the render and returned by reads.
    pub content_type: &'a str,
    /// Content encoding and language, stored and returned as the content type is
    /// ([`Labels::NONE`]: none).
    pub labels: &'a Labels,
    /// The value, at most [`Config::max_value`] bytes.
    pub value: &'a [u8],
    /// An old revision regenerated on request: kept `historical_ttl`, never the current one.
    pub historical: bool,
}

impl<'a> Put<'a> {
    /// A put of `value` as revision `rev` of a title, with a tid from the store's clock and no
    /// labels; set `tid`, `labels` or `historical` with struct update syntax
    /// (`Put { tid, ..Put::new(...) }`).
    pub fn new(
        domain: &'a str,
        title: &'a str,
        rev: u64,
        content_type: &'a str,
        value: &'a [u8],
    ) -> Put<'a> {
        Put {
            domain,
            title,
            rev,
            tid: None,
            content_type,
            labels: &Labels::NONE,
            value,
            historical: false,
        }
    }
}

/// Which render of a title a read asks for ([`Store::get`]). Renders are ordered by revision,
/// then by tid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The latest render of the latest revision.
    Latest,
    /// The latest render of a revision.
    Rev(u64),
    /// One render: its revision and tid.
    Render(u64, Uuid),
    /// What was the latest render at a time: the newest readable render whose tid carries a
    /// time at or before it. Renders that retention has dropped since are not found, so
    /// neither is a render that was the latest then but is gone now.
    AsOf(std::time::SystemTime),
}

/// A render read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Got {
    /// Revision number.
    pub rev: u64,
    /// Render id (a version-1 UUID).
    pub tid: Uuid,
    /// Content type, as put.
    pub content_type: String,
    /// Content encoding and language, as put.
    pub labels: Labels,
    /// Where it stands when read.
    pub state: State,
    /// The value, checked against its CRC-32.
    pub value: Vec<u8>,
}

/// A render as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Revision number.
    pub rev: u64,
    /// Render id (a version-1 UUID).
    pub tid: Uuid,
    /// The value's length, bytes.
    pub size: u64,
    /// Content type, as put.
    pub content_type: String,
    /// Content encoding and language, as put.
    pub labels: Labels,
    /// Where it stands when listed.
    pub state: State,
}

/// Which part of a listing.
#[derive(Clone, Copy, Debug)]
pub struct Page {
    /// Renders to skip, newest first.
    pub offset: usize,
    /// Renders to return at most.
    pub limit: usize,
}

impl Default for Page {
    fn default() -> Self {
        Page {
            offset: 0,
            limit: usize::MAX,
        }
    }
}

/// An open render store.
#[derive(Debug)]
pub struct Store {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    cfg: Config,
    /// The title records: the meta filesys and what reads and writes it.
    records: TitleRecords,
    /// The containers of the values: numbers, the current one's writer, open files for reads.
    containers: Containers,
    clock: Arc<dyn Clock>,
    tids: TidMaker,
    archive: Option<Archive>,
    /// Why the archive could not be opened: only what needs it fails, with this error (see
    /// [`Store::archive_tier`]); titles that never reached the archive read as usual.
    archive_damage: Option<Error>,
    /// What the writer's open repaired (for the log).
    recovery: Vec<String>,
    /// The archive filesys's base (named by the generation file).
    archive_base: PathBuf,
    /// The settings the answers kept for gets of the latest render depend on, hashed
    /// ([`latest`]).
    latest_tag: u64,
    /// How it was opened, to open it again ([`Store::reopen`]).
    opts: StoreOptions,
    /// The file whose sync failed, on a handle whose reopen failed: it stays a failed writer.
    failed: Option<PathBuf>,
}

pub(crate) fn meta_base(dir: &Path) -> PathBuf {
    dir.join("meta")
}

/// Opens the title records: a miss is verified, since "no record" decides whether a title
/// exists (see [`Filesys::set_verify_misses`]).
pub(crate) fn open_meta(
    vfs: Arc<dyn Vfs>,
    dir: &Path,
    open: &filesys::OpenOptions,
) -> Result<Filesys> {
    let mut meta = Filesys::open_in(vfs, &meta_base(dir), open)?;
    meta.set_verify_misses(true);
    Ok(meta)
}

fn record_name(domain: &str, title: &str) -> Vec<u8> {
    let mut name = Vec::with_capacity(domain.len() + 1 + title.len());
    name.extend_from_slice(domain.as_bytes());
    name.push(b'/');
    name.extend_from_slice(title.as_bytes());
    name
}

/// A value's file name in its container: `DOMAIN/TITLE/REV/TID` (made per put: no `format!`).
fn value_name(title: &TitleKey, rev: u64, tid: Uuid) -> Vec<u8> {
    let mut name = Vec::with_capacity(title.name().len() + 2 + 20 + uuid::fmt::Hyphenated::LENGTH);
    name.extend_from_slice(title.name());
    name.push(b'/');
    name.extend_from_slice(rev.to_string().as_bytes());
    name.push(b'/');
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    name.extend_from_slice(tid.hyphenated().encode_lower(&mut buf).as_bytes());
    name
}

/// The damage of a file of `fs` that should exist and is not found: the index cell or the inode
/// of `file` was lost. Named at the file's home cell in the index, where its lookup starts.
fn lost_file(fs: &Filesys, file: &[u8], what: String, expected: &str, found: &str) -> Error {
    let idx = fs.index();
    let cell = idx.home(&filesys::inode::inode_key(file));
    Error::corrupt(
        idx.path(),
        idx.cell_offset(cell),
        format!("{what} (its index cell, home cell {cell}, or its inode)"),
        expected,
        found,
    )
}

impl Store {
    /// Creates a store in `dir` (created when missing; it must not hold a store yet).
    pub fn init(dir: &Path, cfg: &Config, opts: &StoreOptions) -> Result<()> {
        let vfs = opts.vfs.as_ref();
        if vfs.exists(&dir.join("store")) {
            return Err(Error::invalid(format!(
                "{} holds a store already",
                dir.display()
            )));
        }
        vfs.create_dir_all(dir)?;
        let writer = filesys::OpenOptions {
            clock: opts.clock.clone(),
            drop_behind: None,
            ..filesys::OpenOptions::writer()
        };
        let mut meta = Filesys::create_in(
            opts.vfs.clone(),
            &meta_base(dir),
            &FsOptions {
                dups: true,
                isz: 88,
                fileincr: 1 << 20,
                ..FsOptions::default()
            },
            &writer,
        )?;
        Filesys::create_in(
            opts.vfs.clone(),
            &container_base(dir, 1),
            &container_options(cfg),
            &writer,
        )?;
        meta.set_var(CURCONT, 1)?;
        meta.sync()?;
        drop(meta);
        if cfg.archive.is_some() {
            let base = generation::Generation::default().archive_base(dir);
            Archive::create_in(opts.vfs.clone(), &base, opts.clock.clone())?;
        }
        // The configuration appears last: a directory without it holds no store.
        let kv = crate::format::kvseq::KvSeqOptions {
            clock: opts.clock.clone(),
            ..Default::default()
        };
        cfg.write(vfs, &dir.join("store"), &kv)?;
        vfs.sync_dir(&dir.join("store"))
    }

    /// Opens the store in `dir`.
    pub fn open(dir: &Path, opts: &StoreOptions) -> Result<Store> {
        let vfs = opts.vfs.clone();
        let cfg_path = dir.join("store");
        if !vfs.exists(&cfg_path) {
            return Err(Error::NotFound(format!(
                "{}: no store here (run `wink init`)",
                dir.display()
            )));
        }
        let cfg = Config::read(vfs.as_ref(), &cfg_path)?;
        let fs_open = filesys::OpenOptions {
            writable: opts.writable,
            wait: opts.wait,
            clock: opts.clock.clone(),
            drop_behind: None,
            background_appends: opts.writable,
        };
        // The writer's lock is the meta filesys's: a second writer is told the store's name.
        let in_use = |e: Error| match e {
            Error::InUse { .. } => Error::InUse {
                path: dir.to_path_buf(),
            },
            e => e,
        };
        // Noted before the view is opened: what the view reads is at least that epoch's state.
        let share = (!opts.writable)
            .then(|| records::ReaderShare::before_open(dir))
            .flatten();
        // The writer drops the title records it wrote from the page cache once committed (a
        // new title's record is ~270 bytes beside its value's few KiB: kept, they were the
        // better part of what a stream of puts left in the cache). The records it wrote are read
        // from the record caches instead (`records`); the meta index stays cached.
        let meta_open = filesys::OpenOptions {
            drop_behind: opts.writable.then_some(8 << 20),
            ..fs_open.clone()
        };
        let meta = open_meta(vfs.clone(), dir, &meta_open).map_err(in_use)?;
        let generation = generation::Generation::read(vfs.as_ref(), dir)?;
        let archive = match cfg.archive {
            Some(_) => {
                let aopts = cfg.archive_options();
                let open = filesys::OpenOptions {
                    drop_behind: Some(8 << 20),
                    ..fs_open.clone()
                };
                match Archive::open_in(vfs.clone(), &generation.archive_base(dir), &open, aopts) {
                    Ok(archive) => Ok(Some(archive)),
                    // Damage stays with what it touches: the hot tier opens without it.
                    Err(e) if e.is_corruption() || matches!(e, Error::Io { .. }) => Err(e),
                    Err(e) => return Err(in_use(e)),
                }
            }
            None => Ok(None),
        };
        let (archive, archive_damage) = match archive {
            Ok(archive) => (archive, None),
            Err(e) => (None, Some(e)),
        };
        let containers = Containers::new(vfs.clone(), dir, opts.clock.clone(), &cfg);
        let records = TitleRecords::new(
            meta,
            opts.writable,
            opts.record_cache_bytes,
            vfs.clone(),
            dir.to_path_buf(),
            opts.clock.clone(),
            share,
        );
        let mut store = Store {
            vfs,
            dir: dir.to_path_buf(),
            cfg,
            records,
            containers,
            clock: opts.clock.clone(),
            tids: TidMaker::new(),
            archive,
            archive_damage,
            recovery: Vec::new(),
            archive_base: generation.archive_base(dir),
            latest_tag: latest::settings_tag(&cfg),
            opts: opts.clone(),
            failed: None,
        };
        if opts.writable {
            let id = store.current_container()?;
            store.containers.open_writer(id, opts.wait)?;
            // What the current container's open repaired (a crash mid-put), then what the
            // generation file left under way.
            store.recovery = store.containers.writer_recovery();
            let generation = store.recover_generation()?;
            store.recovery.extend(generation);
        }
        for id in store.container_ids()? {
            // A container that cannot be opened now is reported by the read that needs it.
            let _ = store.container(id);
        }
        Ok(store)
    }

    /// Moves a read-only handle to the latest commit of the title records. Reads need no refresh
    /// to stay current: one that finds its view stale (a title rewritten, taken down or created
    /// since, by a put or a compaction, even during the read) reads again through a fresh view
    /// and keeps it ([`Store::renewals`] counts them); a title created after an index rebuild of
    /// the records is the exception, missed until a refresh. `stat`, `check` and the other scans
    /// read the view as of the open or the last refresh. Containers the handle has opened stay
    /// readable after a compaction removes them. The writer's handle is always current.
    pub fn refresh(&mut self) -> Result<()> {
        self.records.refresh()?;
        Ok(())
    }

    /// The file whose sync failed, when this is a failed writer ([`Error::WriterFailed`]): it
    /// refuses every read and write until [`Store::reopen`].
    pub fn failed(&self) -> Option<&Path> {
        let values = self.containers.writer_failed();
        self.records
            .fs
            .failed()
            .or(values)
            .or(self.failed.as_deref())
    }

    /// `Ok` unless this is a failed writer: the writer's puts, commits, take-downs and reads begin
    /// with it.
    pub(crate) fn check_failed(&self) -> Result<()> {
        Error::check_not_failed(self.failed())
    }

    /// Closes this handle and opens the store again in its place, with the same options: a
    /// writer's open recovers as after a crash, keeping only what was committed, so this is how
    /// a failed writer works again. When the open fails, the handle refuses everything as a
    /// failed writer, until a reopen succeeds.
    pub fn reopen(&mut self) -> Result<()> {
        let (dir, opts) = (self.dir.clone(), self.opts.clone());
        let failed = self.failed().unwrap_or(&dir).to_path_buf();
        // The writer's locks are its filesys handles': they are closed before the open takes
        // them again, a read-only handle (which takes none) holding the place meanwhile.
        let read_only = StoreOptions {
            writable: false,
            ..opts.clone()
        };
        let mut stand_in = Store::open(&dir, &read_only)?;
        stand_in.failed = Some(failed);
        drop(std::mem::replace(self, stand_in));
        *self = Store::open(&dir, &opts)?;
        Ok(())
    }

    /// The archive filesys's base path (whether or not the store has an archive).
    pub fn archive_base(&self) -> &Path {
        &self.archive_base
    }

    /// What the writer's open repaired: the current container (what a crash mid-put left: a
    /// journal replayed or discarded, an unsynced tail dropped) and unfinished compactions
    /// completed or undone. The meta filesys's own repairs are in `meta().recovery()`.
    pub fn recovery(&self) -> &[String] {
        &self.recovery
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration (policy and limits).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Commits of the title records made through this handle: by a commit (so by every
    /// committed put, take-down and lift), and inside a put when the container rolls over or the
    /// record index grows. After a power cut the store holds what the last completed one
    /// committed (crash tests compare this counter around an operation to know which states may
    /// have survived).
    pub fn commits(&self) -> u64 {
        self.records.fs.commits()
    }

    /// Now, by the store's clock.
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Where the store's files are opened.
    pub(crate) fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.vfs
    }

    /// The store's clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The title records, to write to around [`Store::save`]: the handle forgets the records it
    /// kept from its reads ([`recent`]), since what is written here does not pass through it.
    pub(crate) fn meta_mut(&mut self) -> &mut Filesys {
        self.records.fs_mut()
    }

    // ---- writes ----------------------------------------------------------------------------

    /// Stores a render and commits it; returns its tid. (Many puts, one commit:
    /// [`Store::batch`].)
    pub fn put(&mut self, put: &Put<'_>) -> Result<Uuid> {
        let tid = self.put_uncommitted(put)?;
        self.commit()?;
        Ok(tid)
    }

    /// A batch of puts made durable by one commit.
    pub fn batch(&mut self) -> Batch<'_> {
        Batch {
            store: self,
            puts: 0,
        }
    }

    /// Applies a put without committing it (see [`Store::batch`]).
    pub(crate) fn put_uncommitted(&mut self, put: &Put<'_>) -> Result<Uuid> {
        self.writer()?;
        let title = TitleKey::new(put.domain, put.title)?;
        check_content_type(put.content_type)?;
        put.labels.check()?;
        if put.value.len() as u64 > self.cfg.max_value {
            return Err(Error::invalid(format!(
                "a value of {} bytes is over this store's maximum of {}",
                put.value.len(),
                self.cfg.max_value
            )));
        }
        // One reading of the clock: the tid's 100-ns ticks and the stamps' seconds agree.
        let ticks = self.clock.now_ticks();
        let now = ticks.div_euclid(crate::clock::TICKS_PER_SEC);
        key::check_now(now)?;
        if let Some(t) = put.tid {
            key::check_tid(t)?;
        }
        let name = title.name();
        // Looked up for an update: the record's rewrite below reuses this lookup of its name.
        // The record's bytes come from the writer's record cache when it holds the inode found
        // (a title written lately), else from the files.
        let (old, version) = self.records.fs.locate_for_update(name)?;
        let mut rec = match old {
            Some(stat) => {
                let path = self.records.fs.data().path();
                match self.records.held(name, stat.inode) {
                    Some(bytes) => TitleRecord::decode(&bytes, name, path, stat.inode.0)?,
                    None => {
                        let bytes = self.records.fs.read_version(&version)?.unwrap_or_default();
                        TitleRecord::decode(&bytes, name, path, stat.inode.0)?
                    }
                }
            }
            None => self.new_record(name)?,
        };
        let tid = match put.tid {
            Some(t) => t,
            None => {
                let newest = self.newest_tid(name, &rec, put.rev)?;
                self.tids.make_after(ticks, newest)?
            }
        };
        let policy = self.cfg.policy;
        rec.check_put(put.rev, put.historical, &policy, now)
            .map_err(|r| match r {
                Refusal::TakenDown => Error::invalid(format!(
                    "{}/{} revision {} is taken down; lift it with `wink rm --lift` first",
                    put.domain, put.title, put.rev
                )),
                Refusal::HistoricalNewerThanCurrent { current } => Error::invalid(format!(
                    "a historical put of revision {} is newer than the current revision {current}",
                    put.rev
                )),
            })?;
        let location = self.write_value(&title, put, tid)?;
        let stamps = policy::Stamps {
            historical: put.historical,
            ..policy::Stamps::default()
        };
        rec.put(
            Render {
                rev: put.rev,
                tid,
                content_type: put.content_type.into(),
                labels: put.labels.clone(),
                location,
                stamps,
            },
            &policy,
            now,
        );
        rec.cull_keeping(&policy, now, self.cfg.archive);
        self.save_over(title.name(), &rec, Some(version))?;
        Ok(tid)
    }

    /// The greatest tid of the renders of `rev` stored in either tier: a generated tid must
    /// be greater, so that a later put of a revision is its newest render (the newest render
    /// of a revision is the one with the greatest tid), whatever the clocks of the processes
    /// that wrote them said.
    fn newest_tid(&self, name: &[u8], rec: &TitleRecord, rev: u64) -> Result<Option<Uuid>> {
        let hot = rec.renders.iter().filter(|r| r.rev == rev).map(|r| r.tid);
        let archive = match rec.archive {
            record::InArchive::No => None,
            _ => self.archive_tier()?,
        };
        let newest =
            |tids: &mut dyn Iterator<Item = Uuid>| tids.max_by(|a, b| key::cmp_tid(*a, *b));
        let archived = match archive {
            // Taken down ones too: a tid is never made again.
            Some(archive) => archive
                .with_entries(name, |entries| {
                    newest(
                        &mut entries
                            .iter()
                            .filter(|e| e.rev == rev)
                            .map(|e| Uuid::from_bytes(e.tid)),
                    )
                })?
                .flatten(),
            None => None,
        };
        Ok(newest(&mut hot.chain(archived)))
    }

    fn write_value(&mut self, title: &TitleKey, put: &Put<'_>, tid: Uuid) -> Result<Location> {
        let limit = self.cfg.container_bytes;
        if self.writer()?.fs.data().filesize() >= limit {
            self.rotate()?;
        }
        let name = value_name(title, put.rev, tid);
        let w = self.writer()?;
        let (_, extents) = w.fs.put_located(&name, 0, put.value)?;
        let offset = extents.first().map_or(0, |e| e.offset);
        Ok(Location {
            container: w.id,
            offset,
            len: put.value.len() as u64,
            crc: crc32fast::hash(put.value),
        })
    }

    /// Makes every put so far durable: the container and the records that point into it, with
    /// one barrier.
    ///
    /// Both journals are written first, the records' saying that it requires the container's
    /// commit; one barrier then syncs both filesys's files at once; then both apply their held
    /// writes. After a crash the records' commit counts only if the container's arrived whole,
    /// so no record ever points at a value that is not durable.
    pub(crate) fn commit(&mut self) -> Result<()> {
        self.check_failed()?;
        let w = self.containers.writer()?;
        let meta = &mut self.records.fs;
        let staged = w.fs.commit_begin().and_then(|()| {
            meta.require(&w.fs);
            meta.commit_begin()
        });
        let synced = staged.and_then(|()| {
            let mut files = w.fs.barrier_files();
            files.extend(meta.barrier_files());
            // A failed sync fails both writers ([`Filesys::fail`]): neither commit may be made
            // again.
            crate::storage::sync_all(&files).inspect_err(|e| {
                w.fs.fail(e);
                meta.fail(e);
            })
        });
        // A large commit applies the two filesys's held writes on two threads: each is
        // thousands of small writes (index cells, deleted flags), to files of their own. The
        // records' own failure forgets what they read (`commit_end`); the values' forgets it here.
        let records = &mut self.records;
        let large = w.fs.pending_bytes() + records.fs.pending_bytes() >= PARALLEL_APPLY_BYTES;
        let ended = synced.and_then(|()| {
            if !large {
                w.fs.commit_end()?;
                return Ok(records.commit_end());
            }
            std::thread::scope(|scope| {
                let values = scope.spawn(|| w.fs.commit_end());
                let titles = records.commit_end();
                values
                    .join()
                    .unwrap_or_else(|p| Err(Error::panicked("a commit's apply", &*p)))?;
                Ok(titles)
            })
        });
        match ended {
            Ok(titles) => titles,
            Err(e) => {
                self.records.forget_all();
                Err(e)
            }
        }
    }

    /// Takes a revision (or, with `None`, the whole title) down: its renders are never returned
    /// again, and puts of it are refused until the take-down is lifted. Returns the readable
    /// renders removed (expired ones that no put has culled yet are not counted: the answer does
    /// not depend on whether culling ran). Committed.
    pub fn take_down(&mut self, domain: &str, title: &str, rev: Option<u64>) -> Result<usize> {
        self.writer()?;
        let title = TitleKey::new(domain, title)?;
        let name = title.name();
        let mut rec = self.load_or_new(name)?;
        let (policy, now) = (self.cfg.policy, self.clock.now());
        let removed = rec
            .take_down(rev)
            .iter()
            .filter(|r| policy.readable(&r.stamps, now))
            .count();
        // The archive first: a crash in between leaves the hot tombstone missing, never an
        // archived copy of a taken-down revision that reads could still find.
        let archived = match self.archive_tier_mut()? {
            Some(archive) => {
                let n = archive.take_down(name, rev)?;
                archive.commit()?;
                n
            }
            None => 0,
        };
        self.save(name, &rec)?;
        self.commit()?;
        Ok(removed + archived)
    }

    /// Lifts a take-down; false when there was none. Committed.
    pub fn lift(&mut self, domain: &str, title: &str, rev: Option<u64>) -> Result<bool> {
        self.writer()?;
        let title = TitleKey::new(domain, title)?;
        let mut rec = self.load_or_new(title.name())?;
        let lifted = rec.lift(rev);
        if lifted {
            self.save(title.name(), &rec)?;
            self.commit()?;
        }
        Ok(lifted)
    }

    pub(crate) fn save(&mut self, name: &[u8], rec: &TitleRecord) -> Result<()> {
        self.save_over(name, rec, None)
    }

    /// Writes a title's record (`version`: where [`Filesys::locate_for_update`] found it); the
    /// current container is synced first when the records may commit on their own.
    fn save_over(
        &mut self,
        name: &[u8],
        rec: &TitleRecord,
        version: Option<filesys::Version>,
    ) -> Result<()> {
        let containers = &mut self.containers;
        self.records
            .write(name, rec, version, || match containers.writer_if_open() {
                Some(w) => w.fs.sync(),
                None => Ok(()),
            })
    }

    // ---- reads -----------------------------------------------------------------------------

    /// A title's record, or a new one for a title the store has never seen; a title whose
    /// record is missing while the archive holds it is damage, never written over.
    fn load_or_new(&self, name: &[u8]) -> Result<TitleRecord> {
        match self.load(name)? {
            Some(rec) => Ok(rec),
            None => self.new_record(name),
        }
    }

    /// The record of a title not found in the title records.
    fn new_record(&self, name: &[u8]) -> Result<TitleRecord> {
        self.check_unrecorded(name)?;
        Ok(TitleRecord::default())
    }

    /// Reads a value and verifies its CRC-32: damaged bytes are an error, never returned (a
    /// quarantined value's error names its quarantine entry).
    pub(crate) fn read_value(&self, loc: &Location) -> Result<Vec<u8>> {
        self.read_value_raw(loc).map_err(|e| match e {
            Error::Corrupt { .. } | Error::Io { .. } => self.damaged_or(loc, e),
            e => e,
        })
    }

    fn read_value_raw(&self, loc: &Location) -> Result<Vec<u8>> {
        self.check_failed()?;
        let mut value = vec![
            0u8;
            usize::try_from(loc.len)
                .map_err(|_| Error::invalid("value too large for memory"))?
        ];
        if loc.len > 0 {
            let storage = self.container(loc.container)?;
            read_exact_at(storage.as_ref(), &mut value, loc.offset, "a value")?;
            loc.verify(storage.path(), &value)?;
        }
        Ok(value)
    }

    fn got(&self, rec: &TitleRecord, render: &Render, now: i64) -> Result<Got> {
        Ok(Got {
            rev: render.rev,
            tid: render.tid,
            content_type: render.content_type.to_string(),
            labels: render.labels.clone(),
            state: state_of(rec, render, &self.cfg.policy, now),
            value: self.read_value(&render.location)?,
        })
    }

    /// The render `which` names of a title, if it is readable (stored, not taken down, not past
    /// retention), from whichever tier holds it. The domain and title are checked as a
    /// [`TitleKey`] is.
    pub fn get(&self, domain: &str, title: &str, which: Which) -> Result<Option<Got>> {
        self.check_failed()?;
        match which {
            Which::Latest => self.find(domain, title, true, |_, _| true),
            Which::Rev(rev) => self.find(domain, title, false, |r, _| r == rev),
            Which::Render(rev, tid) => self.find(domain, title, false, |r, t| r == rev && t == tid),
            Which::AsOf(at) => {
                let limit = key::ticks_at(at);
                self.find(domain, title, false, |_, tid| key::tid_ticks(tid) <= limit)
            }
        }
    }

    /// True when puts of `rev` (or, with `None`, of the whole title) are refused by a take-down
    /// until it is lifted.
    pub fn is_taken_down(&self, domain: &str, title: &str, rev: Option<u64>) -> Result<bool> {
        self.check_failed()?;
        let title = TitleKey::new(domain, title)?;
        let rec = self.load_fresh(title.name())?;
        Ok(rec.is_some_and(|r| r.title_down || rev.is_some_and(|rev| r.revs_down.contains(&rev))))
    }

    /// A title's readable renders in both tiers, newest first.
    pub fn list(&self, domain: &str, title: &str, page: Page) -> Result<Vec<Listed>> {
        self.check_failed()?;
        self.list_tiers(domain, title, page)
    }
}

/// The state a render is listed with.
fn state_of(rec: &TitleRecord, r: &Render, policy: &Policy, now: i64) -> State {
    if r.stamps.historical {
        State::Historical
    } else if rec.current_rev(policy, now) == Some(r.rev) {
        State::Current
    } else {
        State::Recent
    }
}

fn check_content_type(ct: &str) -> Result<()> {
    if ct.is_empty() || ct.len() > 255 || ct.chars().any(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "content type {ct:?}: 1 to 255 bytes, no control characters"
        )));
    }
    Ok(())
}

/// Puts made durable together by [`Batch::commit`] (group commit).
///
/// A batch dropped without a commit promises nothing of its puts: they stay applied in memory
/// and ride in the store's next commit, or are lost with the process.
#[derive(Debug)]
pub struct Batch<'a> {
    store: &'a mut Store,
    puts: usize,
}

impl Batch<'_> {
    /// Applies a put; it is durable once the batch commits.
    pub fn put(&mut self, put: &Put<'_>) -> Result<Uuid> {
        let tid = self.store.put_uncommitted(put)?;
        self.puts += 1;
        Ok(tid)
    }

    /// Reads through the batch's store (puts so far are visible).
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Takes a revision (or, with `None`, the whole title) down, as [`Store::take_down`]:
    /// committed, and with it the batch's puts so far.
    pub fn take_down(&mut self, domain: &str, title: &str, rev: Option<u64>) -> Result<usize> {
        self.store.take_down(domain, title, rev)
    }

    /// Lifts a take-down, as [`Store::lift`]: when there was one, committed, and with it the
    /// batch's puts so far.
    pub fn lift(&mut self, domain: &str, title: &str, rev: Option<u64>) -> Result<bool> {
        self.store.lift(domain, title, rev)
    }

    /// Commits every put of the batch so far with one sync; returns how many there were. The
    /// batch stays open: puts after this are durable at its next commit.
    pub fn commit(&mut self) -> Result<usize> {
        self.store.commit()?;
        Ok(std::mem::take(&mut self.puts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_name_is_domain_title_rev_tid() {
        let tid = key::tid_at(1_600_000_000, 7, [1, 2, 3, 4, 5, 6]);
        let title = TitleKey::new("en.wikipedia.org", "Main_Page").unwrap();
        for rev in [0, 7, 1234, u64::MAX] {
            assert_eq!(
                value_name(&title, rev, tid),
                format!("en.wikipedia.org/Main_Page/{rev}/{tid}").into_bytes()
            );
        }
        assert_eq!(record_name("d", "t/x"), b"d/t/x");
        let key = TitleKey::new("d", "t/x").unwrap();
        assert_eq!(
            (key.name(), key.domain(), key.title()),
            (&b"d/t/x"[..], "d", "t/x")
        );
        assert!(TitleKey::new("d/x", "t").is_err() && TitleKey::new("d", "").is_err());
    }
}
