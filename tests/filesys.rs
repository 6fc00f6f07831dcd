//! filesys and filesys-ao through the public API: operations, the time index, the files of an
//! independent implementation, locking, and power loss on a simulated disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::filesys::check::check_filesys;
use wink::filesys::{file_path, Filesys, FsOptions, OpenOptions};
use wink::Error;
use wink_harness::sim::SimDisk;

mod common;

fn writer(clock: &ManualClock) -> OpenOptions {
    OpenOptions {
        clock: Arc::new(clock.clone()),
        ..OpenOptions::writer()
    }
}

fn assert_clean(base: &Path) {
    let report = check_filesys(base);
    assert!(
        report.problems.is_empty(),
        "check found: {:#?}",
        report.problems
    );
}

#[test]
fn create_read_append_rename_delete_reopen_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let clock = ManualClock::new(1_700_000_000);
    let opts = FsOptions {
        isz: 88,
        htsize: 4,
        ..FsOptions::default()
    };
    let mut fs = Filesys::create(&base, &opts, &writer(&clock)).unwrap();
    fs.put(b"readme.txt", 1, b"Hello, ").unwrap();
    fs.append(b"readme.txt", b"world!\n").unwrap();
    let stat = fs
        .append(b"readme.txt", b"A third piece forces a resize.\n")
        .unwrap();
    assert_eq!(
        stat.inode_size, 176,
        "inode doubled when its 2 pointers were used"
    );
    assert_eq!(
        fs.read(b"readme.txt").unwrap(),
        b"Hello, world!\nA third piece forces a resize.\n"
    );
    assert_eq!(
        fs.read_range(b"readme.txt", 5, 12).unwrap(),
        b", world!\nA t"
    );
    assert_eq!(fs.read_range(b"readme.txt", 40, 100).unwrap(), b"ize.\n");
    fs.put(b"a/b c.html", 2, b"<html>renamed later</html>")
        .unwrap();
    fs.rename(b"a/b c.html", b"renamed.html").unwrap();
    assert!(fs.stat(b"a/b c.html").unwrap().is_none());
    assert!(matches!(
        fs.rename(b"renamed.html", b"readme.txt"),
        Err(Error::Invalid(_))
    ));
    fs.put(b"gone.bin", 0, &[0u8; 100]).unwrap();
    assert!(fs.delete(b"gone.bin").unwrap());
    assert!(!fs.delete(b"gone.bin").unwrap());
    assert!(matches!(
        fs.create_file(b"readme.txt", 0),
        Err(Error::Invalid(_))
    ));
    for i in 0..50 {
        fs.put(
            format!("many/{i}").as_bytes(),
            0,
            format!("content {i}").as_bytes(),
        )
        .unwrap();
    }
    assert!(fs.index().htsize() > 4, "the index grew");
    fs.sync().unwrap();
    drop(fs);
    assert_clean(&base);

    let mut fs = Filesys::open(&base, &writer(&clock)).unwrap();
    assert!(fs.recovery().actions.is_empty(), "{:?}", fs.recovery());
    let names: Vec<Vec<u8>> = fs.iter().map(|s| s.unwrap().name).collect();
    assert_eq!(names.len(), 52);
    assert_eq!(names[0], b"readme.txt");
    assert_eq!(
        fs.read(b"renamed.html").unwrap(),
        b"<html>renamed later</html>"
    );
    assert_eq!(fs.read(b"many/49").unwrap(), b"content 49");
    let before: Vec<_> = names.iter().map(|n| fs.stat(n).unwrap().unwrap()).collect();
    assert_eq!(fs.reindex().unwrap(), 52);
    let after: Vec<_> = names.iter().map(|n| fs.stat(n).unwrap().unwrap()).collect();
    assert_eq!(before, after);
    drop(fs);
    assert_clean(&base);
}

#[test]
fn ao_time_marks_and_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("ao");
    let clock = ManualClock::new(960);
    let opts = FsOptions {
        ao: true,
        dups: true,
        isz: 120,
        timemp: 60,
        ..FsOptions::default()
    };
    let mut fs = Filesys::create(&base, &opts, &writer(&clock)).unwrap();
    fs.put(b"log/1", 0, b"version one\n").unwrap();
    clock.set(1010);
    fs.put(b"log/2", 0, b"second\n").unwrap();
    clock.set(1075);
    fs.create_file(b"log/3", 0).unwrap();
    clock.set(1050); // the clock steps back: the mtime must not
    let s = fs.put(b"log/4", 0, b"clock stepped back\n").unwrap();
    assert_eq!(s.mtime, 1075);
    clock.set(1200);
    fs.create_file(b"log/5", 3).unwrap();
    clock.set(1230);
    fs.put(b"log/1", 0, b"version two\n").unwrap();
    assert!(matches!(fs.rename(b"log/2", b"x"), Err(Error::Invalid(_))));
    for _ in 0..4 {
        let _ = fs.append(b"log/3", b"x");
    }
    assert!(
        matches!(
            fs.append(b"log/3", b"one too many"),
            Err(Error::Full { .. })
        ),
        "4 pointers in a 120-byte ao inode"
    );
    fs.sync().unwrap();
    let range = |fs: &Filesys, t0, t1| -> Vec<String> {
        fs.iter_time(t0, t1)
            .unwrap()
            .map(|s| String::from_utf8(s.unwrap().name).unwrap())
            .collect()
    };
    assert_eq!(range(&fs, 1000, 1080), ["log/2", "log/3", "log/4"]);
    assert!(range(&fs, 1020, 1021).is_empty());
    assert!(range(&fs, 1100, 1200).is_empty());
    assert_eq!(range(&fs, 1200, 1300), ["log/5", "log/1"]);
    assert_eq!(range(&fs, 0, 2000).len(), 5);
    let marks: Vec<i64> = (0..fs.time_index().unwrap().len())
        .map(|i| fs.time_index().unwrap().mark(i).unwrap().0)
        .collect();
    assert_eq!(marks, [960, 1020, 1200]);
    assert_eq!(fs.read(b"log/1").unwrap(), b"version two\n");
    let plain = tempfile::tempdir().unwrap();
    let p = Filesys::create(
        &plain.path().join("p"),
        &FsOptions::default(),
        &writer(&clock),
    )
    .unwrap();
    assert!(matches!(p.iter_time(0, 1), Err(Error::Invalid(_))));
    drop(fs);
    assert_clean(&base);
}

fn shared_fixtures() -> Option<PathBuf> {
    common::require::shared("fixtures", "the independent-implementation check")
}

fn copy_set(from: &Path, to: &Path, stem: &str) {
    for ext in ["data", "idx", "time"] {
        let src = from.join(format!("{stem}.{ext}"));
        if src.exists() {
            std::fs::copy(&src, to.join(format!("{stem}.{ext}"))).unwrap();
        }
    }
}

#[test]
fn reads_the_filesystems_of_an_independent_implementation() {
    let Some(fixtures) = shared_fixtures() else {
        return;
    };
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("fixtures.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (stem, spec) in json["filesystems"].as_object().unwrap() {
        copy_set(&fixtures, dir.path(), stem);
        let base = dir.path().join(stem);
        let fs = Filesys::open(&base, &OpenOptions::read_only()).unwrap();
        for file in spec["live"].as_array().unwrap() {
            let name = hex(file["name_hex"].as_str().unwrap());
            let stat = fs
                .stat(&name)
                .unwrap()
                .unwrap_or_else(|| panic!("{stem}: {:?} missing", file["name"]));
            assert_eq!(stat.size, file["size"].as_u64().unwrap());
            assert_eq!(stat.ftype as u64, file["ftype"].as_u64().unwrap());
            assert_eq!(stat.mtime, file["mtime"].as_i64().unwrap());
            assert_eq!(stat.fileid, file["fileid"].as_u64().unwrap());
            assert_eq!(stat.inode.0, file["inode_offset"].as_u64().unwrap());
            assert_eq!(stat.inode_size, file["inode_size"].as_u64().unwrap());
            assert_eq!(
                fs.read(&name).unwrap(),
                hex(file["content_hex"].as_str().unwrap())
            );
        }
        for file in spec["absent"].as_array().unwrap() {
            assert!(fs
                .stat(&hex(file["name_hex"].as_str().unwrap()))
                .unwrap()
                .is_none());
        }
        let listed: Vec<Vec<u8>> = fs.iter().map(|s| s.unwrap().name).collect();
        let walked: Vec<_> = fs.iter().map(|s| s.unwrap()).collect();
        let sparse: Vec<_> = fs.iter_sparse().map(|s| s.unwrap()).collect();
        assert_eq!(
            sparse, walked,
            "{stem}: a sparse walk and a full walk disagree"
        );
        // Found through the index, or None where the index cannot be shown to hold every file.
        if let Some(by_index) = fs.files_by_index().unwrap() {
            assert_eq!(by_index, walked, "{stem}: the index and a walk disagree");
        }
        let expected: Vec<Vec<u8>> = spec["live"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| hex(f["name_hex"].as_str().unwrap()))
            .collect();
        let mut sorted_listed = listed.clone();
        sorted_listed.sort();
        let mut sorted_expected = expected.clone();
        sorted_expected.sort();
        assert_eq!(sorted_listed, sorted_expected, "{stem}");
        if let Some(queries) = spec.get("range_queries") {
            for q in queries.as_array().unwrap() {
                let names: Vec<String> = fs
                    .iter_time(q["t0"].as_i64().unwrap(), q["t1"].as_i64().unwrap())
                    .unwrap()
                    .map(|s| String::from_utf8(s.unwrap().name).unwrap())
                    .collect();
                let want: Vec<String> = q["names"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect();
                assert_eq!(names, want, "{stem} range {q}");
            }
        }
        drop(fs);
        assert!(
            !file_path(&base, "jnl").exists(),
            "a read-only open wrote a journal"
        );
        assert_clean(&base);
        // A writer opens it too, adds NEXTFID and a journal, and keeps every file readable.
        let mut fs = Filesys::open(&base, &OpenOptions::writer()).unwrap();
        fs.put(b"new file", 0, b"written by wink").unwrap();
        fs.sync().unwrap();
        assert_eq!(fs.read(b"new file").unwrap(), b"written by wink");
        drop(fs);
        assert_clean(&base);
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn one_writer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let _fs = Filesys::create(&base, &FsOptions::default(), &OpenOptions::writer()).unwrap();
    let err = Filesys::open(&base, &OpenOptions::writer()).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    assert!(err.to_string().contains("in use"));
    Filesys::open(&base, &OpenOptions::read_only()).unwrap();
}

#[test]
fn bad_names_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let mut fs = Filesys::create(&base, &FsOptions::default(), &OpenOptions::writer()).unwrap();
    assert!(matches!(fs.put(b"a\0b", 0, b"x"), Err(Error::Invalid(_))));
    assert!(matches!(
        fs.put(&vec![b'n'; 4097], 0, b"x"),
        Err(Error::Invalid(_))
    ));
    fs.put(&vec![b'n'; 4096], 0, b"x").unwrap();
    assert_eq!(fs.iter().count(), 1);
}

#[test]
fn readers_see_a_consistent_prefix_while_a_writer_appends() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let mut fs = Filesys::create(
        &base,
        &FsOptions {
            htsize: 8,
            ..FsOptions::default()
        },
        &OpenOptions::writer(),
    )
    .unwrap();
    let content = |i: usize| format!("file {i} ").repeat(i % 50 + 1).into_bytes();
    let mut readers = Vec::new();
    for i in 0..300 {
        fs.put(format!("f{i}").as_bytes(), 0, &content(i)).unwrap();
        if i % 3 == 0 {
            fs.append(format!("f{}", i / 2).as_bytes(), b"+").unwrap();
        }
        if i % 25 == 24 {
            fs.sync().unwrap();
            readers.push(Filesys::open(&base, &OpenOptions::read_only()).unwrap());
        }
        // Every reader, old or new, sees whole files with their true content as of some commit.
        // A stale reader gets NotFound for a file a later commit rewrote, refreshes and retries.
        for reader in &mut readers {
            let stats: Vec<_> = reader.iter().map(|s| s.unwrap()).collect();
            for stat in stats {
                let name = String::from_utf8(stat.name.clone()).unwrap();
                let n: usize = name[1..].parse().unwrap();
                let got = match reader.read_stat(&stat) {
                    Ok(bytes) => bytes,
                    Err(Error::NotFound(_)) => {
                        reader.refresh().unwrap();
                        reader.read(&stat.name).unwrap()
                    }
                    Err(e) => panic!("{name}: {e}"),
                };
                let base_content = content(n);
                assert!(got.starts_with(&base_content), "{name}");
                assert!(
                    got[base_content.len()..].iter().all(|b| *b == b'+'),
                    "{name}"
                );
            }
        }
    }
    let last = readers.last_mut().unwrap();
    last.refresh().unwrap();
    assert_eq!(last.iter().count(), 300);
}

#[test]
fn reindex_repairs_a_damaged_or_unreadable_index() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let mut fs = Filesys::create(&base, &FsOptions::default(), &OpenOptions::writer()).unwrap();
    for i in 0..40 {
        fs.put(
            format!("f{i}").as_bytes(),
            0,
            format!("content {i}").as_bytes(),
        )
        .unwrap();
    }
    fs.sync().unwrap();
    // A second commit, so that the last journal holds only this file's cell: a writer's open
    // replays that journal, and would otherwise put back every cell damaged below.
    fs.put(b"f40", 0, b"content 40").unwrap();
    fs.sync().unwrap();
    drop(fs);
    let idx = file_path(&base, "idx");
    // Damage every stored hash: the open's spot check refuses the index.
    let mut bytes = std::fs::read(&idx).unwrap();
    for cell in bytes[4096..].chunks_mut(16) {
        if cell[..8] != [0u8; 8] {
            cell[8] ^= 0xff;
        }
    }
    std::fs::write(&idx, &bytes).unwrap();
    assert!(Filesys::open(&base, &OpenOptions::writer())
        .unwrap_err()
        .is_corruption());
    let vfs = Arc::new(wink::vfs::RealFs);
    assert_eq!(
        Filesys::reindex_in(vfs.clone(), &base, &OpenOptions::writer()).unwrap(),
        41
    );
    assert_eq!(
        Filesys::open(&base, &OpenOptions::read_only())
            .unwrap()
            .read(b"f7")
            .unwrap(),
        b"content 7"
    );
    // An index that cannot even be opened is moved aside and rebuilt.
    std::fs::write(&idx, b"not a wink file at all").unwrap();
    assert_eq!(
        Filesys::reindex_in(vfs, &base, &OpenOptions::writer()).unwrap(),
        41
    );
    assert!(file_path(&base, "idx.broken").exists());
    let fs = Filesys::open(&base, &OpenOptions::read_only()).unwrap();
    assert_eq!(fs.read(b"f39").unwrap(), b"content 39");
    drop(fs);
    assert_clean(&base);
}

#[test]
fn a_survey_through_an_index_that_lost_a_cell_falls_back_to_a_walk() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let clock = ManualClock::new(1_700_000_000);
    let opts = FsOptions {
        ao: true,
        dups: true,
        isz: 88,
        htsize: 64,
        ..FsOptions::default()
    };
    let mut fs = Filesys::create(&base, &opts, &writer(&clock)).unwrap();
    for i in 0..20u32 {
        // Values of several pages, so a sparse walk has data entries to step over.
        fs.put(
            format!("f{i}").as_bytes(),
            0,
            &vec![i as u8; 9000 + i as usize],
        )
        .unwrap();
    }
    fs.put(b"f3", 0, b"rewritten").unwrap();
    fs.sync().unwrap();
    drop(fs);
    let fs = Filesys::open(&base, &OpenOptions::read_only()).unwrap();
    let walked: Vec<_> = fs.iter().map(|s| s.unwrap()).collect();
    assert_eq!(walked.len(), 20);
    assert_eq!(fs.files_by_index().unwrap().as_ref(), Some(&walked));
    drop(fs);

    // The index loses one file's cell: the files it still finds no longer account for every
    // live entry of the datafile, so it must not be trusted as the list of files.
    let mut idx = wink::format::hindex::HIndex::open_path(&file_path(&base, "idx"), true).unwrap();
    let (cell, _) = idx.used_cells().next().unwrap().unwrap();
    idx.delete_cell(cell).unwrap();
    idx.flush().unwrap();
    drop(idx);
    let fs = Filesys::open(&base, &OpenOptions::read_only()).unwrap();
    assert_eq!(fs.files_by_index().unwrap(), None);
    let sparse: Vec<_> = fs.iter_sparse().map(|s| s.unwrap()).collect();
    assert_eq!(sparse, walked, "the walk still finds every file");
}

/// A datafile written elsewhere can carry a header whose FILESIZE passes SYNCSIZE (appends made
/// visible with a flush, never synced). A writer's open drops that tail back to SYNCSIZE and says
/// so: the file, the offset range and how many entries went; the files before it stay.
#[test]
fn a_writers_open_drops_an_unsynced_tail_and_reports_range_and_entries() {
    use wink::format::kvseq::KvSeq;
    use wink::storage::FileStorage;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let clock = ManualClock::new(1_700_000_000);
    let mut fs = Filesys::create(&base, &FsOptions::default(), &writer(&clock)).unwrap();
    fs.put(b"kept", 0, b"synced content").unwrap();
    fs.sync().unwrap();
    drop(fs);
    let data = file_path(&base, "data");
    let (syncsize, filesize) = {
        let storage = FileStorage::open(&data, true).unwrap();
        let mut kv = KvSeq::open(Box::new(storage), true).unwrap();
        let syncsize = kv.filesize();
        for i in 0..3 {
            kv.append(format!("junk/{i}").as_bytes(), b"never synced")
                .unwrap();
        }
        kv.flush().unwrap();
        (syncsize, kv.filesize())
    };
    let fs = Filesys::open(&base, &writer(&clock)).unwrap();
    let expected = format!(
        "{}: dropped unsynced tail {syncsize}..{filesize}: 3 entries",
        data.display()
    );
    assert!(
        fs.recovery()
            .actions
            .iter()
            .any(|a| a.starts_with(&expected)),
        "expected {expected:?} in {:?}",
        fs.recovery()
    );
    assert_eq!(fs.data().filesize(), syncsize);
    assert_eq!(fs.read(b"kept").unwrap(), b"synced content");
    drop(fs);
    assert_clean(&base);
}

#[test]
fn a_bounded_read_refuses_a_file_over_its_limit_before_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let clock = ManualClock::new(1_700_000_000);
    let mut fs = Filesys::create(&base, &FsOptions::default(), &writer(&clock)).unwrap();
    fs.put(b"map", 0, &[7u8; 1000]).unwrap();
    let (stat, bytes) = fs.read_located_within(b"map", 1000).unwrap().unwrap();
    assert_eq!((stat.size, bytes.len()), (1000, 1000));
    let err = fs.read_located_within(b"map", 999).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("at most 999 bytes"), "{err}");
    assert!(fs.read_located_within(b"none", 1).unwrap().is_none());
}

/// A filesys whose commit's sync failed (as Linux's fdatasync after a writeback error: once,
/// the next one succeeding without the lost writes) is a failed writer: at each of the commit's
/// syncs in turn, every later write, commit and read refuses with `Error::WriterFailed`, closing
/// it writes nothing, and after a power cut the reopened filesys holds its last commit, whole.
#[test]
fn a_failed_sync_fails_the_writer_until_it_is_reopened() {
    use wink_harness::sim::CrashMode;
    let clock = ManualClock::new(1_700_000_000);
    let base = Path::new("/sim/fs");
    let fresh = sim_committed(&clock, base, &[(b"kept", &[7; 5000]), (b"moved", b"first")]);
    let open = |disk: &SimDisk| sim_writer(disk, base, &clock);
    let syncs = {
        let disk = fresh.fork();
        let mut fs = open(&disk);
        rewrite_and_add(&mut fs);
        let before = disk.syncs();
        fs.sync().unwrap();
        disk.syncs() - before
    };
    for n in 1..=syncs {
        let disk = fresh.fork();
        let mut fs = open(&disk);
        rewrite_and_add(&mut fs);
        disk.lose_writeback_at_sync(n);
        let e = fs.sync().unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "sync {n} of {syncs}: {e}");
        let failed = fs.failed().expect("failed").to_path_buf();
        let refused = [
            fs.put(b"other", 0, b"x").map(|_| ()),
            fs.delete(b"kept").map(|_| ()),
            fs.sync(),
            fs.read(b"kept").map(|_| ()),
            fs.stat(b"new").map(|_| ()),
        ];
        for (i, r) in refused.into_iter().enumerate() {
            let e = r.expect_err("a failed writer refuses");
            assert!(
                matches!(&e, Error::WriterFailed { path } if *path == failed),
                "sync {n} of {syncs}, call {i}: {e}"
            );
        }
        let writes = disk.writes();
        drop(fs);
        assert_eq!(disk.writes(), writes, "sync {n} of {syncs}: closing wrote");
        disk.crash(CrashMode::DropUnsynced);
        let fs = open(&disk);
        assert_eq!(fs.read(b"kept").unwrap(), [7; 5000]);
        assert_eq!(fs.read(b"moved").unwrap(), b"first", "sync {n} of {syncs}");
        assert!(fs.stat(b"new").unwrap().is_none(), "sync {n} of {syncs}");
        drop(fs);
        assert_clean_sim(&disk, base);
    }
}

/// A filesys at `base` on a fresh simulated disk that committed each of `files` in turn, closed.
fn sim_committed(clock: &ManualClock, base: &Path, files: &[(&[u8], &[u8])]) -> SimDisk {
    let disk = SimDisk::new();
    let vfs: Arc<dyn wink::vfs::Vfs> = Arc::new(disk.clone());
    let mut fs = Filesys::create_in(vfs, base, &FsOptions::default(), &writer(clock)).unwrap();
    for (name, bytes) in files {
        fs.put(name, 0, bytes).unwrap();
        fs.sync().unwrap();
    }
    disk
}

/// The writer of the filesys at `base` on `disk`.
fn sim_writer(disk: &SimDisk, base: &Path, clock: &ManualClock) -> Filesys {
    Filesys::open_in(Arc::new(disk.clone()), base, &writer(clock)).unwrap()
}

/// The change the fault tests cut: `moved` rewritten (its inode's update is an in-place write
/// the commit holds), `new` added.
fn rewrite_and_add(fs: &mut Filesys) {
    fs.put(b"moved", 0, b"second").unwrap();
    fs.put(b"new", 0, &[9; 3000]).unwrap();
}

/// `check_filesys` reads the real file system: the simulated one is checked through a reader.
fn assert_clean_sim(disk: &wink_harness::sim::SimDisk, base: &Path) {
    let fs = Filesys::open_in(Arc::new(disk.clone()), base, &OpenOptions::read_only()).unwrap();
    for f in fs.iter() {
        f.unwrap();
    }
}

/// A write that fails in a commit (EIO once, the disk going on): in the journal's writes, before
/// the barrier, the commit is simply made again by the same handle (only a failed sync fails a
/// writer); in the apply of the held writes after the barrier, the writer is failed. Either
/// way, after a power cut the filesys holds a whole commit, the last acknowledged one or later.
#[test]
fn a_failed_write_in_a_commit_fails_the_writer_only_after_its_barrier() {
    use wink_harness::sim::CrashMode;
    let clock = ManualClock::new(1_700_000_000);
    let base = Path::new("/sim/fs");
    let fresh = sim_committed(&clock, base, &[(b"moved", b"first")]);
    let open = |disk: &SimDisk| sim_writer(disk, base, &clock);
    let writes = {
        let disk = fresh.fork();
        let mut fs = open(&disk);
        rewrite_and_add(&mut fs);
        let before = disk.writes();
        fs.sync().unwrap();
        disk.writes() - before
    };
    let (mut again, mut failed, mut queued) = (0, 0, 0);
    for n in 1..=writes {
        let disk = fresh.fork();
        let mut fs = open(&disk);
        rewrite_and_add(&mut fs);
        let syncs = disk.syncs();
        disk.fail_write_once(n);
        let Err(e) = fs.sync() else {
            continue;
        };
        assert!(matches!(e, Error::Io { .. }), "write {n} of {writes}: {e}");
        let barrier_passed = disk.syncs() > syncs;
        let committed = match fs.failed() {
            None => {
                assert!(
                    !barrier_passed,
                    "write {n} of {writes}: failed after its barrier"
                );
                match fs.sync() {
                    Ok(()) => {
                        again += 1;
                        true
                    }
                    // A queued append that failed fails every later operation on its file,
                    // as before: what reached the file is unknown.
                    Err(e) if e.to_string().contains("an earlier background write failed") => {
                        queued += 1;
                        false
                    }
                    Err(e) => panic!("write {n} of {writes}: made again: {e}"),
                }
            }
            Some(_) => {
                assert!(
                    barrier_passed,
                    "write {n} of {writes}: failed before any sync"
                );
                failed += 1;
                let e = fs.put(b"other", 0, b"x").unwrap_err();
                assert!(matches!(e, Error::WriterFailed { .. }), "{e}");
                true
            }
        };
        disk.fail_after_writes(1);
        drop(fs);
        disk.crash(CrashMode::DropUnsynced);
        let fs = open(&disk);
        // The commit made again returned: it counts. The one whose apply failed had passed its
        // barrier: it counts too. One that never passed a barrier does not.
        let (moved, new) = match committed {
            true => (&b"second"[..], Some(vec![9; 3000])),
            false => (&b"first"[..], None),
        };
        assert_eq!(fs.read(b"moved").unwrap(), moved, "write {n} of {writes}");
        let got = fs.stat(b"new").unwrap().map(|_| fs.read(b"new").unwrap());
        assert_eq!(got, new, "write {n} of {writes}");
    }
    assert!(
        again > 0 && failed > 0,
        "{again} made again, {failed} failed, {queued} queued"
    );
}
