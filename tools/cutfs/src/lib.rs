//! cutfs: a FUSE filesystem for power-cut tests.
//!
//! It passes reads and writes through to a backing directory, except that nothing reaches the
//! backing directory before it is made durable the way a program must make it durable on a real
//! disk:
//!
//! - a file's bytes and length, by fsync or fdatasync of the file;
//! - a name (a creation, a rename, an unlink, a mkdir, an rmdir), by fsync of the directory
//!   that holds it; fsync of the file does not make its name durable ([`Names::Strict`], the
//!   default), or, as ext4 and XFS do, by the fsync of any file ([`Names::Journaled`]).
//!
//! A cut ([`Control::cut`], or `cut` on the control socket of `cutfs mount`) loses the rest, as a
//! power cut does: from that moment every request fails with EIO and nothing more is written, so
//! the backing directory is the durable state. The filesystem is then unmounted (after killing
//! the processes that use it) and mounted again, showing exactly that state. See README.md.
//!
//! [`Control::lose_writeback_at_fsync`] fails one fsync as Linux does after a writeback error:
//! once, with EIO, the file's unsynced bytes never becoming durable.

mod fuse;
mod state;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use state::{PAGE, SCRATCH};

/// What makes a name durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Names {
    /// Only an fsync of its directory, as POSIX promises: the rule Wink's stores follow.
    #[default]
    Strict,
    /// Also the fsync or fdatasync of any file, which commits every name operation made before
    /// it, as the metadata journals of ext4 (data=ordered) and XFS do. Programs that never
    /// fsync a directory rely on it (nats-server does, for the files of its store).
    Journaled,
}

/// A handle that can cut the power of one mount, from any thread.
#[derive(Clone, Debug)]
pub struct Control {
    state: Arc<Mutex<state::State>>,
}

impl Control {
    /// Cuts the power: everything not durable is lost, every later request fails with EIO.
    /// Returns after the last request that was being served has finished.
    pub fn cut(&self) {
        self.lock().cut = true;
    }

    /// Makes everything durable, as `sync(2)` would.
    pub fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        if st.cut {
            return Err(io::Error::other("the power was cut"));
        }
        st.sync_all().map_err(io::Error::from_raw_os_error)
    }

    /// The `n`-th fsync or fdatasync of a file from now (1-based) fails once with EIO, as Linux's
    /// after a writeback error: the file's bytes written since its last sync never become
    /// durable, reads see the durable bytes there, and later syncs succeed.
    pub fn lose_writeback_at_fsync(&self, n: u64) {
        let mut st = self.lock();
        st.lose_at = Some(st.fsyncs + n);
    }

    /// Files' fsyncs and fdatasyncs so far.
    pub fn fsyncs(&self) -> u64 {
        self.lock().fsyncs
    }

    /// Whether the power was cut.
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, state::State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn config() -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("cutfs".into()),
        fuser::MountOption::Subtype("cutfs".into()),
    ];
    config
}

fn open(backing: &Path, names: Names) -> io::Result<(fuse::CutFs, Control)> {
    let state = Arc::new(Mutex::new(state::State::open(backing, names)?));
    let control = Control {
        state: state.clone(),
    };
    Ok((fuse::CutFs { state }, control))
}

/// A mounted cutfs, served by a thread of this process; unmounted when dropped.
#[derive(Debug)]
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    control: Control,
    mountpoint: PathBuf,
}

/// Mounts the durable state in `backing` (a directory) at `mountpoint` (an existing directory),
/// served by a thread of this process. Needs /dev/fuse and `fusermount3`.
pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<Mount> {
    mount_with(backing, mountpoint, Names::Strict)
}

/// [`mount`] with the given rule for names.
pub fn mount_with(backing: &Path, mountpoint: &Path, names: Names) -> io::Result<Mount> {
    let (fs, control) = open(backing, names)?;
    let session = fuser::spawn_mount(fs, mountpoint, &config())?;
    Ok(Mount {
        session: Some(session),
        control,
        mountpoint: mountpoint.to_path_buf(),
    })
}

impl Mount {
    /// The handle that cuts this mount's power.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts: without a cut first this is a clean unmount, which makes everything durable.
    /// The processes using the mount must have exited (a cut mount is unmounted lazily, but this
    /// waits for the serving thread, which ends when the last user is gone).
    pub fn unmount(mut self) -> io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let synced = if self.control.is_cut() {
            Ok(())
        } else {
            let synced = self.control.sync();
            self.control.cut();
            synced
        };
        session.umount_and_join()?;
        synced
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Serves a mount in the foreground until it is unmounted (`fusermount3 -u MOUNTPOINT`, or
/// `unmount` on the control socket), answering commands on the unix socket `control`: one line
/// each, `cut`, `sync` or `unmount`, answered `ok` or `error: WHY`.
pub fn serve(backing: &Path, mountpoint: &Path, control: &Path, names: Names) -> io::Result<()> {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;

    let (fs, handle) = open(backing, names)?;
    let _ = std::fs::remove_file(control);
    let listener = UnixListener::bind(control)?;
    let mut session = fuser::Session::new(fs, mountpoint, &config())?;
    let mut unmounter = session.unmount_callable();
    // The answer to `unmount` is written after the unmount, which ends `session.run`: the
    // process must not exit before the answer is out, or the client reads an empty line.
    let (answered, unmount_answered) = std::sync::mpsc::channel::<()>();
    let unmount_asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asked = unmount_asked.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let Ok(reader) = conn.try_clone() else {
                continue;
            };
            let mut out = conn;
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                let answer = match line.trim() {
                    "cut" => {
                        handle.cut();
                        Ok(())
                    }
                    "sync" => handle.sync(),
                    "unmount" => {
                        asked.store(true, std::sync::atomic::Ordering::SeqCst);
                        let synced = if handle.is_cut() {
                            Ok(())
                        } else {
                            let s = handle.sync();
                            handle.cut();
                            s
                        };
                        synced.and_then(|()| unmounter.unmount())
                    }
                    other => Err(io::Error::other(format!("unknown command {other:?}"))),
                };
                let reply = match answer {
                    Ok(()) => "ok\n".to_string(),
                    Err(e) => format!("error: {e}\n"),
                };
                let written = out.write_all(reply.as_bytes());
                if line.trim() == "unmount" {
                    let _ = answered.send(());
                }
                if written.is_err() {
                    break;
                }
            }
        }
    });
    let served = session.run();
    if unmount_asked.load(std::sync::atomic::Ordering::SeqCst) {
        // Bounded: a client that never reads does not hold the process forever.
        let _ = unmount_answered.recv_timeout(std::time::Duration::from_secs(5));
    }
    served
}

/// Sends one command to the control socket of `cutfs mount`, returning the answer line.
pub fn command(control: &Path, command: &str) -> io::Result<String> {
    use std::io::{BufRead, BufReader, Write};
    let mut conn = std::os::unix::net::UnixStream::connect(control)?;
    conn.write_all(format!("{command}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    let line = line.trim_end().to_string();
    match line.strip_prefix("error: ") {
        Some(why) => Err(io::Error::other(why.to_string())),
        None if line == "ok" => Ok(line),
        None => Err(io::Error::other(format!("unexpected answer {line:?}"))),
    }
}
