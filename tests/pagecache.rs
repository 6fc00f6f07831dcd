//! Page-cache policy: what the filesys writes does not stay in the page cache; the same bytes
//! written with plain `write()` do. Measured with mincore(2) on a real disk file system (the
//! target directory, not a tmpfs, where pages could never be dropped).

use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use wink::filesys::{file_path, Filesys, FsOptions, OpenOptions};
use wink::storage::{residency, Storage};
use wink::vfs::{RealFs, Vfs, WriterLock};

const TOTAL: usize = 256 << 20;
const DOC: usize = 64 << 10;

#[test]
fn filesys_writes_leave_little_resident_and_plain_writes_do_not() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let doc: Vec<u8> = (0..DOC).map(|i| (i * 31 % 251) as u8).collect();

    let base = dir.path().join("fs");
    let mut fs = Filesys::create(
        &base,
        &FsOptions {
            ao: true,
            ..FsOptions::default()
        },
        &OpenOptions::writer(),
    )
    .unwrap();
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

/// The real file system, recording the datafile's read-ahead hints and reads in order.
#[derive(Debug, Default)]
struct Recording {
    events: Arc<Mutex<Vec<(&'static str, u64)>>>,
}

#[derive(Debug)]
struct RecordingStorage {
    inner: Box<dyn Storage>,
    events: Arc<Mutex<Vec<(&'static str, u64)>>>,
}

impl Storage for RecordingStorage {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.events.lock().unwrap().push(("read", offset));
        self.inner.read_at(buf, offset)
    }
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.events.lock().unwrap().push(("will_need", offset));
        self.inner.will_need(offset, len)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        self.inner.create_temp(suffix)
    }
    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        self.inner.commit_temp(temp)
    }
    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.inner.discard_temp(temp)
    }
}

impl Vfs for Recording {
    fn open(&self, path: &Path, writable: bool) -> wink::Result<Box<dyn Storage>> {
        let inner = RealFs.open(path, writable)?;
        if path.extension().is_some_and(|e| e == "data") {
            let events = self.events.clone();
            return Ok(Box::new(RecordingStorage { inner, events }));
        }
        Ok(inner)
    }
    fn create_new(&self, path: &Path) -> wink::Result<Box<dyn Storage>> {
        RealFs.create_new(path)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn remove(&self, path: &Path) -> wink::Result<()> {
        RealFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> wink::Result<()> {
        RealFs.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> wink::Result<()> {
        RealFs.sync_dir(path)
    }
    fn lock(&self, path: &Path, wait: bool) -> wink::Result<Option<WriterLock>> {
        RealFs.lock(path, wait)
    }
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
    let vfs = Arc::new(Recording::default());
    let events = vfs.events.clone();
    let mut fs = Filesys::open_in(vfs, &base, &OpenOptions::writer()).unwrap();
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
        .filter(|(what, _)| *what == "will_need")
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
        .position(|&(what, at)| what == "read" && in_an_entry(at))
        .unwrap();
    let last_hint = seen.iter().rposition(|(what, _)| *what == "will_need");
    assert!(last_hint < Some(first_entry_read), "{seen:?}");

    // A read within one data entry has nothing to overlap: no hint.
    events.lock().unwrap().clear();
    let first = fs.read_range(b"log", 0, extents[0].len).unwrap();
    assert_eq!(first, part);
    assert!(!events
        .lock()
        .unwrap()
        .iter()
        .any(|(w, _)| *w == "will_need"));
}
