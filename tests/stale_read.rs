//! A read-only handle that reads a title record while the writer rewrites it: the rewrite must
//! never look like corruption, and the reader must get the current answer.
//!
//! The race is reproduced without timing: the reader's files come through a `Vfs` that runs the
//! writer's rewrite at the exact moment the reader is about to read the record's data entry (its
//! inode already found), i.e. between the lookup and the read.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wink::filesys::{Filesys, FsOptions, OpenOptions, Staleness};
use wink::format::kvseq::KvSeq;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Page, Policy, Renders, Revisions, Store, StoreOptions};
use wink::Error;

mod common;
use common::spy::{Access, SpyVfs};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";

type Hook = Box<dyn FnOnce() + Send>;

fn value(title: &str, rev: u64) -> Vec<u8> {
    format!("<p>{title} revision {rev}</p>")
        .repeat(1 + (rev % 7) as usize)
        .into_bytes()
}

fn keep_all() -> wink::store::Config {
    wink::store::Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            historical_ttl: 3600,
        },
        ..wink::store::Config::default()
    }
}

fn writer(dir: &Path) -> Store {
    Store::init(dir, &keep_all(), &StoreOptions::writer()).unwrap();
    Store::open(dir, &StoreOptions::writer()).unwrap()
}

/// Where the title record of `title` keeps its bytes in `DIR/meta.data`.
fn record_offset(dir: &Path, title: &str) -> u64 {
    let meta = Filesys::open(&dir.join("meta"), &OpenOptions::read_only()).unwrap();
    let extents = meta
        .extents(format!("{D}/{title}").as_bytes())
        .unwrap()
        .unwrap();
    extents[0].offset
}

/// A read-only store whose next read of `title`'s record lets `writer` put revision 2 between
/// the lookup of the record's inode and the read of its bytes. Returns the reader and a flag set
/// once the rewrite happened.
fn racing_reader(dir: &Path, writer: Store, title: &str) -> (Store, Arc<AtomicBool>) {
    let writer = Arc::new(Mutex::new(writer));
    let fired = Arc::new(AtomicBool::new(false));
    let hook: Hook = {
        let (writer, fired, title) = (writer.clone(), fired.clone(), title.to_string());
        Box::new(move || {
            let mut w = writer.lock().unwrap();
            w.put(&Put::new(D, &title, 2, HTML, &value(&title, 2)))
                .unwrap();
            fired.store(true, Ordering::SeqCst);
        })
    };
    // The first read of the record's bytes runs the rewrite first.
    let (target, at) = (dir.join("meta.data"), record_offset(dir, title));
    let hook = Mutex::new(Some(hook));
    let vfs = SpyVfs {
        watched: Box::new(move |path| path == target),
        watch: Arc::new(move |access, offset, len| {
            if access == Access::Read && (offset..offset + len).contains(&at) {
                let hook = hook.lock().unwrap().take();
                if let Some(f) = hook {
                    f();
                }
            }
        }),
    };
    let reader = Store::open(
        dir,
        &StoreOptions {
            vfs: Arc::new(vfs),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    (reader, fired)
}

#[test]
fn a_record_rewritten_between_lookup_and_read_is_read_again_not_reported_corrupt() {
    // Each read path of the store, each on its own store, meets the rewrite mid-read.
    type Read = fn(&Store) -> wink::Result<(u64, Vec<u8>)>;
    let reads: [(&str, Read); 4] = [
        ("get_latest", |s| {
            let g = s.get(D, "T", Which::Latest)?.expect("found");
            Ok((g.rev, g.value))
        }),
        ("get_rev", |s| {
            let g = s.get(D, "T", Which::Rev(2))?.expect("revision 2 found");
            Ok((g.rev, g.value))
        }),
        ("get_render", |s| {
            let tid = s.list(D, "T", Page::default())?[0].tid;
            let g = s.get(D, "T", Which::Render(2, tid))?.expect("render found");
            Ok((g.rev, g.value))
        }),
        ("list", |s| {
            let l = s.list(D, "T", Page::default())?;
            let newest = &l[0];
            let g = s
                .get(D, "T", Which::Render(newest.rev, newest.tid))?
                .expect("listed");
            assert_eq!(l.len(), 2, "both revisions listed");
            Ok((g.rev, g.value))
        }),
    ];
    for (what, read) in reads {
        let dir = tempfile::tempdir().unwrap();
        // A writer sharing no records: the records it shares once committed would answer the
        // reader's first read from memory, and the race is with the files (as in a reader of
        // another process).
        Store::init(dir.path(), &keep_all(), &StoreOptions::writer()).unwrap();
        let unshared = StoreOptions {
            record_cache_bytes: 0,
            ..StoreOptions::writer()
        };
        let mut w = Store::open(dir.path(), &unshared).unwrap();
        w.put(&Put::new(D, "T", 1, HTML, &value("T", 1))).unwrap();
        let (reader, fired) = racing_reader(dir.path(), w, "T");
        let got = read(&reader);
        assert!(
            fired.load(Ordering::SeqCst),
            "{what}: the rewrite never ran"
        );
        let (rev, bytes) = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(rev, 2, "{what}");
        assert_eq!(bytes, value("T", 2), "{what}");
        assert!(reader.renewals() >= 1, "{what}");
    }
}

#[test]
fn a_read_only_handle_finds_titles_written_after_its_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    w.put(&Put::new(D, "Old", 1, HTML, &value("Old", 1)))
        .unwrap();
    let reader = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
    w.put(&Put::new(D, "Old", 2, HTML, &value("Old", 2)))
        .unwrap();
    w.put(&Put::new(D, "New", 5, HTML, &value("New", 5)))
        .unwrap();
    let old = reader
        .get(D, "Old", Which::Latest)
        .unwrap()
        .expect("rewritten title");
    assert_eq!((old.rev, old.value), (2, value("Old", 2)));
    let new = reader
        .get(D, "New", Which::Latest)
        .unwrap()
        .expect("new title");
    assert_eq!((new.rev, new.value), (5, value("New", 5)));
    assert_eq!(reader.list(D, "Old", Page::default()).unwrap().len(), 2);
    // A title that does not exist is still simply not there.
    assert!(reader.get(D, "Never", Which::Latest).unwrap().is_none());
    // A title removed whole is gone for the reader too.
    w.take_down(D, "New", None).unwrap();
    assert!(reader.get(D, "New", Which::Latest).unwrap().is_none());
}

/// Flags the live data entry of `name`'s first piece deleted, in place: damage, not a rewrite.
fn plant_deleted_data_entry(base: &Path, name: &[u8]) {
    let fileid = Filesys::open(base, &OpenOptions::read_only())
        .unwrap()
        .stat(name)
        .unwrap()
        .unwrap()
        .fileid;
    let path = base.with_extension("data");
    let kv = KvSeq::open_path(&path, false).unwrap();
    let key = format!("{fileid:x}/D0").into_bytes();
    let ptr = kv
        .iter(kv.first(), true)
        .map(|e| e.unwrap())
        .find(|e| e.key == key)
        .expect("the data entry")
        .layout
        .ptr;
    drop(kv);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[ptr.0 as usize] = 1;
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn a_deleted_data_entry_under_a_live_inode_is_still_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    w.put(&Put::new(D, "T", 1, HTML, &value("T", 1))).unwrap();
    w.put(&Put::new(D, "U", 1, HTML, &value("U", 1))).unwrap();
    drop(w);
    plant_deleted_data_entry(&dir.path().join("meta"), format!("{D}/T").as_bytes());
    // The writer reached it through its own index: damage.
    let w = Store::open(dir.path(), &StoreOptions::writer()).unwrap();
    let err = w.get(D, "T", Which::Latest).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "writer: {err}");
    assert_eq!(
        w.get(D, "U", Which::Latest).unwrap().unwrap().value,
        value("U", 1)
    );
    drop(w);
    // A reader sees the same on every fresh view, and ends up reporting it as damage too.
    let r = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
    let err = r.get(D, "T", Which::Latest).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "reader: {err}");
    assert!(err.to_string().contains("meta.data"), "{err}");
    assert_eq!(err.exit_code(), 3);
    assert_eq!(
        r.get(D, "U", Which::Latest).unwrap().unwrap().value,
        value("U", 1)
    );
}

#[test]
fn filesys_a_file_rewritten_between_stat_and_read_is_stale_for_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let mut fs = Filesys::create(&base, &FsOptions::default(), &OpenOptions::writer()).unwrap();
    fs.put(b"f", 0, b"first version").unwrap();
    fs.sync().unwrap();
    let mut reader = Filesys::open(&base, &OpenOptions::read_only()).unwrap();
    // Step one of a read: the inode.
    let stat = reader.stat(b"f").unwrap().unwrap();
    fs.put(b"f", 0, b"second version").unwrap();
    fs.sync().unwrap();
    // Step two: its data entry, flagged deleted by the rewrite's commit.
    let err = reader.read_stat(&stat).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err}");
    assert_eq!(err.exit_code(), 4);
    // A plain lookup through the old view still misses (as it always has); asked to report, it
    // says the view is stale; read strictly, as a writer reads, it misses.
    assert!(reader.read_located(b"f").unwrap().is_none());
    let err = reader.read_located_as(b"f", Staleness::Report).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err}");
    assert!(reader
        .read_located_as(b"f", Staleness::Strict)
        .unwrap()
        .is_none());
    reader.refresh().unwrap();
    assert_eq!(reader.read(b"f").unwrap(), b"second version");
}

#[test]
fn stress_readers_beside_a_writer_rewriting_records_see_no_corruption() {
    const TITLES: [&str; 3] = ["A", "B", "C"];
    const PUTS: u64 = 240;
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    for t in TITLES {
        w.put(&Put::new(D, t, 0, HTML, &value(t, 0))).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    // The revision of each title whose put has returned: a read begun after must see it.
    let committed: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    // Two threads share one long-lived handle; a third has its own.
    let shared = Arc::new(Store::open(dir.path(), &StoreOptions::read_only()).unwrap());
    let own = Arc::new(Store::open(dir.path(), &StoreOptions::read_only()).unwrap());
    let readers: Vec<_> = [shared.clone(), shared.clone(), own.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, store)| {
            let (done, reads, committed) = (done.clone(), reads.clone(), committed.clone());
            std::thread::spawn(move || {
                let mut i = n;
                while !done.load(Ordering::SeqCst) {
                    i += 1;
                    let t = TITLES[i % TITLES.len()];
                    let acked = committed[i % TITLES.len()].load(Ordering::SeqCst);
                    let got = match i % 3 {
                        0 => store.get(D, t, Which::Latest).map(|g| {
                            let g = g.expect("title");
                            assert!(g.rev >= acked, "reader {n}, {t}: {} after {acked}", g.rev);
                            vec![g]
                        }),
                        1 => store.list(D, t, Page::default()).and_then(|l| {
                            let newest = &l[0];
                            Ok(vec![store
                                .get(D, t, Which::Render(newest.rev, newest.tid))?
                                .expect("listed render")])
                        }),
                        _ => store
                            .get(D, t, Which::Rev(0))
                            .map(|g| vec![g.expect("revision 0")]),
                    };
                    for g in got.unwrap_or_else(|e| panic!("reader {n}, {t}: {e}")) {
                        assert_eq!(g.value, value(t, g.rev), "reader {n}, {t} rev {}", g.rev);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for rev in 1..=PUTS {
        let t = TITLES[rev as usize % TITLES.len()];
        w.put(&Put::new(D, t, rev, HTML, &value(t, rev))).unwrap();
        committed[rev as usize % TITLES.len()].store(rev, Ordering::SeqCst);
    }
    done.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    // The handles ended current: each title's latest revision is the writer's last.
    for t in TITLES {
        let last = (1..=PUTS)
            .rev()
            .find(|r| TITLES[*r as usize % TITLES.len()] == t)
            .unwrap();
        assert_eq!(shared.get(D, t, Which::Latest).unwrap().unwrap().rev, last);
        assert_eq!(own.get(D, t, Which::Latest).unwrap().unwrap().rev, last);
    }
    eprintln!(
        "{} reads; views renewed {} times (shared handle) and {} (own)",
        reads.load(Ordering::Relaxed),
        shared.renewals(),
        own.renewals()
    );
}

/// Reads of `meta.*` files through a read-only handle, counted.
fn counting_reader(dir: &Path) -> (Store, Arc<AtomicU64>) {
    counting_reader_at(dir, wink::clock::system())
}

/// A file system that counts in `reads` the reads of the files `watched` picks.
fn counting_vfs(
    reads: &Arc<AtomicU64>,
    watched: impl Fn(&Path) -> bool + Send + Sync + 'static,
) -> SpyVfs {
    let reads = reads.clone();
    SpyVfs {
        watched: Box::new(watched),
        watch: Arc::new(move |access, _, _| {
            if access == Access::Read {
                reads.fetch_add(1, Ordering::SeqCst);
            }
        }),
    }
}

/// [`counting_reader`] on `clock`.
fn counting_reader_at(dir: &Path, clock: Arc<dyn wink::clock::Clock>) -> (Store, Arc<AtomicU64>) {
    let reads = Arc::new(AtomicU64::new(0));
    let vfs = counting_vfs(&reads, |path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.starts_with("meta.")
    });
    let opts = StoreOptions {
        vfs: Arc::new(vfs),
        clock,
        ..StoreOptions::read_only()
    };
    (Store::open(dir, &opts).unwrap(), reads)
}

#[test]
fn read_only_handles_beside_the_writer_share_its_committed_records_and_no_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    w.put(&Put::new(D, "T", 1, HTML, &value("T", 1))).unwrap();
    let (reader, meta_reads) = counting_reader(dir.path());
    let (other, _) = counting_reader(dir.path());
    let latest = |s: &Store| {
        s.get(D, "T", Which::Latest)
            .unwrap()
            .map(|g| (g.rev, g.value))
    };
    assert_eq!(latest(&reader), Some((1, value("T", 1))));
    let before = meta_reads.load(Ordering::SeqCst);
    assert!(before > 0, "the first read reads the record from the files");
    // A warm read, on this handle or another, reads no meta file: only the value.
    assert_eq!(latest(&reader), Some((1, value("T", 1))));
    assert_eq!(latest(&other), Some((1, value("T", 1))));
    assert_eq!(meta_reads.load(Ordering::SeqCst), before);
    // An uncommitted rewrite is not seen, and the kept record is not used meanwhile.
    let mut batch = w.batch();
    batch
        .put(&wink::store::Put {
            domain: D,
            title: "T",
            rev: 2,
            tid: None,
            content_type: HTML,
            labels: &wink::store::Labels::NONE,
            value: &value("T", 2),
            historical: false,
        })
        .unwrap();
    assert_eq!(latest(&reader), Some((1, value("T", 1))));
    assert!(meta_reads.load(Ordering::SeqCst) > before);
    batch.commit().unwrap();
    // The commit is seen at once, and kept again for the next read.
    assert_eq!(latest(&reader), Some((2, value("T", 2))));
    let after = meta_reads.load(Ordering::SeqCst);
    assert_eq!(latest(&other), Some((2, value("T", 2))));
    assert_eq!(meta_reads.load(Ordering::SeqCst), after);
    // A take-down removes the kept record too.
    w.take_down(D, "T", None).unwrap();
    assert_eq!(latest(&reader), None);
    assert_eq!(latest(&other), None);
    // Once the writer is gone, another process may write: the handles read the files again.
    w.lift(D, "T", None).unwrap();
    w.put(&Put::new(D, "T", 3, HTML, &value("T", 3))).unwrap();
    assert_eq!(latest(&reader), Some((3, value("T", 3))));
    drop(w);
    let gone = meta_reads.load(Ordering::SeqCst);
    assert_eq!(latest(&reader), Some((3, value("T", 3))));
    assert!(meta_reads.load(Ordering::SeqCst) > gone);
}

/// The answer a handle keeps for a get of a title's latest render holds until the first
/// retention deadline among the title's renders, on the writer's handle and on the read-only
/// handles beside it; the writer's own put replaces it at once on its handle, and a committed one
/// on the others.
#[test]
fn the_kept_latest_answer_ends_at_the_first_deadline_and_with_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = wink::store::Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::Ttl { ttl: 100 },
            historical_ttl: 3600,
        },
        ..wink::store::Config::default()
    };
    let clock = Arc::new(wink::clock::ManualClock::new(1_000_000));
    let opts = StoreOptions {
        clock: clock.clone(),
        ..StoreOptions::writer()
    };
    Store::init(dir.path(), &cfg, &opts).unwrap();
    let mut w = Store::open(dir.path(), &opts).unwrap();
    w.put(&Put::new(D, "T", 1, HTML, &value("T", 1))).unwrap();
    clock.advance(50);
    // Readable until 1,000,100 (revision 1) and 1,000,150 (revision 2).
    w.put(&Put::new(D, "T", 2, HTML, &value("T", 2))).unwrap();
    let (reader, meta_reads) = counting_reader_at(dir.path(), clock.clone());
    let latest = |s: &Store| {
        s.get(D, "T", Which::Latest)
            .unwrap()
            .map(|g| (g.rev, g.value))
    };
    for _ in 0..2 {
        assert_eq!(latest(&w), Some((2, value("T", 2))));
    }
    assert_eq!(latest(&reader), Some((2, value("T", 2))));
    let before = meta_reads.load(Ordering::SeqCst);
    assert_eq!(latest(&reader), Some((2, value("T", 2))));
    assert_eq!(
        meta_reads.load(Ordering::SeqCst),
        before,
        "a warm read is kept"
    );
    // Revision 1's deadline ends the answer's span; the answer worked out again is the same.
    clock.set(1_000_100);
    assert_eq!(latest(&w), Some((2, value("T", 2))));
    assert_eq!(latest(&reader), Some((2, value("T", 2))));
    // Past revision 2's, nothing is readable: the answer kept before is not given.
    clock.set(1_000_150);
    assert_eq!(latest(&w), None);
    assert_eq!(latest(&reader), None);
    // The writer sees its own put before the commit, the reader only after it.
    let mut batch = w.batch();
    batch
        .put(&Put::new(D, "T", 3, HTML, &value("T", 3)))
        .unwrap();
    assert_eq!(latest(batch.store()), Some((3, value("T", 3))));
    assert_eq!(latest(&reader), None);
    batch.commit().unwrap();
    assert_eq!(latest(&reader), Some((3, value("T", 3))));
    assert_eq!(latest(&w), Some((3, value("T", 3))));
    // A rewrite of the title within the answer's span replaces it on both handles.
    clock.advance(10);
    w.put(&Put::new(D, "T", 4, HTML, &value("T", 4))).unwrap();
    assert_eq!(latest(&w), Some((4, value("T", 4))));
    assert_eq!(latest(&reader), Some((4, value("T", 4))));
}

/// A writer rewriting a title whose record it holds (written or read lately) takes the record's
/// bytes from its cache once the lookup finds the inode it holds them for, and reads them when
/// it holds none; either way the rewrite keeps every render.
#[test]
fn a_writer_rewrites_a_record_it_holds_without_reading_it_again() {
    let dir = tempfile::tempdir().unwrap();
    Store::init(dir.path(), &keep_all(), &StoreOptions::writer()).unwrap();
    let reads = Arc::new(AtomicU64::new(0));
    let open = || {
        let vfs = counting_vfs(&reads, |path| {
            path.file_name().is_some_and(|n| n == "meta.data")
        });
        let opts = StoreOptions {
            vfs: Arc::new(vfs),
            ..StoreOptions::writer()
        };
        Store::open(dir.path(), &opts).unwrap()
    };
    let mut w = open();
    w.put(&Put::new(D, "T", 1, HTML, &value("T", 1))).unwrap();
    let before = reads.load(Ordering::SeqCst);
    w.put(&Put::new(D, "T", 2, HTML, &value("T", 2))).unwrap();
    let held = reads.load(Ordering::SeqCst) - before;
    drop(w);
    // A new handle holds nothing: the same rewrite reads the record too.
    let mut w = open();
    let before = reads.load(Ordering::SeqCst);
    w.put(&Put::new(D, "T", 3, HTML, &value("T", 3))).unwrap();
    let read = reads.load(Ordering::SeqCst) - before;
    assert!(
        held < read,
        "{held} reads with the record held, {read} without"
    );
    let revs: Vec<u64> = w
        .list(D, "T", Page::default())
        .unwrap()
        .iter()
        .map(|l| l.rev)
        .collect();
    assert_eq!(revs, [3, 2, 1]);
    for rev in 1..=3 {
        let got = w.get(D, "T", Which::Rev(rev)).unwrap().unwrap();
        assert_eq!(got.value, value("T", rev));
    }
}
