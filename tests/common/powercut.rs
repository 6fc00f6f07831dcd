//! Power cuts for tests: cutfs (tools/cutfs) mounted over a backing directory, served by a thread
//! of the test process. Whatever was not fsynced (bytes and lengths: fsync or fdatasync of the
//! file; names: fsync of their directory) is lost at [`PowerCut::cut`], which also SIGKILLs
//! every process using the mount; [`PowerCut::remount`] then shows exactly the durable state.
//!
//! ```ignore
//! if !powercut::available("my power-cut test") { return; }
//! let mut pc = PowerCut::new(&tmp.path().join("backing"), &tmp.path().join("mnt"));
//! // ... start processes that work under pc.path() ...
//! pc.cut();      // the power goes: processes killed, unsynced state lost
//! pc.remount();  // the machine is back: the durable state only
//! ```
//!
//! A test mounts one per store directory or data root (a NATS server's store dir, each node's
//! root); dropping it cuts (so no process is left blocked on it) and unmounts.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::require;

/// Whether this machine can mount cutfs (/dev/fuse and fusermount3). When it cannot, the test
/// `what` is skipped loudly outside CI and fails in CI (see require.rs).
pub fn available(what: &str) -> bool {
    if !Path::new("/dev/fuse").exists() {
        require::skip(what, "/dev/fuse is absent (cutfs needs FUSE)");
        return false;
    }
    require::tool("fusermount3", "-V", what)
}

/// A cutfs mount.
pub struct PowerCut {
    backing: PathBuf,
    mountpoint: PathBuf,
    mount: Option<cutfs::Mount>,
    names: cutfs::Names,
}

impl PowerCut {
    /// Mounts cutfs at `mountpoint` over `backing` (both created when missing; `backing` is the
    /// durable state, and is the starting state when it holds anything).
    pub fn new(backing: &Path, mountpoint: &Path) -> PowerCut {
        PowerCut::with_names(backing, mountpoint, cutfs::Names::Strict)
    }

    /// [`PowerCut::new`] with the given rule for what makes a name durable.
    pub fn with_names(backing: &Path, mountpoint: &Path, names: cutfs::Names) -> PowerCut {
        fs::create_dir_all(backing).unwrap();
        fs::create_dir_all(mountpoint).unwrap();
        // Canonical, as /proc shows the paths of the processes to kill.
        let mut pc = PowerCut {
            backing: fs::canonicalize(backing).unwrap(),
            mountpoint: fs::canonicalize(mountpoint).unwrap(),
            mount: None,
            names,
        };
        pc.mount();
        pc
    }

    fn mount(&mut self) {
        let m =
            cutfs::mount_with(&self.backing, &self.mountpoint, self.names).unwrap_or_else(|e| {
                panic!(
                    "mounting cutfs at {} over {}: {e}",
                    self.mountpoint.display(),
                    self.backing.display()
                )
            });
        self.mount = Some(m);
    }

    /// Where the filesystem is mounted: the directory the code under test works in.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The mount's control (`None` while it is unmounted): faults besides the cut.
    pub fn control(&self) -> Option<cutfs::Control> {
        self.mount.as_ref().map(|m| m.control())
    }

    /// The backing directory: the durable state (plus cutfs's scratch area `.cutfs`).
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// Cuts the power: from this instant nothing more becomes durable and every operation on
    /// the mount fails with EIO; then every other process using the mount is SIGKILLed. Returns
    /// their pids (a test reaps its own children with `Child::wait`). The mount stays, dead,
    /// until [`PowerCut::remount`].
    pub fn cut(&mut self) -> Vec<i32> {
        if let Some(m) = &self.mount {
            m.control().cut();
        }
        kill_users(&self.mountpoint)
    }

    /// Cuts the power of every mount at the same instant, then SIGKILLs the processes using
    /// any of them: a power cut of a whole machine (or of several, each under its mounts).
    pub fn cut_all(mounts: &mut [PowerCut]) -> Vec<i32> {
        for m in mounts.iter() {
            if let Some(mount) = &m.mount {
                mount.control().cut();
            }
        }
        let mut killed = Vec::new();
        for m in mounts.iter() {
            killed.extend(kill_users(&m.mountpoint));
        }
        killed
    }

    /// Unmounts a cut mount (cutting first if [`PowerCut::cut`] was not called) and mounts the
    /// durable state again.
    pub fn remount(&mut self) {
        self.cut();
        if let Some(m) = self.mount.take() {
            m.unmount().unwrap();
        }
        self.mount();
    }

    /// A clean unmount (everything made durable first, as a real unmount writes everything
    /// back). The processes using the mount must be gone.
    pub fn unmount(mut self) {
        if let Some(m) = self.mount.take() {
            m.unmount().unwrap();
        }
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        if self.mount.is_some() {
            // A failed test may leave processes on the mount: kill them, or unmounting waits.
            self.cut();
            if let Some(m) = self.mount.take() {
                let _ = m.unmount();
            }
        }
    }
}

/// SIGKILLs every process but this one that has a file, its working directory or a mapping
/// under `dir`, until none is left; returns their pids.
pub fn kill_users(dir: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let users: Vec<i32> = pids()
            .into_iter()
            .filter(|p| *p != me && uses(*p, dir))
            .collect();
        if users.is_empty() {
            return killed;
        }
        assert!(
            Instant::now() < deadline,
            "processes {users:?} survive SIGKILL on {dir:?}"
        );
        for pid in users {
            // SAFETY: kill(2) with a pid read from /proc and a signal number.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            if !killed.contains(&pid) {
                killed.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pids() -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn uses(pid: i32, dir: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    // A zombie holds nothing; only its parent's wait remains.
    if let Ok(stat) = fs::read_to_string(proc.join("stat")) {
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'))
        {
            return false;
        }
    }
    let under = |p: &Path| p.starts_with(dir);
    if fs::read_link(proc.join("cwd")).is_ok_and(|p| under(&p)) {
        return true;
    }
    if let Ok(fds) = fs::read_dir(proc.join("fd")) {
        for fd in fds.flatten() {
            if fs::read_link(fd.path()).is_ok_and(|p| under(&p)) {
                return true;
            }
        }
    }
    let prefix = dir.to_string_lossy().into_owned();
    fs::read_to_string(proc.join("maps")).is_ok_and(|maps| {
        maps.lines().any(|l| {
            l.split_whitespace()
                .nth(5)
                .is_some_and(|p| Path::new(p).starts_with(&prefix))
        })
    })
}

/// SplitMix64: the test's only randomness, from a seed it prints.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed of a power-cut test: `WINK_POWERCUT_SEED` when set (to repeat a run), else the clock.
/// Printed, so that a failure can be repeated.
pub fn seed(what: &str) -> u64 {
    let seed = std::env::var("WINK_POWERCUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("{what}: power-cut seed {seed} (WINK_POWERCUT_SEED={seed} repeats the choices)");
    seed
}
