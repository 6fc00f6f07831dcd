//! Maintenance of a render store, through the library and the built binary: `scrub` finds exactly
//! the damaged values (hot and archived) by title, revision and tid; `snapshot` makes a copy that
//! opens on its own, reads back byte for byte and does not see later writes; `stat --json`
//! reports space and page-cache residency per container and for the meta files.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;
use wink::clock::ManualClock;
use wink::maintenance;
use wink::maintenance::scrub::Tier;
use wink::storage::residency;
use wink::store::policy::ArchivePolicy;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Policy, Revisions, Store, StoreOptions};

mod common;
use common::cli::{finish, s, spawn, wink_at, Run};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";
const T: i64 = 1_700_000_000;
/// The recent window of the test stores.
const TTL: i64 = 100;
/// A time when revision 1 of every title has left the hot tier.
const LATER: i64 = T + 10 * TTL;

/// `wink ARGS` at time `now`; its stdout must be UTF-8.
fn wink<S: AsRef<OsStr>>(now: i64, args: &[S]) -> Run {
    wink_at(now, args, b"").utf8()
}

fn opts(now: i64, writable: bool) -> StoreOptions {
    StoreOptions {
        writable,
        clock: Arc::new(ManualClock::new(now)),
        ..StoreOptions::writer()
    }
}

/// A writer. It waits for the lock: another test's child process, between its fork and its exec,
/// holds a copy of every descriptor of this process, locked ones included, for a moment.
fn open(dir: &Path, now: i64) -> Store {
    let wait = StoreOptions {
        wait: true,
        ..opts(now, true)
    };
    Store::open(dir, &wait).unwrap()
}

/// Bytes no compressor shrinks (xorshift from `seed`), so that they appear verbatim in an
/// archive block as well as in a container.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn value(title: usize, rev: u64, len: usize) -> Vec<u8> {
    noise(title as u64 * 1000 + rev, len)
}

/// A store with the archive tier (first render of a leaving revision) and 1 MiB containers.
fn create(dir: &Path) {
    let cfg = Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl: TTL },
            ..Policy::default()
        },
        container_bytes: 1 << 20,
        archive: Some(ArchivePolicy::First),
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts(T, true)).unwrap();
}

/// `titles` titles, each with revision 1 at T and revision 2 at T + 10, values of `len` bytes;
/// then (at LATER) revision 1 of each is archived. Returns the tids by (title, rev).
fn populate(dir: &Path, titles: usize, len: usize) -> BTreeMap<(usize, u64), Uuid> {
    let mut tids = BTreeMap::new();
    for (rev, now) in [(1u64, T), (2, T + 10)] {
        let mut store = open(dir, now);
        for t in 0..titles {
            let tid = store
                .put(&Put::new(D, &name(t), rev, HTML, &value(t, rev, len)))
                .unwrap();
            tids.insert((t, rev), tid);
        }
    }
    let report = maintenance::archive_due(&mut open(dir, LATER), |_, _| {}).unwrap();
    assert_eq!(report.revisions, titles as u64);
    tids
}

fn name(t: usize) -> String {
    format!("Title_{t}")
}

/// Where `needle` starts in `path` (it must be there exactly once).
fn find_once(path: &Path, needle: &[u8]) -> usize {
    let bytes = fs::read(path).unwrap();
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{} holds it {} times",
        path.display(),
        hits.len()
    );
    hits[0]
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

#[test]
fn scrub_reports_exactly_the_damaged_values_by_title_revision_and_tid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    create(&dir);
    let tids = populate(&dir, 3, 3000);

    let clean =
        maintenance::scrub(&Store::open(&dir, &opts(LATER, false)).unwrap(), |_| {}).unwrap();
    assert!(clean.is_clean(), "{:?}", clean.damaged);
    assert_eq!((clean.values, clean.bytes, clean.archived), (3, 9000, 3));
    // Page-cache polite: the pages the scrub read are dropped again (all clean, as committed).
    let container = dir.join("c000001.data");
    assert_eq!(residency(&container).unwrap().0, 0);
    let run = wink(LATER, &["scrub", s(&dir)]).expect(0);
    assert_eq!(
        run.out(),
        format!(
            "{}: ok (3 values, 9000 bytes, 3 archived revisions)\n",
            dir.display()
        )
    );

    // A byte in the middle of title 0's hot revision 2, and one in title 1's archived revision 1.
    let hot = value(0, 2, 3000);
    let hot_at = find_once(&container, &hot);
    flip(&container, hot_at + 1500);
    let archive = dir.join("archive.data");
    let archived = value(1, 1, 3000);
    let archived_at = find_once(&archive, &archived[1000..1064]);
    flip(&archive, archived_at + 10);

    let report =
        maintenance::scrub(&Store::open(&dir, &opts(LATER, false)).unwrap(), |_| {}).unwrap();
    assert_eq!((report.values, report.archived), (3, 3));
    let mut damaged = report.damaged.clone();
    damaged.sort_by_key(|d| (d.title.clone(), d.rev));
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    let (h, a) = (&damaged[0], &damaged[1]);
    assert_eq!(
        (h.tier, h.domain.as_str(), h.title.as_str(), h.rev, h.tid),
        (Tier::Hot, D, name(0).as_str(), 2, tids[&(0, 2)])
    );
    assert_eq!(
        (h.file.as_path(), h.offset),
        (container.as_path(), hot_at as u64)
    );
    assert!(h.what.contains("CRC-32"), "{}", h.what);
    assert_eq!(
        (a.tier, a.title.as_str(), a.rev, a.tid),
        (Tier::Archive, name(1).as_str(), 1, tids[&(1, 1)])
    );
    assert_eq!(a.file, archive);

    let run = wink(LATER, &["scrub", s(&dir)]).expect(1);
    let out = run.out();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let hot_line = format!(
        "{D}/{} rev 2 tid {}: hot {} at byte {hot_at}: ",
        name(0),
        tids[&(0, 2)],
        container.display()
    );
    let archive_line = format!(
        "{D}/{} rev 1 tid {}: archive {}",
        name(1),
        tids[&(1, 1)],
        archive.display()
    );
    assert!(lines.iter().any(|l| l.starts_with(&hot_line)), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with(&archive_line)),
        "{lines:?}"
    );
    assert!(run.stderr.contains("2 damaged values"), "{}", run.stderr);

    // The other values still read.
    let store = Store::open(&dir, &opts(LATER, false)).unwrap();
    assert_eq!(
        store
            .get(D, &name(1), Which::Latest)
            .unwrap()
            .unwrap()
            .value,
        value(1, 2, 3000)
    );
    assert_eq!(
        store
            .get(D, &name(0), Which::Rev(1))
            .unwrap()
            .unwrap()
            .value,
        value(0, 1, 3000)
    );
}

#[test]
fn scrub_exits_3_when_the_store_cannot_be_read_and_2_without_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    create(&dir);
    populate(&dir, 1, 100);
    let meta = dir.join("meta.data");
    let bytes = fs::read(&meta).unwrap();
    fs::write(&meta, &bytes[..40]).unwrap();
    wink(LATER, &["scrub", s(&dir)]).expect(3);
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    wink(LATER, &["scrub", s(&empty)]).expect(2);
}

/// Every render the store lists for `titles` titles, read back: ((title, rev, tid), value).
fn contents(store: &Store, titles: usize) -> BTreeMap<(usize, u64, Uuid), Vec<u8>> {
    common::readable(store, D, titles, name)
}

#[test]
fn snapshot_copies_a_live_store_that_opens_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    create(&dir);
    const TITLES: usize = 12;
    populate(&dir, TITLES, 150_000);
    let current = dir.join("c000004.data");
    assert!(current.exists(), "the values fill several containers");

    let dest = tmp.path().join("copy");
    let run = wink(LATER, &["snapshot", s(&dir), s(&dest), "--wait"]).expect(0);
    let fields = run.numbers();
    // Containers 1..3 are sealed: their data, idx and time files are linked.
    assert!(fields["linked"] >= 9, "{fields:?}");
    assert!(fields["copied"] >= 8, "{fields:?}");
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(&dir.join("c000001.data")),
        ino(&dest.join("c000001.data"))
    );
    assert_ne!(ino(&current), ino(&dest.join("c000004.data")));
    assert_eq!(
        fs::read(&current).unwrap(),
        fs::read(dest.join("c000004.data")).unwrap()
    );

    let original = contents(&Store::open(&dir, &opts(LATER, false)).unwrap(), TITLES);
    assert_eq!(original.len(), 2 * TITLES);
    let copy = Store::open(&dest, &opts(LATER, false)).unwrap();
    assert_eq!(contents(&copy, TITLES), original);
    drop(copy);
    wink(LATER, &["check", s(&dest)]).expect(0);

    // A put to the original afterwards is not in the copy, which takes writes of its own.
    let mut store = open(&dir, LATER);
    store
        .put(&Put::new(D, &name(0), 3, HTML, b"after"))
        .unwrap();
    drop(store);
    let mut copy = open(&dest, LATER);
    assert_eq!(
        copy.get(D, &name(0), Which::Latest).unwrap().unwrap().rev,
        2
    );
    copy.put(&Put::new(D, &name(0), 4, HTML, b"in the copy"))
        .unwrap();
    drop(copy);
    let store = Store::open(&dir, &opts(LATER, false)).unwrap();
    assert_eq!(
        store
            .get(D, &name(0), Which::Latest)
            .unwrap()
            .unwrap()
            .value,
        b"after"
    );
    assert_eq!(
        store
            .get(D, &name(1), Which::Rev(1))
            .unwrap()
            .unwrap()
            .value,
        value(1, 1, 150_000)
    );
    wink(LATER, &["check", s(&dir)]).expect(0);
}

#[test]
fn snapshot_refuses_an_existing_dest_and_waits_for_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    create(&dir);
    populate(&dir, 2, 100);
    let taken = tmp.path().join("taken");
    fs::create_dir(&taken).unwrap();
    wink(LATER, &["snapshot", s(&dir), s(&taken)]).expect(2);
    assert_eq!(fs::read_dir(&taken).unwrap().count(), 0);

    // The library refuses a read-only handle: it cannot hold the writer lock.
    let ro = tmp.path().join("ro");
    let mut reader = Store::open(&dir, &opts(LATER, false)).unwrap();
    assert!(matches!(
        maintenance::snapshot(&mut reader, &ro),
        Err(wink::Error::Invalid(_))
    ));
    assert!(!ro.exists());
    drop(reader);

    let writer = open(&dir, LATER);
    let dest = tmp.path().join("copy");
    wink(LATER, &["snapshot", s(&dir), s(&dest)]).expect(4);
    assert!(!dest.exists());
    let child = spawn(&["snapshot", s(&dir), s(&dest), "--wait"], LATER);
    thread::sleep(Duration::from_millis(300));
    drop(writer);
    finish(child, b"").utf8().expect(0);
    let copy = Store::open(&dest, &opts(LATER, false)).unwrap();
    assert_eq!(
        copy.get(D, &name(1), Which::Latest).unwrap().unwrap().value,
        value(1, 2, 100)
    );
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[test]
fn stat_json_reports_space_and_residency_per_container_and_meta_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    create(&dir);
    populate(&dir, 10, 150_000);
    let run = wink(LATER, &["stat", s(&dir), "--json"]).expect(0);
    let st: Value = serde_json::from_str(&run.out()).unwrap();
    let per: &Vec<Value> = st["per_container"].as_array().expect("per_container");
    assert!(per.len() >= 2, "{per:?}");
    assert_eq!(per.len() as u64, num(&st["containers"]));
    let numbers: Vec<u64> = per.iter().map(|c| num(&c["number"])).collect();
    assert_eq!(numbers, (1..=per.len() as u64).collect::<Vec<_>>());
    let sum = |k: &str| per.iter().map(|c| num(&c[k])).sum::<u64>();
    assert_eq!(sum("bytes"), num(&st["container_files_bytes"]));
    assert_eq!(sum("live_bytes"), num(&st["live_bytes"]));
    assert_eq!(num(&st["live_bytes"]), 10 * 150_000);
    for c in per {
        assert_eq!(
            num(&c["bytes"]),
            num(&c["live_bytes"]) + num(&c["dead_bytes"])
        );
        assert!(
            num(&c["resident_bytes"])
                <= fs::metadata(container_path(&dir, num(&c["number"])))
                    .unwrap()
                    .len()
        );
    }
    let meta: &Vec<Value> = st["meta_files"].as_array().expect("meta_files");
    let files: Vec<&str> = meta.iter().map(|m| m["file"].as_str().unwrap()).collect();
    assert!(
        files.contains(&"meta.data") && files.contains(&"meta.idx"),
        "{files:?}"
    );
    for m in meta {
        let len = fs::metadata(dir.join(m["file"].as_str().unwrap()))
            .unwrap()
            .len();
        assert_eq!(num(&m["bytes"]), len);
        assert!(num(&m["resident_bytes"]) <= len);
    }
    // The existing fields are still there.
    for key in [
        "titles",
        "revisions",
        "renders",
        "dead_bytes",
        "policy",
        "max_value",
    ] {
        assert!(st.get(key).is_some(), "{key} missing");
    }
}

fn container_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("c{n:06}.data"))
}
