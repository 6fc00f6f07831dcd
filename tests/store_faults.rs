//! The render store when the disk fills up, and when a second writer comes. The rules: a full
//! disk or an I/O error during a put is an error naming the file, and the store stays readable
//! and consistent, with nothing committed before lost; one writer per store at a time
//! (docs/INTERNALS.md § The render store's rules, docs/ARCHITECTURE.md § Durability).
//!
//! - On a simulated disk with a capacity: puts and batches until the disk is full, at capacities
//!   that make different files run out (a container's or the title records' preallocation, an
//!   index rebuild, a journal, a new container). Every failed put is an I/O error with ENOSPC naming the file;
//!   every put committed before reads back byte-exact in the same handle, from a read-only handle
//!   while the disk is still full, and after a reopen or a power cut. A put that failed is absent
//!   or whole — never damaged. Once space is freed, the same handle takes puts again: a full disk
//!   does not poison it.
//! - On the real file system: this test binary, re-executed as the writer (the same test, with
//!   `WINK_FSIZE_WRITER` set) under RLIMIT_FSIZE (SIGXFSZ ignored), puts until a put fails with
//!   EFBIG — at a preallocation, in the middle of a value, or in a commit's in-place writes; the
//!   parent then checks every value the child reported committed, and puts again.
//! - A second writer gets `Error::InUse`; with `wait` it gets in once the first closes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wink::clock::ManualClock;
use wink::store::Which;
use wink::store::{Config, Policy, Put, Renders, Revisions, Store, StoreOptions};
use wink::Error;
use wink_harness::sim::{CrashMode, SimDisk};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html; charset=utf-8";
const DIR: &str = "/sim/full";

/// Nothing expires: every committed value must stay readable.
fn keep_all() -> Config {
    Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            historical_ttl: 3600,
        },
        container_bytes: 8 << 20,
        ..Config::default()
    }
}

fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u64 ^ i.wrapping_mul(0x9E37_79B9)) as u8)
        .collect()
}

/// Asserts `e` is the full disk's error: I/O, `errno`, naming a file of the store; returns the
/// file.
fn assert_no_space(e: &Error, dir: &Path, errno: i32) -> PathBuf {
    match e {
        Error::Io { path, source, .. } => {
            assert_eq!(source.raw_os_error(), Some(errno), "{e}");
            assert!(path.starts_with(dir), "{e}");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
            if errno == libc::ENOSPC {
                // What an operator must read: the disk is full, not a crash or damage.
                assert!(e.to_string().contains(": disk full"), "{e}");
            }
            path.clone()
        }
        other => panic!("expected an I/O error, got {other}"),
    }
}

/// What was put, by (title, revision): values every read must return, and values of failed puts,
/// which may be absent or must be whole.
#[derive(Default)]
struct Ledger {
    committed: BTreeMap<(String, u64), Vec<u8>>,
    failed: BTreeMap<(String, u64), Vec<u8>>,
    /// The files the failures named.
    full: BTreeSet<PathBuf>,
}

impl Ledger {
    fn verify(&self, s: &Store) {
        for ((title, rev), v) in &self.committed {
            let got = s.get(D, title, Which::Rev(*rev)).unwrap();
            assert_eq!(
                got.map(|g| g.value).as_ref(),
                Some(v),
                "{title} revision {rev}"
            );
        }
        for ((title, rev), v) in &self.failed {
            if let Some(got) = s.get(D, title, Which::Rev(*rev)).unwrap() {
                assert_eq!(&got.value, v, "failed put of {title} revision {rev}");
            }
        }
    }
}

/// Puts (single and in batches) from step `from` until `failures` puts or commits have failed,
/// or step `until`; records them all. Returns the next step and the failures.
fn fill(
    s: &mut Store,
    ledger: &mut Ledger,
    from: u64,
    until: u64,
    failures: usize,
) -> (u64, usize) {
    let mut failed = 0;
    let mut i = from;
    while failed < failures && i < until {
        if i % 3 == 0 {
            let mut batch = s.batch();
            let mut pending = Vec::new();
            for j in 0..i % 17 {
                let key = (format!("B{}", (i * 7 + j) % 1100), i);
                let v = value(i * 100 + j, 300 + (j as usize) * 40);
                let put = Put {
                    domain: D,
                    title: &key.0,
                    rev: i,
                    tid: None,
                    content_type: HTML,
                    labels: &wink::store::Labels::NONE,
                    value: &v,
                    historical: false,
                };
                match batch.put(&put) {
                    Ok(_) => pending.push((key, v)),
                    Err(e) => {
                        ledger
                            .full
                            .insert(assert_no_space(&e, Path::new(DIR), libc::ENOSPC));
                        ledger.failed.insert(key, v);
                        failed += 1;
                    }
                }
            }
            match batch.commit() {
                Ok(n) => {
                    assert_eq!(n, pending.len());
                    ledger.committed.extend(pending);
                }
                Err(e) => {
                    ledger
                        .full
                        .insert(assert_no_space(&e, Path::new(DIR), libc::ENOSPC));
                    ledger.failed.extend(pending);
                    failed += 1;
                }
            }
        } else {
            let key = (format!("T{}", i % 900), i);
            let v = value(i, 7000 + (i as usize * 37) % 5000);
            match s.put(&Put::new(D, &key.0, i, HTML, &v)) {
                Ok(_) => {
                    ledger.committed.insert(key, v);
                }
                Err(e) => {
                    ledger
                        .full
                        .insert(assert_no_space(&e, Path::new(DIR), libc::ENOSPC));
                    ledger.failed.insert(key, v);
                    failed += 1;
                }
            }
        }
        i += 1;
    }
    (i, failed)
}

fn sim_options(disk: &SimDisk, writable: bool) -> StoreOptions {
    StoreOptions {
        writable,
        wait: false,
        clock: Arc::new(ManualClock::new(1_700_000_000)),
        vfs: Arc::new(disk.clone()),
        ..StoreOptions::writer()
    }
}

#[test]
fn a_full_disk_fails_puts_cleanly_and_loses_nothing() {
    let dir = Path::new(DIR);
    let mut full = BTreeSet::new();
    // After a warm-up of a different length, a little room: from round to round a different file
    // is the first to need more (a container's or the title records' preallocation, an index
    // rebuild, a container's journal, a new container).
    for round in 0..16u64 {
        let disk = SimDisk::new();
        Store::init(dir, &keep_all(), &sim_options(&disk, true)).unwrap();
        let mut s = Store::open(dir, &sim_options(&disk, true)).unwrap();
        let mut ledger = Ledger::default();
        let warm = round * 131;
        assert_eq!(fill(&mut s, &mut ledger, 0, warm, 1), (warm, 0));
        disk.set_capacity(disk.used() + round * 37_813 % 300_000);
        let (next, failed) = fill(&mut s, &mut ledger, warm, warm + 10_000, 4);
        assert!(failed >= 4, "the disk never filled up");
        ledger.verify(&s);
        let reader = Store::open(dir, &sim_options(&disk, false)).unwrap();
        ledger.verify(&reader);
        drop(reader);
        if round % 2 == 1 {
            // The power goes while the disk is full; the store reopens on the full disk.
            disk.fail_after_syncs(1);
            drop(s);
            disk.crash(CrashMode::DropUnsynced);
            s = Store::open(dir, &sim_options(&disk, true)).unwrap();
            ledger.verify(&s);
        }
        disk.set_capacity(u64::MAX);
        // Freed space: the same handle takes puts again.
        put_freely(&mut s, &mut ledger, next);
        ledger.verify(&s);
        drop(s);
        let s = Store::open(dir, &sim_options(&disk, true)).unwrap();
        ledger.verify(&s);
        full.extend(ledger.full);
    }
    // The capacities made several files run out first, not one.
    assert!(full.len() >= 4, "{full:?}");
}

/// Puts that must all succeed.
fn put_freely(s: &mut Store, ledger: &mut Ledger, from: u64) {
    for i in from..from + 20 {
        let key = (format!("after{}", i % 7), i);
        let v = value(i, 5000);
        s.put(&Put::new(D, &key.0, i, HTML, &v)).unwrap();
        ledger.committed.insert(key, v);
    }
}

// ---- RLIMIT_FSIZE on the real file system --------------------------------------------------

const CHILD_ENV: &str = "WINK_FSIZE_WRITER";
/// The test a re-executed copy of this binary runs: with `CHILD_ENV` set it is the writer instead.
/// A `#[test]` of the writer's own would pass, checking nothing, in every normal run.
const CHILD_HOST: &str = "a_file_size_limit_mid_put_is_a_clean_error_and_loses_nothing";
const FSIZE_VALUE: usize = 200 << 10;

fn fsize_title(i: u64) -> String {
    format!("Page {}", i % 5)
}

fn fsize_value(i: u64) -> Vec<u8> {
    value(i, FSIZE_VALUE + (i % 7) as usize * 1000)
}

/// The writer, in a copy of this binary run with `WINK_FSIZE_WRITER=DIR,LIMIT`. Limits the size
/// of the files it writes to LIMIT bytes, then puts until a put fails, printing `committed I`
/// after each put and `error I: MESSAGE` for the one that failed.
fn fsize_writer(spec: &str) {
    let (dir, limit) = spec.rsplit_once(',').expect("DIR,LIMIT");
    let limit: libc::rlim_t = limit.parse().expect("a byte count");
    let mut s = Store::open(Path::new(dir), &StoreOptions::writer()).unwrap();
    // SAFETY: SIG_IGN installs no handler code; with SIGXFSZ ignored a write past RLIMIT_FSIZE
    // fails with EFBIG instead of killing the process.
    let previous = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    assert_ne!(previous, libc::SIG_ERR);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or fill the one struct passed, nothing else.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl), 0);
        rl.rlim_cur = limit.min(rl.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0);
    }
    for i in 1..10_000 {
        match s.put(&Put::new(D, &fsize_title(i), i, HTML, &fsize_value(i))) {
            Ok(_) => println!("committed {i}"),
            Err(e) => {
                println!("error {i}: {e}");
                return;
            }
        }
    }
    panic!("2 GB written past a limit of {limit} bytes");
}

/// Runs the child on `dir` with RLIMIT_FSIZE `limit`; returns the revisions it committed, the one
/// that failed, and its error message.
fn run_fsize_child(dir: &Path, limit: u64) -> (Vec<u64>, u64, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_HOST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{},{limit}", dir.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the writer did not end with a clean error: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness's "test NAME ... " has no newline before the child's first line.
    let after =
        |l: &'static str| move |line: &str| line.split_once(l).map(|(_, rest)| rest.to_string());
    let committed = stdout
        .lines()
        .filter_map(after("committed "))
        .map(|n| n.parse().unwrap())
        .collect();
    let (failed, message) = stdout
        .lines()
        .find_map(after("error "))
        .and_then(|l| {
            l.split_once(": ")
                .map(|(i, m)| (i.to_string(), m.to_string()))
        })
        .expect("the writer reached the limit");
    (committed, failed.parse().unwrap(), message)
}

#[test]
fn a_file_size_limit_mid_put_is_a_clean_error_and_loses_nothing() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        fsize_writer(&spec);
        return;
    }
    // (limit, container_bytes, the file that meets the limit first, puts before it at least):
    // - the container's next 16 MiB preallocation fails;
    // - a value's write into the preallocated container crosses the limit and is cut short;
    // - an index cell past the limit (the index of a 1 GiB container is 4 MiB) fails while a
    //   commit applies its journal — after the journal was synced.
    let rounds = [
        (20u64 << 20, 64u64 << 20, "c000001.data", 2),
        ((3 << 20) + 12_345, 64 << 20, "c000001.data", 2),
        (2 << 20, 1 << 30, "c000001.", 0),
    ];
    for (limit, container_bytes, file, at_least) in rounds {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            container_bytes,
            ..keep_all()
        };
        Store::init(dir.path(), &cfg, &StoreOptions::writer()).unwrap();
        let mut s = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
        // The container preallocates its first 16 MiB here, without the limit.
        s.put(&Put::new(D, &fsize_title(0), 0, HTML, &fsize_value(0)))
            .unwrap();
        drop(s);
        let (committed, failed, message) = run_fsize_child(dir.path(), limit);
        assert!(committed.len() >= at_least, "{committed:?} {message}");
        assert!(message.contains("File too large"), "{message}");
        let path = dir.path().join(file).display().to_string();
        assert!(message.contains(&path), "{message}");
        let mut s = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
        for i in std::iter::once(0).chain(committed.iter().copied()) {
            let got = s.get(D, &fsize_title(i), Which::Rev(i)).unwrap();
            assert_eq!(got.map(|g| g.value), Some(fsize_value(i)), "revision {i}");
        }
        if let Some(got) = s.get(D, &fsize_title(failed), Which::Rev(failed)).unwrap() {
            assert_eq!(got.value, fsize_value(failed), "the failed put");
        }
        // Without the limit, the store takes puts again.
        let next = failed + 1;
        let v = fsize_value(next);
        s.put(&Put::new(D, &fsize_title(next), next, HTML, &v))
            .unwrap();
        drop(s);
        let s = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
        assert_eq!(
            s.get(D, &fsize_title(next), Which::Rev(next))
                .unwrap()
                .unwrap()
                .value,
            v
        );
        assert_eq!(
            s.get(D, &fsize_title(next), Which::Latest)
                .unwrap()
                .unwrap()
                .rev,
            next
        );
    }
}

// ---- one writer at a time ------------------------------------------------------------------

#[test]
fn a_second_writer_is_refused_or_waits_for_the_first_to_close() {
    let dir = tempfile::tempdir().unwrap();
    Store::init(dir.path(), &keep_all(), &StoreOptions::writer()).unwrap();
    let mut first = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
    first.put(&Put::new(D, "T", 1, HTML, b"one")).unwrap();
    let err = Store::open(dir.path(), &StoreOptions::writer()).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    assert_eq!(err.exit_code(), 4);
    assert!(err.to_string().contains("in use"), "{err}");
    // Readers are not kept out.
    let reader = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
    assert_eq!(
        reader.get(D, "T", Which::Latest).unwrap().unwrap().value,
        b"one"
    );
    let closed = Arc::new(AtomicBool::new(false));
    let closer = {
        let closed = closed.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            first.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap();
            closed.store(true, Ordering::SeqCst);
            drop(first);
        })
    };
    let wait = StoreOptions {
        wait: true,
        ..StoreOptions::writer()
    };
    let mut second = Store::open(dir.path(), &wait).unwrap();
    assert!(
        closed.load(Ordering::SeqCst),
        "the second writer got in before the first closed"
    );
    closer.join().unwrap();
    assert_eq!(
        second.get(D, "T", Which::Latest).unwrap().unwrap().value,
        b"two"
    );
    second.put(&Put::new(D, "T", 3, HTML, b"three")).unwrap();
}

/// What a crash in the middle of a put leaves — the value's bytes appended to the current
/// container past its committed FILESIZE, no commit naming them — is reported by the next
/// writer's open (`Store::recovery`, what `wink` prints as `recovered:`) with the file and the
/// byte range, and zeroed; the committed renders read as before, a later open reports nothing.
#[test]
fn a_writers_open_reports_the_bytes_a_crash_left_in_the_current_container() {
    let dir = tempfile::tempdir().unwrap();
    Store::init(dir.path(), &keep_all(), &StoreOptions::writer()).unwrap();
    let mut s = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
    s.put(&Put::new(D, "Kept", 1, HTML, &value(1, 5000)))
        .unwrap();
    assert!(s.recovery().is_empty(), "{:?}", s.recovery());
    drop(s);
    let data = dir.path().join("c000001.data");
    let filesize = {
        let fs = wink::filesys::Filesys::open(
            &data.with_extension(""),
            &wink::filesys::OpenOptions::read_only(),
        )
        .unwrap();
        fs.data().filesize()
    };
    // An entry's worth of bytes, as a killed writer leaves them (not zero: preallocated space is).
    let torn = vec![0x5a; 3000];
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
        f.write_all_at(&torn, filesize).unwrap();
    }
    let mut s = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
    let expected = format!(
        "{}: zeroed uncommitted bytes {filesize}..{}",
        data.display(),
        filesize + torn.len() as u64
    );
    assert!(
        s.recovery().iter().any(|a| a.starts_with(&expected)),
        "expected {expected:?} in {:?}",
        s.recovery()
    );
    assert_eq!(
        s.get(D, "Kept", Which::Latest).unwrap().unwrap().value,
        value(1, 5000)
    );
    s.put(&Put::new(D, "Next", 1, HTML, &value(2, 100)))
        .unwrap();
    drop(s);
    let s = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
    assert!(s.recovery().is_empty(), "{:?}", s.recovery());
    assert_eq!(
        s.get(D, "Next", Which::Latest).unwrap().unwrap().value,
        value(2, 100)
    );
}

// ---- a failed sync ---------------------------------------------------------------------------

/// A store with a few committed renders on a simulated disk, the writer closed cleanly; the
/// renders by (title, revision).
fn synced_base() -> (SimDisk, BTreeMap<(String, u64), Vec<u8>>) {
    let disk = SimDisk::new();
    let dir = Path::new(DIR);
    Store::init(dir, &keep_all(), &sim_options(&disk, true)).unwrap();
    let mut s = Store::open(dir, &sim_options(&disk, true)).unwrap();
    let mut acked = BTreeMap::new();
    for i in 0..6u64 {
        let key = (format!("W{}", i % 4), i);
        let v = value(i, 3000 + 500 * i as usize);
        s.put(&Put::new(D, &key.0, i, HTML, &v)).unwrap();
        acked.insert(key, v);
    }
    drop(s);
    (disk, acked)
}

/// Linux after a writeback error ("fsyncgate"): the sync that failed reports it once and the
/// kernel forgets the pages it could not write; the next sync succeeds without them. A writer
/// that made its commit again would have it acknowledged over bytes that never reached the
/// disk, and lost at the next power cut (on the store before this rule, a render put after the
/// failed commit read back damaged, or the failed put's title record did). So the writer whose
/// barrier failed, at each of its syncs in turn, refuses every put, commit, take-down and read
/// until the store is reopened; after a power cut and a reopen every acknowledged render reads
/// back byte for byte, the failed put is absent or whole, and the reopened writer takes puts
/// again, as does a failed writer reopened in place ([`Store::reopen`]).
#[test]
fn a_writer_whose_sync_failed_refuses_everything_until_reopened() {
    let dir = Path::new(DIR);
    let (base, acked) = synced_base();
    let (a, b, c) = (value(100, 9000), value(101, 7000), value(102, 5000));
    // The syncs of a commit like the one failed here.
    let syncs = {
        let disk = base.fork();
        let mut s = Store::open(dir, &sim_options(&disk, true)).unwrap();
        let before = disk.syncs();
        s.put(&Put::new(D, "A", 1, HTML, &a)).unwrap();
        disk.syncs() - before
    };
    assert!(syncs >= 2, "{syncs}");
    // Reopened after a power cut, or in place ([`Store::reopen`], with the lost writes still
    // in the page cache that the failed writer drops).
    for (n, in_place) in (1..=syncs).flat_map(|n| [(n, false), (n, true)]) {
        let disk = base.fork();
        let mut acked = acked.clone();
        let mut s = Store::open(dir, &sim_options(&disk, true)).unwrap();
        disk.lose_writeback_at_sync(n);
        let err = s.put(&Put::new(D, "A", 1, HTML, &a)).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO)),
            "sync {n} of {syncs}: {err}"
        );
        // The same handle again: what it acknowledged would have to be durable. It refuses
        // everything instead, with one error naming the file whose sync failed.
        let failed = s.failed().expect("a failed writer").to_path_buf();
        assert!(failed.starts_with(dir), "{}", failed.display());
        let refusals = [
            s.put(&Put::new(D, "B", 1, HTML, &b)).map(|_| ()),
            s.batch().commit().map(|_| ()),
            s.take_down(D, "W0", None).map(|_| ()),
            s.lift(D, "W0", None).map(|_| ()),
            s.get(D, "A", Which::Latest).map(|_| ()),
            s.get(D, "W1", Which::Latest).map(|_| ()),
            s.list(D, "W2", wink::store::Page::default()).map(|_| ()),
            s.is_taken_down(D, "W3", None).map(|_| ()),
            s.titles_after(D, None, 10).map(|_| ()),
            s.stat().map(|_| ()),
        ];
        for (i, r) in refusals.into_iter().enumerate() {
            let e = r.expect_err("a failed writer refuses");
            assert!(
                matches!(&e, Error::WriterFailed { path } if *path == failed),
                "sync {n} of {syncs}, call {i}: {e}"
            );
            assert_eq!(e.exit_code(), 3);
            assert!(e.to_string().contains("until the store is reopened"), "{e}");
        }
        if in_place {
            s.reopen().unwrap();
            assert!(s.failed().is_none(), "sync {n} of {syncs}: reopened");
            s.put(&Put::new(D, "B", 1, HTML, &b)).unwrap();
            acked.insert(("B".into(), 1), b.clone());
        }
        // The power goes: nothing more reaches the disk.
        disk.fail_after_writes(1);
        drop(s);
        disk.crash(CrashMode::DropUnsynced);
        let mut s = Store::open(dir, &sim_options(&disk, true)).unwrap();
        for ((title, rev), v) in &acked {
            let got = s.get(D, title, Which::Rev(*rev));
            let got = got.unwrap_or_else(|e| panic!("sync {n} of {syncs}: {title}: {e}"));
            assert_eq!(
                got.map(|g| g.value).as_ref(),
                Some(v),
                "sync {n} of {syncs}: acknowledged {title} revision {rev}"
            );
        }
        if let Some(got) = s.get(D, "A", Which::Rev(1)).unwrap() {
            assert_eq!(got.value, a, "sync {n} of {syncs}: the failed put");
        }
        // The reopened writer works; and so does a failed one reopened in place, again.
        s.put(&Put::new(D, "C", 1, HTML, &c)).unwrap();
        disk.lose_writeback_at_sync(1);
        s.put(&Put::new(D, "E", 1, HTML, &c)).unwrap_err();
        assert!(s.failed().is_some());
        s.reopen().unwrap();
        assert!(s.failed().is_none(), "sync {n} of {syncs}: reopened");
        for ((title, rev), v) in &acked {
            let got = s.get(D, title, Which::Rev(*rev)).unwrap();
            assert_eq!(got.map(|g| g.value).as_ref(), Some(v), "{title} {rev}");
        }
        s.put(&Put::new(D, "C", 2, HTML, &b)).unwrap();
        disk.fail_after_writes(1);
        drop(s);
        disk.crash(CrashMode::DropUnsynced);
        let s = Store::open(dir, &sim_options(&disk, false)).unwrap();
        assert_eq!(s.get(D, "C", Which::Rev(1)).unwrap().unwrap().value, c);
        assert_eq!(s.get(D, "C", Which::Rev(2)).unwrap().unwrap().value, b);
        if let Some(got) = s.get(D, "E", Which::Rev(1)).unwrap() {
            assert_eq!(got.value, c, "sync {n} of {syncs}: the second failed put");
        }
    }
}
