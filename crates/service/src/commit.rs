//! Group commit: one thread per bucket owns the bucket's writes. Requests hand it jobs through a
//! queue; it takes every job waiting (up to a batch's bounds), applies the puts, makes them
//! durable with one commit, and only then answers each. A put's 201 therefore always follows the
//! commit that holds it, and the commits' fixed cost (two fdatasyncs and a journal) is shared by
//! every put that arrived while the previous commit was under way.
//!
//! Take-downs and lifts commit themselves; the puts queued before one are committed and answered
//! first, so the jobs of a bucket take effect in the order they were queued.
//!
//! A commit whose sync failed fails the store's writer (`Error::WriterFailed`): it refuses
//! everything, so no later job is acknowledged over writes the disk may have lost. The thread
//! reopens it before the next job ([`heal`]): its recovery keeps what was committed, and the
//! bucket works again without a restart of the server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::conditions::Preconditions;
use super::histogram::{Histogram, BATCH};
use wink_engine::store::{Labels, Put, Store};
use wink_engine::{Error, Result};

/// Puts one commit takes at most.
const MAX_BATCH_PUTS: usize = 4096;
/// Value bytes one commit takes at most.
const MAX_BATCH_BYTES: u64 = 256 << 20;

/// How a put was refused or failed.
#[derive(Debug)]
pub enum PutError {
    /// The revision or title is taken down.
    TakenDown,
    /// The store refused or failed it.
    Store(Error),
    /// The commit that was to make it durable failed (shared by the batch's puts).
    Commit(Arc<Error>),
    /// Its conditions do not hold: why.
    Precondition(String),
}

/// A render to store.
#[derive(Debug)]
pub struct PutJob {
    /// The render's domain.
    pub domain: String,
    /// Its title.
    pub title: String,
    /// Its revision.
    pub rev: u64,
    /// Its time-UUID; `None`: the bucket's clock gives one.
    pub tid: Option<Uuid>,
    /// Its content type.
    pub content_type: String,
    /// Its content encoding and language.
    pub labels: Labels,
    /// Its bytes.
    pub value: Bytes,
    /// Checked against the store when the put is applied, in queue order.
    pub conditions: Preconditions,
}

/// What the bucket's writer thread is asked to do.
#[derive(Debug)]
pub enum Job {
    /// A render to store; answers its tid once it is durable, or why it was not stored.
    Put(PutJob, oneshot::Sender<std::result::Result<Uuid, PutError>>),
    /// A take-down of a revision or (`rev: None`) a title; answers the renders it removed.
    TakeDown {
        /// The title's domain.
        domain: String,
        /// The title.
        title: String,
        /// The revision; `None`: the whole title.
        rev: Option<u64>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<usize>>,
    },
    /// A lift of a take-down; answers whether there was one.
    Lift {
        /// The title's domain.
        domain: String,
        /// The title.
        title: String,
        /// The revision; `None`: the whole title.
        rev: Option<u64>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<bool>>,
    },
    /// Work on the writer's handle in queue order, with the lock held: a cluster's apply of a
    /// batch of messages (its own puts, records and commit), a snapshot. It answers through
    /// whatever it captured; the commit generation is bumped after it.
    Exclusive(ExclusiveWork),
}

/// See [`Job::Exclusive`].
pub struct ExclusiveWork(pub Box<dyn FnOnce(&mut Store) + Send>);

impl std::fmt::Debug for ExclusiveWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExclusiveWork")
    }
}

/// What a bucket's writer thread reports.
#[derive(Debug)]
pub struct CommitStats {
    /// Puts per commit.
    pub batch: Histogram,
    /// Seconds per commit.
    pub seconds: Histogram,
    /// Commits that made puts or take-downs durable; read handles older than this are renewed.
    pub generation: AtomicU64,
    /// Failed writers (a sync failed) reopened ([`heal`]).
    pub reopens: AtomicU64,
}

impl Default for CommitStats {
    fn default() -> Self {
        CommitStats {
            batch: Histogram::new(&BATCH),
            seconds: Histogram::new(&COMMIT_SECONDS),
            generation: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
        }
    }
}

const COMMIT_SECONDS: [f64; 12] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.5, 2.0,
];

type PutReply = oneshot::Sender<std::result::Result<Uuid, PutError>>;

/// The writer thread's loop: runs until every sender of `jobs` is gone, then returns (every job
/// queued by then has been done and answered).
pub fn run(store: Arc<Mutex<Store>>, jobs: Receiver<Job>, stats: Arc<CommitStats>) {
    let mut next: Option<Job> = None;
    loop {
        let first = match next.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut puts = Vec::new();
        let mut bytes = 0u64;
        let mut other = None;
        let mut job = Some(first);
        while let Some(j) = job.take() {
            match j {
                Job::Put(put, reply) => {
                    bytes += put.value.len() as u64;
                    puts.push((put, reply));
                }
                j => {
                    other = Some(j);
                    break;
                }
            }
            if puts.len() >= MAX_BATCH_PUTS || bytes >= MAX_BATCH_BYTES {
                break;
            }
            job = jobs.try_recv().ok();
        }
        if !puts.is_empty() {
            commit_puts(&store, puts, &stats);
        }
        if let Some(j) = other {
            run_other(&store, j, &stats);
        }
        next = jobs.try_recv().ok();
    }
}

/// Applies a batch of puts, commits them once, then answers each.
fn commit_puts(store: &Mutex<Store>, puts: Vec<(PutJob, PutReply)>, stats: &CommitStats) {
    let started = Instant::now();
    let Ok(mut s) = store.lock() else {
        for (_, reply) in puts {
            let _ = reply.send(Err(PutError::Store(poisoned())));
        }
        return;
    };
    heal(&mut s, stats);
    let mut done: Vec<(PutReply, std::result::Result<Uuid, PutError>)> = Vec::new();
    let mut batch = s.batch();
    for (put, reply) in puts {
        match put
            .conditions
            .check(batch.store(), &put.domain, &put.title, put.rev, put.tid)
        {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                done.push((reply, Err(PutError::Precondition(why))));
                continue;
            }
            Err(e) => {
                done.push((reply, Err(PutError::Store(e))));
                continue;
            }
        }
        let result = batch.put(&Put {
            domain: &put.domain,
            title: &put.title,
            rev: put.rev,
            tid: put.tid,
            content_type: &put.content_type,
            labels: &put.labels,
            value: &put.value,
            historical: false,
        });
        let result = result.map_err(|e| refusal(batch.store(), &put, e));
        done.push((reply, result));
    }
    let applied = done.iter().filter(|(_, r)| r.is_ok()).count();
    // A batch of refusals only is not committed: nothing of it was applied.
    if applied > 0 {
        if let Err(e) = batch.commit() {
            // Nothing of the batch is promised: its puts may or may not have reached the disk.
            let e = Arc::new(e);
            for (_, r) in done.iter_mut().filter(|(_, r)| r.is_ok()) {
                *r = Err(PutError::Commit(e.clone()));
            }
        }
        stats.generation.fetch_add(1, Ordering::Release);
        stats.batch.observe(applied as f64);
        stats.seconds.observe(started.elapsed().as_secs_f64());
    }
    heal(&mut s, stats);
    drop(s);
    for (reply, result) in done {
        // A client that went away no longer waits for its answer.
        let _ = reply.send(result);
    }
}

/// A put the store refused: a take-down says so, anything else is the store's error.
fn refusal(s: &Store, put: &PutJob, e: Error) -> PutError {
    if matches!(e, Error::Invalid(_))
        && s.is_taken_down(&put.domain, &put.title, Some(put.rev))
            .unwrap_or(false)
    {
        return PutError::TakenDown;
    }
    PutError::Store(e)
}

fn run_other(store: &Mutex<Store>, job: Job, stats: &CommitStats) {
    let Ok(mut s) = store.lock() else {
        match job {
            Job::TakeDown { reply, .. } => drop(reply.send(Err(poisoned()))),
            Job::Lift { reply, .. } => drop(reply.send(Err(poisoned()))),
            Job::Put(_, reply) => drop(reply.send(Err(PutError::Store(poisoned())))),
            // Its own answer channel is dropped with it: the waiter sees the bucket closing.
            Job::Exclusive(work) => drop(work),
        }
        return;
    };
    heal(&mut s, stats);
    match job {
        Job::TakeDown {
            domain,
            title,
            rev,
            reply,
        } => {
            let r = s.take_down(&domain, &title, rev);
            stats.generation.fetch_add(1, Ordering::Release);
            heal(&mut s, stats);
            drop(s);
            let _ = reply.send(r);
        }
        Job::Lift {
            domain,
            title,
            rev,
            reply,
        } => {
            let r = s.lift(&domain, &title, rev);
            stats.generation.fetch_add(1, Ordering::Release);
            heal(&mut s, stats);
            drop(s);
            let _ = reply.send(r);
        }
        Job::Put(put, reply) => {
            drop(s);
            commit_puts(store, vec![(put, reply)], stats);
        }
        Job::Exclusive(work) => {
            (work.0)(&mut s);
            stats.generation.fetch_add(1, Ordering::Release);
            heal(&mut s, stats);
        }
    }
}

/// Reopens a failed writer (a sync failed: it refuses everything until reopened). Its open
/// recovers as after a crash; the read handles renew, since the recovery may have dropped what
/// the failed commit wrote. A reopen that fails leaves it failed, its jobs refused (503), and is
/// tried again before the next job. The sync's error went to the failed jobs' answers, so to
/// the error log; here it is counted (`wink_writer_reopens_total`).
fn heal(s: &mut Store, stats: &CommitStats) {
    if s.failed().is_some() && s.reopen().is_ok() {
        stats.reopens.fetch_add(1, Ordering::Relaxed);
        stats.generation.fetch_add(1, Ordering::Release);
    }
}

/// The error of a bucket whose writer panicked while holding the store (a bug, never input).
fn poisoned() -> Error {
    Error::internal("the bucket's writer stopped after a panic; restart the server")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Preconditions, Tags};
    use wink_engine::store::{Config, StoreOptions};

    /// A put's answer, as the requester waits for it.
    type Answer = oneshot::Receiver<std::result::Result<Uuid, PutError>>;

    fn put(body: &'static [u8], conditions: Preconditions) -> (PutJob, PutReply, Answer) {
        let (tx, rx) = oneshot::channel();
        let job = PutJob {
            domain: "en.wikipedia.org".into(),
            title: "T".into(),
            rev: 1,
            tid: None,
            content_type: "text/html".into(),
            labels: Labels::NONE,
            value: Bytes::from_static(body),
            conditions,
        };
        (job, tx, rx)
    }

    /// Two puts of one batch that both ask for a revision with no render: the second sees the
    /// first (uncommitted, in the same batch) and is refused.
    #[test]
    fn conditions_see_the_puts_before_them_in_the_same_batch() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions::writer();
        Store::init(dir.path(), &Config::default(), &opts).unwrap();
        let store = Mutex::new(Store::open(dir.path(), &opts).unwrap());
        let absent = Preconditions {
            if_match: None,
            if_none_match: Some(Tags::Any),
        };
        let (a, a_tx, mut a_rx) = put(b"first", absent.clone());
        let (b, b_tx, mut b_rx) = put(b"second", absent);
        commit_puts(&store, vec![(a, a_tx), (b, b_tx)], &CommitStats::default());
        let tid = a_rx.try_recv().unwrap().expect("the first is stored");
        assert!(matches!(
            b_rx.try_recv().unwrap(),
            Err(PutError::Precondition(_))
        ));
        let s = store.lock().unwrap();
        let got = s
            .get("en.wikipedia.org", "T", wink_engine::Which::Rev(1))
            .unwrap()
            .unwrap();
        assert_eq!((got.tid, got.value.as_slice()), (tid, &b"first"[..]));
    }

    /// A commit whose sync fails (as Linux's after a writeback error: once, the next sync
    /// succeeding without what it lost) answers its puts an error, and the writer thread
    /// reopens the failed store before the next job: the next put is acknowledged by a store
    /// whose recovery read only what was durable, and it survives a power cut. At each sync of
    /// the commit in turn.
    #[test]
    fn a_failed_sync_answers_an_error_and_the_bucket_reopens_its_store() {
        use wink_harness::sim::{CrashMode, SimDisk};
        let dir = std::path::Path::new("/sim/bucket");
        for n in 1..=4 {
            let disk = SimDisk::new();
            let opts = StoreOptions {
                vfs: Arc::new(disk.clone()),
                clock: Arc::new(wink_engine::clock::ManualClock::new(1_700_000_000)),
                ..StoreOptions::writer()
            };
            Store::init(dir, &Config::default(), &opts).unwrap();
            let store = Mutex::new(Store::open(dir, &opts).unwrap());
            let stats = CommitStats::default();
            let (a, a_tx, mut a_rx) = put(b"first", Preconditions::default());
            disk.lose_writeback_at_sync(n);
            commit_puts(&store, vec![(a, a_tx)], &stats);
            match a_rx.try_recv().unwrap() {
                Err(PutError::Commit(e)) => assert!(matches!(*e, Error::Io { .. }), "{e}"),
                other => panic!("sync {n}: {other:?}"),
            }
            assert_eq!(stats.reopens.load(Ordering::Relaxed), 1, "sync {n}");
            assert!(store.lock().unwrap().failed().is_none(), "sync {n}");
            let (b, b_tx, mut b_rx) = put(b"second", Preconditions::default());
            commit_puts(&store, vec![(b, b_tx)], &stats);
            let tid = b_rx.try_recv().unwrap().expect("stored after the reopen");
            // The power goes: nothing more reaches the disk.
            disk.fail_after_writes(1);
            drop(store);
            disk.crash(CrashMode::DropUnsynced);
            let s = Store::open(dir, &opts).unwrap();
            let got = s
                .get("en.wikipedia.org", "T", wink_engine::Which::Render(1, tid))
                .unwrap()
                .expect("the acknowledged put survives");
            assert_eq!(got.value, b"second", "sync {n}");
        }
    }
}
