//! A store's commit cut by a power loss at each of its writes and at each of its syncs in turn:
//! one barrier makes the container's and the title records' journals and appended bytes durable
//! together, so a cut anywhere must leave the store as it was before the commit or as it is
//! after it (never a record without its value, never a damaged read), the same whether a reader
//! or the writer opens it first, and after a commit that returned, the new state. Unsynced
//! writes are either all lost or a random subset survives, reordered and torn at sector
//! boundaries.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::store::Which;
use wink::store::{Config, Put, Store, StoreOptions};
use wink_harness::sim::{CrashMode, Cut, SimDisk};

const DIR: &str = "/sim/store";
const DOMAIN: &str = "en.wikipedia.org";
const T0: i64 = 1_700_000_000;
const TITLES: [&str; 4] = ["A", "B", "C", "D"];

type State = BTreeMap<&'static str, Option<Vec<u8>>>;

fn value(title: &str, rev: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 ^ rev.wrapping_mul(31) ^ title.as_bytes()[0] as u64) as u8)
        .collect()
}

fn options(disk: &SimDisk, clock: &ManualClock, writable: bool) -> StoreOptions {
    StoreOptions {
        writable,
        wait: false,
        clock: Arc::new(clock.clone()),
        vfs: Arc::new(disk.clone()),
        ..StoreOptions::writer()
    }
}

fn put<'a>(title: &'a str, rev: u64, value: &'a [u8]) -> Put<'a> {
    Put {
        domain: DOMAIN,
        title,
        rev,
        tid: None,
        content_type: "text/html",
        labels: &wink::store::Labels::NONE,
        value,
        historical: false,
    }
}

/// What every title reads as (a read that fails panics: damage is never an allowed outcome).
fn state(store: &Store) -> State {
    TITLES
        .iter()
        .map(|t| {
            let got = store
                .get(DOMAIN, t, Which::Latest)
                .unwrap_or_else(|e| panic!("reading {t}: {e}"));
            (*t, got.map(|g| g.value))
        })
        .collect()
}

/// The operations a commit is cut in: one put committed, and a batch that puts a title twice
/// (its second record is written over bytes the same commit appended), a value larger than the
/// appended bytes' checksum blocks, and a new title.
fn operations() -> Vec<Vec<(&'static str, u64, usize)>> {
    vec![
        vec![("A", 2, 700)],
        vec![
            ("A", 3, 300),
            ("A", 4, 5000),
            ("B", 2, 1_300_000),
            ("D", 1, 64),
        ],
    ]
}

/// A store with a few committed renders, the writer closed cleanly.
fn base(clock: &ManualClock) -> SimDisk {
    let disk = SimDisk::new();
    let opts = options(&disk, clock, true);
    Store::init(Path::new(DIR), &Config::default(), &opts).unwrap();
    let mut s = Store::open(Path::new(DIR), &opts).unwrap();
    for (i, t) in TITLES[..3].iter().enumerate() {
        s.put(&Put::new(
            DOMAIN,
            t,
            1,
            "text/html",
            &value(t, 1, 1000 + 2_000_000 * (i % 2)),
        ))
        .unwrap();
    }
    drop(s);
    disk
}

/// Runs `op` on a writer opened on `disk`; true when its commit returned.
fn run(
    disk: &SimDisk,
    clock: &ManualClock,
    op: &[(&'static str, u64, usize)],
    cut: impl Fn(),
) -> bool {
    let mut s = Store::open(Path::new(DIR), &options(disk, clock, true)).unwrap();
    cut();
    let values: Vec<Vec<u8>> = op.iter().map(|(t, r, l)| value(t, *r, *l)).collect();
    let mut batch = s.batch();
    for ((t, r, _), v) in op.iter().zip(&values) {
        if batch.put(&put(t, *r, v)).is_err() {
            return false;
        }
    }
    let ok = batch.commit().is_ok();
    drop(s);
    ok
}

/// After a cut: reopened (a reader first, then the writer, then a reader again), the store must
/// read as `before` or as `after`, the same through each handle; `after` when the commit returned.
fn check(
    disk: &SimDisk,
    clock: &ManualClock,
    before: &State,
    after: &State,
    done: bool,
    what: &str,
) {
    let first = state(&Store::open(Path::new(DIR), &options(disk, clock, false)).unwrap());
    let writer = Store::open(Path::new(DIR), &options(disk, clock, true)).unwrap();
    let recovered = state(&writer);
    drop(writer);
    let again = state(&Store::open(Path::new(DIR), &options(disk, clock, false)).unwrap());
    assert!(
        recovered == *before || recovered == *after,
        "{what}: neither the state before nor after the commit"
    );
    assert!(
        !done || recovered == *after,
        "{what}: a commit that returned was lost"
    );
    assert!(
        first == recovered,
        "{what}: a reader saw another commit than the writer's recovery"
    );
    assert!(
        again == recovered,
        "{what}: a reader after the recovery saw another state"
    );
}

fn cut_everywhere(op: &[(&'static str, u64, usize)]) {
    let clock = ManualClock::new(T0);
    let disk = base(&clock);
    let before = state(&Store::open(Path::new(DIR), &options(&disk, &clock, false)).unwrap());
    // The whole operation once, to count its writes and syncs and see the state it commits.
    let whole = disk.fork();
    let (w0, s0) = (whole.writes(), whole.syncs());
    assert!(run(&whole, &clock, op, || {}));
    let after = state(&Store::open(Path::new(DIR), &options(&whole, &clock, false)).unwrap());
    assert_ne!(before, after);
    let (writes, syncs) = (whole.writes() - w0, whole.syncs() - s0);
    assert!(writes > 4 && syncs > 0, "{writes} writes, {syncs} syncs");
    let modes = |n: u64| {
        [
            CrashMode::DropUnsynced,
            CrashMode::Reorder { seed: n },
            CrashMode::Reorder { seed: n + 1000 },
        ]
    };
    for at in Cut::every(writes, syncs) {
        let cut = disk.fork();
        let done = run(&cut, &clock, op, || at.arm(&cut));
        for mode in modes(at.n()) {
            let crashed = cut.fork();
            crashed.crash(mode);
            let at = format!("{at}, {mode:?}");
            check(&crashed, &clock, &before, &after, done, &at);
        }
    }
}

#[test]
fn one_put_cut_at_every_write_and_sync() {
    cut_everywhere(&operations()[0]);
}

#[test]
fn a_batch_cut_at_every_write_and_sync() {
    cut_everywhere(&operations()[1]);
}

/// After a power cut that kept a commit's journal but lost its in-place writes, the
/// container's last commit is in its journal only: `check` judges the records against the
/// container as a reader recovers it, so the store is clean and every render reads back.
#[test]
fn check_sees_a_commit_whose_in_place_writes_were_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let opts = StoreOptions::writer();
    Store::init(&dir, &Config::default(), &opts).unwrap();
    let first = value("A", 1, 300);
    let mut store = Store::open(&dir, &opts).unwrap();
    store
        .put(&Put::new(DOMAIN, "A", 1, "text/html", &first))
        .unwrap();
    drop(store);
    let data = dir.join("c000001.data");
    let superblock = std::fs::read(&data).unwrap()[..4096].to_vec();
    let index = ["idx", "time"].map(|ext| {
        let path = dir.join(format!("c000001.{ext}"));
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    });
    let second = value("A", 2, 500);
    let mut store = Store::open(&dir, &opts).unwrap();
    store
        .put(&Put::new(DOMAIN, "A", 2, "text/html", &second))
        .unwrap();
    // The process dies before its clean close, and the cut loses the container's in-place
    // writes (its superblock, its index's cells): the journal and the appended value stay.
    std::mem::forget(store);
    let file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &superblock, 0).unwrap();
    drop(file);
    for (path, bytes) in &index {
        std::fs::write(path, bytes).unwrap();
    }

    let report = wink::store::check::check_store(&dir);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let store = Store::open(&dir, &StoreOptions::read_only()).unwrap();
    assert_eq!(
        store
            .get(DOMAIN, "A", Which::Latest)
            .unwrap()
            .unwrap()
            .value,
        second
    );
    assert_eq!(
        store
            .get(DOMAIN, "A", Which::Rev(1))
            .unwrap()
            .unwrap()
            .value,
        first
    );
}
