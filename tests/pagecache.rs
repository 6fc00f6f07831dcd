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
