//! Background maintenance: a thread that culls, archives and compacts a store that the process
//! keeps using, through the same `Arc<Mutex<Store>>` its puts and reads go through.
//!
//! The thread takes the lock for one bounded step at a time and lets it go in between, so a put
//! or a read waits for one step at most, never for a whole run:
//!
//! - cull: one [`cull_due`](fn@crate::maintenance::cull_due) step (N title records, a commit) under the lock; nothing
//!   without it.
//! - archive: one [`archive_step`](fn@crate::maintenance::archive_step) (N titles: read, compress, commit twice) under the lock;
//!   nothing without it.
//! - compaction, plan: nothing under the lock; without it, a dry-run survey through a read-only
//!   handle.
//! - compaction, per job: [`start_compaction_of`](fn@crate::maintenance::start_compaction_of) (and sealing the current one, if asked)
//!   under the lock; nothing without it.
//! - compaction, build: nothing under the lock; without it, [`CompactJob::run`]: survey and copy,
//!   throttled.
//! - compaction, switch: [`adopt`](fn@crate::maintenance::adopt) under the lock: validate, switch, point the records;
//!   nothing without it.
//!
//! Every step is one the store can stop after (each is committed, and a compaction's crash
//! safety is the generation file's), so stopping waits for the step under way only — a
//! container's copy included. Errors are kept in the [`MaintenanceStatus`] and the next round
//! goes on; the thread stops by itself only when the store's lock is poisoned (a thread panicked
//! while holding it), since the store may then be half way through a change.
//!
//! Stopping (or dropping) a [`Maintenance`] joins its thread: never do it while holding the
//! store's lock.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::{Store, StoreOptions, TitleCursor};
use crate::vfs::Vfs;

use super::compact::{
    adopt, plan_compaction, start_compaction_of, Action, Adopted, CompactJob, CompactOptions,
    CompactReport, ContainerPlan, Reason,
};
use super::{archive_step, cull_due, ArchiveReport, CullReport};

/// Tries of a compaction's dry run before its error is reported (see [`Runner::plan`]).
const PLAN_ATTEMPTS: u32 = 3;

/// What the maintenance thread does, and how often.
#[derive(Clone, Debug)]
pub struct MaintenanceOptions {
    /// The pause between the end of a round and the start of the next.
    pub interval: Duration,
    /// Limit on compaction I/O (bytes read plus written), in MB/s.
    pub max_mbps: Option<f64>,
    /// Compact a sealed container once this fraction of its bytes is dead (0 to 1).
    pub min_dead: f64,
    /// Cull title records of renders past their deadline each round.
    pub cull: bool,
    /// Archive revisions leaving the hot tier (stores with an archive only).
    pub archive: bool,
    /// Compact the sealed containers worth it (`min_dead`) each round.
    pub compact: bool,
    /// Seal the current container when a compaction would rewrite it (as `wink compact` does).
    /// Off by default: in a store taking writes, the current container fills and is sealed by
    /// itself, and sealing it every round would leave many small containers.
    pub seal_current: bool,
    /// Title records per cull or archive step: how long the lock is held at most.
    pub step_titles: usize,
}

impl Default for MaintenanceOptions {
    fn default() -> Self {
        MaintenanceOptions {
            interval: Duration::from_secs(600),
            max_mbps: Some(100.0),
            min_dead: 0.25,
            cull: true,
            archive: true,
            compact: true,
            seal_current: false,
            step_titles: 64,
        }
    }
}

impl MaintenanceOptions {
    fn check(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.min_dead) {
            return Err(Error::invalid(format!(
                "min_dead {}: a fraction, 0 to 1",
                self.min_dead
            )));
        }
        if self.max_mbps.is_some_and(|m| !(m > 0.0 && m.is_finite())) {
            return Err(Error::invalid("max_mbps: a positive number of MB/s"));
        }
        if self.step_titles == 0 {
            return Err(Error::invalid("step_titles: at least 1"));
        }
        Ok(())
    }
}

/// What the maintenance thread has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaintenanceStatus {
    /// Rounds finished (each: a cull pass, an archive pass, a compaction of what is worth it).
    pub rounds: u64,
    /// What the culls did, added up.
    pub culled: CullReport,
    /// What the archive steps did, added up.
    pub archived: ArchiveReport,
    /// Containers rewritten or dropped whole.
    pub compacted: u64,
    /// Container compactions given up because the records changed under them (retried later).
    pub abandoned: u64,
    /// Bytes the compactions reclaimed (estimated as [`ContainerPlan::reclaimed`]).
    pub reclaimed_bytes: u64,
    /// Errors its work met; `last_error` holds the last one.
    pub errors: u64,
    /// The last error, prefixed with the work that met it.
    pub last_error: Option<String>,
    /// False once the thread has ended (stopped, or halted by a poisoned lock).
    pub running: bool,
}

struct State {
    status: MaintenanceStatus,
    stop: bool,
    wake: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Only this module locks it, and nothing in it panics while holding it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut MaintenanceStatus)) {
        f(&mut self.state().status);
        self.changed.notify_all();
    }

    fn error(&self, work: &str, e: &dyn std::fmt::Display) {
        self.update(|s| {
            s.errors += 1;
            s.last_error = Some(format!("{work}: {e}"));
        });
    }

    fn stopping(&self) -> bool {
        self.state().stop
    }
}

/// A running maintenance thread.
pub struct Maintenance {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("status", &self.status())
            .finish()
    }
}

impl Maintenance {
    /// Starts the thread. The store must be the writer's handle.
    pub fn spawn(store: Arc<Mutex<Store>>, opts: MaintenanceOptions) -> Result<Maintenance> {
        opts.check()?;
        let (dir, vfs, clock, has_archive) = {
            let mut s = store.lock().map_err(|_| {
                Error::internal("the store's lock is poisoned (a thread panicked holding it)")
            })?;
            s.writer()?;
            (
                s.dir().to_path_buf(),
                s.vfs().clone(),
                s.clock().clone(),
                s.config().archive.is_some(),
            )
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                status: MaintenanceStatus {
                    running: true,
                    ..MaintenanceStatus::default()
                },
                stop: false,
                wake: false,
            }),
            changed: Condvar::new(),
        });
        let runner = Runner {
            store,
            shared: shared.clone(),
            archive: opts.archive && has_archive,
            opts,
            dir,
            vfs,
            clock,
            cull_cursor: TitleCursor::new(),
            archive_cursor: TitleCursor::new(),
        };
        let thread = thread::Builder::new()
            .name("wink-maintenance".into())
            .spawn(move || runner.run())
            .map_err(|e| Error::io(std::path::Path::new("wink-maintenance"), None, e))?;
        Ok(Maintenance {
            shared,
            thread: Some(thread),
        })
    }

    /// What the thread has done so far.
    pub fn status(&self) -> MaintenanceStatus {
        self.shared.state().status.clone()
    }

    /// Starts the next round now instead of after the interval.
    pub fn run_now(&self) {
        self.shared.state().wake = true;
        self.shared.changed.notify_all();
    }

    /// Waits until `rounds` rounds are finished (or the thread has ended, or `timeout` passed);
    /// returns the status then.
    pub fn wait_rounds(&self, rounds: u64, timeout: Duration) -> MaintenanceStatus {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.shared.state();
        loop {
            let now = std::time::Instant::now();
            if state.status.rounds >= rounds || !state.status.running || now >= deadline {
                return state.status.clone();
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Stops the thread after the step under way and waits for it; returns the final status.
    pub fn stop(mut self) -> MaintenanceStatus {
        self.shutdown();
        self.status()
    }

    fn shutdown(&mut self) {
        self.shared.state().stop = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread catches its own panics; a join error has nothing left to report.
            let _ = thread.join();
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The store's lock was poisoned: the thread ends.
struct Halt;

struct Runner {
    store: Arc<Mutex<Store>>,
    shared: Arc<Shared>,
    opts: MaintenanceOptions,
    archive: bool,
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    clock: Arc<dyn Clock>,
    /// Passes resume where an error stopped them, in the next round.
    cull_cursor: TitleCursor,
    archive_cursor: TitleCursor,
}

impl Runner {
    fn run(mut self) {
        loop {
            if self.shared.stopping() {
                break;
            }
            match catch_unwind(AssertUnwindSafe(|| self.round())) {
                Ok(Ok(())) => self.shared.update(|s| s.rounds += 1),
                Ok(Err(Halt)) => break,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    self.shared
                        .error("maintenance stopped after a panic", &what);
                    break;
                }
            }
            if !self.pause() {
                break;
            }
        }
        self.shared.update(|s| s.running = false);
    }

    /// Waits for the interval, a wake-up or a stop; false on a stop.
    fn pause(&self) -> bool {
        let shared = &self.shared;
        let state = shared.state();
        let (mut state, _) = shared
            .changed
            .wait_timeout_while(state, self.opts.interval, |s| !s.stop && !s.wake)
            .unwrap_or_else(|p| p.into_inner());
        state.wake = false;
        !state.stop
    }

    /// Runs `f` on the store under its lock, and lets other threads have it right after.
    fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> std::result::Result<T, Halt> {
        let out = match self.store.lock() {
            Ok(mut store) => f(&mut store),
            Err(_) => {
                self.shared.error(
                    "maintenance stopped",
                    &"the store's lock is poisoned (a thread panicked while holding it)",
                );
                return Err(Halt);
            }
        };
        thread::yield_now();
        Ok(out)
    }

    fn round(&mut self) -> std::result::Result<(), Halt> {
        if self.opts.cull {
            self.cull_pass()?;
        }
        if self.archive {
            self.archive_pass()?;
        }
        if self.opts.compact {
            self.compact()?;
        }
        Ok(())
    }

    fn cull_pass(&mut self) -> std::result::Result<(), Halt> {
        let n = self.opts.step_titles;
        let mut cursor = fresh_if_done(std::mem::take(&mut self.cull_cursor));
        while !cursor.is_done() && !self.shared.stopping() {
            let before = cursor.clone();
            match self.with_store(|s| cull_due(s, &mut cursor, n))? {
                Ok(report) => self.shared.update(|s| s.culled.add(&report)),
                Err(e) => {
                    self.shared.error("cull", &e);
                    cursor = restart_if_stuck(cursor, &before);
                    break;
                }
            }
        }
        self.cull_cursor = cursor;
        Ok(())
    }

    fn archive_pass(&mut self) -> std::result::Result<(), Halt> {
        let n = self.opts.step_titles;
        let mut cursor = fresh_if_done(std::mem::take(&mut self.archive_cursor));
        while !cursor.is_done() && !self.shared.stopping() {
            let before = cursor.clone();
            match self.with_store(|s| archive_step(s, &mut cursor, n))? {
                Ok(report) => self.shared.update(|s| s.archived.add(&report)),
                Err(e) => {
                    self.shared.error("archive", &e);
                    cursor = restart_if_stuck(cursor, &before);
                    break;
                }
            }
        }
        self.archive_cursor = cursor;
        Ok(())
    }

    /// Compacts every container a dry run finds worth it, one at a time.
    fn compact(&mut self) -> std::result::Result<(), Halt> {
        let opts = CompactOptions {
            min_dead: self.opts.min_dead,
            max_mbps: self.opts.max_mbps,
            seal_current: self.opts.seal_current,
            dry_run: false,
        };
        let plan = match self.plan(&opts) {
            Ok(plan) => plan,
            Err(e) => {
                self.shared.error("compaction survey", &e);
                return Ok(());
            }
        };
        let min_dead = self.opts.min_dead;
        let due = plan
            .containers
            .iter()
            .filter(|c| worth_it(c, min_dead))
            .map(|c| c.id);
        let mut due: VecDeque<u32> = due.collect();
        while let Some(&first) = due.front() {
            if self.shared.stopping() {
                break;
            }
            match self.compact_some(&due, &opts)? {
                Ok(adopted) => {
                    due.drain(..adopted.taken.clamp(1, due.len()));
                    for id in adopted.retry.iter().rev() {
                        due.push_front(*id);
                    }
                }
                Err(e) => {
                    self.shared
                        .error(&format!("compaction of container {first}"), &e);
                    due.pop_front();
                }
            }
        }
        Ok(())
    }

    /// The dry run, through a read-only handle of its own: no lock held. It surveys the current
    /// container too, which the writer appends to meanwhile: an open that meets an append half
    /// way (an index naming an entry past the size its superblock gave) fails, and is made again.
    fn plan(&self, opts: &CompactOptions) -> Result<CompactReport> {
        let mut attempt = 0;
        loop {
            match self.plan_once(opts) {
                Err(_) if attempt + 1 < PLAN_ATTEMPTS && !self.shared.stopping() => {
                    attempt += 1;
                    thread::sleep(Duration::from_millis(10));
                }
                done => return done,
            }
        }
    }

    fn plan_once(&self, opts: &CompactOptions) -> Result<CompactReport> {
        let reader = Store::open(
            &self.dir,
            &StoreOptions {
                writable: false,
                wait: false,
                clock: self.clock.clone(),
                vfs: self.vfs.clone(),
                // A plan reads each title once.
                record_cache_bytes: 0,
            },
        )?;
        plan_compaction(
            &reader,
            &CompactOptions {
                dry_run: true,
                ..opts.clone()
            },
        )
    }

    /// One job over the first of `due` (it takes those whose live bytes fit one container):
    /// started and adopted under the lock, built without it.
    fn compact_some(
        &self,
        due: &VecDeque<u32>,
        opts: &CompactOptions,
    ) -> std::result::Result<Result<Adopted>, Halt> {
        let seal = opts.seal_current;
        let candidates: Vec<u32> = due.iter().copied().collect();
        let job = self.with_store(|s| -> Result<Option<CompactJob>> {
            if candidates.first() == Some(&s.current_container()?) {
                if !seal {
                    return Ok(None);
                }
                s.rotate()?;
            }
            start_compaction_of(s, &candidates, opts).map(Some)
        })?;
        let job = match job {
            Ok(Some(job)) => job,
            Ok(None) => {
                return Ok(Ok(Adopted {
                    taken: 1,
                    ..Adopted::default()
                }))
            }
            Err(e) => return Ok(Err(e)),
        };
        let built = job.run();
        let adopted = self.with_store(|s| adopt(s, &job, built))?;
        Ok(adopted.inspect(|adopted| {
            self.shared.update(|s| {
                for plan in &adopted.plans {
                    match plan.action {
                        Action::Rewrite | Action::Drop => {
                            s.compacted += 1;
                            s.reclaimed_bytes += plan.reclaimed();
                        }
                        Action::Abandoned => s.abandoned += 1,
                        Action::Keep => {}
                    }
                }
            })
        }))
    }
}

/// Whether a container's compaction pays: it holds no live value (it is dropped whole), a
/// taken-down value (which must go), or dead values making up `min_dead` of its value bytes.
/// The plan's own test counts the container's bookkeeping (its index file) as dead too, which a
/// rewrite does not reclaim: run in a loop, it would rewrite a small container every round.
fn worth_it(c: &ContainerPlan, min_dead: f64) -> bool {
    let dead: u64 = c.dropped.values().map(|t| t.bytes).sum();
    match c.action {
        Action::Drop => true,
        Action::Rewrite => {
            c.dropped.contains_key(&Reason::TakenDown)
                || (dead > 0 && dead as f64 >= min_dead * (dead + c.live.bytes) as f64)
        }
        Action::Keep | Action::Abandoned => false,
    }
}

/// A new pass when the last one is done.
fn fresh_if_done(cursor: TitleCursor) -> TitleCursor {
    if cursor.is_done() {
        TitleCursor::new()
    } else {
        cursor
    }
}

/// After an error that did not move the cursor (damage where it stands), the next round starts
/// a new pass rather than meet the same error at once and never get to the titles before it.
fn restart_if_stuck(cursor: TitleCursor, before: &TitleCursor) -> TitleCursor {
    if &cursor == before {
        TitleCursor::new()
    } else {
        cursor
    }
}
