//! cutfs through the kernel: a mount served by this process, driven with ordinary system calls,
//! cut, and mounted again; each test checks what survived against the durability rule.

#[allow(dead_code)]
#[path = "../../../tests/common/require.rs"]
mod require;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

struct Fixture {
    dir: TempDir,
    mount: Option<cutfs::Mount>,
    names: cutfs::Names,
}

impl Fixture {
    /// A fresh mount, or `None` (after saying so) where FUSE is not available outside CI.
    fn new(what: &str) -> Option<Fixture> {
        Fixture::with_names(what, cutfs::Names::Strict)
    }

    /// [`Fixture::new`] under the given rule for names.
    fn with_names(what: &str, names: cutfs::Names) -> Option<Fixture> {
        if !Path::new("/dev/fuse").exists() {
            require::skip(what, "/dev/fuse is absent");
            return None;
        }
        if !require::tool("fusermount3", "-V", what) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("backing")).unwrap();
        fs::create_dir(dir.path().join("mnt")).unwrap();
        let mut f = Fixture {
            dir,
            mount: None,
            names,
        };
        f.mount();
        Some(f)
    }

    fn mount(&mut self) {
        let m = cutfs::mount_with(
            &self.dir.path().join("backing"),
            &self.dir.path().join("mnt"),
            self.names,
        )
        .expect("mount cutfs");
        self.mount = Some(m);
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join("mnt").join(rel)
    }

    fn backing(&self, rel: &str) -> PathBuf {
        self.dir.path().join("backing").join(rel)
    }

    /// Cuts the power, unmounts and mounts again (no process of the test holds a file open).
    fn cut(&mut self) {
        let m = self.mount.take().unwrap();
        m.control().cut();
        settle();
        m.unmount().unwrap();
        self.mount();
    }

    /// A clean unmount and mount.
    fn remount(&mut self) {
        settle();
        self.mount.take().unwrap().unmount().unwrap();
        self.mount();
    }
}

fn sync_dir(path: &Path) {
    File::open(path).unwrap().sync_all().unwrap();
}

fn rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn unsynced_bytes_vanish_and_synced_bytes_stay() {
    let Some(mut fx) = Fixture::new("cutfs: unsynced bytes") else {
        return;
    };
    let f = rw(&fx.p("data"));
    f.write_all_at(&[b'a'; 10_000], 0).unwrap();
    f.sync_data().unwrap();
    sync_dir(&fx.p(""));
    // Overwrite inside the synced part, across a page boundary, and grow.
    f.write_all_at(&[b'b'; 300], 4000).unwrap();
    f.write_all_at(b"tail", 10_000).unwrap();
    // Reads before the cut see the writes.
    let mut want = vec![b'a'; 10_000];
    want[4000..4300].fill(b'b');
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(fx.p("data")).unwrap(), want);
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, 4296).unwrap();
    assert_eq!(&buf, b"bbbbaaaa");
    // Nothing of it reached the backing file.
    assert_eq!(fs::read(fx.backing("data")).unwrap(), vec![b'a'; 10_000]);
    drop(f);
    fx.cut();
    assert_eq!(fs::read(fx.p("data")).unwrap(), vec![b'a'; 10_000]);

    // Now synced with fdatasync: it stays.
    let f = rw(&fx.p("data"));
    f.write_all_at(&[b'c'; 5000], 8000).unwrap();
    f.sync_data().unwrap();
    drop(f);
    fx.cut();
    let mut want = vec![b'a'; 8000];
    want.extend_from_slice(&[b'c'; 5000]);
    assert_eq!(fs::read(fx.p("data")).unwrap(), want);
}

/// A lost writeback: the armed fsync fails once with EIO and the file's unsynced bytes never
/// become durable (nor are read: evicted); the next fsync succeeds with only what was written
/// since.
#[test]
fn a_lost_writeback_fails_one_fsync_and_its_bytes_never_reach_the_disk() {
    let Some(mut fx) = Fixture::new("cutfs: a lost writeback") else {
        return;
    };
    let f = rw(&fx.p("data"));
    f.write_all_at(&[b'a'; 5000], 0).unwrap();
    f.sync_data().unwrap();
    sync_dir(&fx.p(""));
    let control = fx.mount.as_ref().unwrap().control();
    f.write_all_at(&[b'b'; 100], 0).unwrap();
    let before = control.fsyncs();
    control.lose_writeback_at_fsync(1);
    let err = f.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(control.fsyncs(), before + 1);
    f.write_all_at(&[b'c'; 100], 4900).unwrap();
    f.sync_data().unwrap();
    drop(f);
    fx.cut();
    let mut want = vec![b'a'; 4900];
    want.extend_from_slice(&[b'c'; 100]);
    assert_eq!(fs::read(fx.p("data")).unwrap(), want);
}

#[test]
fn length_changes_are_cut_too() {
    let Some(mut fx) = Fixture::new("cutfs: length changes") else {
        return;
    };
    let f = rw(&fx.p("f"));
    f.write_all_at(&[7u8; 6000], 0).unwrap();
    f.sync_all().unwrap();
    sync_dir(&fx.p(""));
    // Growth by set_len and by fallocate, unsynced.
    f.set_len(20_000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 20_000);
    // SAFETY: fallocate on an open descriptor with plain integers.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 50_000) };
    assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    assert_eq!(f.metadata().unwrap().len(), 50_000);
    drop(f);
    fx.cut();
    assert_eq!(fs::metadata(fx.p("f")).unwrap().len(), 6000);

    // A truncation, then growth past the old end: the cut restores the old bytes, and before
    // the cut the regrown part reads as zeros.
    let f = rw(&fx.p("f"));
    f.set_len(100).unwrap();
    f.set_len(9000).unwrap();
    let got = fs::read(fx.p("f")).unwrap();
    assert_eq!(&got[..100], &[7u8; 100][..]);
    assert!(
        got[100..].iter().all(|b| *b == 0),
        "regrown bytes read as zeros"
    );
    drop(f);
    fx.cut();
    assert_eq!(fs::read(fx.p("f")).unwrap(), vec![7u8; 6000]);

    // A synced truncation stays.
    let f = rw(&fx.p("f"));
    f.set_len(10).unwrap();
    f.write_all_at(b"xy", 10).unwrap();
    f.sync_data().unwrap();
    drop(f);
    fx.cut();
    let mut want = vec![7u8; 10];
    want.extend_from_slice(b"xy");
    assert_eq!(fs::read(fx.p("f")).unwrap(), want);
}

#[test]
fn names_need_a_directory_fsync() {
    let Some(mut fx) = Fixture::new("cutfs: names") else {
        return;
    };
    // Created and its bytes fsynced, but the directory not: the rule says the name is lost.
    let f = rw(&fx.p("new"));
    f.write_all_at(b"bytes", 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(names(&fx.p("")), ["new"]);
    fx.cut();
    assert!(names(&fx.p("")).is_empty());

    // With the directory fsynced it stays.
    let f = rw(&fx.p("new"));
    f.write_all_at(b"bytes", 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    sync_dir(&fx.p(""));
    fx.cut();
    assert_eq!(fs::read(fx.p("new")).unwrap(), b"bytes");

    // A rename over an existing name without the directory's fsync is undone: the old file
    // is back under its name, and the renamed one under its old name.
    let f = rw(&fx.p("tmp"));
    f.write_all_at(b"replacement", 0).unwrap();
    f.sync_all().unwrap();
    sync_dir(&fx.p(""));
    drop(f);
    fs::rename(fx.p("tmp"), fx.p("new")).unwrap();
    assert_eq!(fs::read(fx.p("new")).unwrap(), b"replacement");
    fx.cut();
    assert_eq!(names(&fx.p("")), ["new", "tmp"]);
    assert_eq!(fs::read(fx.p("new")).unwrap(), b"bytes");

    // With it, the rename is durable.
    fs::rename(fx.p("tmp"), fx.p("new")).unwrap();
    sync_dir(&fx.p(""));
    fx.cut();
    assert_eq!(names(&fx.p("")), ["new"]);
    assert_eq!(fs::read(fx.p("new")).unwrap(), b"replacement");

    // An unlink without the directory's fsync is undone; with it, it is not.
    fs::remove_file(fx.p("new")).unwrap();
    fx.cut();
    assert_eq!(fs::read(fx.p("new")).unwrap(), b"replacement");
    fs::remove_file(fx.p("new")).unwrap();
    sync_dir(&fx.p(""));
    fx.cut();
    assert!(names(&fx.p("")).is_empty());
}

#[test]
fn journaled_names_are_committed_by_any_fsync() {
    let what = "cutfs: journaled names";
    let Some(mut fx) = Fixture::with_names(what, cutfs::Names::Journaled) else {
        return;
    };
    // A new directory and a new file in it, only the file fsynced: both names stay, as an
    // ext4 journal commit keeps them.
    fs::create_dir(fx.p("d")).unwrap();
    let f = rw(&fx.p("d/new"));
    f.write_all_at(b"bytes", 0).unwrap();
    f.sync_data().unwrap();
    drop(f);
    // A name operation after the last fsync is not committed.
    fs::write(fx.p("later"), b"unsynced").unwrap();
    fx.cut();
    assert_eq!(names(&fx.p("")), ["d"]);
    assert_eq!(fs::read(fx.p("d/new")).unwrap(), b"bytes");

    // Another file's fsync commits a rename and an unlink made before it; bytes stay the
    // business of their own file's fsync.
    let g = rw(&fx.p("g"));
    g.write_all_at(b"g", 0).unwrap();
    fs::rename(fx.p("d/new"), fx.p("moved")).unwrap();
    fs::remove_dir(fx.p("d")).unwrap();
    let h = rw(&fx.p("h"));
    h.write_all_at(b"h", 0).unwrap();
    h.sync_all().unwrap();
    drop((g, h));
    fx.cut();
    assert_eq!(names(&fx.p("")), ["g", "h", "moved"]);
    assert_eq!(fs::read(fx.p("moved")).unwrap(), b"bytes");
    assert_eq!(fs::read(fx.p("g")).unwrap(), b"");
    assert_eq!(fs::read(fx.p("h")).unwrap(), b"h");
}

#[test]
fn directories_follow_the_same_rule() {
    let Some(mut fx) = Fixture::new("cutfs: directories") else {
        return;
    };
    fs::create_dir_all(fx.p("a/b")).unwrap();
    fs::write(fx.p("a/b/f"), b"one").unwrap();
    File::open(fx.p("a/b/f")).unwrap().sync_all().unwrap();
    // Only the innermost directory is fsynced: nothing is reachable after the cut.
    sync_dir(&fx.p("a/b"));
    fx.cut();
    assert!(names(&fx.p("")).is_empty());

    // Made durable bottom-up.
    fs::create_dir_all(fx.p("a/b")).unwrap();
    fs::write(fx.p("a/b/f"), b"one").unwrap();
    File::open(fx.p("a/b/f")).unwrap().sync_all().unwrap();
    sync_dir(&fx.p("a/b"));
    sync_dir(&fx.p("a"));
    sync_dir(&fx.p(""));
    fx.cut();
    assert_eq!(fs::read(fx.p("a/b/f")).unwrap(), b"one");

    // A directory moved to another parent: durable where the fsynced parent says.
    fs::create_dir(fx.p("c")).unwrap();
    sync_dir(&fx.p(""));
    fs::rename(fx.p("a/b"), fx.p("c/b")).unwrap();
    fx.cut();
    assert_eq!(fs::read(fx.p("a/b/f")).unwrap(), b"one");
    assert!(names(&fx.p("c")).is_empty());
    fs::rename(fx.p("a/b"), fx.p("c/b")).unwrap();
    sync_dir(&fx.p("c"));
    fx.cut();
    assert_eq!(fs::read(fx.p("c/b/f")).unwrap(), b"one");
    assert!(names(&fx.p("a")).is_empty());

    // rmdir of a durable tree's leaf, then of its parent, made durable by the grandparent.
    fs::remove_file(fx.p("c/b/f")).unwrap();
    fs::remove_dir(fx.p("c/b")).unwrap();
    fs::remove_dir(fx.p("c")).unwrap();
    assert_eq!(names(&fx.p("")), ["a"]);
    fx.cut();
    assert_eq!(names(&fx.p("")), ["a", "c"]);
    fs::remove_dir_all(fx.p("c")).unwrap();
    sync_dir(&fx.p(""));
    fx.cut();
    assert_eq!(names(&fx.p("")), ["a"]);
    // The backing directory holds the durable tree and the (wiped) scratch area only.
    assert_eq!(names(&fx.backing("")), [cutfs::SCRATCH, "a"]);
}

#[test]
fn a_clean_unmount_keeps_everything() {
    let Some(mut fx) = Fixture::new("cutfs: clean unmount") else {
        return;
    };
    fs::create_dir(fx.p("d")).unwrap();
    fs::write(fx.p("d/f"), b"kept").unwrap();
    fs::write(fx.p("g"), b"also").unwrap();
    fx.remount();
    assert_eq!(fs::read(fx.p("d/f")).unwrap(), b"kept");
    assert_eq!(fs::read(fx.p("g")).unwrap(), b"also");
}

#[test]
fn after_a_cut_everything_fails() {
    let Some(mut fx) = Fixture::new("cutfs: after a cut") else {
        return;
    };
    let f = rw(&fx.p("f"));
    fx.mount.as_ref().unwrap().control().cut();
    let err = f.write_all_at(b"x", 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::EIO));
    drop(f);
    fx.cut();
    assert!(names(&fx.p("")).is_empty());
}

#[test]
fn flock_and_mmap_work_through_the_mount() {
    let Some(fx) = Fixture::new("cutfs: flock and mmap") else {
        return;
    };
    fs::write(fx.p("lock"), b"0123456789").unwrap();
    let a = File::open(fx.p("lock")).unwrap();
    let b = File::open(fx.p("lock")).unwrap();
    // SAFETY: flock on open descriptors.
    unsafe {
        assert_eq!(libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB), 0);
        assert_eq!(
            libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB),
            -1
        );
    }
    assert_eq!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EWOULDBLOCK)
    );
    drop(a);
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );

    // A read-only shared mapping sees the (unsynced) bytes.
    // SAFETY: a private read-only mapping of 10 bytes of an open file, read then unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            10,
            libc::PROT_READ,
            libc::MAP_SHARED,
            b.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        let bytes = std::slice::from_raw_parts(p as *const u8, 10);
        assert_eq!(bytes, b"0123456789");
        libc::munmap(p, 10);
    }
}

#[test]
fn the_binary_serves_a_control_socket() {
    let Some(fx) = Fixture::new("cutfs: the binary") else {
        return;
    };
    // Its own mount beside the fixture's.
    let root = fx.dir.path();
    fs::create_dir(root.join("b2")).unwrap();
    fs::create_dir(root.join("m2")).unwrap();
    let ctl = root.join("ctl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cutfs"))
        .arg("mount")
        .arg(root.join("b2"))
        .arg(root.join("m2"))
        .arg("--control")
        .arg(&ctl)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !is_mounted(&root.join("m2")) {
        assert!(std::time::Instant::now() < deadline, "cutfs did not mount");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut f = File::create(root.join("m2/f")).unwrap();
    f.write_all(b"unsynced").unwrap();
    drop(f);
    cutfs::command(&ctl, "cut").unwrap();
    assert!(fs::read(root.join("m2/f")).is_err());
    cutfs::command(&ctl, "unmount").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(names(&root.join("b2")), [cutfs::SCRATCH]);
    assert!(cutfs::command(&ctl, "bogus").is_err());
}

fn is_mounted(path: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let want = path.to_str().unwrap();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want))
}

/// SplitMix64, seeded per run and printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// Random operations through the kernel against a model of the rule: a file's content is
/// durable as of its last fsync, a directory's entries as of its last fsync. Before each cut the
/// mount must show the model's current state, after it the model's durable state.
#[test]
fn random_operations_match_the_model() {
    use std::collections::BTreeMap;
    let Some(mut fx) = Fixture::new("cutfs: random operations") else {
        return;
    };
    // CUTFS_SEED replays a failing run's seed.
    let seed = std::env::var("CUTFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("seed {seed}");
    let mut rng = Rng(seed);
    const DIRS: [&str; 2] = ["", "d"];
    fs::create_dir(fx.p("d")).unwrap();
    sync_dir(&fx.p(""));
    // Per file id: (current, durable) content; per directory: current and durable entries.
    let mut files: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut now: Vec<BTreeMap<String, usize>> = vec![BTreeMap::new(); 2];
    let mut durable = now.clone();
    let path = |fx: &Fixture, d: usize, name: &str| fx.p(DIRS[d]).join(name);
    for _round in 0..15 {
        for _ in 0..80 {
            let d = rng.below(2) as usize;
            let name = format!("f{}", rng.below(4));
            let exists = now[d].get(&name).copied();
            match (rng.below(8), exists) {
                (0, None) => {
                    File::create(path(&fx, d, &name)).unwrap();
                    files.push((Vec::new(), Vec::new()));
                    now[d].insert(name, files.len() - 1);
                }
                (1 | 2, Some(id)) => {
                    let off = rng.below(12_000) as usize;
                    let len = 1 + rng.below(6000) as usize;
                    let byte = rng.below(256) as u8;
                    rw(&path(&fx, d, &name))
                        .write_all_at(&vec![byte; len], off as u64)
                        .unwrap();
                    let c = &mut files[id].0;
                    if c.len() < off + len {
                        c.resize(off + len, 0);
                    }
                    c[off..off + len].fill(byte);
                }
                (3, Some(id)) => {
                    let len = rng.below(15_000) as usize;
                    rw(&path(&fx, d, &name)).set_len(len as u64).unwrap();
                    files[id].0.resize(len, 0);
                }
                (4, Some(id)) => {
                    rw(&path(&fx, d, &name)).sync_data().unwrap();
                    files[id].1 = files[id].0.clone();
                }
                (5, Some(id)) => {
                    let d2 = rng.below(2) as usize;
                    let name2 = format!("f{}", rng.below(4));
                    fs::rename(path(&fx, d, &name), path(&fx, d2, &name2)).unwrap();
                    // A cut can leave one file under two durable names (a rename, then both
                    // directories fsynced); a rename between two names of one file does
                    // nothing (rename(2)), and both names stay.
                    if now[d2].get(&name2) != Some(&id) {
                        now[d].remove(&name);
                        now[d2].insert(name2, id);
                    }
                }
                (6, Some(_)) => {
                    fs::remove_file(path(&fx, d, &name)).unwrap();
                    now[d].remove(&name);
                }
                (7, _) => {
                    sync_dir(&fx.p(DIRS[d]));
                    durable[d] = now[d].clone();
                }
                _ => {}
            }
        }
        let show = |fx: &Fixture, entries: &[BTreeMap<String, usize>], durable: bool| {
            for (d, map) in entries.iter().enumerate() {
                let mut want: Vec<String> = map.keys().cloned().collect();
                if d == 0 {
                    want.push("d".into());
                    want.sort();
                }
                assert_eq!(names(&fx.p(DIRS[d])), want, "seed {seed}: dir {d}");
                for (name, id) in map {
                    let c = if durable {
                        &files[*id].1
                    } else {
                        &files[*id].0
                    };
                    let got = fs::read(path(fx, d, name)).unwrap();
                    let first = got.iter().zip(c.iter()).position(|(a, b)| a != b);
                    assert!(
                        got == *c,
                        "seed {seed}: {}/{name}, durable {durable}: {} bytes, {} wanted, first \
                         difference at {first:?}",
                        DIRS[d],
                        got.len(),
                        c.len()
                    );
                }
            }
        };
        show(&fx, &now, false);
        fx.cut();
        show(&fx, &durable, true);
        // What survived is what there is now.
        now = durable.clone();
        for f in &mut files {
            f.0 = f.1.clone();
        }
    }
}

/// Lets the kernel finish releasing the files the test just closed: an unmount right after the
/// last close was refused once as busy (EBUSY) on a loaded machine.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(200));
}
