//! The "old way": one file per render in a 256×256 directory tree.
//!
//! A render lives in `XX/YY/H` where H is the hex MD5 of (domain, title, revision, tid) and XX, YY
//! its first two bytes. Each title has a pointer file `XX/YY/G.latest` (G = MD5 of (domain,
//! title)) holding the revision and tid of its latest render (24 bytes). A put writes the render
//! file (create, write, close), reads the title's pointer and, when the new render takes
//! precedence (revision, then tid — never write order), replaces it atomically (write a temporary
//! file, rename). A commit is one `syncfs(2)`: the only affordable barrier for thousands of new
//! files and directory entries (an fsync per file and per directory costs a journal commit each);
//! on a shared machine it also flushes other writers' dirty data on the same file system.
//!
//! Reads: `get_render` opens the render's file and preads it (into a 4096-aligned buffer, see
//! docs/PERFORMANCE.md § Machine, ceilings and cold reads); `get_latest` reads the pointer file
//! first. The 65,536 directories are made at create time, outside the timed load.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};
use uuid::Uuid;
use wink::store::key::cmp_tid;

use crate::contender::{Contender, Files, Res, Seen};
use crate::workload::PutBuf;

const LATEST: &str = ".latest";
const FANOUT: usize = 256;

pub struct Tree {
    root: PathBuf,
    buf: RefCell<Vec<u8>>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `root/XX/YY/<hex digest><suffix>`.
fn path_of(root: &Path, digest: &[u8], suffix: &str) -> PathBuf {
    let mut name = String::with_capacity(40);
    for b in digest {
        name.push(HEX[(b >> 4) as usize] as char);
        name.push(HEX[(b & 15) as usize] as char);
    }
    name.push_str(suffix);
    root.join(&name[0..2]).join(&name[2..4]).join(name)
}

fn render_path(root: &Path, domain: &str, title: &str, rev: u64, tid: Uuid) -> PathBuf {
    let mut h = Md5::new();
    h.update(domain.as_bytes());
    h.update([0]);
    h.update(title.as_bytes());
    h.update([0]);
    h.update(rev.to_be_bytes());
    h.update(tid.as_bytes());
    path_of(root, &h.finalize(), "")
}

fn latest_path(root: &Path, domain: &str, title: &str) -> PathBuf {
    let mut h = Md5::new();
    h.update(domain.as_bytes());
    h.update([0]);
    h.update(title.as_bytes());
    path_of(root, &h.finalize(), LATEST)
}

/// The pointer file's (revision, tid), or None when the title has none yet.
fn read_latest(path: &Path) -> Res<Option<(u64, Uuid)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut b = [0u8; 24];
    file.read_exact_at(&mut b, 0)?;
    let rev = u64::from_be_bytes(b[..8].try_into()?);
    Ok(Some((rev, Uuid::from_bytes(b[8..].try_into()?))))
}

/// A slice of `buf` of `len` bytes starting at a 4096-aligned address.
fn aligned(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len + 4096 {
        buf.resize(len + 4096, 0);
    }
    let skip = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    &mut buf[skip..skip + len]
}

impl Tree {
    fn read_file(&self, path: &Path, rev: u64, tid: Uuid, seen: Seen<'_>) -> Res<bool> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let len = usize::try_from(file.metadata()?.len())?;
        let mut buf = self.buf.borrow_mut();
        let out = aligned(&mut buf, len);
        file.read_exact_at(out, 0)?;
        seen(rev, tid, out);
        Ok(true)
    }

    fn update_latest(&self, b: &PutBuf) -> Res<()> {
        let path = latest_path(&self.root, b.domain, &b.title);
        if let Some((rev, tid)) = read_latest(&path)? {
            if rev.cmp(&b.rev).then_with(|| cmp_tid(tid, b.tid)) != Ordering::Less {
                return Ok(());
            }
        }
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&b.rev.to_be_bytes());
        bytes[8..].copy_from_slice(b.tid.as_bytes());
        let tmp = path.with_extension("tmp");
        File::create(&tmp)?.write_all(&bytes)?;
        fs::rename(&tmp, &path)?;
        Ok(())
    }
}

impl Contender for Tree {
    fn create(dir: &Path) -> Res<Self> {
        for a in 0..FANOUT {
            for b in 0..FANOUT {
                fs::create_dir_all(dir.join(format!("{a:02x}/{b:02x}")))?;
            }
        }
        Tree::open(dir)
    }

    fn open(dir: &Path) -> Res<Self> {
        Ok(Tree {
            root: dir.to_path_buf(),
            buf: RefCell::new(Vec::new()),
        })
    }

    fn write_batch(&mut self, n: u64, fill: &mut dyn FnMut(u64, &mut PutBuf)) -> Res<()> {
        let mut buf = PutBuf::default();
        for i in 0..n {
            fill(i, &mut buf);
            let path = render_path(&self.root, buf.domain, &buf.title, buf.rev, buf.tid);
            File::create(&path)?.write_all(&buf.value)?;
            self.update_latest(&buf)?;
        }
        let root = File::open(&self.root)?;
        // SAFETY: syncfs on a file descriptor we own and keep open for the call.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    fn get_latest(&self, domain: &str, title: &str, seen: Seen<'_>) -> Res<bool> {
        let Some((rev, tid)) = read_latest(&latest_path(&self.root, domain, title))? else {
            return Ok(false);
        };
        let path = render_path(&self.root, domain, title, rev, tid);
        if !self.read_file(&path, rev, tid, seen)? {
            return Err(format!("{}: the latest render is missing", path.display()).into());
        }
        Ok(true)
    }

    fn get_render(
        &self,
        domain: &str,
        title: &str,
        rev: u64,
        tid: Uuid,
        seen: Seen<'_>,
    ) -> Res<bool> {
        self.read_file(
            &render_path(&self.root, domain, title, rev, tid),
            rev,
            tid,
            seen,
        )
    }

    /// Data: the render files. Index: the pointer files (and, not visited, the directories).
    fn visit(dir: &Path, kind: Files, f: &mut dyn FnMut(&Path)) -> Res<()> {
        for a in fs::read_dir(dir)? {
            let a = a?;
            if !a.file_type()?.is_dir() {
                continue;
            }
            for b in fs::read_dir(a.path())? {
                for file in fs::read_dir(b?.path())? {
                    let path = file?.path();
                    let is_latest = path.to_str().is_some_and(|p| p.ends_with(LATEST));
                    if is_latest == (kind == Files::Index) {
                        f(&path);
                    }
                }
            }
        }
        Ok(())
    }
}
