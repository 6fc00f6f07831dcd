//! Page-cache policy: what the filesys writes does not stay in the page cache; the same bytes
//! written with plain `write()` do. Measured with mincore(2) on a real disk file system (the
//! target directory, not a tmpfs, where pages could never be dropped).

use std::io::Write;
use std::sync::{Arc, Mutex};

use wink::filesys::{file_path, Filesys, FsOptions, OpenOptions};
use wink::storage::residency;

mod common;
use common::spy::{Access, SpyVfs};

const TOTAL: usize = 256 << 20;
const DOC: usize = 64 << 10;

#[test]
fn filesys_writes_leave_little_resident_and_plain_writes_do_not() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let doc: Vec<u8> = (0..DOC).map(|i| (i * 31 % 251) as u8).collect();

    let base = dir.path().join("fs");
    let mut fs = append_only(&base);
    for i in 0..TOTAL / DOC {
        fs.put(format!("doc/{i}").as_bytes(), 0, &doc).unwrap();
    }
    fs.sync().unwrap();
    let (fs_resident, fs_len) = residency(&file_path(&base, "data")).unwrap();
    assert!(fs_len >= TOTAL as u64);

    let plain = dir.path().join("plain");
    let mut f = std::fs::File::create(&plain).unwrap();
    for _ in 0..TOTAL / DOC {
        f.write_all(&doc).unwrap();
    }
    f.sync_data().unwrap();
    let (plain_resident, _) = residency(&plain).unwrap();

    eprintln!(
        "resident after 256 MiB: filesys {} KiB, plain write {} KiB",
        fs_resident >> 10,
        plain_resident >> 10
    );
    assert!(
        fs_resident < 16 << 20,
        "filesys left {fs_resident} bytes of its datafile resident"
    );
    assert!(
        plain_resident > 128 << 20,
        "plain write left only {plain_resident} bytes resident: the comparison shows nothing"
    );
}

/// A commit per small put, as a server with one client makes them: each commit's range starts
/// inside the page the last one ended in, and that page must not stay behind, one a commit.
#[test]
fn a_sync_per_small_put_leaves_little_resident() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = dir.path().join("fs");
    let mut fs = append_only(&base);
    const PUTS: usize = 1000;
    // 8 KiB and a little: no put ends on a page boundary.
    let doc: Vec<u8> = (0..8300).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..PUTS {
        fs.put(format!("doc/{i}").as_bytes(), 0, &doc).unwrap();
        fs.sync().unwrap();
    }
    let (resident, len) = residency(&file_path(&base, "data")).unwrap();
    eprintln!(
        "resident after {PUTS} synced puts: {} KiB of {} KiB",
        resident >> 10,
        len >> 10
    );
    let written = (PUTS * doc.len()) as u64;
    assert!(len >= written);
    assert!(
        resident * 20 <= written,
        "{resident} bytes of the datafile resident after {written} written (at most 5%)"
    );
}

/// A new append-only filesys at `base`, open for writing.
fn append_only(base: &std::path::Path) -> Filesys {
    Filesys::create(
        base,
        &FsOptions {
            ao: true,
            ..FsOptions::default()
        },
        &OpenOptions::writer(),
    )
    .unwrap()
}

/// Accesses of a file, in order: (what, offset).
type Accesses = Arc<Mutex<Vec<(Access, u64)>>>;

/// The real file system, with every read and hint of a filesys datafile (`*.data`) recorded.
fn datafile_accesses() -> (SpyVfs, Accesses) {
    let events: Accesses = Arc::default();
    let vfs = SpyVfs {
        watched: Box::new(|path| path.extension().is_some_and(|e| e == "data")),
        watch: {
            let events = events.clone();
            Arc::new(move |access, at, _| events.lock().unwrap().push((access, at)))
        },
    };
    (vfs, events)
}

/// A file appended to in several runs has its data entries apart in the datafile; read cold one
/// after the other, each would wait for a disk read of its own. A read asks for all of them
/// first (on the writer's handle, whose datafile holds in-place writes back, as on a reader's).
#[test]
fn a_read_over_several_data_entries_asks_for_all_of_them_before_reading() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = dir.path().join("fs");
    let fs_opts = FsOptions {
        ao: true,
        ..FsOptions::default()
    };
    Filesys::create(&base, &fs_opts, &OpenOptions::writer()).unwrap();
    let (vfs, events) = datafile_accesses();
    let mut fs = Filesys::open_in(Arc::new(vfs), &base, &OpenOptions::writer()).unwrap();
    let part = vec![7u8; 20 << 10];
    fs.put(b"log", 0, &part).unwrap();
    for i in 0..3 {
        fs.put(format!("other/{i}").as_bytes(), 0, &[1u8; 50 << 10])
            .unwrap();
        fs.append(b"log", &part).unwrap();
    }
    fs.sync().unwrap();
    let extents = fs.extents(b"log").unwrap().unwrap();
    assert_eq!(extents.len(), 4);

    events.lock().unwrap().clear();
    assert_eq!(fs.read(b"log").unwrap(), part.repeat(4));
    let seen = events.lock().unwrap().clone();
    let hinted: Vec<u64> = seen
        .iter()
        .filter(|(what, _)| *what == Access::WillNeed)
        .map(|&(_, at)| at)
        .collect();
    assert_eq!(hinted.len(), 4, "{seen:?}");
    for (at, e) in hinted.iter().zip(&extents) {
        assert!(*at < e.offset && e.offset - at < 100, "{at} for {e:?}");
    }
    let in_an_entry = |at: u64| {
        extents
            .iter()
            .any(|e| at + 100 > e.offset && at < e.offset + e.len)
    };
    let first_entry_read = seen
        .iter()
        .position(|&(what, at)| what == Access::Read && in_an_entry(at))
        .unwrap();
    let last_hint = seen.iter().rposition(|(what, _)| *what == Access::WillNeed);
    assert!(last_hint < Some(first_entry_read), "{seen:?}");

    // A read within one data entry has nothing to overlap: no hint.
    events.lock().unwrap().clear();
    let first = fs.read_range(b"log", 0, extents[0].len).unwrap();
    assert_eq!(first, part);
    assert!(!events
        .lock()
        .unwrap()
        .iter()
        .any(|(w, _)| *w == Access::WillNeed));
}

/// A file's inode can be asked for ahead of its read, by the index alone: one hint where the
/// inode entry lies, no read; none for a file that does not exist.
#[test]
fn will_need_file_hints_the_inode_and_reads_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = dir.path().join("fs");
    let fs_opts = FsOptions {
        ao: true,
        ..FsOptions::default()
    };
    let mut fs = Filesys::create(&base, &fs_opts, &OpenOptions::writer()).unwrap();
    for i in 0..20 {
        fs.put(format!("f/{i}").as_bytes(), 0, &[i as u8; 3000])
            .unwrap();
    }
    fs.sync().unwrap();
    drop(fs);
    let (vfs, events) = datafile_accesses();
    let fs = Filesys::open_in(Arc::new(vfs), &base, &OpenOptions::read_only()).unwrap();
    events.lock().unwrap().clear();
    fs.will_need_file(b"f/7");
    let hinted = events.lock().unwrap().clone();
    assert_eq!(hinted.len(), 1, "{hinted:?}");
    assert_eq!(hinted[0].0, Access::WillNeed);
    // The hint lies at the inode entry that a read then reads first.
    events.lock().unwrap().clear();
    assert_eq!(fs.read(b"f/7").unwrap(), vec![7u8; 3000]);
    let first_read = events.lock().unwrap()[0];
    assert_eq!(first_read, (Access::Read, hinted[0].1));
    events.lock().unwrap().clear();
    fs.will_need_file(b"f/none");
    assert!(events.lock().unwrap().is_empty());
}

/// Bytes of every file of `dir` resident in the page cache, by file name.
fn resident_by_file(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, residency(&p).unwrap().0)
        })
        .collect();
    out.sort();
    out
}

/// Drops the page cache of every file of `dir`, to start from nothing.
fn drop_dir(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let f = std::fs::File::open(&p).unwrap();
            f.sync_all().unwrap();
            let _ = nix::fcntl::posix_fadvise(
                std::os::unix::io::AsRawFd::as_raw_fd(&f),
                0,
                0,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            );
        }
    }
}

fn store_put<'a>(title: &'a str, value: &'a [u8]) -> wink::store::Put<'a> {
    wink::store::Put::new("d", title, 1, "text/html", value)
}

/// A store committing one 8 KiB put at a time (as `wink serve` does for one client) leaves at
/// most 1% of the bytes it wrote in the page cache besides its container's index: the values
/// and the title records are dropped once committed. A read-only handle beside the writer then
/// reads a title just written without reading the meta datafile.
#[test]
fn a_store_committing_each_put_leaves_little_but_its_index_resident() {
    use wink::store::{Config, Store, StoreOptions, Which};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("s");
    Store::init(&root, &Config::default(), &StoreOptions::writer()).unwrap();
    let mut store = Store::open(&root, &StoreOptions::writer()).unwrap();
    drop_dir(&root);
    const PUTS: usize = 2000;
    let value: Vec<u8> = (0..8192).map(|i| (i * 13 % 251) as u8).collect();
    for i in 0..PUTS {
        store.put(&store_put(&format!("T{i}"), &value)).unwrap();
    }
    let files = resident_by_file(&root);
    let written = (PUTS * value.len()) as u64;
    eprintln!("resident after {PUTS} committed puts of 8 KiB: {files:?}");
    // The container's index is a table of fixed size (4 MiB) from its creation, whose every
    // page a put may probe: it stays cached on purpose, the same few MiB at any number of puts.
    let rest: u64 = files
        .iter()
        .filter(|(n, _)| !(n.starts_with('c') && n.ends_with(".idx")))
        .map(|(_, r)| r)
        .sum();
    assert!(
        rest * 100 <= written,
        "{rest} bytes resident besides the container's index after {written} written: {files:?}"
    );
    let meta_data = files.iter().find(|(n, _)| n == "meta.data").unwrap().1;
    assert!(
        meta_data <= 64 << 10,
        "meta.data: {meta_data} bytes resident"
    );

    let (vfs, events) = datafile_accesses();
    let opts = StoreOptions {
        vfs: Arc::new(vfs),
        ..StoreOptions::read_only()
    };
    let reader = Store::open(&root, &opts).unwrap();
    events.lock().unwrap().clear();
    let got = reader.get("d", "T1999", Which::Latest).unwrap().unwrap();
    assert_eq!(got.rev, 1);
    let meta_reads = events.lock().unwrap().len();
    // The value's read is of the container's datafile; no access of the meta datafile.
    assert!(meta_reads <= 2, "{:?}", events.lock().unwrap());
}

/// A writer opened, given one put and closed, again and again (as `wink put` runs): the opens'
/// reads of the preallocated tails do not stay cached.
#[test]
fn writers_opened_for_one_put_each_leave_little_resident() {
    use wink::store::{Config, Store, StoreOptions};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("s");
    Store::init(&root, &Config::default(), &StoreOptions::writer()).unwrap();
    drop_dir(&root);
    // What stays: the title records written (about 3% of the bytes; the records' pages are
    // dropped 8–16 MiB behind the writes, which these writers never reach), and the container
    // pages of the last commits, still dirty when their writer dropped them (20–60 KiB,
    // varying with writeback). 500 writers, so that this constant part fits inside the 5%
    // whatever writeback does (200 writers left 4.3–5.5%).
    const PUTS: usize = 500;
    let value: Vec<u8> = (0..8192).map(|i| (i * 17 % 251) as u8).collect();
    for i in 0..PUTS {
        let mut store = Store::open(&root, &StoreOptions::writer()).unwrap();
        store.put(&store_put(&format!("T{i}"), &value)).unwrap();
    }
    let files = resident_by_file(&root);
    eprintln!("resident after {PUTS} writers of one put each: {files:?}");
    let data: u64 = files
        .iter()
        .filter(|(n, _)| n.ends_with(".data"))
        .map(|(_, r)| r)
        .sum();
    let written = (PUTS * value.len()) as u64;
    assert!(
        data * 20 <= written,
        "{data} bytes of datafiles resident after {written} written: {files:?}"
    );
}

/// A count of the whole store (`Store::stat`, which `wink serve` makes every few minutes) and
/// `wink stat`'s space by container read every title record, and leave the page cache of the
/// title records' files as they found it: the pages they brought in are dropped, the ones cached
/// before stay.
#[test]
fn a_count_of_the_store_leaves_the_page_cache_as_it_found_it() {
    use std::os::unix::fs::FileExt;
    use wink::store::{Store, StoreOptions};
    const TITLES: usize = 20_000;
    let (_dir, root) = small_titles(TITLES);
    // Pages a server was reading before the count: the first 256 KiB of the title records.
    let meta = root.join("meta.data");
    let mut warm = vec![0u8; 256 << 10];
    std::fs::File::open(&meta)
        .unwrap()
        .read_exact_at(&mut warm, 0)
        .unwrap();
    let before = residency(&meta).unwrap();

    let reader = Store::open(&root, &StoreOptions::read_only()).unwrap();
    let st = reader.stat().unwrap();
    assert_eq!(st.titles, TITLES as u64);
    // `wink stat`'s space by container scans the records again.
    let space = wink::maintenance::space(&reader).unwrap();
    let live: u64 = space.containers.iter().map(|c| c.live_bytes).sum();
    assert_eq!(live, st.live_bytes);

    let after = as_found(&meta, before, "the count");
    assert!(
        after.0 >= warm.len() as u64,
        "the count dropped pages that were cached before it: {} resident",
        after.0
    );
}

/// `PageMap::drop_others_in` drops, within its range only, the pages the map did not show
/// resident; `drop_others` then does the rest of the file.
#[test]
fn a_page_map_drops_what_was_not_cached_within_a_range() {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    use wink::storage::PageMap;
    const KIB: u64 = 1024;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    drop_dir(dir.path());
    let file = std::fs::File::open(&path).unwrap();
    // No read-ahead: the pages read are the pages cached.
    nix::fcntl::posix_fadvise(
        file.as_raw_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM,
    )
    .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    file.read_exact_at(&mut buf[..64 << 10], 0).unwrap();
    let map = PageMap::of(&path).unwrap();
    assert_eq!(residency(&path).unwrap().0, 64 * KIB);
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(residency(&path).unwrap().0, 1024 * KIB);
    // A range that does not start on a page: widened to the page it starts in.
    map.drop_others_in(&path, 256 * KIB + 100, 768 * KIB)
        .unwrap();
    assert_eq!(residency(&path).unwrap().0, 512 * KIB);
    map.drop_others_in(&path, 0, 128 * KIB).unwrap();
    assert_eq!(residency(&path).unwrap().0, 448 * KIB);
    map.drop_others(&path).unwrap();
    assert_eq!(residency(&path).unwrap().0, 64 * KIB);
}

/// A dump of a whole store reads every value once, ahead of need, and leaves the containers'
/// page cache as it found it, whatever the values' sizes: a value whose first page the one
/// before it shares (the values lie end to end, not on page boundaries) is dropped as well.
#[test]
fn a_dump_leaves_the_containers_page_cache_as_it_found_it() {
    use wink::store::{Config, Store, StoreOptions, TitleCursor};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("s");
    Store::init(&root, &Config::default(), &StoreOptions::writer()).unwrap();
    const TITLES: u64 = 4000;
    let mut written = 0u64;
    {
        let mut store = Store::open(&root, &StoreOptions::writer()).unwrap();
        let mut batch = store.batch();
        for i in 0..TITLES {
            // 2–16 KiB, never a whole number of pages.
            let len = 2048 + (i * 7919 % 14336) as usize + 1;
            let value: Vec<u8> = (0..len).map(|j| (j as u64 * 31 + i) as u8).collect();
            written += len as u64;
            batch.put(&store_put(&format!("T{i}"), &value)).unwrap();
        }
        batch.commit().unwrap();
    }
    drop_dir(&root);
    // A serving node's title records are cached; the values are not.
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("meta.")
        {
            std::fs::read(&p).unwrap();
        }
    }
    let reader = Store::open(&root, &StoreOptions::read_only()).unwrap();
    let mut dump = reader.dump_reader().unwrap();
    let mut cursor = TitleCursor::new();
    let mut read = 0u64;
    while !cursor.is_done() {
        let titles = reader.dump_step(&mut cursor, 256).unwrap();
        for t in &titles {
            for r in &t.renders {
                dump.plan(r);
            }
        }
        for t in &titles {
            for r in &t.renders {
                read += dump.read(t, r).unwrap().len() as u64;
            }
        }
    }
    dump.finish().unwrap();
    assert_eq!(read, written);
    let containers: u64 = resident_by_file(&root)
        .iter()
        .filter(|(n, _)| n.starts_with('c') && n.ends_with(".data"))
        .map(|(_, r)| r)
        .sum();
    eprintln!("containers resident after a dump of {read} bytes: {containers}");
    assert!(
        containers * 100 <= read,
        "a dump of {read} bytes left {containers} bytes of the containers resident"
    );
}

/// A dump walks every title record: it leaves the title records' page cache as it found it.
#[test]
fn a_dump_leaves_the_title_records_page_cache_as_it_found_it() {
    use wink::store::{Store, StoreOptions, TitleCursor};
    let (_dir, root) = small_titles(20_000);
    let meta = root.join("meta.data");
    let reader = Store::open(&root, &StoreOptions::read_only()).unwrap();
    let before = residency(&meta).unwrap();
    let mut dump = reader.dump_reader().unwrap();
    let mut cursor = TitleCursor::new();
    let mut titles = 0;
    while !cursor.is_done() {
        for t in reader.dump_step(&mut cursor, 256).unwrap() {
            for r in &t.renders {
                assert_eq!(dump.read(&t, r).unwrap(), b"<p>x</p>");
            }
            titles += 1;
        }
    }
    dump.finish().unwrap();
    assert_eq!(titles, 20_000);
    as_found(&meta, before, "the dump");
}

/// A store of `titles` titles of one small render each, its page cache dropped.
fn small_titles(titles: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    use wink::store::{Config, Store, StoreOptions};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("s");
    Store::init(&root, &Config::default(), &StoreOptions::writer()).unwrap();
    {
        let mut store = Store::open(&root, &StoreOptions::writer()).unwrap();
        let mut batch = store.batch();
        for i in 0..titles {
            batch
                .put(&store_put(&format!("T{i}"), b"<p>x</p>"))
                .unwrap();
        }
        batch.commit().unwrap();
    }
    drop_dir(&root);
    (dir, root)
}

/// Checks that `who` left `meta` (2 MiB at least) resident as `before` (from `residency`) found
/// it, give or take 64 KiB; returns the residency after.
fn as_found(meta: &std::path::Path, before: (u64, u64), who: &str) -> (u64, u64) {
    let after = residency(meta).unwrap();
    eprintln!("meta.data resident: {before:?} before {who}, {after:?} after");
    assert!(
        before.1 >= 2 << 20,
        "meta.data is {} bytes: too small to show",
        before.1
    );
    assert!(
        after.0 <= before.0 + (64 << 10),
        "{who} left {} bytes of meta.data resident ({} before)",
        after.0,
        before.0
    );
    after
}

/// A whole cull and a scrub walk every title record, and leave the title records' page cache as
/// they found it.
#[test]
fn a_cull_and_a_scrub_leave_the_title_records_page_cache_as_they_found_it() {
    use wink::store::{Store, StoreOptions};
    let (_dir, root) = small_titles(20_000);
    let meta = root.join("meta.data");
    let mut store = Store::open(&root, &StoreOptions::writer()).unwrap();
    let before = residency(&meta).unwrap();
    wink::maintenance::cull_all(&mut store, |_, _| {}).unwrap();
    as_found(&meta, before, "the cull");
    let report = wink::maintenance::scrub(&store, |_| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    as_found(&meta, before, "the scrub");
}
