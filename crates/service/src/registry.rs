//! The buckets of a data root: `ROOT/BUCKET`, each a render store opened once, by this server,
//! as its only writer.
//!
//! | per bucket | what | who uses it |
//! |---|---|---|
//! | writer `Arc<Mutex<Store>>` | the writer's handle | group commit, maintenance, archived reads |
//! | job queue | puts, take-downs, lifts | requests → the group-commit thread ([`super::commit`]) |
//! | generation | commits made by the group-commit thread | read handles: renewed when older |
//! | read handles | one read-only `Store` per worker thread | every read, with no lock |
//! | stat | the last whole-store count (titles, renders, bytes) | `/_health`, `/metrics` |
//!
//! **Reads.** Each worker thread keeps its own read-only handle of each bucket (a thread-local
//! map), so reads on all cores share nothing but the page cache. Before a read, the handle is
//! refreshed when the bucket's commit generation has passed the one it last saw: every commit
//! acknowledged before the read started is in its view (read-your-writes). What a handle may
//! miss between those refreshes — records rewritten by maintenance — its reads notice and renew
//! by themselves (the store's `Error::Stale` renewal).
//!
//! **The archive tier.** A read-only handle's archive is its view as of the open, and an archive
//! step of the background maintenance moves renders there without a commit of ours. So in a
//! bucket with an archive, a read whose answer is not a hot render (nothing, or an archived
//! render), a title listing and a title walk are answered through the writer's handle instead,
//! under its lock: those reads wait for a commit under way, hot reads never do.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::commit::{self, CommitStats, Job};
use super::error::{ServiceError, Unavailable};
use super::spec::{valid_bucket_name, BucketSpec};
use std::sync::atomic::AtomicU64;
use wink_engine::maintenance::background::{Maintenance, MaintenanceOptions};
use wink_engine::store::{Config, Store, StoreOptions, StoreStat};
use wink_engine::{Error, Result};

/// The last whole-store count of a bucket.
#[derive(Clone, Debug)]
pub struct StatSnapshot {
    /// When it was made.
    pub at: SystemTime,
    /// The count, or why it could not be made.
    pub stat: std::result::Result<StoreStat, String>,
}

/// One open bucket.
pub struct Bucket {
    /// Its name, which is its directory's under the data root.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Its store's settings.
    pub config: Config,
    writer: Arc<Mutex<Store>>,
    jobs: Mutex<Option<Sender<Job>>>,
    /// Its group commit's batches and times.
    pub commits: Arc<CommitStats>,
    thread: Mutex<Option<JoinHandle<()>>>,
    maintenance: Mutex<Option<Maintenance>>,
    stat: Mutex<Option<StatSnapshot>>,
    /// What the writer's open repaired.
    pub recovery: Vec<String>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("name", &self.name).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The registry's own mutexes guard plain data; a panic elsewhere leaves them consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bucket {
    /// Opens the store in `dir` as its writer and starts its threads.
    fn open(name: &str, dir: &Path, maintenance: Option<&MaintenanceOptions>) -> Result<Bucket> {
        // The system's clock, unless the thread applying a cluster's messages stamps their time.
        let opts = StoreOptions {
            clock: Arc::new(wink_engine::clock::StampedClock),
            ..StoreOptions::writer()
        };
        let store = Store::open(dir, &opts)?;
        let config = *store.config();
        let mut recovery = store.meta().recovery().actions.clone();
        recovery.extend(store.recovery().iter().cloned());
        let writer = Arc::new(Mutex::new(store));
        let (tx, rx) = mpsc::channel();
        let commits = Arc::new(CommitStats::default());
        let thread = {
            let (writer, commits) = (writer.clone(), commits.clone());
            std::thread::Builder::new()
                .name(format!("wink-commit-{name}"))
                .spawn(move || commit::run(writer, rx, commits))
                .map_err(|e| Error::io(dir, None, e))?
        };
        let maintenance = match maintenance {
            Some(opts) => Some(Maintenance::spawn(writer.clone(), opts.clone())?),
            None => None,
        };
        Ok(Bucket {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            config,
            writer,
            jobs: Mutex::new(Some(tx)),
            commits,
            thread: Mutex::new(Some(thread)),
            maintenance: Mutex::new(maintenance),
            stat: Mutex::new(None),
            recovery,
        })
    }

    /// Queues a job for the group-commit thread; false once the bucket is closing.
    pub fn submit(&self, job: Job) -> bool {
        match lock(&self.jobs).as_ref() {
            Some(tx) => tx.send(job).is_ok(),
            None => false,
        }
    }

    /// Runs `f` on the writer's handle, under its lock.
    pub fn with_writer<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let store = self.writer.lock().map_err(|_| {
            Error::internal(format!(
                "{}: the writer's lock is poisoned",
                self.dir.display()
            ))
        })?;
        f(&store)
    }

    /// Whether its store keeps old revisions in an archive.
    pub fn has_archive(&self) -> bool {
        self.config.archive.is_some()
    }

    /// Its last whole-store count, if one was made yet.
    pub fn stat(&self) -> Option<StatSnapshot> {
        lock(&self.stat).clone()
    }

    /// The background maintenance's status (`None`: not running in this server).
    pub fn maintenance(&self) -> Option<wink_engine::maintenance::background::MaintenanceStatus> {
        lock(&self.maintenance).as_ref().map(|m| m.status())
    }

    /// Stops taking jobs, lets the group-commit thread finish the queued ones (each committed and
    /// answered), and stops the maintenance after its step under way.
    fn close(&self) {
        drop(lock(&self.jobs).take());
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        if let Some(m) = lock(&self.maintenance).take() {
            m.stop();
        }
    }
}

/// This worker thread's read handle of a bucket.
struct Reader {
    bucket: Arc<Bucket>,
    store: Store,
    /// The bucket's commit generation when the handle was last brought up to date.
    seen: u64,
}

/// No bucket `name`.
pub fn missing(name: &str) -> ServiceError {
    ServiceError::NotFound(format!("no bucket {name} (create it with PUT)"))
}

/// Bucket `name` exists but could not be opened, for `why` (what the error log gets).
pub fn unopened(name: &str, why: &str) -> ServiceError {
    ServiceError::Unavailable(Unavailable {
        why: format!("bucket {name} could not be opened (tried again every few seconds)"),
        retry_after: 10,
        log: Some(format!("bucket {name}: {why}")),
    })
}

thread_local! {
    static READERS: RefCell<HashMap<String, Reader>> = RefCell::new(HashMap::new());
}

/// The buckets of a data root.
pub struct Registry {
    root: PathBuf,
    buckets: RwLock<HashMap<String, Arc<Bucket>>>,
    /// Buckets that could not be opened, with why.
    failed: Mutex<BTreeMap<String, String>>,
    creating: Mutex<()>,
    maintenance: Option<MaintenanceOptions>,
    /// Buckets held at most: a creation past it is refused.
    max_buckets: usize,
    /// Read handles brought up to a newer commit before a read.
    pub read_handle_refreshes: AtomicU64,
    /// Reads answered through a bucket's writer (the archive tier, listings of archived titles).
    pub writer_fallbacks: AtomicU64,
}

/// What a bucket's `PUT` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Created {
    /// It was made.
    New,
    /// It existed with the same settings.
    Existed,
}

impl Registry {
    /// Opens every bucket under `root` (created when missing). A bucket that cannot be opened is
    /// kept as failed (its reads answer 503, `/_health` names it), the others serve.
    pub fn open(
        root: &Path,
        maintenance: Option<MaintenanceOptions>,
        max_buckets: usize,
    ) -> Result<Registry> {
        wink_engine::vfs::Vfs::create_dir_all(&wink_engine::vfs::RealFs, root)?;
        let reg = Registry {
            root: root.to_path_buf(),
            buckets: RwLock::new(HashMap::new()),
            failed: Mutex::new(BTreeMap::new()),
            creating: Mutex::new(()),
            maintenance,
            max_buckets,
            read_handle_refreshes: AtomicU64::new(0),
            writer_fallbacks: AtomicU64::new(0),
        };
        let entries = std::fs::read_dir(root).map_err(|e| Error::io(root, None, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(root, None, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if valid_bucket_name(&name) && entry.path().join("store").exists() {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            let dir = root.join(&name);
            match Bucket::open(&name, &dir, reg.maintenance.as_ref()) {
                Ok(b) => {
                    reg.write_buckets().insert(name, Arc::new(b));
                }
                Err(e) => {
                    lock(&reg.failed).insert(name, e.to_string());
                }
            }
        }
        Ok(reg)
    }

    fn write_buckets(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Bucket>>> {
        self.buckets.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The open buckets, by name.
    pub fn buckets(&self) -> Vec<Arc<Bucket>> {
        let map = self.buckets.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<Arc<Bucket>> = map.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The open bucket `name`; `Err` with why when it could not be opened; `Ok(None)` when there
    /// is no such bucket.
    pub fn bucket(&self, name: &str) -> std::result::Result<Option<Arc<Bucket>>, String> {
        let map = self.buckets.read().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = map.get(name) {
            return Ok(Some(b.clone()));
        }
        match lock(&self.failed).get(name) {
            Some(why) => Err(why.clone()),
            None => Ok(None),
        }
    }

    /// The open bucket `name`, or why it cannot be used: not there, or not opened (yet).
    pub fn open_bucket(&self, name: &str) -> std::result::Result<Arc<Bucket>, ServiceError> {
        match self.bucket(name) {
            Ok(Some(b)) => Ok(b),
            Ok(None) => Err(missing(name)),
            Err(why) => Err(unopened(name, &why)),
        }
    }

    /// Buckets that could not be opened, with why.
    pub fn failed(&self) -> BTreeMap<String, String> {
        lock(&self.failed).clone()
    }

    /// Runs `f` on this thread's read handle of bucket `name`, brought up to the bucket's last
    /// commit first when it is older; `Ok(None)` when there is no such bucket (`Err(Problem)`
    /// for one that failed is the caller's: see [`Registry::bucket`]).
    pub fn read<T>(
        &self,
        name: &str,
        f: impl FnOnce(&Bucket, &Store) -> Result<T>,
    ) -> std::result::Result<Option<T>, ReadError> {
        READERS.with(|readers| {
            let mut readers = readers.borrow_mut();
            if !readers.contains_key(name) {
                let bucket = match self.bucket(name) {
                    Ok(Some(b)) => b,
                    Ok(None) => return Ok(None),
                    Err(why) => return Err(ReadError::Failed(why)),
                };
                let seen = bucket.commits.generation.load(Ordering::Acquire);
                let store = Store::open(&bucket.dir, &StoreOptions::read_only())
                    .map_err(ReadError::Store)?;
                readers.insert(
                    name.to_string(),
                    Reader {
                        bucket,
                        store,
                        seen,
                    },
                );
            }
            let Some(reader) = readers.get_mut(name) else {
                return Ok(None);
            };
            let now = reader.bucket.commits.generation.load(Ordering::Acquire);
            if reader.seen < now {
                reader.store.refresh().map_err(ReadError::Store)?;
                reader.seen = now;
                self.read_handle_refreshes.fetch_add(1, Ordering::Relaxed);
            }
            f(&reader.bucket, &reader.store)
                .map(Some)
                .map_err(ReadError::Store)
        })
    }

    /// Creates bucket `name` with `spec`'s settings, or checks them against the bucket's when
    /// it exists (an `Err` naming both when they differ).
    pub fn create(
        &self,
        name: &str,
        spec: &BucketSpec,
    ) -> std::result::Result<Created, CreateError> {
        let _one_at_a_time = lock(&self.creating);
        match self.bucket(name) {
            Ok(Some(b)) => {
                let differ = spec.differences(&b.config).map_err(CreateError::Invalid)?;
                return if differ.is_empty() {
                    Ok(Created::Existed)
                } else {
                    Err(CreateError::Differs(format!(
                        "bucket {name} exists with other settings: {differ}"
                    )))
                };
            }
            Ok(None) => {}
            Err(why) => return Err(CreateError::Failed(why)),
        }
        let cfg = spec.config().map_err(CreateError::Invalid)?;
        let held =
            self.buckets.read().unwrap_or_else(|p| p.into_inner()).len() + lock(&self.failed).len();
        if held >= self.max_buckets {
            return Err(CreateError::Full(self.max_buckets));
        }
        let dir = self.root.join(name);
        let existed = dir.exists();
        let made = Store::init(&dir, &cfg, &StoreOptions::writer())
            .and_then(|()| Bucket::open(name, &dir, self.maintenance.as_ref()));
        match made {
            Ok(b) => {
                self.write_buckets().insert(name.to_string(), Arc::new(b));
                Ok(Created::New)
            }
            Err(e) => {
                if !existed {
                    // Only what this request created (a validated name under the root).
                    let _ = std::fs::remove_dir_all(&dir);
                }
                Err(CreateError::Store(e))
            }
        }
    }

    /// Counts every bucket's store (a scan of its title records) through a read-only handle of
    /// the stat thread's own; `handles` keeps them between rounds.
    pub fn refresh_stats(&self, handles: &mut HashMap<String, Store>) {
        self.refresh_stats_where(handles, |_| true);
    }

    /// [`Registry::refresh_stats`] of the buckets that have none yet (new ones).
    pub fn refresh_missing_stats(&self, handles: &mut HashMap<String, Store>) {
        self.refresh_stats_where(handles, |b| lock(&b.stat).is_none());
    }

    /// Opens again the buckets that could not be opened (their writer lock was held by another
    /// process, their disk was away): each one that opens now serves. Answers their names.
    pub fn retry_failed(&self) -> Vec<String> {
        let names: Vec<String> = lock(&self.failed).keys().cloned().collect();
        let mut opened = Vec::new();
        for name in names {
            let dir = self.root.join(&name);
            let Ok(b) = Bucket::open(&name, &dir, self.maintenance.as_ref()) else {
                continue;
            };
            // Under the creation lock: a bucket is never open twice.
            let _creating = lock(&self.creating);
            self.write_buckets().insert(name.clone(), Arc::new(b));
            lock(&self.failed).remove(&name);
            opened.push(name);
        }
        opened
    }

    fn refresh_stats_where(
        &self,
        handles: &mut HashMap<String, Store>,
        which: impl Fn(&Bucket) -> bool,
    ) {
        for b in self.buckets().into_iter().filter(|b| which(b)) {
            let stat = match handles.get_mut(&b.name) {
                Some(s) => s.refresh(),
                None => Store::open(&b.dir, &StoreOptions::read_only())
                    .map(|s| drop(handles.insert(b.name.clone(), s))),
            }
            .and_then(|()| match handles.get(&b.name) {
                Some(s) => s.stat(),
                None => Err(Error::invalid("no handle")),
            })
            .map_err(|e| e.to_string());
            *lock(&b.stat) = Some(StatSnapshot {
                at: SystemTime::now(),
                stat,
            });
        }
    }

    /// Closes every bucket: queued jobs done and answered, maintenance stopped. The writers'
    /// locks go with the last handle (the registry's, and the worker threads' read handles).
    pub fn close(&self) {
        for b in self.buckets() {
            b.close();
        }
    }

    /// `/_health`: (all buckets readable, the JSON summary).
    /// A message with the data root's path taken out of the file paths it names: an answer
    /// names files relative to the root (`b/c000001.data`), never where the root is.
    fn within_root(&self, message: &str) -> String {
        let root = self.root.display().to_string();
        message.replace(&format!("{}/", root.trim_end_matches('/')), "")
    }

    /// Whether every bucket serves, and the buckets' states and last counts as JSON.
    pub fn health(&self) -> (bool, Value) {
        let mut buckets = serde_json::Map::new();
        for b in self.buckets() {
            let stat = b.stat();
            let counts = match stat.as_ref().map(|s| &s.stat) {
                Some(Ok(st)) => json!({
                    "titles": st.titles,
                    "renders": st.renders,
                    "live_bytes": st.live_bytes,
                    "containers": st.containers,
                    "container_bytes": st.container_bytes,
                    "counted_at": stat.as_ref().map(|s| httpdate::fmt_http_date(s.at)),
                }),
                Some(Err(e)) => json!({ "error": self.within_root(e) }),
                None => Value::Null,
            };
            let containers = containers_in(&b.dir);
            let maintenance = b.maintenance().map(|m| {
                json!({
                    "running": m.running,
                    "rounds": m.rounds,
                    "compacted": m.compacted,
                    "reclaimed_bytes": m.reclaimed_bytes,
                    "archived_revisions": m.archived.revisions,
                    "culled_renders": m.culled.renders_culled,
                    "errors": m.errors,
                    "last_error": m.last_error.as_deref().map(|e| self.within_root(e)),
                })
            });
            buckets.insert(
                b.name.clone(),
                json!({
                    "status": "ok",
                    "containers": containers,
                    "commits": b.commits.generation.load(Ordering::Relaxed),
                    "counts": counts,
                    "maintenance": maintenance,
                    "recovery": b.recovery.iter().map(|r| self.within_root(r)).collect::<Vec<_>>(),
                }),
            );
        }
        let failed = self.failed();
        for (name, why) in &failed {
            buckets.insert(
                name.clone(),
                json!({ "status": "unreadable", "error": self.within_root(why) }),
            );
        }
        let ok = failed.is_empty();
        let status = if ok { "ok" } else { "degraded" };
        (ok, json!({ "status": status, "buckets": buckets }))
    }
}

/// The containers in a store's directory (`cNNNNNN.data`), counted without the writer's lock: a
/// health check must not wait for a commit or a maintenance step.
fn containers_in(dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.len() == 12
                    && name.starts_with('c')
                    && name.ends_with(".data")
                    && name[1..7].bytes().all(|b| b.is_ascii_digit())
            })
            .count(),
    )
}

/// Why a read could not be made.
#[derive(Debug)]
pub enum ReadError {
    /// The bucket could not be opened at start.
    Failed(String),
    /// The store could not be read.
    Store(Error),
}

/// Why a bucket's `PUT` failed.
#[derive(Debug)]
pub enum CreateError {
    /// The settings given are not valid.
    Invalid(Error),
    /// The bucket exists with other settings.
    Differs(String),
    /// The bucket exists but could not be opened.
    Failed(String),
    /// The server holds as many buckets as it may (this many).
    Full(usize),
    /// The store could not be made or opened.
    Store(Error),
}

impl Registry {
    /// The per-bucket part of `/metrics`.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let buckets = self.buckets();
        let gauges: [(&str, &str); 6] = [
            (
                "wink_bucket_titles",
                "Titles with a readable render (at the last count).",
            ),
            (
                "wink_bucket_renders",
                "Readable renders (at the last count).",
            ),
            (
                "wink_bucket_container_bytes",
                "Bytes of the bucket's containers.",
            ),
            (
                "wink_bucket_live_ratio",
                "Live bytes over container bytes (at the last count).",
            ),
            (
                "wink_bucket_archive_compression_ratio",
                "Archive bytes over the raw bytes they hold.",
            ),
            (
                "wink_bucket_count_age_seconds",
                "Seconds since the last count.",
            ),
        ];
        for (i, (name, help)) in gauges.iter().enumerate() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for b in &buckets {
                let Some(snap) = b.stat() else { continue };
                let Ok(st) = &snap.stat else { continue };
                let share = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                let v = match i {
                    0 => st.titles as f64,
                    1 => st.renders as f64,
                    2 => st.container_bytes as f64,
                    3 => share(st.live_bytes, st.container_bytes),
                    4 => match &st.archive {
                        Some(a) => share(a.stored_bytes, a.raw_bytes),
                        None => continue,
                    },
                    _ => snap.at.elapsed().map_or(0.0, |d| d.as_secs_f64()),
                };
                let _ = writeln!(out, "{name}{{bucket=\"{}\"}} {v}", b.name);
            }
        }
        let _ = writeln!(
            out,
            "# HELP wink_group_commit_batch_puts Puts made durable by one commit.\n\
             # TYPE wink_group_commit_batch_puts histogram"
        );
        for b in &buckets {
            let labels = format!("bucket=\"{}\",", b.name);
            b.commits
                .batch
                .render(out, "wink_group_commit_batch_puts", &labels);
        }
        let _ = writeln!(
            out,
            "# HELP wink_group_commit_seconds Time to apply and commit one batch.\n\
             # TYPE wink_group_commit_seconds histogram"
        );
        for b in &buckets {
            let labels = format!("bucket=\"{}\",", b.name);
            b.commits
                .seconds
                .render(out, "wink_group_commit_seconds", &labels);
        }
        let counters: [(&str, &str); 4] = [
            (
                "wink_maintenance_rounds_total",
                "Background maintenance rounds finished.",
            ),
            (
                "wink_maintenance_errors_total",
                "Errors met by background maintenance.",
            ),
            (
                "wink_maintenance_compacted_total",
                "Containers compacted by maintenance.",
            ),
            (
                "wink_maintenance_archived_revisions_total",
                "Revisions archived by maintenance.",
            ),
        ];
        for (i, (name, help)) in counters.iter().enumerate() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for b in &buckets {
                let Some(m) = b.maintenance() else { continue };
                let v = [m.rounds, m.errors, m.compacted, m.archived.revisions][i];
                let _ = writeln!(out, "{name}{{bucket=\"{}\"}} {v}", b.name);
            }
        }
        let _ = writeln!(
            out,
            "# HELP wink_writer_reopens_total Writers reopened after a sync failed.\n\
             # TYPE wink_writer_reopens_total counter"
        );
        for b in &buckets {
            let v = b.commits.reopens.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "wink_writer_reopens_total{{bucket=\"{}\"}} {v}",
                b.name
            );
        }
        let reads = [
            (
                "wink_read_handle_refreshes_total",
                "Read handles brought up to a newer commit before a read.",
                &self.read_handle_refreshes,
            ),
            (
                "wink_writer_fallback_reads_total",
                "Reads answered through a bucket's writer (archive tier, listings of archived \
                    titles).",
                &self.writer_fallbacks,
            ),
        ];
        super::histogram::render_counters(out, &reads);
        let failed = self.failed();
        let _ = writeln!(
            out,
            "# HELP wink_bucket_unreadable Buckets that could not be opened.\n\
             # TYPE wink_bucket_unreadable gauge\nwink_bucket_unreadable {}",
            failed.len()
        );
    }
}
